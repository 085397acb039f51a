"""The ``dynsource`` Python data source: a Hive-partitioned file table read with dynamic partition pruning."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructField, StructType

from dynsource import figures, files, partitions, planner, report, rowfilter, store
from dynsource.enumerator import DynamicPartitionEnumerator, Listing, PartitionEnumerator
from dynsource.filtering import DynamicFilteringData
from dynsource.options import ScanOptions
from dynsource.types import arrow_type, normalize_type, read_arrow_schema, spark_schema

log = logging.getLogger(__name__)


class DynsourceDataSource(DataSource):
    """Hive-partitioned Parquet/ORC/CSV/JSON tables, pruned at run time by a dynamic filter.

    The schema is the data columns of the files followed by the partition
    columns, with the names and types ``spark.read.parquet(path)`` gives. With
    ``dynamicFilter`` set to a handle from :func:`dynsource.collect` or
    :func:`dynsource.publish`, only partitions whose values the filter contains
    are listed, planned and read; a filter that cannot be trusted (exceeded,
    missing, unreadable) reads every partition and logs a WARNING.

    Filter fields may also be data columns (any column of the read schema). The
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
    DataFrame, so every query of it reads the same partitions.

    Options
    -------
    path : str, required
        Table directory as an fsspec URL (``file:///data/store_sales``,
        ``memory://t``, ``s3://bucket/t``) or a local path.
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
        unnamed columns are inferred like Spark does.
    partitionFilter : str, default none
        A SQL predicate on partition columns, e.g.
        ``"ss_sold_date_sk BETWEEN 2451545 AND 2451910 AND store IN ('a', 'b')"``:
        only partitions for which it is true are listed further and read, so the
        scan returns ``spark.read.parquet(path).where(predicate)``. Comparisons,
        ``<=>``, ``[NOT] IN``, ``[NOT] BETWEEN``, ``IS [NOT] NULL``, ``NOT``, ``AND``
        and ``OR`` of integral, decimal, string, date and boolean partition
        columns with literals; anything else is an error.
    maxPartitionBytes : str, default "134217728" (128 MB)
        Most bytes packed into one Spark partition (``spark.sql.files.maxPartitionBytes``); ``"128m"`` works.
    openCostInBytes : str, default "4194304" (4 MB)
        Estimated cost of opening a file, as ``spark.sql.files.openCostInBytes``.
    minPartitionNum : str, default the number of CPU cores
        Parallelism the split size aims for, as ``spark.sql.files.minPartitionNum``.
    batchSize : str, default "65536"
        Most rows per Arrow batch handed to Spark.
    timeZone : str, default this machine's time zone
        Zone of timestamp partition values such as ``ts=2024-01-01 10%3A00%3A00``
        (set it to ``spark.sql.session.timeZone`` if you changed that).
    dynamicFilterWaitMs : str, default "10000"
        How long planning waits for a filter that ``collect(..., wait=False)``
        is still collecting; then it proceeds as ``dynamicFilterOnError`` says.
        A handle that was never published or reserved does not wait.
    rowFilterMaxKeys : str, default "2000"
        Most keys of a dynamic filter for which the read tasks filter rows by its
        data-column fields (openLooKeng's row-filtering threshold); above it they
        only skip Parquet row groups. ``"0"`` turns row filtering off.
    taskFilterMaxBytes : str, default "262144" (256 KiB)
        Most bytes of the filter copied into each read task for its data-column
        fields (planning reads the store; read tasks never do). Over it, exact
        keys travel as their bounds (row groups are skipped, no rows filtered)
        and a Bloom filter does not travel; the scan report says so.

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
    task_figures: ClassVar[figures.Channel | figures.Unavailable] = figures.Unavailable(figures.NOT_REGISTERED)

    @classmethod
    def name(cls) -> str:
        return "dynsource"

    @classmethod
    def with_figures(cls, channel: figures.Channel | figures.Unavailable) -> type[DynsourceDataSource]:
        """A subclass whose read tasks send their figures through ``channel``.

        It is not importable by name, so cloudpickle ships it by value, the
        channel (an accumulator) included, to the Python workers.
        """
        return type(f"{cls.__name__}WithFigures", (cls,), {"task_figures": channel})

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.scan_options = ScanOptions.parse(options)

    def schema(self) -> StructType:
        fs, root = files.open_table(self.scan_options.path, self.scan_options.storageOptions)
        listing = PartitionEnumerator(fs, root).enumerate()
        return table_schema(listing, fs, self.scan_options)

    def reader(self, schema: StructType) -> DynsourceReader:
        return DynsourceReader(self.scan_options, schema, self.task_figures)


class DynsourceReader(DataSourceReader):
    def __init__(
        self, options: ScanOptions, schema: StructType, task_figures: figures.Channel | figures.Unavailable
    ) -> None:
        self.options = options
        self.schema = schema
        self.task_figures = task_figures

    def partitions(self) -> Sequence[InputPartition]:
        return plan_scan(self.options, self.schema, self.task_figures)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if partition is None or partition.value is None:  # Spark turns an empty plan into one empty partition
            return
        plan: planner.SplitPlan = partition.value
        fs = files.arrow_filesystem(files.open_table(self.options.path, self.options.storageOptions)[0])
        target = read_arrow_schema(self.schema)
        row_filter = rowfilter.open_row_filter(plan.row_filter)
        try:
            for split in plan.splits:
                yield from files.read_split(split, fs, self.options.format, target, plan.partition_columns,
                                            self.options.batchSize, row_filter)
        finally:
            # Also when Spark stops early (a LIMIT): the figures then cover what was read.
            if row_filter is not None:
                self.task_figures.record(row_filter.spec.scan_id, plan.index, row_filter.figures)


def table_schema(listing: Listing, fs: Any, options: ScanOptions) -> StructType:
    """Data columns of the first data file, then the partition columns, as ``spark.read.parquet`` gives them."""
    first = next((f.path for p in listing.partitions for f in p.files), None)
    if first is None:
        raise ValueError(f"Option 'path': table '{options.path}' has no data files, so its schema cannot be inferred.")
    data = spark_schema(files.file_schema(first, files.arrow_filesystem(fs), options.format))
    partition_fields = {f.name: f for f in _partition_fields(listing, options)}
    # A partition column also stored in the files keeps its place but takes the partition's type (as Spark).
    fields = [partition_fields.pop(f.name, f) for f in data.fields] + list(partition_fields.values())
    # Spark's file sources declare every column nullable, whatever the files say.
    return StructType([StructField(f.name, f.dataType, nullable=True) for f in fields])


def _partition_fields(listing: Listing, options: ScanOptions) -> list[StructField]:
    declared = dict(options.partitionColumns)
    undeclared = sorted(set(declared) - set(listing.columns))
    if undeclared:
        raise ValueError(
            f"Option 'partitionColumns' names {undeclared}, which are not partition columns of '{options.path}'; "
            f"its partition columns are {list(listing.columns)}."
        )
    fields = []
    for index, column in enumerate(listing.columns):
        type_name = declared.get(column) or partitions.infer_type(p.raw_values[index] for p in listing.partitions)
        fields.append(spark_schema(pa.schema([(column, arrow_type(type_name))]))[0])
    return fields


def read_column_types(options: ScanOptions, schema: StructType) -> dict[str, str]:
    """Spark SQL type of each read-schema column, with ``partitionColumns`` declarations taking precedence."""
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    return {**schema_types, **dict(options.partitionColumns)}


def plan_scan(
    options: ScanOptions, schema: StructType,
    task_figures: figures.Channel | figures.Unavailable = DynsourceDataSource.task_figures,
) -> list[InputPartition]:
    """Enumerate (pruning with ``partitionFilter`` and the dynamic filter if any), then pack the kept files."""
    started = time.perf_counter()
    fs, root = files.open_table(options.path, options.storageOptions)
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    column_types = read_column_types(options, schema)
    partition_filter = options.partitionFilter
    if partition_filter is not None:
        partition_filter.check_types(column_types)
    enumerator = DynamicPartitionEnumerator(
        PartitionEnumerator(fs, root), column_types, data_columns=schema.names, time_zone=options.timeZone,
        on_error=options.dynamicFilterOnError,
        static_filter=partition_filter.level_filter(column_types, options.timeZone) if partition_filter else None,
    )
    waited = time.perf_counter()
    data, unusable = _filter_data(options)
    wait_ms = round((time.perf_counter() - waited) * 1000, 1)
    if data is not None:
        enumerator.set_dynamic_filtering_data(data)
    listing = enumerator.enumerate()
    if partition_filter is not None:
        partition_filter.check_listing(listing.columns, listed_leaves=bool(listing.partitions))
    read_columns = [c for c in listing.columns if c in column_types]
    _check_data_columns(schema, listing, fs, options)
    values = _typed_values(listing, read_columns, column_types, options.timeZone)
    scan_id = uuid.uuid4().hex
    row_filter, rows_unusable = None, None
    if enumerator.data is not None:  # None also when the enumerator set the filter aside
        row_filter, rows_unusable = rowfilter.plan_row_filter(
            data, listing.columns, schema_types, handle=options.dynamicFilter, scan_id=scan_id,
            max_keys=options.rowFilterMaxKeys, max_bytes=options.taskFilterMaxBytes,
            on_error=options.dynamicFilterOnError,
        )
    input_partitions = planner.plan(
        listing.partitions, values, read_columns,
        splittable=options.format == "parquet",
        max_partition_bytes=options.maxPartitionBytes,
        open_cost_in_bytes=options.openCostInBytes,
        min_partition_num=options.minPartitionNum,
        row_filter=row_filter,
    )
    if options.dynamicFilter and options.dynamicFilteringEnabled:
        reason = unusable or enumerator.fallback_reason
        if data is not None and not data.is_filtering:
            reason = "the filter exceeded the collector's threshold"
        _report(options, data, listing, reason=reason, rows_reason=rows_unusable, wait_ms=wait_ms,
                input_partitions=len(input_partitions), started=started, scan_id=scan_id, row_filter=row_filter,
                task_figures=task_figures)
    return input_partitions


def _filter_data(options: ScanOptions) -> tuple[DynamicFilteringData | None, str | None]:
    """The filter to apply, or None and why it cannot be used (under ``dynamicFilterOnError=fallback``)."""
    if not options.dynamicFilter or not options.dynamicFilteringEnabled:
        return None, None
    try:
        data = store.resolve(options.dynamicFilter, options.filterStore, wait_ms=options.dynamicFilterWaitMs,
                             storage_options=options.store_options)
        return data, None
    except (LookupError, ValueError, OSError, store.FilterFailedError) as error:
        if options.dynamicFilterOnError == "fail":
            raise
        log.warning("dynsource: dynamic filter '%s' is not usable, reading every partition: %s",
                    options.dynamicFilter, error)
        return None, str(error)


def _check_data_columns(schema: StructType, listing: Listing, fs: Any, options: ScanOptions) -> None:
    """A requested column must be a partition column or stored in the files (checked on the first kept file)."""
    first = next((f.path for p in listing.partitions for f in p.files), None)
    wanted = [f.name for f in schema.fields if f.name not in listing.columns]
    if first is None or not wanted:
        return
    stored = set(files.file_schema(first, files.arrow_filesystem(fs), options.format).names)
    missing = [name for name in wanted if name not in stored]
    if missing:
        raise ValueError(
            f"Column(s) {missing} of the read schema are neither partition columns {list(listing.columns)} "
            f"nor stored in data file '{first}' (columns {sorted(stored)})."
        )


def _typed_values(listing: Listing, columns: Sequence[str], types: dict[str, str], zone: str | None) -> list[tuple]:
    indexes = [listing.columns.index(c) for c in columns]
    typed = [
        partitions.to_arrow([p.raw_values[i] for p in listing.partitions], types[c], time_zone=zone).to_pylist()
        for i, c in zip(indexes, columns, strict=True)
    ]
    return list(zip(*typed, strict=True)) if typed else [()] * len(listing.partitions)


def _report(
    options, data, listing, *, reason, rows_reason, wait_ms, input_partitions, started, scan_id, row_filter,
    task_figures,
) -> None:
    # A data column the filter cannot compare leaves the partition pruning standing: filtering stays true.
    kept_files = [f for p in listing.partitions for f in p.files]
    scan = report.ScanReport(
        handle=options.dynamicFilter,
        path=options.path,
        payload_kind=data.kind if data is not None else None,
        keys=len(data) if data is not None else None,
        payload_bytes=data.size_bytes if data is not None else None,
        filtering=reason is None,
        partitions_total=len(listing.partitions) + listing.directories_pruned,
        partitions_kept=len(listing.partitions),
        files_kept=len(kept_files),
        bytes_kept=sum(f.size for f in kept_files),
        listings=len(listing.listed_paths),
        input_partitions=input_partitions,
        planning_ms=round((time.perf_counter() - started) * 1000, 1),
        wait_ms=wait_ms,
        fallback_reason=reason or rows_reason,
        scan_id=scan_id,
        data_columns=tuple(column for column, _ in row_filter.data_columns) if row_filter else (),
        row_filtering=row_filter is not None and row_filter.filter_rows,
        figures_owner=task_figures.owner if row_filter and isinstance(task_figures, figures.Channel) else None,
        task_figures_unavailable=(
            task_figures.reason if row_filter and isinstance(task_figures, figures.Unavailable) else None),
    )
    scan.log()
    try:
        report.save(scan, options.filterStore, storage_options=options.store_options)
    except (OSError, ValueError) as error:  # ValueError: a malformed handle, read unfiltered under 'fallback'
        log.warning("dynsource: could not save the scan report of '%s': %s", options.dynamicFilter, error)
