"""Planning a scan as a value: :class:`ScanPlanner` resolves the filter and walks the table once, and returns a
frozen :class:`PlannedScan` that either reader consumes.

The Python reader packs a plan's files into InputPartitions (:meth:`PlannedScan.input_partitions`) in
``DataSourceReader.partitions``, in a Spark Python worker on the driver's host; Spark's own file reader is
handed the plan's files by :mod:`dynsource.spark.filereader`, in the driver. Either way :func:`record` writes the
scan's report and its log lines from the plan.

A warm session plans the same scans again and again: every query of ``dynsource.sql`` that leaves the pruning
to Spark reads its facts whole. A plan without a dynamic filter, of a local table walked from its root, is kept
(the newest :data:`KEPT_PLANS`) and given again, under a new scan id, while every directory its walk read would
be read alike now (:func:`dynsource.layout.directories.read_alike`: the kept listing, nothing in its directories
changed since, as their inotify watches or their ``stat`` calls tell). Checking costs none of the walk's typing,
filtering and checks: on TPC-DS ``store_sales`` (1,823 partitions) 1-3 ms by watches, 20 ms by ``stat``, and by
watches a ``stat`` of the top directory while nothing happened since the last check passed.

Inside :func:`dynsource.scan.latechecks.checked_later` (``dynsource.sql`` runs a query's planning there) a
kept plan is given at once and checked on a thread beside the caller, which meanwhile has Spark analyse the
query; the scan's report is saved on that thread too. The caller plans again, checking first, if any check
fails. There a caller may also trust a plan found alike less than ``check_interval_ms`` ago without checking
it again, as Trino trusts its file status cache for ``hive.file-status-cache-expire-time``: files written within
the interval may be missed until it ends.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import fsspec
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from dynsource.filtering import DynamicFilteringData
from dynsource.layout import directories
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.layout.listing import Listing
from dynsource.runtime.lru import LruMap
from dynsource.scan import files, latechecks, report, resolution, rowfilter, splits, taskfigures
from dynsource.scan.options import ScanOptions
from dynsource.scan.origin import Reader
from dynsource.scan.rowfilter import RowFilterSpec
from dynsource.scan.tableschema import read_column_types, table_walk
from dynsource.types import normalize_type

log = logging.getLogger(__name__)
# The tables (registered names or paths) this worker process has said were read whole: once per table is enough.
_warned_whole: set[str] = set()
KEPT_PLANS = 64
# The session setting of the interval of dynsource.sql's late checks (0: every kept plan checked).
CHECK_INTERVAL_CONF = "spark.dynsource.listingCheckIntervalMs"
# By (options, schema): the plan, and when its walk was last found alike (time.perf_counter() before the check).
_kept_plans: LruMap[tuple[PlannedScan, float]] = LruMap(KEPT_PLANS)


@dataclass(frozen=True)
class PlannedScan:
    """What one scan reads and why: the kept partitions and files, the filter's outcome, the row filter, timings."""

    options: ScanOptions
    schema: StructType
    scan_id: str
    listing: Listing
    read_columns: tuple[str, ...]  # the partition columns the read schema has
    values: tuple[tuple[Any, ...], ...]  # each kept partition's typed values of read_columns
    data: DynamicFilteringData | None  # the filter resolved (None: none asked for, or unusable)
    applied: bool  # whether the walk pruned with ``data`` (it sets aside a filter it cannot compare)
    reason: str | None  # why the dynamic filter was not used, when it was asked for and not used
    row_filter: RowFilterSpec | None
    rows_reason: str | None  # why the data-column fields filter no rows
    wait_ms: float
    started: float  # time.perf_counter() when planning began

    @property
    def dynamic(self) -> bool:
        """Whether the scan was asked to filter dynamically."""
        return bool(self.options.dynamic_filter and self.options.dynamic_filtering_enabled)

    @property
    def file_paths(self) -> list[str]:
        return [f.path for f in self.listing.files]

    def input_partitions(self) -> list[splits.SplitGroup]:
        """The kept files packed for the Python reader, as Spark's ``FilePartition`` packs them."""
        options = self.options
        return splits.pack(
            self.listing.partitions, self.values, self.read_columns, splittable=options.format == "parquet",
            max_partition_bytes=options.max_partition_bytes, open_cost_in_bytes=options.open_cost_in_bytes,
            min_partition_num=options.min_partition_num, row_filter=self.row_filter,
        )


class ScanPlanner:
    """Plans one scan of a table read with ``schema``; what is worked out once is a cached property.

    ``stored_schema``: the schema is a registered table's, checked against its files when it was registered, so
    planning opens no file to check it (a file of a partition the query does not read may be damaged).
    """

    def __init__(self, options: ScanOptions, schema: StructType, stored_schema: bool = False) -> None:
        self.options = options
        self.schema = schema
        self.stored_schema = stored_schema

    @functools.cached_property
    def column_types(self) -> dict[str, str]:
        """Spark SQL type of each read-schema column, ``partitionColumns`` declarations first."""
        return read_column_types(self.options, self.schema)

    @functools.cached_property
    def walk(self) -> tuple[Any, PartitionEnumerator]:
        return table_walk(self.options)

    def resolve_filter(self) -> tuple[DynamicFilteringData | None, str | None]:
        """The filter to apply, or None and why it cannot be used (under ``dynamicFilterOnError=fallback``): resolved
        by the rules of every source's :func:`dynsource.dynamic_filter` (:mod:`dynsource.scan.resolution`)."""
        options = self.options
        kept = " its partitionFilter keeps" if options.partition_filter else ""
        return resolution.resolve(resolution.FilterOptions.of_scan(options),
                                  unfiltered=f"the scan of {options.path} reads every partition{kept}",
                                  reading="reading every partition")

    def plan(self) -> PlannedScan:
        """Enumerate, pruning with ``partitionFilter`` and the dynamic filter if any; type the kept partitions.

        A kept plan of the same scan is given again while its walk would read alike (see the module's docstring).
        """
        started = time.perf_counter()
        options = self.options
        key = (None if self._dynamic or options.base_path is not None
               else (options, self.schema.json(), self.stored_schema))
        kept = _kept_plans.get(key) if key else None
        if kept is not None and self._given_again(key, *kept):
            return dataclasses.replace(kept[0], scan_id=uuid.uuid4().hex, started=started)
        planned = self._plan(started)
        if key and planned.listing.checkable(self.walk[1].root):
            _kept_plans.put(key, (planned, started))
        return planned

    def _given_again(self, key: Hashable, kept: PlannedScan, alike_at: float) -> bool:
        """Whether ``kept``, found alike at ``alike_at``, is given again: once its check passes, or at once inside
        :func:`~dynsource.scan.latechecks.checked_later` (without a check while its interval since ``alike_at``
        lasts)."""
        late = latechecks.current()
        if late is not None and time.perf_counter() - alike_at < late.interval_s:
            return True
        check = functools.partial(_check, self.walk[0], key, kept)
        if late is None:
            return check()
        late.submit(check)
        return True

    @property
    def _dynamic(self) -> bool:
        return bool(self.options.dynamic_filter and self.options.dynamic_filtering_enabled)

    def _plan(self, started: float) -> PlannedScan:
        options, schema = self.options, self.schema
        partition_filter = options.partition_filter and options.partition_filter.under(options.partition_settings)
        if partition_filter is not None:
            partition_filter.check_types(self.column_types)
        fs, walk = self.walk
        enumerator = DynamicPartitionEnumerator(
            walk, self.column_types, data_columns=schema.names, settings=options.partition_settings,
            on_error=options.dynamic_filter_on_error,
            static_filter=partition_filter.level_filter() if partition_filter else None,
        )
        waited = time.perf_counter()
        data, unusable = self.resolve_filter()
        wait_ms = round((time.perf_counter() - waited) * 1000, 1)
        if data is not None:
            enumerator.set_dynamic_filtering_data(data)
        listing = enumerator.enumerate()
        if partition_filter is not None:
            partition_filter.check_listing(listing.columns, listed_leaves=bool(listing.partitions))
        read_columns = tuple(c for c in listing.columns if c in self.column_types)
        if not self.stored_schema:
            _check_data_columns(schema, listing, fs, options)
        values = tuple(listing.typed_rows(read_columns))
        scan_id = uuid.uuid4().hex
        applied = data is not None and not listing.filter_dropped
        row_filter, rows_reason = None, None
        if applied:
            schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
            row_filter, rows_reason = rowfilter.plan_row_filter(
                data, listing.columns, schema_types, handle=options.dynamic_filter, scan_id=scan_id,
                max_keys=options.row_filter_max_keys, max_bytes=options.task_filter_max_bytes,
                on_error=options.dynamic_filter_on_error,
            )
        reason = None
        if self._dynamic:
            reason = unusable or listing.filter_set_aside
            if data is not None and not data.is_filtering:
                reason = f"the filter exceeded the collector's threshold: {resolution.EXCEEDED_FIX}"
        return PlannedScan(options, schema, scan_id, listing, read_columns, values, data, applied, reason,
                           row_filter, rows_reason, wait_ms, started)


def _check(fs: fsspec.AbstractFileSystem, key: Hashable, kept: PlannedScan) -> bool:
    """Whether ``kept``'s walk would read alike now; if so, it is kept as found alike now (unless replaced)."""
    began = time.perf_counter()
    alike = directories.read_alike(fs, kept.listing.read)
    current = _kept_plans.get(key)
    if alike and current is not None and current[0] is kept:
        _kept_plans.put(key, (kept, began))
    return alike


def plan_scan(
    options: ScanOptions, schema: StructType,
    task_figures: taskfigures.Channel | taskfigures.Unavailable = taskfigures.PLANNED_ONLY,
    reader: Reader | None = None,
) -> list[InputPartition]:
    """The Python reader's InputPartitions for a scan, its report saved and logged (see :func:`record`).
    ``task_figures`` is the channel its read tasks count through; without one, the scan is planned but not read
    (an explain), and its report says so."""
    planned = ScanPlanner(options, schema, stored_schema=reader is not None and reader.table is not None).plan()
    input_partitions = planned.input_partitions()
    record(planned, input_partitions=len(input_partitions), task_figures=task_figures, reader=reader)
    return input_partitions


def record(
    planned: PlannedScan, *, input_partitions: int | None, task_figures: taskfigures.Channel | taskfigures.Unavailable,
    reader: Reader | None, read_by: str = "python",
) -> report.ScanReport:
    """Log and save ``planned``'s report, under its ``reader``'s table (by default the one at ``path``) and its
    handle if any; a partitioned table read whole without any filter by the Python reader logs a WARNING.

    Spark's reader reads only for ``dynsource.sql``, ``dynsource.table`` and ``dynamic_join``; ``dynsource.sql``
    turns a query's predicates on partition columns into ``partitionFilter`` and, knowing the query, says itself
    where one could not prune (its reads set ``warnUnpruned`` false).
    """
    scan = _report(planned, reader, input_partitions=input_partitions, task_figures=task_figures, read_by=read_by)
    options = planned.options
    if read_by == "python" and options.warn_unpruned and not planned.dynamic and options.partition_filter is None:
        _warn_whole_table(options, reader.table if reader else None, planned.listing)
    return scan


def _warn_whole_table(options: ScanOptions, table: str | None, listing: Listing) -> None:
    """Say once per table in this worker process that a partitioned table was read whole, and how to prune it."""
    if not listing.columns or listing.directories_pruned or (table or options.path) in _warned_whole:
        return
    _warned_whole.add(table or options.path)
    column = listing.columns[0]
    turns = "which turns WHERE predicates on partition columns into partitionFilter"
    if table:
        option = f"SELECT ... FROM {table} WITH ('partitionFilter' = '{column} = ...')"
        doors = (f"run the query with dynsource.sql(spark, query), {turns}, or in DataFrame code read the table with "
                 f"dynsource.table(spark, '{table}'), whose joins Spark's own pruning reaches")
    else:
        option = f"spark.read.format('dynsource').option('partitionFilter', '{column} = ...')"
        doors = ("register the table (dynsource.register_table) and run the query with dynsource.sql(spark, query), "
                 + turns)
    log.warning(
        "dynsource: the scan of %s reads all %d partitions: it has neither a partitionFilter nor a dynamicFilter. "
        "If the query filters on partition column %s, note that Spark does not pass a query's WHERE to a Python data "
        "source, so such a filter prunes nothing here; give the partitionFilter option (%s), or %s. (Said once per "
        "table in each Python worker.)",
        f"table {table}" if table else options.path, len(listing.partitions), column, option, doors,
    )


def _check_data_columns(schema: StructType, listing: Listing, fs: Any, options: ScanOptions) -> None:
    """A requested column must be a partition column or stored in the first kept file (with ``mergeSchema`` files
    may lack columns, which then read as null, as in Spark)."""
    first = next((f.path for f in listing.files), None)
    wanted = [f.name for f in schema.fields if f.name not in listing.columns]
    if first is None or not wanted or options.merge_schema:
        return
    stored = set(files.file_schema(first, files.arrow_filesystem(fs), options.format).names)
    missing = [name for name in wanted if name not in stored]
    if missing:
        raise ValueError(
            f"Column(s) {missing} of the read schema are neither partition columns {list(listing.columns)} "
            f"nor stored in data file '{first}' (columns {sorted(stored)})."
        )


def _part_lines(planned: PlannedScan, read_by: str) -> tuple[str, ...]:
    """For a filter of several parts, each part's figures and what it was applied to."""
    data = planned.data
    if data is None or data.kind != "all":
        return ()
    uses = planned.row_filter.uses if planned.row_filter is not None else ()
    partitioned = {column.lower() for column in planned.listing.columns}
    lines = []
    for index, part in enumerate(data.parts):
        applied = ["directories"] if planned.applied and partitioned & {n.lower() for n in part.field_names} else []
        use = uses[index] if index < len(uses) else ""
        if use and read_by == "spark":
            use = "a predicate pushed to Spark's file reader" if part.kind != "bloom" else ""
        applied += [use] if use else []
        lines.append(f"{', '.join(part.field_names)}: {part.kind}, {len(part):,} key(s), {part.size_bytes:,} bytes; "
                     f"applied to {' and '.join(applied) or 'nothing in this scan (the join still filters)'}")
    return tuple(lines)


def _report(
    planned: PlannedScan, reader: Reader | None, *, input_partitions: int | None,
    task_figures: taskfigures.Channel | taskfigures.Unavailable, read_by: str,
) -> report.ScanReport:
    options, data, listing, row_filter = planned.options, planned.data, planned.listing, planned.row_filter
    # Row figures come from the Python reader's tasks only; Spark's reader counts none that reach dynsource.
    counted = row_filter is not None and read_by == "python"
    scan = report.ScanReport(
        handle=options.dynamic_filter if planned.dynamic else None,
        path=options.path,
        payload_kind=data.kind if data is not None else None,
        keys=len(data) if data is not None else None,
        payload_bytes=data.size_bytes if data is not None else None,
        payload_exceeded=data is not None and data.exceed_threshold,
        # A data column the filter cannot compare leaves the partition pruning standing: filtering stays true.
        filtering=planned.dynamic and planned.reason is None,
        partitions_total=listing.leaf_total,
        partitions_kept=len(listing.partitions),
        files_kept=len(listing.files),
        bytes_kept=listing.files_bytes,
        listings=len(listing.listed_paths),
        input_partitions=input_partitions,
        planning_ms=round((time.perf_counter() - planned.started) * 1000, 1),
        wait_ms=planned.wait_ms,
        fallback_reason=planned.reason or planned.rows_reason,
        scan_id=planned.scan_id,
        pruned_by_column=dict(listing.pruned),
        data_columns=tuple(column for column, _ in row_filter.data_columns) if row_filter else (),
        row_filtering=row_filter is not None and row_filter.filter_rows,
        figures_owner=task_figures.owner if counted and isinstance(task_figures, taskfigures.Channel) else None,
        task_figures_unavailable=(
            task_figures.reason if counted and isinstance(task_figures, taskfigures.Unavailable) else None),
        table=reader.table if reader else None,
        partition_columns=tuple(listing.columns),
        partition_filter=options.partition_filter.text if options.partition_filter else None,
        options_digest=reader.options_digest if reader else None,
        read_by=read_by,
        parts=_part_lines(planned, read_by),
        task_filter_bytes=len(row_filter.payload) if row_filter is not None and read_by == "python" else None,
    )
    scan.log()
    late = latechecks.current()
    if late is None:
        _save(scan, options)
    else:  # a few ms of file writes, beside Spark's analysis of the query
        late.defer(functools.partial(_save, scan, options))
    return scan


def _save(scan: report.ScanReport, options: ScanOptions) -> None:
    try:
        report.save(scan, options.filter_store)
    except OSError as error:  # the scan itself is sound: losing its report must not fail the query
        log.warning("dynsource: could not save the report of a scan of '%s': %s", options.path, error)
