"""Task figures: how what each read task counted (row groups, rows) reaches the driver.

Read tasks run in executors that may share nothing with the driver but the
table's storage, so they cannot write their figures anywhere the driver reads,
and one object-store PUT per task would cost more than the figures are worth.
Spark's own channel is an accumulator: each task's updates travel back with its
result and are merged in the driver's Python process. :func:`channel` makes one
per SparkContext; :func:`dynsource.register` hands it to the reader through the
registered source class (pickled by value), and every read task adds its
figures keyed by (scan, task), so a retried task or a second action on the same
DataFrame replaces its figures instead of adding to them.

Spark Connect has no accumulators and no SparkContext in the client: there the
channel is :class:`Unavailable`, and the scan report says so instead of
showing figures; so it does for a scan planned but never read (an explain).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import weakref
from dataclasses import dataclass

from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import SparkSession

from dynsource.runtime import deployment

# Figures of the newest tasks a driver keeps: a scan's tasks are a few thousand at most, a session runs many scans.
MAX_TASKS_KEPT = 200_000
NOT_REGISTERED = (
    "the source was registered without dynsource.register(spark), which sets up the channel the read tasks "
    "send their figures through"
)
CONNECT = (
    "Spark Connect has no channel from read tasks back to the client (no accumulators): the partition, file and "
    "planning figures are complete, the read tasks' row groups and rows are not counted"
)
NOT_RUN = "the query was not run (explain plans scans without reading them)"

_Key = tuple[str, int]  # (scan id, task index)


@dataclass
class ReadCounts:
    """Figures one ``read()`` task counts when a filter field is a data column.

    ``rows_read`` are the rows of the row groups read, before row filtering;
    ``rows_filtered`` those row filtering then dropped; ``row_filtering_tasks``
    is 1 when the task filtered rows to its end (summed over tasks, how many did).
    """

    row_groups_total: int = 0
    row_groups_skipped: int = 0
    rows_read: int = 0
    rows_filtered: int = 0
    row_filtering_tasks: int = 0


class _FiguresParam(AccumulatorParam):
    """Merges {(scan id, task index): figures as a tuple}; a task's newer figures replace its older ones."""

    def zero(self, value: dict[_Key, tuple[int, ...]]) -> dict[_Key, tuple[int, ...]]:
        return {}

    def addInPlace(
        self, total: dict[_Key, tuple[int, ...]], update: dict[_Key, tuple[int, ...]]
    ) -> dict[_Key, tuple[int, ...]]:
        for key, figures in update.items():
            total.pop(key, None)  # re-inserted last: the oldest entries are the first to go
            total[key] = figures
        while len(total) > MAX_TASKS_KEPT:
            del total[next(iter(total))]
        return total


@dataclass(frozen=True)
class Channel:
    """The accumulator read tasks add their figures to; pickled with the reader into every task.

    ``owner`` names the driver process that merges the figures (host, process,
    accumulator): a scan report read in another process cannot show them.
    """

    accumulator: Accumulator
    owner: str

    def record(self, scan_id: str, task: int, counts: ReadCounts) -> None:
        self.accumulator.add({(scan_id, task): dataclasses.astuple(counts)})


@dataclass(frozen=True)
class Unavailable:
    """No channel: ``reason`` is what the scan report says instead of task figures."""

    reason: str

    def record(self, scan_id: str, task: int, counts: ReadCounts) -> None:
        """Nothing to send the figures through (they are not written anywhere either)."""


UNREGISTERED = Unavailable(NOT_REGISTERED)
PLANNED_ONLY = Unavailable(NOT_RUN)  # a scan planned outside Spark's read (explain_sql): no task ever reads it
_channels: weakref.WeakKeyDictionary[object, Channel] = weakref.WeakKeyDictionary()


def channel(spark: SparkSession) -> Channel | Unavailable:
    """The figures channel of ``spark``'s SparkContext (made once), or why there is none (Spark Connect)."""
    if deployment.is_connect(spark):
        return Unavailable(CONNECT)
    context = spark.sparkContext
    found = _channels.get(context)
    if found is None:
        accumulator = context.accumulator({}, _FiguresParam())
        owner = f"{socket.gethostname()}:{os.getpid()}:{accumulator.aid}"
        found = _channels[context] = Channel(accumulator, owner)
    return found


def scan_totals(owner: str, scan_id: str) -> tuple[int, ReadCounts] | None:
    """How many tasks of scan ``scan_id`` sent figures through channel ``owner``, and their sums.

    None when the channel is not this process's: the figures are in the driver that ran the scan.
    """
    found = next((channel_ for channel_ in list(_channels.values()) if channel_.owner == owner), None)
    if found is None:
        return None
    rows = [figures for (scan, _), figures in list(found.accumulator.value.items()) if scan == scan_id]
    sums = [sum(column) for column in zip(*rows, strict=True)] if rows else []
    return len(rows), ReadCounts(*sums)
