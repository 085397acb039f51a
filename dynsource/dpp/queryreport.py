"""What :func:`dynsource.sql` and :func:`dynsource.dynamic_join` did for the DataFrames they return.

A :class:`QueryReport` has one :class:`Assignment` per fact scan of a query: the dynamic filter wired to it, or
why none was, and notes on the joins not pruned; its scans' own reports are read back from the filter store
once a query ran. Both are kept per returned DataFrame (weakly: they go with it) for ``dynsource.scan_report``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from pyspark.sql import DataFrame

from dynsource.filtering.filterstore import FilterStore
from dynsource.scan.report import ScanReport, handle_report


@dataclass(frozen=True)
class JoinRecord:
    """What :func:`dynsource.dynamic_join` did for a DataFrame: its fact, the handle that pruned it or why none."""

    fact: str
    handle: str | None
    reason: str | None
    store: FilterStore | None


_joins: weakref.WeakKeyDictionary[DataFrame, JoinRecord] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Assignment:
    """One fact scan of a :func:`dynsource.sql` query: the dynamic filter wired to it, or why none was."""

    scan: str  # the table and its alias, e.g. 'default.store_sales AS ss'
    filter: str | None = None  # e.g. 'default.store_sales (ss.ss_sold_date_sk) <- default.date_dim (d.d_date_sk)'
    handle: str | None = None
    payload_kind: str | None = None
    keys: int | None = None
    collection_ms: float | None = None
    reason: str | None = None  # why the scan is not pruned (None when it is)
    columns: tuple[str, ...] | None = None  # the columns the pruned scan reads; None: all
    partition_filter: str | None = None  # the query's own predicates on partition columns, given to the scan
    # The names of the options a reference gave the scan itself (``t WITH ('dynamicFilter' = ...)``): dynsource.sql
    # adds no filter to it, and ``handle`` and ``partition_filter`` are those it reads with.
    given: tuple[str, ...] = ()
    store: FilterStore | None = field(default=None, compare=False)  # the given handle's store

    def given_line(self) -> str:
        """What a scan read with its own options (``given``) is pruned by, in a report's words."""
        pruned = [f"partitionFilter {self.partition_filter!r}"] if self.partition_filter is not None else []
        if self.handle is not None:
            pruned.append(f"dynamic filter {self.handle}")
        return (f"{self.scan}: read with its own WITH options ({', '.join(self.given)}), pruned by "
                f"{' and '.join(pruned) or 'none'}; dynsource.sql adds no filter to a reference that carries options")


@dataclass(frozen=True)
class QueryReport:
    """What :func:`dynsource.sql` did for a query (Trino's EXPLAIN ANALYZE as the model).

    ``assignments`` has one entry per fact scan it could prune; ``notes`` says
    why other joins were not pruned. :meth:`scans` gives each pruned scan's
    :class:`ScanReport` once a query ran (None before).
    """

    assignments: tuple[Assignment, ...]
    notes: tuple[str, ...]
    store: FilterStore | None = None

    def scans(self) -> list[ScanReport | None]:
        return [None if a.handle is None else _ran_report(a.handle, a.store or self.store) for a in self.assignments]

    def __str__(self) -> str:
        lines = []
        for assignment, scan in zip(self.assignments, self.scans(), strict=True):
            if assignment.given:
                lines.append(assignment.given_line())
                if assignment.handle is not None:
                    lines += _scan_lines(scan)
                continue
            if assignment.partition_filter is not None:
                lines.append(f"{assignment.scan}: partitionFilter {assignment.partition_filter!r}")
            if assignment.handle is None:
                if assignment.reason is not None:
                    lines.append(f"{assignment.scan}: not pruned by dynsource ({assignment.reason})")
                continue
            read = "all columns" if assignment.columns is None else f"columns {list(assignment.columns)}"
            collected = "" if assignment.collection_ms is None else f", collected in {assignment.collection_ms} ms"
            lines.append(f"{assignment.filter}: {assignment.payload_kind}, {assignment.keys} keys{collected}; "
                         f"reads {read}")
            lines += _scan_lines(scan)
        lines += [f"not pruned: {note}" for note in self.notes]
        return "\n".join(lines) or "no dynamic filtering"


def _scan_lines(scan: ScanReport | None) -> list[str]:
    if scan is None:
        return ["  (no scan yet: run an action on the DataFrame first)"]
    return ["  " + line for line in scan.lines()]


_queries: weakref.WeakKeyDictionary[DataFrame, QueryReport] = weakref.WeakKeyDictionary()


def record_query(df: DataFrame, query_report: QueryReport) -> None:
    """Remember what :func:`dynsource.sql` did for ``df``."""
    _queries[df] = query_report


def _ran_report(handle: str, location: FilterStore | None) -> ScanReport | None:
    try:
        return handle_report(handle, location or FilterStore.of(None))
    except LookupError:
        return None


def record_join(
    df: DataFrame, *, fact: str, handle: str | None, reason: str | None, store: FilterStore | None
) -> None:
    """Remember what :func:`dynsource.dynamic_join` did for ``df``: pruned (a handle of ``store``) or not, and why."""
    _joins[df] = JoinRecord(fact, handle, reason, store)


def recorded(df: DataFrame) -> QueryReport | JoinRecord | None:
    """What :func:`dynsource.sql` or :func:`dynsource.dynamic_join` recorded for ``df``, if either made it."""
    return _queries.get(df) or _joins.get(df)
