"""Scan reports: what a dynamically filtered scan kept, pruned and why (EXPLAIN for dynamic filtering).

The scan is planned in a Python worker, so the report is written to the
filter store under the filter's handle and read back in the driver. Row groups
and rows are counted later, by the ``read()`` tasks in executors: each task
writes its own figures next to the report, and :func:`scan_report` adds up the
figures of the tasks of the last planned scan.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame

from dynsource import storage, store

log = logging.getLogger(__name__)


@dataclass
class ReadCounts:
    """Figures one ``read()`` task counts when a filter field is a data column.

    ``rows_read`` are the rows of the row groups read, before row filtering;
    ``rows_filtered`` those row filtering then dropped.
    """

    row_groups_total: int = 0
    row_groups_skipped: int = 0
    rows_read: int = 0
    rows_filtered: int = 0


@dataclass(frozen=True)
class ScanReport:
    """Figures of the last scan planned with one dynamic filter handle.

    ``planning_ms`` includes ``wait_ms``, the time spent waiting for a late filter.
    ``partitions_total`` counts the partition directories seen: the kept ones plus
    those pruned at the level where they were pruned (for a table partitioned by
    one column, its partition count).

    ``data_columns`` are the filter fields that are data columns. For those, the
    read tasks skip Parquet row groups (``row_groups_total`` of the kept files,
    ``row_groups_skipped``) and, when ``row_filtering`` (the filter has at most
    ``rowFilterMaxKeys`` keys), filter rows (``rows_read``, ``rows_filtered``).
    These task figures are sums over the ``tasks_reported`` tasks that have run
    (0 before the first action, or without data-column fields).

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
    tasks_reported: int = 0
    row_groups_total: int = 0
    row_groups_skipped: int = 0
    rows_read: int = 0
    rows_filtered: int = 0

    def log(self) -> None:
        # Flink's HiveSourceDynamicFileEnumerator wording, so the line is familiar in logs.
        log.info(
            "Dynamic filtering with handle %s on %s: original partition number is %d, remaining partition "
            "number is %d (%d files, %d bytes)%s%s",
            self.handle, self.path, self.partitions_total, self.partitions_kept, self.files_kept,
            self.bytes_kept, self._row_level(), f"; fallback: {self.fallback_reason}" if self.fallback_reason else "",
        )

    def _row_level(self) -> str:
        if not self.data_columns:
            return ""
        rows = "row groups and rows" if self.row_filtering else "row groups"
        return f"; {rows} filtered in the read tasks by data column(s) {list(self.data_columns)}"


def save(report: ScanReport, filter_store: str | None, *, storage_options: Mapping[str, Any] | None = None) -> None:
    store.put(_name(report.handle), json.dumps(asdict(report)).encode(), filter_store, storage_options=storage_options)


def save_task(
    handle: str, scan_id: str, task: int, counts: ReadCounts, filter_store: str | None, *,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Record the figures of one read task.

    Named by the task's InputPartition index, so a retried task or a second
    action on the same DataFrame replaces its figures instead of adding to them.
    """
    store.put(f"{_task_directory(handle, scan_id)}/{task}.json", json.dumps(asdict(counts)).encode(), filter_store,
              storage_options=storage_options)


@dataclass(frozen=True)
class _Join:
    fact: str
    handle: str | None
    reason: str | None
    store: str | None
    storage_options: Mapping[str, Any] | None = None


_joins: weakref.WeakKeyDictionary[DataFrame, _Join] = weakref.WeakKeyDictionary()


def record_join(
    df: DataFrame, *, fact: str, handle: str | None, reason: str | None, store: str | None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Remember what :func:`dynsource.dynamic_join` did for ``df``: pruned with ``handle``, or not, and why."""
    _joins[df] = _Join(fact, handle, reason, store, storage_options)


def scan_report(
    target: str | DataFrame, store_url: str | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> ScanReport:
    """The report of the last scan that used a handle, or of a DataFrame made by ``dynamic_join``.

    ``storage_options`` are the fsspec options of the filter store ``store_url``.
    Raises ``LookupError`` when no scan has used the handle yet (run a query first).
    """
    if isinstance(target, DataFrame):
        join = _joins.get(target)
        if join is None:
            raise ValueError("scan_report() takes a filter handle or a DataFrame returned by dynsource.dynamic_join().")
        if join.handle is None:
            return ScanReport(handle=None, path=join.fact, payload_kind=None, keys=None, payload_bytes=None,
                              filtering=False, partitions_total=None, partitions_kept=None, files_kept=None,
                              bytes_kept=None, listings=None, input_partitions=None, planning_ms=None,
                              fallback_reason=join.reason)
        if join.store:
            return _handle_report(join.handle, join.store, join.storage_options)
        return _handle_report(join.handle, store_url, storage_options)
    return _handle_report(target, store_url, storage_options)


def _handle_report(handle: str, store_url: str | None, storage_options: Mapping[str, Any] | None) -> ScanReport:
    store.validate_handle(handle)
    try:
        fields = json.loads(store.get(_name(handle), store_url, storage_options=storage_options))
    except FileNotFoundError:
        raise LookupError(f"No scan has used dynamic filter handle '{handle}' yet: run a query on it first.") from None
    report = ScanReport(**{**fields, "data_columns": tuple(fields.get("data_columns", ()))})
    if report.scan_id is None:
        return report
    tasks = _task_counts(handle, report.scan_id, store_url, storage_options)
    totals = {name: sum(getattr(task, name) for task in tasks) for name in asdict(ReadCounts())}
    return dataclasses.replace(report, tasks_reported=len(tasks), **totals)


def _task_counts(
    handle: str, scan_id: str, store_url: str | None, storage_options: Mapping[str, Any] | None
) -> list[ReadCounts]:
    fs, root = storage.filesystem(store_url or store.default_store(), storage_options)
    fs.invalidate_cache()  # tasks kept writing their figures since this process may have listed them
    directory = f"{root.rstrip('/')}/{_task_directory(handle, scan_id)}"
    try:
        names = fs.ls(directory, detail=False)
    except FileNotFoundError:
        return []
    # store.put leaves '<name>.<uuid>.tmp' files while it writes.
    return [ReadCounts(**json.loads(fs.cat_file(name))) for name in names if name.endswith(".json")]


def _name(handle: str) -> str:
    store.validate_handle(handle)  # a handle names a file: '../' must not reach outside the store
    return f"{store.REPORTS}/{handle}.json"


def _task_directory(handle: str, scan_id: str) -> str:
    store.validate_handle(handle)
    return f"{store.REPORTS}/{handle}/{scan_id}"
