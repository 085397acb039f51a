"""A scan's report: what one planned scan kept, pruned and why, and where reports are kept.

A scan may be planned in a Python worker on the driver's host, so its report is written to the filter store,
one file per scan under its table (``reports/tables/<digest>/<planned at>-<scan id>.json``) and its handle if
any (``reports/<handle>/...``), the newest ``MAX_SCANS_KEPT`` of each, read back in the driver by handle or
from a DataFrame's plan (:mod:`dynsource.explain`). The Python reader's tasks count row groups and rows later,
in executors, through a Spark accumulator (:mod:`dynsource.scan.taskfigures`); reading a report back adds up the figures
of the tasks of its scan, or says why there are none.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from dynsource.filtering import filterstore
from dynsource.filtering.filterstore import FilterStore
from dynsource.scan import taskfigures

log = logging.getLogger(__name__)
# Reports of a handle's (and a table's) newest scans that the store keeps: a DataFrame plans a scan per action.
MAX_SCANS_KEPT = 20
_TABLES = "tables"  # reports/tables/<digest>/: the reports of a table's scans, with or without a handle
WHERE_DOES_NOT_PRUNE = (
    "Spark does not pass a query's WHERE to a Python data source, so WHERE on partition columns does not prune: give "
    "the partitionFilter option, or run the query with dynsource.sql(spark, query), which turns them into one")
# Said instead of WHERE_DOES_NOT_PRUNE of a scan read by Spark's reader (dynsource.table's, dynsource.sql's).
SPARK_PRUNES_FURTHER = (
    "the kept files were handed to Spark's file reader, which may read fewer of them: it prunes partitions by the "
    "query's WHERE on partition columns and by its own dynamic partition pruning")
_TASK_FIGURES = ("tasks_reported", *(field.name for field in dataclasses.fields(taskfigures.ReadCounts)))


@dataclass(frozen=True)
class ScanReport:
    """Figures of one planned scan; ``str()`` gives a summary of a few lines.

    Every scan (each action on a DataFrame plans one) keeps its own report, named by ``scan_id``;
    :func:`dynsource.scan_report` gives a handle's newest scan (``planned_at``, seconds since the epoch, and
    ``scans_with_handle`` say which) and :func:`dynsource.scan_reports` all of them; ``scan_report(df)`` the newest
    scan of the DataFrame's reader (its ``table`` or ``path``, with the same options: ``options_digest``),
    with a handle or not. :meth:`pruned_by` says which filters pruned (``partition_filter``, the handle's).

    ``planning_ms`` includes ``wait_ms``, the time spent waiting for a late filter.
    ``partitions_kept`` counts the leaf partitions read; ``partitions_total`` the table's, when the walk
    knows them: when directories were pruned above the leaf level (``pruned_by_column``, directories pruned
    at each partition column's level), nothing below them was listed, so it is None. ``read_by`` says which
    reader read the kept files: ``python`` (dynsource's, packed into ``input_partitions``) or ``spark``.

    ``data_columns`` are the filter fields that are data columns. For those, the Python reader's tasks
    skip Parquet row groups (``row_groups_total`` of the kept files, ``row_groups_skipped``) and, when
    ``row_filtering`` was planned (at most ``rowFilterMaxKeys`` keys, within ``taskFilterMaxBytes``),
    filter rows (``rows_read``, ``rows_filtered``; ``row_filtering_tasks`` of them did to the end): sums
    over the ``tasks_reported`` tasks that have run (0 before the first action, or without data-column
    fields). When the tasks had no way to send them (Spark Connect), the scan was only planned (an explain),
    or the report is read outside the driver that ran the scan, they are None and
    ``task_figures_unavailable`` says why. A filter of several ``parts`` (one per dimension) has a line for
    each: its fields, kind, keys, bytes, and what it was applied to (directories, row groups, rows).

    The report of a :func:`dynsource.dynamic_join` that did not prune has no
    handle and no scan figures (None), only the reason.
    """

    handle: str | None
    path: str
    payload_kind: str | None
    keys: int | None
    payload_bytes: int | None
    filtering: bool
    partitions_total: int | None
    partitions_kept: int | None
    files_kept: int | None
    bytes_kept: int | None
    listings: int | None
    input_partitions: int | None
    planning_ms: float | None
    wait_ms: float = 0.0
    fallback_reason: str | None = None
    scan_id: str | None = None
    data_columns: tuple[str, ...] = ()
    row_filtering: bool = False
    figures_owner: str | None = None
    task_figures_unavailable: str | None = None
    tasks_reported: int | None = 0
    row_groups_total: int | None = 0
    row_groups_skipped: int | None = 0
    rows_read: int | None = 0
    rows_filtered: int | None = 0
    row_filtering_tasks: int | None = 0
    pruned_by_column: dict[str, int] = dataclasses.field(default_factory=dict)
    planned_at: float = dataclasses.field(default_factory=time.time)
    scans_with_handle: int | None = None
    table: str | None = None  # the registered table read ('default.sales'); None: read by path
    partition_columns: tuple[str, ...] = ()
    partition_filter: str | None = None
    options_digest: str | None = None
    payload_exceeded: bool = False  # the collector stopped past its threshold: the payload holds no key
    read_by: str = "python"  # the reader of the kept files: dynsource's Python reader, or Spark's file reader
    parts: tuple[str, ...] = ()  # a filter of several parts (one per dimension): each one's figures and uses
    task_filter_bytes: int | None = None  # the filter each read task gets: its data-column parts, each capped

    def __str__(self) -> str:
        if self.partitions_kept is None:  # a dynamic_join that planned no scan with a filter
            return f"{self.path}: not pruned dynamically ({self.fallback_reason})"
        return "\n".join([self._heading(), *("  " + line for line in self.lines())])

    def pruned_by(self) -> str:
        """The filters that pruned the scan: its ``partitionFilter``, its dynamic filter, both, or none."""
        used = [f"partitionFilter {self.partition_filter!r}"] if self.partition_filter else []
        if self.handle is not None and self.filtering:
            used.append(f"dynamic filter {self.handle}")
        return " and ".join(used) or "none"

    def lines(self) -> list[str]:
        """The summary's lines under its heading: payload or filters, partitions, files, listings and times, rows."""
        head = [f"payload: {self._payload()}", *(f"  part {part}" for part in self.parts)] if self.handle else []
        if self.handle is None or self.partition_filter:
            head.append(f"pruned by: {self.pruned_by()}")
        lines = [*head, f"partitions: {self._partitions()}",
                 f"files: {self.files_kept:,} ({self.bytes_kept:,} bytes) " + (
                     f"in {self.input_partitions:,} input partition(s)" if self.input_partitions is not None
                     else "read by Spark's file reader"),
                 f"listings: {self.listings:,}; planning: {self.planning_ms:,} ms"
                 + (f", of which waiting for the filter: {self.wait_ms:,} ms" if self.wait_ms else "")]
        if self.data_columns:
            lines.append(self._read_tasks())
        if self.fallback_reason:
            lines.append(("not filtering: " if not self.filtering else "note: ") + self.fallback_reason)
        if self.handle is None and self.partition_filter is None and self.partition_columns:
            lines.append(f"note: {SPARK_PRUNES_FURTHER if self.read_by == 'spark' else WHERE_DOES_NOT_PRUNE}")
        return lines

    def _heading(self) -> str:
        heading = f"dynamic filter {self.handle} on {self.path}" if self.handle else f"scan of {self._source()}"
        if self.scan_id is None:
            return heading
        planned = f", planned {_utc(self.planned_at)}"
        newest = "" if not self.scans_with_handle or self.scans_with_handle < 2 else (
            f"; the newest of {self.scans_with_handle} scans with this handle, dynsource.scan_reports() lists them")
        return f"{heading} (scan {self.scan_id[:8]}{planned}{newest})"

    def _source(self) -> str:
        return f"table {self.table} ({self.path})" if self.table else self.path

    def _payload(self) -> str:
        if self.payload_kind is None:
            return "none (the filter could not be loaded)"
        if self.payload_exceeded:  # not an empty dimension, which would prune every partition
            kept = "every partition its partitionFilter keeps" if self.partition_filter else "every partition"
            return f"exceeded the collector's threshold, so it holds no key and prunes nothing: {kept} is read"
        kind = f"all of {len(self.parts)} parts" if self.parts else self.payload_kind
        return f"{kind}, {self.keys:,} key(s), {self.payload_bytes:,} bytes"

    def _partitions(self) -> str:
        pruned = ", ".join(f"{count:,} at {column}" for column, count in self.pruned_by_column.items() if count)
        if self.partitions_total is None:
            return (f"{self.partitions_kept:,} leaf partition(s) kept; directories pruned without listing below "
                    f"them: {pruned}")
        kept = f"{self.partitions_kept:,} of {self.partitions_total:,} kept"
        return f"{kept} (pruned: {pruned})" if len(self.pruned_by_column) > 1 and pruned else kept

    def _read_tasks(self) -> str:
        by = f"by data column(s) {list(self.data_columns)}"
        if self.read_by == "spark":
            return f"row groups and rows ({by}): a predicate pushed to Spark's file reader, which counts them itself"
        if self.task_figures_unavailable is not None:
            return f"row groups and rows ({by}): not counted: {self.task_figures_unavailable}"
        if not self.tasks_reported:
            return f"row groups and rows ({by}): no read task has reported yet (run an action)"
        line = (f"row groups ({by}): {self.row_groups_skipped:,} of {self.row_groups_total:,} skipped in "
                f"{self.tasks_reported:,} read task(s)")
        if self.row_filtering:
            line += f"; rows: {self.rows_read:,} read, {self.rows_filtered:,} filtered out"
        return line

    def log(self) -> None:
        # Flink's HiveSourceDynamicFileEnumerator wording, so the line is familiar in logs.
        total = "unknown (pruned above the leaf level)" if self.partitions_total is None else self.partitions_total
        scan = f"Dynamic filtering with handle {self.handle} on" if self.handle else "Scan of"
        log.info(
            "%s %s: original partition number is %s, remaining partition number is %d (%d files, %d bytes); "
            "planning %s ms; pruned by %s%s%s",
            scan, self._source(), total, self.partitions_kept,
            self.files_kept, self.bytes_kept, self.planning_ms, self.pruned_by(), self._row_level(),
            f"; fallback: {self.fallback_reason}" if self.fallback_reason else "",
        )

    def _row_level(self) -> str:
        if not self.data_columns:
            return ""
        rows = "row groups and rows" if self.row_filtering else "row groups"
        return f"; {rows} filtered in the read tasks by data column(s) {list(self.data_columns)}"


def save(report: ScanReport, filter_store: str | FilterStore | None) -> None:
    """Store ``report`` among its table's scans and its handle's, keeping the newest ``MAX_SCANS_KEPT`` of each."""
    location = FilterStore.of(filter_store)
    directories = [_table_directory(report.table, report.path)]
    if report.handle is not None:
        directories.append(_directory(report.handle))
    for directory in directories:
        location.put(f"{directory}/{_scan_name(report)}", json.dumps(asdict(report)).encode())
        for old in _scan_names(directory, location)[:-MAX_SCANS_KEPT]:
            location.remove(f"{directory}/{old}")


def _utc(epoch_seconds: float) -> str:
    return dt.datetime.fromtimestamp(epoch_seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def handle_reports(handle: str, location: FilterStore) -> list[ScanReport]:
    """The kept reports of the scans that used ``handle``, oldest first (the newest ``MAX_SCANS_KEPT``)."""
    scans = _scan_names(_directory(handle), location)
    return [_complete(_read(_directory(handle), name, location), len(scans)) for name in scans]


def handle_report(handle: str, location: FilterStore) -> ScanReport:
    """The newest kept report of a scan that used ``handle``; ``LookupError`` when none is kept."""
    scans = _scan_names(_directory(handle), location)
    if not scans:
        raise LookupError(f"No scan has used dynamic filter handle '{handle}' yet: run a query on it first.")
    return _complete(_read(_directory(handle), scans[-1], location), len(scans))


def table_scans(table: str | None, path: str, location: FilterStore) -> Iterator[ScanReport]:
    """The kept reports of the scans of registered ``table`` (None: of the table at ``path``), newest first."""
    directory = _table_directory(table, path)
    for name in reversed(_scan_names(directory, location)):
        try:
            scan = _read(directory, name, location)
        except FileNotFoundError:  # the oldest, removed since listed by another process's newer scan
            continue
        yield _complete(scan, None)


def _read(directory: str, name: str, location: FilterStore) -> ScanReport:
    fields = json.loads(location.get(f"{directory}/{name}"))
    tuples = {key: tuple(fields.get(key, ())) for key in ("data_columns", "partition_columns", "parts")}  # JSON lists
    return ScanReport(**{**fields, **tuples})


def _complete(report: ScanReport, scans: int | None) -> ScanReport:
    """``report`` with the count of its handle's scans and, when this driver ran it, its read tasks' figures."""
    report = dataclasses.replace(report, scans_with_handle=scans)
    if report.scan_id is None or not report.data_columns:
        return report
    if report.task_figures_unavailable is None:
        totals = taskfigures.scan_totals(report.figures_owner, report.scan_id)
        if totals is not None:
            tasks, counts = totals
            return dataclasses.replace(report, tasks_reported=tasks, **asdict(counts))
        report = dataclasses.replace(
            report, task_figures_unavailable="they are counted only in the driver that ran the query (process "
            f"{report.figures_owner}), not in this process: ask dynsource.scan_report() in that driver")
    return dataclasses.replace(report, **dict.fromkeys(_TASK_FIGURES))


def _directory(handle: str) -> str:
    filterstore.validate_handle(handle)  # a handle names a directory: '../' must not reach outside the store
    return f"{filterstore.REPORTS}/{handle}"


def _scan_name(report: ScanReport) -> str:
    # Sorting by name sorts by planning time: the newest scan is the last name.
    return f"{round(report.planned_at * 1000):015d}-{report.scan_id}.json"


def _table_directory(table: str | None, path: str) -> str:
    # A digest: paths hold '/' and ':'. With a table's path: two metastores may each have a 'default.sales'.
    key = f"table:{table}:{path}" if table else f"path:{path}"
    return f"{filterstore.REPORTS}/{_TABLES}/{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _scan_names(directory: str, location: FilterStore) -> list[str]:
    return [name for name in location.names(directory) if name.endswith(".json")]
