"""The ``dynsource`` Python data source: a Hive-partitioned file table read with dynamic partition pruning."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import DataType, StructType

from dynsource import types
from dynsource.runtime import logs
from dynsource.scan import files, rowfilter, taskfigures
from dynsource.scan.options import ScanOptions
from dynsource.scan.origin import Reader
from dynsource.scan.planner import plan_scan
from dynsource.scan.splits import SplitGroup
from dynsource.scan.tableschema import infer_schema
from dynsource.spark.dynamicfiltering import SupportsDynamicFiltering
from dynsource.spark.writeplan import plan_write
from dynsource.spark.writer import DynsourceWriter
from dynsource.types import read_arrow_schema

_Method = TypeVar("_Method", bound=Callable[..., Any])


def said_plainly(method: _Method) -> _Method:
    """Raise dynsource's errors (``ValueError``, ``OSError``: a bad option, path or value, an unreachable store)
    from ``method`` itself, without the frames below it. Spark shows a Python source's error as the worker's
    traceback with the sentence last: this way the sentence follows a single frame. Other errors (a bug) keep
    their frames."""

    @functools.wraps(method)
    def plainly(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (ValueError, OSError) as error:
            raise error.with_traceback(None) from None

    return plainly  # type: ignore[return-value]


class DynsourceDataSource(SupportsDynamicFiltering, DataSource):
    """Hive-partitioned Parquet/ORC/CSV/JSON tables, pruned at run time by a dynamic filter.

    The schema is the data columns of the first data file (of every file with
    ``mergeSchema``) followed by the partition columns, with the names and types
    ``spark.read.parquet(path)`` gives. With
    ``dynamicFilter`` set to a handle from :func:`dynsource.collect` or
    :func:`dynsource.publish`, only partitions whose values the filter contains
    are listed, planned and read; a filter that cannot be trusted (exceeded,
    missing, unreadable) reads every partition and logs a WARNING.

    Filter fields may also be data columns (any column of the read schema;
    :meth:`accepted_filter_fields` of :class:`dynsource.SupportsDynamicFiltering`
    names the partition columns and the data columns of atomic types). The
    read tasks then skip the Parquet row groups whose statistics hold no key and,
    up to ``rowFilterMaxKeys`` keys, drop the rows no key matches. Passing
    ``dynamicFilter`` declares that the scan feeds an inner or semi join with the
    dimension on the filter fields: the scan returns a superset of the fact rows
    that join (with ``=`` a null key joins nothing), not every row of the table.
    Do not pass it for outer or anti joins that must keep non-matching fact rows.

    WHERE clauses are evaluated by Spark on what is read; they do not prune
    (Spark's filter pushdown to Python sources reuses a read planned for one
    query in later queries of the same DataFrame, so dynsource does not take
    part in it). To prune statically, give ``partitionFilter``: it belongs to the
    DataFrame, so every query of it reads the same partitions. A partitioned
    table read whole, without either filter, logs a WARNING saying so (once per
    table in each Python worker). Every scan's report, with a handle or not, is
    ``dynsource.scan_report(df)`` after an action on ``df``.

    Writes (``df.write.format("dynsource").option("path", ...).mode("append" |
    "overwrite").save()``, ``INSERT INTO`` / ``INSERT OVERWRITE`` of a registered
    table, ``dynsource.write``) put the rows in Spark's partition layout under the
    partition columns of ``partitionColumns`` (else of the table's directories),
    staged in a hidden directory and published by one commit on the driver.

    Options
    -------
    path : str, required
        Table directory as an fsspec URL (``file:///data/store_sales``,
        ``memory://t``, ``s3://bucket/t``) or a local path.
    basePath : str, default none
        As Spark's file sources: when ``path`` is a partition directory (or a
        file in one) of the table at ``basePath``, the ``key=value`` directories
        between them are partition columns too, e.g. ``path`` =
        ``.../store_sales/ss_sold_date_sk=2451545`` with ``basePath`` =
        ``.../store_sales`` keeps column ``ss_sold_date_sk``. Without it, as in
        Spark, the scan sees only what is below ``path``.
    format : str, default "parquet"
        File format of the data files: ``parquet``, ``orc``, ``csv`` (with a
        header row) or ``json`` (one object per line), read by pyarrow.dataset.
    dynamicFilter : str, default none
        Handle of the dynamic filter to prune with. A filter field must be a
        partition column or a column of the read schema.
    dynamicFilteringEnabled : bool, default "true"
        ``false`` ignores ``dynamicFilter`` and reads every partition.
    dynamicFilterOnError : str, default "fallback"
        When the handle was never published or its payload cannot be read:
        ``fallback`` reads every partition and logs a WARNING naming the handle
        and the reason; ``fail`` raises.
    filterStore : str, default ``$DYNSOURCE_FILTER_STORE`` or ``~/.cache/dynsource/filters``
        fsspec directory the handle was published in (the ``store=`` of ``collect``/``publish``).
        Only planning reads it, on the driver's host; the default comes from the environment
        the Spark driver started with, so name the store when that differs from yours.
    storageOptions : str, default none
        JSON object of fsspec storage options for ``path``: credentials, endpoint,
        region... (the filesystem's keyword arguments, like ``storage_options`` in
        pandas). For ``s3://`` (needs ``s3fs``):
        ``{"key": "...", "secret": "...", "client_kwargs": {"endpoint_url": "http://host:9000"}}``.
        Like Spark's per-scheme Hadoop settings, they also apply to a filter store
        on the same kind of filesystem as ``path`` (both ``s3://``).
    filterStoreOptions : str, default ``storageOptions`` for a store of the same kind as ``path``, else none
        JSON object of fsspec storage options for ``filterStore`` (the
        ``storage_options=`` of ``collect``/``publish``), when they differ from the table's.
    partitionColumns : str, default inferred
        DDL of partition column types, e.g. ``"ss_sold_date_sk BIGINT"``;
        unnamed columns are inferred like Spark does. A column may be named
        without a type (``"day, store INT"``): a read infers it, a write takes
        the rows' type. On a write it names the partition columns, in order
        (an existing table's must be these); without it a write keeps the
        table's. ``DataFrameWriter.partitionBy`` cannot be used: Spark refuses
        it for a Python data source before dynsource runs.
    mergeSchema : bool, default "false"
        As Spark's ``spark.sql.parquet.mergeSchema``: the inferred schema is the
        union of every data file's columns (each file's schema is read) instead
        of the first file's, new columns after the first file's in the order
        the files are listed. A column some files lack reads as null in their
        rows; a column two files store with different types is an error naming
        it and both files. Without it, every file is expected to store the
        schema's data columns: one that a scan's first file lacks is an error.
    partitionFilter : str, default none
        A SQL predicate on partition columns, e.g.
        ``"ss_sold_date_sk BETWEEN 2451545 AND 2451910 AND store IN ('a', 'b')"``:
        only partitions for which it is true are listed further and read, so the
        scan returns ``spark.read.parquet(path).where(predicate)``. Comparisons,
        ``<=>``, ``[NOT] IN``, ``[NOT] BETWEEN``, ``IS [NOT] NULL``, ``NOT``, ``AND``
        and ``OR`` of integral, decimal, string, date, timestamp, timestamp_ntz
        and boolean partition columns with literals (a string or ``TIMESTAMP``
        literal is a wall-clock time in option ``timeZone``, as Spark casts it
        in the session time zone); anything else is an error.
    maxPartitionBytes : str, default "134217728" (128 MB)
        Most bytes packed into one Spark partition (``spark.sql.files.maxPartitionBytes``); ``"128m"`` works.
    openCostInBytes : str, default "4194304" (4 MB)
        Estimated cost of opening a file, as ``spark.sql.files.openCostInBytes``.
    minPartitionNum : str, default the number of CPU cores
        Parallelism the split size aims for, as ``spark.sql.files.minPartitionNum``.
    batchSize : str, default "65536"
        Most rows per Arrow batch handed to Spark.
    timeZone : str, default the session's where dynsource builds the read, else none
        The session time zone (``spark.sql.session.timeZone``) in which Spark
        reads timestamp partition values such as ``ts=2024-01-01 10%3A00%3A00``,
        and names the directories it writes. Spark does not pass its session's
        settings to a Python data source: ``dynsource.sql``, ``dynsource.table``,
        ``dynamic_join`` and ``dynsource.write`` pass the session's; a read of a
        TIMESTAMP partition column, or a write of one, without it is an error
        naming this option, never a guess. Spark's file sources take the same option.
    partitionColumnTypeInference : bool, default "true"
        As ``spark.sql.sources.partitionColumnTypeInference.enabled``: ``false``
        types every partition column ``partitionColumns`` does not declare as a
        string (``zip=00501`` stays ``'00501'``). Where dynsource builds the read
        it passes the session's, as for ``timeZone``; ``spark.read.format("dynsource")``
        cannot learn the session's, so give it there.
    timestampType : str, default "timestamp_ltz"
        As ``spark.sql.timestampType`` (``TIMESTAMP_LTZ`` or ``TIMESTAMP_NTZ``,
        any case): what a partition column of values such as
        ``2024-01-01 10%3A00%3A00`` is inferred as (``TIMESTAMP_NTZ``: a
        ``timestamp_ntz``, read without a zone). Passed as ``timeZone`` is.
    dynamicFilterWaitMs : str, default "10000"
        How long planning waits for a filter that ``collect(..., wait=False)``
        is still collecting; then it proceeds as ``dynamicFilterOnError`` says.
        A handle that was never published or reserved does not wait.
    rowFilterMaxKeys : str, default "2000"
        Most keys of a dynamic filter (of each part, for a filter of several
        dimensions) for which the read tasks filter rows by its data-column
        fields (openLooKeng's row-filtering threshold); above it they only skip
        Parquet row groups. ``"0"`` turns row filtering off.
    taskFilterMaxBytes : str, default "262144" (256 KiB)
        Most bytes of the filter (of each part) copied into each read task for
        its data-column fields (planning reads the store; read tasks never do).
        Over it, exact keys travel as their bounds (row groups are skipped, no
        rows filtered) and a Bloom filter does not travel, while the other parts
        still filter; the scan report says so.
    logLevel : str, default the driver's ``dynsource`` logger level, else ``$DYNSOURCE_LOG_LEVEL``, else "WARNING"
        Level of dynsource's log lines in Spark's Python workers, which do not
        share the driver's logging setup: ``DEBUG``, ``INFO`` (one line per
        planned scan: partitions kept of the total, files, bytes, planning time,
        the filters that pruned), ``WARNING`` (a filter that cannot be used, a
        partitioned table read whole), ``ERROR`` or ``CRITICAL``. The driver's
        level is the one set on ``logging.getLogger("dynsource")`` before
        ``dynsource.register(spark)``. Lines go to the worker's stderr: the
        console in local mode, the executor's stderr log on a cluster.
    warnUnpruned : bool, default "true"
        Whether a scan of a partitioned table that the Python reader reads
        whole, with neither ``partitionFilter`` nor ``dynamicFilter``, logs a
        WARNING naming the ways to prune it (once per table in each Python
        worker). ``dynsource.sql`` sets it ``false``: it knows the query, and
        warns itself only where a predicate on a partition column could not
        become a ``partitionFilter``.
    reader : str, default "auto"
        Who reads a registered table's kept files when ``dynsource.sql`` or
        ``dynamic_join`` reads it (``spark.read.format("dynsource")`` is always
        this Python reader): ``spark``, Spark's own file source, handed the
        files dynsource planned (much faster per byte, with column pruning);
        ``python``, this reader; ``auto``, Spark's for Parquet and ORC where
        Spark's Hadoop filesystem opens the table (``file:``, ``hdfs:``, ``s3a:``
        with its jars) in a classic session, else this one (``memory://``,
        ``s3://`` through fsspec, Spark Connect). ``spark`` where Spark cannot
        open the table is an error.
    partitionOverwriteMode : str, default none
        What a write in mode ``overwrite`` (``INSERT OVERWRITE``) replaces, as
        Spark's ``spark.sql.sources.partitionOverwriteMode``: ``static``, the whole
        table; ``dynamic``, only the partitions the write has rows for. Spark
        does not pass its session's setting to a Python data source, so an
        overwrite of a partitioned table that sets it neither on the write
        (``.option(...)``) nor on the registered table is refused before anything
        is deleted; ``dynsource.write`` and ``dynsource.sql`` take the session's.
    abandonedWriteAgeMs : str, default "86400000" (a day)
        On a write: the age past which a staging directory or a pending commit
        record left by a killed write is removed by this write's commit (as
        ``dynsource table vacuum`` does). A running write keeps its own younger.

    Examples
    --------
    >>> import dynsource, pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> root = tempfile.mkdtemp()
    >>> pq.write_to_dataset(pa.table({"price": [1.5, 2.5, 4.0], "day": [1, 2, 3]}), root, partition_cols=["day"])
    >>> dynsource.register(spark)
    >>> handle = dynsource.publish(dynsource.DynamicFilteringData([("day", "int")], [(2,), (3,)]))
    >>> df = spark.read.format("dynsource").option("path", root).option("dynamicFilter", handle).load()
    >>> sorted(df.collect())
    [Row(price=2.5, day=2), Row(price=4.0, day=3)]

    A filter field may be a data column: rows whose price no key matches are dropped in the read tasks.

    >>> handle = dynsource.publish(dynsource.DynamicFilteringData([("price", "double")], [(4.0,)]))
    >>> spark.read.format("dynsource").option("path", root).option("dynamicFilter", handle).load().collect()
    [Row(price=4.0, day=3)]

    ``partitionFilter`` prunes by a predicate on partition columns:

    >>> spark.read.format("dynsource").option("path", root).option("partitionFilter", "day >= 3").load().collect()
    [Row(price=4.0, day=3)]
    """

    # How read tasks send their figures to the driver; dynsource.register gives the registered class its own.
    task_figures: ClassVar[taskfigures.Channel | taskfigures.Unavailable] = taskfigures.UNREGISTERED
    # The driver's dynsource log level when dynsource.register ran (None: not set there).
    driver_log_level: ClassVar[str | None] = None

    @classmethod
    def name(cls) -> str:
        return "dynsource"

    @classmethod
    def with_figures(cls, channel: taskfigures.Channel | taskfigures.Unavailable) -> type[DynsourceDataSource]:
        """A subclass whose read tasks send their figures through ``channel`` and log at the driver's level.

        It is not importable by name, so cloudpickle ships it by value, the
        channel (an accumulator) and the level included, to the Python workers.
        """
        attributes = {"task_figures": channel, "driver_log_level": logs.driver_level()}
        return type(f"{cls.__name__}WithFigures", (cls,), attributes)

    @said_plainly
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.scan_options = self.parse_options(options)
        self.log_level = self.scan_options.log_level or self.driver_log_level
        # What the DataFrame's plan also knows of this reader: scan_report(df) finds the scans it plans by it.
        self.scan_reader = Reader.of(self.name(), options)

    def parse_options(self, options: Mapping[str, str]) -> ScanOptions:
        """The validated options of this source's scans (a registered table's source merges its stored ones)."""
        return ScanOptions.parse(options)

    @said_plainly
    def schema(self) -> StructType:
        logs.configure_worker(self.log_level)
        return self.table_schema()

    def table_schema(self) -> StructType:
        """The schema :meth:`schema` gives Spark, worked out without setting up a worker's logging."""
        return infer_schema(self.scan_options)

    def accepted_filter_fields(self) -> list[str]:
        """The partition columns, whose values prune directories, and the data columns of atomic types, by which
        read tasks skip Parquet row groups and drop rows (a nested column cannot be compared with a key)."""
        return [field.name for field in self.schema().fields if _atomic(field.dataType)]

    @said_plainly
    def writer(self, schema: StructType, overwrite: bool) -> DynsourceWriter:
        """Spark's writes into the table (``save``, ``INSERT INTO`` / ``INSERT OVERWRITE`` of a registered table):
        checked here, on the driver, before any task writes."""
        return DynsourceWriter(plan_write(self.scan_options, schema, overwrite), overwrite)

    def reader(self, schema: StructType) -> DynsourceReader:
        return DynsourceReader(self.scan_options, schema, self.task_figures, self.log_level, self.scan_reader)


def _atomic(data_type: DataType) -> bool:
    try:
        types.normalize_type(data_type.simpleString())
    except ValueError:
        return False
    return True


class DynsourceReader(DataSourceReader):
    def __init__(
        self, options: ScanOptions, schema: StructType, task_figures: taskfigures.Channel | taskfigures.Unavailable,
        log_level: str | None = None, scan_reader: Reader | None = None,
    ) -> None:
        self.options = options
        self.schema = schema
        self.task_figures = task_figures
        self.log_level = log_level
        self.scan_reader = scan_reader

    @said_plainly
    def partitions(self) -> Sequence[InputPartition]:
        logs.configure_worker(self.log_level)
        return plan_scan(self.options, self.schema, self.task_figures, self.scan_reader)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitGroup):  # Spark turns an empty plan into one empty partition
            return
        logs.configure_worker(self.log_level)
        plan = partition
        sizes = {split.path: split.file_size for split in plan.splits}
        fs = files.arrow_filesystem(files.open_table(self.options.path, self.options.storage_options)[0], sizes)
        target = read_arrow_schema(self.schema)
        row_filter = rowfilter.open_row_filter(plan.row_filter)
        for split in plan.splits:
            yield from files.read_split(split, fs, self.options.format, target, plan.partition_columns,
                                        self.options.batch_size, row_filter)
        # Only a task read to its end sends figures: one Spark stops early (a LIMIT, show()) or that fails ends its
        # worker without the accumulator updates, whatever it recorded.
        if row_filter is not None:
            self.task_figures.record(row_filter.spec.scan_id, plan.index, row_filter.figures)
