"""Spark's own file reader for a planned scan: dynsource plans (lists only what can match), Spark reads.

A Python data source pays Spark's Python read path for every byte: rows cross
from a Python worker to the JVM, and the source gets no column pruning. Where
Spark's Hadoop filesystem can open the table, :func:`read` plans the scan in the
driver with :class:`~dynsource.scan.planner.ScanPlanner` (the same walk,
``partitionFilter``, dynamic filter and checks as the Python reader) and hands
the kept files to Spark's built-in file source, with ``basePath`` at the
table's root and the table's stored schema, so Spark types the partition
values as the table declares them and lists nothing but those files.
Data-column filter fields become predicates Spark pushes into Parquet and ORC
row groups: an ``IN`` list per column, or its bounds past ``rowFilterMaxKeys`` keys
and, for Parquet, past ``spark.sql.parquet.pushdown.inFilterThreshold`` (10), where
Spark pushes an ``IN`` list to Parquet as its bounds anyway (only the row groups'
min/max are compared) while every long list costs its optimizer and each row a
lookup the join makes again.

The reader option ``reader`` chooses: ``python`` is dynsource's Python reader
(``spark.read.format("dynsource...")``), ``spark`` Spark's, and ``auto`` Spark's
where it can open the table, Parquet or ORC, else the Python one. Over Spark Connect this client plans the scan
when it reaches the table's storage, and the server's Spark reads the kept files when it opens them
(:mod:`dynsource.spark.connect`); otherwise the server plans it in its Python workers.

Spark's file index looks up every file it is handed (in a Spark job past
``spark.sql.sources.parallelPartitionDiscovery.threshold``, 32 paths), as a
fresh ``spark.read.parquet`` lists its table. On a local disk that job costs
twenty times a lookup by the driver (8 s against 0.4 s for 3,227 files on two
cores), so there the driver looks them up, as the planner's walk just did. A warm session reuses a DataFrame
whose files Spark has listed; so does :func:`read`: the DataFrame of the same
kept files (every path and size equal, so an added, removed or rewritten file
makes a new one) and read settings is reused, the newest ``LISTED_KEPT`` of a session. A plan the planner
gives again (its walk would read alike) is read again as the same DataFrame, columns selected, with no work
on its files.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import urllib.parse
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dynsource import storage
from dynsource.filtering import DynamicFilteringData
from dynsource.layout.listing import Listing
from dynsource.runtime import deployment, settings
from dynsource.runtime.lru import LruMap
from dynsource.scan import files, planner, taskfigures
from dynsource.scan.options import ScanOptions
from dynsource.scan.origin import Reader
from dynsource.scan.planner import PlannedScan, ScanPlanner
from dynsource.spark import connect, globalviews

# Formats whose files Spark's reader reads as pyarrow does; CSV and JSON parsing differ (headers, nulls, numbers).
_AUTO_FORMATS = ("parquet", "orc")
_GLOB = re.compile(r"[{}\[\]*?\\]")  # a path with any of these is a pattern to Spark's reader, not a name
_PARQUET_IN_THRESHOLD = "spark.sql.parquet.pushdown.inFilterThreshold"
_DISCOVERY_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_SPARK_DISCOVERY_THRESHOLD = 32  # its default
_DISCOVERY_LOCK = threading.Lock()  # one local load at a time raises the session's threshold and restores it
LISTED_KEPT = 32
READS_KEPT = 64  # the newest DataFrames read by Spark's reader whose scans scan_report(df) finds from their plans
_LISTED: weakref.WeakKeyDictionary[SparkSession, LruMap[DataFrame]] = weakref.WeakKeyDictionary()
_READ_AGAIN: weakref.WeakKeyDictionary[SparkSession, LruMap[tuple[Listing, DataFrame]]] = weakref.WeakKeyDictionary()
_OPENED: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()  # see _hadoop_opens
_PLANNED: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()  # see planned_before
_READS: weakref.WeakKeyDictionary[SparkSession, LruMap[_Read]] = weakref.WeakKeyDictionary()  # see reads_of


def choose(spark: SparkSession, options: ScanOptions) -> tuple[str, str]:
    """Which reader reads a scan with ``options`` (``spark`` or ``python``), and why."""
    if options.reader == "python":
        return "python", "option 'reader' is 'python'"
    forced = options.reader == "spark"
    if not forced and options.format not in _AUTO_FORMATS:
        return "python", f"format '{options.format}': Spark's reader parses text files differently from pyarrow"
    if not forced and (options.storage_options or options.merge_schema):
        return "python", "the table has storageOptions or mergeSchema, which only dynsource's reader applies"
    base = _base_url(options)
    if deployment.is_connect(spark):
        if not connect.client_reaches(options):
            return _refuse(forced, f"Spark Connect: this client cannot reach '{base}' to plan the scan")
        return "spark", f"Spark Connect: this client plans the scan of '{base}', the server's Spark reads it"
    if not _hadoop_opens(spark, base):
        return _refuse(forced, f"Spark's Hadoop filesystem cannot open '{base}'")
    return "spark", f"Spark's Hadoop filesystem opens '{base}'"


def read_by_choice(spark: SparkSession, source: str, options: Mapping[str, str], scan_options: ScanOptions,
                   table_schema: StructType, columns: Sequence[str] | None = None) -> DataFrame:
    """The table read by the reader :func:`choose` picks for ``scan_options``: Spark's, planned now, or the
    Python ``source`` (``dynsource`` or ``dynsource.<db>.<table>``) with ``options``, which plans at each action.

    Only ``columns`` are read (None: all of ``table_schema``).
    """
    if choose(spark, scan_options)[0] == "spark":
        scan_reader = Reader.of(source, options)
        df = read(spark, scan_options, table_schema, columns, scan_reader)
        if df is not None:
            if not deployment.is_connect(spark):  # there a DataFrame's plan is the server's: scan_report cannot ask
                _READS.setdefault(spark, LruMap(READS_KEPT)).put((id(df), scan_reader), _Read(df, scan_reader,
                                                                                             scan_options))
            return df
    deployment.workers_checked(spark)  # the Python reader runs in Spark's Python workers
    if columns is None:
        return spark.read.format(source).schema(table_schema).options(**options).load()
    # The Python reader plans with the schema it reads: it must hold the columns partitionFilter names. A read of
    # no column (count(*)) reads the table's last one, a partition column where it has one (constant per file):
    # pyspark 4.0 counts no row of a Python source's batches that have no column.
    filtered = scan_options.partition_filter.columns() if scan_options.partition_filter else set()
    wanted = [*columns, *(f.name for f in table_schema if f.name.lower() in filtered)] or table_schema.names[-1:]
    read_schema = _projected(table_schema, wanted)
    df = spark.read.format(source).schema(read_schema).options(**options).load()
    return df if len(read_schema) == len(_projected(table_schema, columns)) else df.select(*_quoted(columns, df))


@dataclass
class _Read:
    """A DataFrame :func:`read_by_choice` had Spark's reader read, and the reader that planned its scan."""

    df: DataFrame
    reader: Reader
    options: ScanOptions
    _leaves: list[tuple[Any, int]] | None = None

    @property
    def leaves(self) -> list[tuple[Any, int]]:
        """The leaves of the DataFrame's analysed plan (JVM objects) with their hash codes, asked once."""
        if self._leaves is None:
            self._leaves = plan_leaves(self.df)
        return self._leaves


def plan_leaves(df: DataFrame) -> list[tuple[Any, int]]:
    """The leaves of ``df``'s analysed plan (JVM objects; a file scan's is a ``LogicalRelation``), each with its
    hash code: a DataFrame derived from another has its leaves, equal (``equals``) and of equal hash."""
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    found = [leaves.apply(index) for index in range(leaves.size())]
    return [(leaf, leaf.hashCode()) for leaf in found]


def reads_of(df: DataFrame) -> dict[Reader, ScanOptions]:
    """The scans by Spark's reader that ``df`` reads, by the reader that planned each (with its options): each
    leaf of ``df``'s plan that is one of a DataFrame :func:`read_by_choice` returned (among the session's newest
    ``READS_KEPT``), by ``df``'s own read if it is such a DataFrame, else the newest read of that leaf (a DataFrame
    of the same kept files is shared by reads alike)."""
    kept = _READS.get(df.sparkSession)
    if kept is None:
        return {}
    reads = [read for read in (kept.get(key) for key in kept) if read is not None][::-1]  # newest first
    reads.sort(key=lambda read: read.df is not df)
    found: dict[Reader, ScanOptions] = {}
    for leaf, code in plan_leaves(df):
        match = next((read for read in reads if any(c == code and other.equals(leaf) for other, c in read.leaves)),
                     None)
        if match is not None:
            found[match.reader] = match.options
    return found


def planned_before(spark: SparkSession, options: ScanOptions) -> bool:
    """Whether the session planned a read of the table of ``options`` by Spark's reader before (its listing, and
    Spark's file index of what it kept, may be warm)."""
    return _table_key(options) in _PLANNED.get(spark, ())


def _table_key(options: ScanOptions) -> str:
    return options.base_path or options.path


def read(spark: SparkSession, options: ScanOptions, table_schema: StructType, columns: Sequence[str] | None,
         scan_reader: Reader) -> DataFrame | None:
    """The scan's rows read by Spark's file reader, only ``columns`` (None: all); None when a kept file's path
    is a pattern to Spark (``*``, ``[``...) and ``reader`` is ``auto``."""
    _PLANNED.setdefault(spark, set()).add(_table_key(options))
    planned = ScanPlanner(options, table_schema, stored_schema=scan_reader.table is not None).plan()
    # A plan given again shares its listing: keyed by the listing's id, held (and compared) so the id stays its.
    again = (id(planned.listing), options, table_schema.json(), None if columns is None else tuple(columns))
    frames = _READ_AGAIN.setdefault(spark, LruMap(LISTED_KEPT))
    kept = frames.get(again)
    if kept is None or kept[0] is not planned.listing:
        kept, paths = None, [_url_prefix(options) + path for path in planned.file_paths]
        refusal = _refused_paths(spark, options, paths)
        if refusal is not None:
            if options.reader == "auto":
                return None
            raise ValueError(f"Option 'reader' = 'spark' cannot be used: {refusal}. Use reader 'python' or 'auto' "
                             "for this table.")
    planner.record(planned, input_partitions=None, task_figures=taskfigures.PLANNED_ONLY, reader=scan_reader,
                       read_by="spark")
    if kept is not None:
        return kept[1]
    if not paths:
        return spark.createDataFrame([], _projected(table_schema, columns))
    df = _listed(spark, options, table_schema, paths, [f.size for f in planned.listing.files])
    predicate = _data_column_predicate(planned, _in_list_cap(spark, options))
    if predicate is not None:
        df = df.where(predicate)
    # Spark puts partition columns after the data columns; the table's schema may order them otherwise.
    df = df.select(*_quoted(_projected(table_schema, columns).names, df))
    if planned.dynamic:
        return df  # the planner plans a dynamic filter's scan anew each time
    if deployment.is_connect(spark):  # a query names the view: its plan would cost each query's analyses ~30 ms
        df = connect.listed_view(spark, df)
    frames.put(again, (planned.listing, df))
    globalviews.read_again(spark, df)
    return df


def _refused_paths(spark: SparkSession, options: ScanOptions, paths: Sequence[str]) -> str | None:
    """Why Spark's reader cannot read the kept files ``paths``, or None."""
    patterns = [path for path in paths if _GLOB.search(path)]
    if patterns:
        return (f"Spark's reader takes data file '{patterns[0]}' as a pattern (a path with any of "
                "{}[]*?\\ is one)")
    if paths and deployment.is_connect(spark) and not connect.server_opens(spark, options.format,
                                                                         _base_url(options), paths[0]):
        return f"Spark Connect: the server's Spark cannot open '{paths[0]}'"
    return None


def _listed(spark: SparkSession, options: ScanOptions, table_schema: StructType, paths: list[str],
            sizes: list[int]) -> DataFrame:
    """Spark's DataFrame of ``paths`` (their files listed by Spark once), reused while the files are the same."""
    files_kept = tuple(zip(paths, sizes, strict=True))
    key = (options.format, _base_url(options), options.time_zone, table_schema.json(), files_kept)
    kept = _LISTED.setdefault(spark, LruMap(LISTED_KEPT))
    df = kept.get(key)
    if df is not None:
        return df
    reader = spark.read.format(options.format).schema(table_schema).option("basePath", key[1])
    if options.time_zone is not None:  # of timestamp partition values; Spark's default is the session's zone
        reader = reader.option("timeZone", options.time_zone)
    if options.format == "csv":
        reader = reader.option("header", "true")  # pyarrow's CSV reader, the Python reader's, takes a header row
    with _driver_looks_up(spark, len(paths) if key[1].startswith("file:") else 0):
        df = reader.load(paths)
        if deployment.is_connect(spark):  # analysed once, as a view: the server would look the files up per action
            df = connect.listed_view(spark, df)
    kept.put(key, df)
    return df


@contextlib.contextmanager
def _driver_looks_up(spark: SparkSession, paths: int) -> Iterator[None]:
    """Spark's file index, analysed inside the block, looks ``paths`` local files up in the driver, not in a job:
    the session's discovery threshold raised to them meanwhile, and restored."""
    if not paths:  # each conf call is a round trip over Spark Connect
        yield
        return
    with _DISCOVERY_LOCK:
        before = spark.conf.get(_DISCOVERY_THRESHOLD, None)  # None: unset, at Spark's default
        if int(before or _SPARK_DISCOVERY_THRESHOLD) >= paths:
            yield
            return
        spark.conf.set(_DISCOVERY_THRESHOLD, str(paths))
        try:
            yield
        finally:  # unset again where it was: a view made since captures no setting of dynsource's
            if before is None:
                spark.conf.unset(_DISCOVERY_THRESHOLD)
            else:
                spark.conf.set(_DISCOVERY_THRESHOLD, before)


def _projected(schema: StructType, columns: Sequence[str] | None) -> StructType:
    return schema if columns is None else StructType([f for f in schema.fields if f.name in set(columns)])


def _quoted(names: Sequence[str], df: DataFrame) -> list[Column]:
    return [df[f"`{name}`"] for name in names]


def _refuse(forced: bool, why: str) -> tuple[str, str]:
    if forced:
        raise ValueError(f"Option 'reader' = 'spark' cannot be used: {why}. Use reader 'auto' or 'python'.")
    return "python", why


def _url_prefix(options: ScanOptions) -> str:
    """What turns a path of the table's fsspec filesystem into a URL Spark's reader opens."""
    scheme = urllib.parse.urlsplit(options.path).scheme
    return "file://" if storage.is_local(options.path) else f"{scheme}://"


def _base_url(options: ScanOptions) -> str:
    """The root of the table's walk (``basePath``, else ``path``) as a URL for Spark."""
    fs, root = files.open_table(options.base_path or options.path, options.storage_options)
    if isinstance(fs, fsspec.implementations.local.LocalFileSystem):
        return "file://" + root
    return _url_prefix(options) + root


def _hadoop_opens(spark: SparkSession, url: str) -> bool:
    """Whether the session's Hadoop filesystem for ``url``'s scheme exists and finds ``url`` (a probe, not a
    guess from the scheme: ``s3a://`` opens only where the session has the S3A jars and settings).

    Hadoop keeps a filesystem per scheme and authority once made, so a URL found once is not probed again (five
    JVM calls per read; the walk that plans each scan reports a root removed since). One not found is probed
    again: its store may become reachable, or the table be created.
    """
    opened = _OPENED.setdefault(spark, set())
    if url in opened:
        return True
    jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    try:
        path = jvm.org.apache.hadoop.fs.Path(url)
        found = bool(path.getFileSystem(conf).exists(path))
    except Exception:  # py4j's error for UnsupportedFileSystemException, a missing class, a refused connection
        return False
    if found:
        opened.add(url)
    return found


def _in_list_cap(spark: SparkSession, options: ScanOptions) -> int:
    """Most keys of a pushed ``IN`` list: past them, a column's bounds (see the module's docstring)."""
    if options.format != "parquet":
        return options.row_filter_max_keys
    return min(options.row_filter_max_keys, int(settings.get(spark, _PARQUET_IN_THRESHOLD, "10")))


def _data_column_predicate(planned: PlannedScan, in_list_cap: int) -> Column | None:
    """The filter's data-column fields as predicates Spark pushes into row groups (and applies to rows).

    One predicate per part of the filter (a dimension's keys), ANDed. Only where the row filter would apply
    (the implied join makes it sound), only for exact and range parts, and only on a column of the field's own
    type: a comparison Spark would cast could disagree with the filter's own.
    """
    row_filter, data = planned.row_filter, planned.data
    if row_filter is None or data is None:
        return None
    column_types = {column.lower(): (column, type_name) for column, type_name in row_filter.data_columns}
    predicates = [
        _column_predicate(part, column_types[name.lower()][0], position, in_list_cap)
        for part in data.parts if part.kind in ("exact", "range") and len(part)
        for position, (name, type_name) in enumerate(part.fields)
        if column_types.get(name.lower(), (None, None))[1] == type_name
    ]
    return functools.reduce(lambda a, b: a & b, predicates) if predicates else None


def _column_predicate(part: DynamicFilteringData, column: str, position: int, in_list_cap: int) -> Column:
    target = F.col(f"`{column}`")
    if part.kind == "range":
        low, high = part.bounds
        matches = target.between(F.lit(low[position]), F.lit(high[position]))
    else:
        values = part.table.column(position).unique().drop_null().to_pylist()
        if len(values) <= in_list_cap:
            matches = target.isin(values)
        else:
            matches = target.between(F.lit(min(values)), F.lit(max(values)))
    return matches | target.isNull() if part.null_safe else matches
