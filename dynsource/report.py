"""Scan reports: what a dynamically filtered scan kept, pruned and why (EXPLAIN for dynamic filtering).

The scan is planned in a Python worker, so the report is written to the
filter store under the filter's handle and read back in the driver.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass

from dynsource import store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanReport:
    """Figures of the last scan planned with one dynamic filter handle.

    ``partitions_total`` counts the partition directories seen: the kept ones plus
    those pruned at the level where they were pruned (for a table partitioned by
    one column, its partition count).
    """

    handle: str
    path: str
    payload_kind: str | None
    keys: int | None
    filtering: bool
    partitions_total: int
    partitions_kept: int
    files_kept: int
    bytes_kept: int
    listings: int
    input_partitions: int
    planning_ms: float
    fallback_reason: str | None = None

    def log(self) -> None:
        # Flink's HiveSourceDynamicFileEnumerator wording, so the line is familiar in logs.
        log.info(
            "Dynamic filtering with handle %s on %s: original partition number is %d, remaining partition "
            "number is %d (%d files, %d bytes)%s",
            self.handle, self.path, self.partitions_total, self.partitions_kept, self.files_kept,
            self.bytes_kept, f"; fallback: {self.fallback_reason}" if self.fallback_reason else "",
        )


def save(report: ScanReport, filter_store: str | None) -> None:
    store.put(_name(report.handle), json.dumps(asdict(report)).encode(), filter_store)


def scan_report(handle: str, store_url: str | None = None) -> ScanReport:
    """The report of the last scan that used ``handle``; ``LookupError`` when none has run yet."""
    store.validate_handle(handle)
    try:
        fields = json.loads(store.get(_name(handle), store_url))
    except FileNotFoundError:
        raise LookupError(f"No scan has used dynamic filter handle '{handle}' yet: run a query on it first.") from None
    return ScanReport(**fields)


def _name(handle: str) -> str:
    return f"reports/{handle}.json"
