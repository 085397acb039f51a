"""Spark's own file reader over Spark Connect: this client plans the scan, the server's Spark reads the files.

A Connect client has no JVM of its own: the server plans and runs every query. The Python reader would plan a
scan there too, in the server's Python workers, and read every byte through Python. Where this client reaches
the table's storage (the same disk, or the store the server also reaches), dynsource plans the scan here instead,
as in a classic session, and sends the server a read of the kept files by Spark's own file source:

- the server must open those files: probed once per table root and session, by the schema of one kept file
  (one footer read on the server); a table it cannot open is read by the Python reader, as before;
- the server analyses a Connect DataFrame's plan at every action, so a plain read of 1,800 files would look
  every one of them up at every query. The read is made a temporary view instead, analysed once (its files
  looked up then, by the driver: the session's ``parallelPartitionDiscovery.threshold`` raised while the view is
  made, as :mod:`dynsource.spark.filereader` does in a classic session); later queries read the view, whose file
  index the server keeps. The server resolves the view's name at each action of every DataFrame that reads it,
  so the view lives as long as one of them does: each holds a :class:`_Lease` in its plan, and the view is dropped
  (at the next view made) once none does. A temporary view dies with its session; its name starts
  ``__dynsource_files_``.
- a fact scan given again (the kept files, the query's columns) is such a view too, and a query's text names it
  (:mod:`dynsource.dpp.placeholders`): sent as a DataFrame's plan with the text, the server would analyse that
  plan at the text's analysis and again at each action, 30 ms of a 250 ms query.
- ``spark.sql`` of a query sends the text to be analysed, and the server gives back the very text as the
  DataFrame's plan, analysed again at each action: the request only raises the text's errors at the call. A
  text the server analysed before in this session is not sent again (:func:`analysed_query`), a round trip of
  a warm query saved; an error it would raise now (a function dropped since) comes at the action, as any
  Connect DataFrame's does.
"""

from __future__ import annotations

import threading
import uuid
import weakref

from pyspark.sql import DataFrame, SparkSession

from dynsource import storage
from dynsource.runtime.lru import LruMap
from dynsource.scan import files
from dynsource.scan.options import ScanOptions

_PREFIX = f"__dynsource_files_{uuid.uuid4().hex[:8]}_"
_opened: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()
ANALYSED_KEPT = 256  # a session's query texts known to analyse
_analysed: weakref.WeakKeyDictionary[SparkSession, LruMap[bool]] = weakref.WeakKeyDictionary()


def client_reaches(options: ScanOptions) -> bool:
    """Whether this process reaches the table's root, so that it can plan the scan (else the server plans it)."""
    try:
        fs, root = files.open_table(options.base_path or options.path, options.storage_options)
        storage.root_info(fs, root)
    except (OSError, ValueError):
        return False
    return True


def server_opens(spark: SparkSession, format_name: str, base: str, file_url: str) -> bool:
    """Whether the server's Spark reads ``file_url`` (a file of the table at ``base``), asked once per ``base``."""
    opened = _opened.setdefault(spark, set())
    if base in opened:
        return True
    try:
        spark.read.format(format_name).load(file_url).schema  # noqa: B018 -- the server analyses the read
    except Exception:  # the server's error: a path it cannot see, a filesystem it has no class for
        return False
    opened.add(base)
    return True


class _Lease:
    """Held by the plan of each DataFrame that reads a view: the view is dropped once no plan holds it."""


# Views no DataFrame reads any more, with their sessions, dropped by the next listed_view: a lease ends in the
# garbage collector, which must not send requests to the server.
_ended: list[tuple[weakref.ref[SparkSession], str]] = []
_ENDED_LOCK = threading.Lock()


def listed_view(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df`` (a read of files) as a temporary view made now, read: a read of the view is not analysed again, its
    files not looked up again. Make it while the discovery threshold is raised."""
    _drop_ended()
    name = f"{_PREFIX}{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(name)
    view = spark.read.table(name)
    lease = _Lease()
    weakref.finalize(lease, _end, weakref.ref(spark), name)
    view._plan.__dict__["_dynsource_lease"] = lease  # derived DataFrames' plans hold this one as their child
    return view


def view_name(df: DataFrame) -> str | None:
    """The name of the view ``df`` reads, if :func:`listed_view` made it: a query text may name it while it holds
    ``df`` (whose plan holds the view's lease)."""
    plan = vars(df).get("_plan")
    return plan.table_name if plan is not None and "_dynsource_lease" in vars(plan) else None


def _end(spark: weakref.ref[SparkSession], name: str) -> None:
    with _ENDED_LOCK:
        _ended.append((spark, name))


def _drop_ended() -> None:
    with _ENDED_LOCK:
        ended = _ended[:]
        _ended.clear()
    for spark, name in ended:
        session = spark()
        if session is not None:
            session.catalog.dropTempView(name)


def analysed_query(spark: SparkSession, text: str) -> DataFrame:
    """``spark.sql(text)`` of a query ``text`` (no parameters, no DataFrames named by it), which the server gives
    as the text's own plan: sent for analysis only the session's first time."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import SQL

    analysed = _analysed.setdefault(spark, LruMap(ANALYSED_KEPT))
    if analysed.get(text):
        return ConnectDataFrame(SQL(text), spark)
    df = spark.sql(text)
    analysed.put(text, True)
    return df
