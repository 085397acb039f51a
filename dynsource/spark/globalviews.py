"""Lasting views: the DataFrames a warm session reads again, each named once in Spark's global temporary database.

:func:`dynsource.sql` puts the DataFrames it reads itself into the query text by placeholders
(:mod:`dynsource.dpp.placeholders`), and ``spark.sql(text, name=df)`` makes a temporary view of each and drops it
once the text is analysed. A view is a command Spark plans and runs, events and all: about 10 ms in a warm JVM, more
while it is busy. A fact scan the planner gives again is read as the same DataFrame
(:mod:`dynsource.spark.filereader`), so that DataFrame is named by a view made the first time a text reads it, and
later texts name the view instead of making one.

The views are global temporary ones (``global_temp.__dynsource_view_...``): they do not show in ``SHOW TABLES``
or ``spark.catalog.listTables()`` of the user's databases. Each name is unique to the process and only the
session that made a view names it; at most ``KEPT`` a session, the least recently used dropped past that
(from the catalog only: a DataFrame the user cached stays cached). A view dropped by someone else is made
again: a text whose analysis fails naming a lasting view has each of its views looked up, and is analysed
again if one was made again (looking them up before every text would cost two JVM calls each). One dropped
past the bound, by another thread of the session, is no longer kept: the text names its DataFrame by a view
``spark.sql`` makes for the call.
Classic sessions only: Spark Connect sends a DataFrame's plan with the query text, so no view is made there.
"""

from __future__ import annotations

import itertools
import threading
import uuid
import weakref

from pyspark.sql import DataFrame, SparkSession

from dynsource.runtime.lru import LruMap
from dynsource.spark import metastore

KEPT = 32
_PREFIX = f"__dynsource_view_{uuid.uuid4().hex[:8]}_"
_numbers = itertools.count()


class _View:
    """A DataFrame read again (held, so that its ``id`` stays its own) and its view's name once made."""

    def __init__(self, df: DataFrame) -> None:
        self.df = df
        self.name: str | None = None


class _Session:
    """A session's DataFrames read again, by ``id``, and the database its global temporary views are in."""

    def __init__(self, session_catalog: metastore.SessionCatalog) -> None:
        self.database = session_catalog.global_database
        self.catalog = session_catalog.catalog
        self.views: LruMap[_View] = LruMap(KEPT)
        self.making = threading.Lock()  # queries on several threads name one view, not one each


_SESSIONS: weakref.WeakKeyDictionary[SparkSession, _Session] = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def read_again(spark: SparkSession, df: DataFrame) -> None:
    """``df`` will be read by later texts too: the first text that reads it names it by a lasting view."""
    session_catalog = metastore.session_catalog(spark)
    if session_catalog is None:
        return
    with _SESSIONS_LOCK:  # one per session, though dimensions are read on several threads
        if spark not in _SESSIONS:
            _SESSIONS[spark] = _Session(session_catalog)
        session = _SESSIONS[spark]
    for view in session.views.put(id(df), _View(df)):
        _drop(session, view)


def name(spark: SparkSession, df: DataFrame, *, checked: bool = False) -> str | None:
    """The qualified name of ``df``'s lasting view, made now if it is not yet, and with ``checked`` also if it was
    dropped since it was made; None if ``df`` is read once."""
    session = _SESSIONS.get(spark)
    view = None if session is None else session.views.get(id(df))
    if view is None:  # (an entry holds its DataFrame: no other object has that id meanwhile)
        return None
    with session.making:
        if view.name is None or (checked and not session.catalog.getGlobalTempView(view.name).isDefined()):
            made = f"{_PREFIX}{next(_numbers)}"
            df.createOrReplaceGlobalTempView(made)
            view.name = made
    return f"{session.database}.{view.name}"


def named_in(error: Exception) -> bool:
    """Whether ``error`` (Spark's, of a text's analysis) names a lasting view, such as one dropped since."""
    return _PREFIX in str(error)


def _drop(session: _Session, view: _View) -> None:
    # The session catalog's drop, not spark.catalog's: that one also uncaches a cached plan equal to the view's.
    if view.name is not None:
        session.catalog.dropGlobalTempView(view.name)
