"""The dimension sides of one :func:`dynsource.sql` query: each read once, collected concurrently, within a budget.

Each pruning's dimension rows are read into a snapshot that the rewritten query
reads in the dimension's place (see :mod:`dynsource.dpp.snapshots`). Rows as few as a
small relation's (``SMALL_RELATION_ROWS``, within ``LOCAL_SNAPSHOT_BYTES``) are
fetched to the driver as Arrow by one Spark job and handed back to Spark as a
local relation, and their keys are taken from them in the driver where Spark's
answer cannot differ (plain key columns of the fact's types): one job in all.
More rows go to a local checkpoint the keys are then collected from by a second
job. Those jobs are bound by their scheduling latency rather than by the cores,
so all the prunings of a query are submitted at once to a few threads and Spark
runs their jobs side by side. Prunings whose dimension rows are the same text
share one snapshot (TPC-DS q88's eight subqueries repeat two of their three
dimensions), and those with the same keys as well share one collection.

Like Trino and Flink, which wait a bounded time for a dynamic filter and then
scan without it, collecting has a budget: the session setting
``spark.dynsource.collectTimeoutMs`` (milliseconds, default 60000), counted from
the query's first collection. A collection not done by then is declined, the
scan reads without its filter (the dimension as written), the report says so,
and its Spark jobs are interrupted.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from threading import Lock
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as spark_types

from dynsource.dpp import detection, snapshots
from dynsource.dpp.placeholders import Frames
from dynsource.filtering import DynamicFilteringData, collector
from dynsource.scan import options

log = logging.getLogger(__name__)

TIMEOUT_CONF = "spark.dynsource.collectTimeoutMs"
DEFAULT_TIMEOUT_MS = 60_000
WORKERS = 4  # collections at once: enough to overlap their jobs' latency, few enough for a small driver
# A dimension side without a selective predicate still prunes when it is this small (Spark's DPP and runtime
# filters also accept a small creation side); its keys are then collected exactly.
SMALL_RELATION_ROWS = 10_000
LOCAL_SNAPSHOT_BYTES = 8 * 1024 * 1024  # most Arrow bytes of dimension rows held in the driver as a local relation

T = TypeVar("T")


def timeout_ms(spark: SparkSession) -> int:
    """The session's collection budget in milliseconds (``spark.dynsource.collectTimeoutMs``)."""
    return options.session_ms(spark, TIMEOUT_CONF, DEFAULT_TIMEOUT_MS)


@dataclass(frozen=True)
class _Snapshot:
    """A dimension's rows as the query reads them (``name``: its placeholder), or why they are not used."""

    name: str | None
    reason: str | None = None
    reads_tables: bool = False  # the rows read a dynsource table
    rows: pa.Table | None = None  # the rows themselves, when held in the driver
    types: Mapping[str, str] = field(default_factory=dict)  # their Spark SQL types by column, when held


@dataclass(frozen=True)
class Collected:
    """A pruning's keys and the pin reading their snapshot; or no data and why not."""

    data: DynamicFilteringData | None
    reason: str | None = None  # why there is no data
    pin: snapshots.Pin | None = None
    seconds: float = 0.0  # how long the collection took (or had taken when the budget ran out)
    reads_tables: bool = False  # the dimension rows read a dynsource table: evaluating them again scans it again


class Dimensions:
    """The collections of one query's prunings, started by :meth:`submit`, awaited by :meth:`collected`.

    Use as a context manager: leaving it interrupts what is still running.
    """

    def __init__(self, spark: SparkSession, frames: Frames, timeout_ms: int,
                 reading: Callable[[str], str] = lambda text: text, workers: int = WORKERS) -> None:
        """``reading`` gives a dimension's rows text the names by which it reads them (the query's reads)."""
        self._spark, self._frames, self._timeout_ms, self._reading = spark, frames, timeout_ms, reading
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="dynsource-collect")
        self._tag = f"dynsource-collect-{uuid.uuid4().hex}"  # marks this query's collection jobs for interrupting
        self._lock = Lock()
        self._shared: dict[tuple, Future] = {}  # snapshots and collections by what they are made from
        self._started: dict[detection.Pruning, tuple[Future[Collected], float]] = {}
        self._deadline: float | None = None

    def __enter__(self) -> Dimensions:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if any(not future.done() for future, _ in self._started.values()):
            self._spark.interruptTag(self._tag)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def submit(self, pruning: detection.Pruning, types: Mapping[str, str]) -> None:
        """Start collecting ``pruning``'s keys, typed as the fact's ``types`` (fact column -> Spark SQL type)."""
        self._start(pruning, self._pool.submit(self._tagged, self._collect, pruning, types))

    def decline(self, pruning: detection.Pruning, reason: str) -> None:
        """Do not collect ``pruning``'s keys: its collection is ``Collected(None, reason)``."""
        declined: Future[Collected] = Future()
        declined.set_result(Collected(None, reason))
        self._start(pruning, declined)

    def _start(self, pruning: detection.Pruning, future: Future[Collected]) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + self._timeout_ms / 1000
        self._started[pruning] = (future, time.monotonic())

    def collected(self, pruning: detection.Pruning) -> Collected:
        """``pruning``'s collection, waiting for it no longer than the budget's end."""
        future, started = self._started[pruning]
        try:
            return future.result(timeout=max(0.0, self._deadline - time.monotonic()))
        except FutureTimeout:
            return Collected(None, f"collecting its keys took longer than the budget of {self._timeout_ms} ms "
                                   f"({TIMEOUT_CONF}), so the scan reads without them",
                             seconds=time.monotonic() - started)
        except Exception as error:  # never worse than spark.sql: the query runs unpruned
            log.warning("dynsource: the dimension query of %s failed, not pruning with it: %s", pruning, error)
            return Collected(None, f"its dimension query failed: {error}", seconds=time.monotonic() - started)

    def _tagged(self, function: Callable[..., T], *args: object) -> T:
        self._spark.addTag(self._tag)  # a thread's own tag: the jobs it starts can be interrupted
        try:
            return function(*args)
        finally:
            self._spark.removeTag(self._tag)

    def _collect(self, pruning: detection.Pruning, types: Mapping[str, str]) -> Collected:
        started = time.monotonic()
        if pruning.pin is None:
            return Collected(None, "the query text of its dimension rows could not be located, "
                                   "so they cannot be read once")
        snapshot = self._once(("rows", pruning.pin.rows_sql, pruning.selective), lambda: self._snapshot(pruning))
        if snapshot.name is None:
            return Collected(None, snapshot.reason, seconds=time.monotonic() - started)
        pin = pruning.pin.with_snapshot(snapshot.name)
        data = self._once(("keys", pin.keys_sql, tuple(types.items()), pruning.null_safe),
                          lambda: self._keys(pruning, pin, snapshot, types))
        return Collected(data, None, pin, time.monotonic() - started, snapshot.reads_tables)

    def _snapshot(self, pruning: detection.Pruning) -> _Snapshot:
        """``pruning``'s dimension rows as a snapshot, or why they are not used."""
        text = self._reading(pruning.pin.rows_sql)
        rows = self._frames.sql(self._spark, text)
        reads_tables, schema = text != pruning.pin.rows_sql, rows.schema  # a schema is a JVM round trip each time
        held = rows.limit(SMALL_RELATION_ROWS + 1).toArrow() if _travels_as_arrow(schema) else None
        if not pruning.selective:
            count = held.num_rows if held is not None else rows.limit(SMALL_RELATION_ROWS + 1).count()
            if count > SMALL_RELATION_ROWS:
                return _Snapshot(None, f"the dimension has no selective predicate and more than {SMALL_RELATION_ROWS} "
                                       "rows (not a small relation)")
        if held is not None and held.num_rows <= SMALL_RELATION_ROWS and held.nbytes <= LOCAL_SNAPSHOT_BYTES:
            local = self._spark.createDataFrame(held, schema=schema)
            types = {f.name: f.dataType.simpleString() for f in schema.fields}
            return _Snapshot(self._frames.add("pinned", local), reads_tables=reads_tables, rows=held, types=types)
        return _Snapshot(self._frames.add("pinned", rows.localCheckpoint()), reads_tables=reads_tables)

    def _keys(self, pruning: detection.Pruning, pin: snapshots.Pin, snapshot: _Snapshot,
              types: Mapping[str, str]) -> DynamicFilteringData:
        """The keys of ``pruning`` in ``snapshot``: taken from its rows in the driver where they can be, else
        collected by a Spark job."""
        if snapshot.rows is not None and pin.key_columns is not None:
            columns = [_column(snapshot.types, name) for name in pin.key_columns]
            if None not in columns:
                data = collector.exact_in_driver(snapshot.rows, snapshot.types,
                                                 dict(zip(pruning.fact_columns, columns, strict=True)), types,
                                                 null_safe=pruning.null_safe)
                if data is not None:
                    return data
        keys = {column: f"k{position}" for position, column in enumerate(pruning.fact_columns)}
        return collector.collect_data(self._frames.sql(self._spark, pin.keys_sql), keys, types=types,
                                      null_safe=pruning.null_safe)

    def _once(self, key: tuple, compute: Callable[[], T]) -> T:
        """``compute()``, or what the first call with the same ``key`` computed (waiting for it if it runs)."""
        with self._lock:
            future, first = self._shared.get(key), False
            if future is None:
                future = self._shared[key] = Future()
                first = True
        if first:
            try:
                future.set_result(compute())
            except BaseException as error:  # the others sharing it learn the same failure
                future.set_exception(error)
        return future.result()


# Types whose values come back from Arrow exactly as Spark wrote them (intervals, variants and the like stay in Spark).
_ARROW_ATOMIC = (spark_types.BooleanType, spark_types.ByteType, spark_types.ShortType, spark_types.IntegerType,
                 spark_types.LongType, spark_types.FloatType, spark_types.DoubleType, spark_types.DecimalType,
                 spark_types.StringType, spark_types.BinaryType, spark_types.DateType, spark_types.TimestampType,
                 spark_types.TimestampNTZType)


def _travels_as_arrow(data_type: spark_types.DataType) -> bool:
    """Whether rows of ``data_type`` can be held in the driver as Arrow and handed back to Spark unchanged."""
    if isinstance(data_type, spark_types.StructType):
        names = [f.name.lower() for f in data_type.fields]
        return len(set(names)) == len(names) and all(_travels_as_arrow(f.dataType) for f in data_type.fields)
    if isinstance(data_type, spark_types.ArrayType):
        return _travels_as_arrow(data_type.elementType)
    if isinstance(data_type, spark_types.MapType):
        return _travels_as_arrow(data_type.keyType) and _travels_as_arrow(data_type.valueType)
    return isinstance(data_type, _ARROW_ATOMIC)


def _column(types: Mapping[str, str], name: str) -> str | None:
    """The column of ``types`` Spark resolves ``name`` to (ignoring case)."""
    matches = [column for column in types if column.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None
