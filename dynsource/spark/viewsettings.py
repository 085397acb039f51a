"""The SQL settings Spark analyses a view's text under, against those the session would analyse it under.

Spark does not analyse a view under the session's settings. It starts from every SQL setting's default, sets
those captured when the view was made (each SQL setting the session had set then, less the optimizer's and the
execution's), and keeps a few of the session's own (its catalogs, the Hive table conversions). Text read in a
view's place is analysed under the session's settings instead. The two agree when

- each captured setting has the same value in the session now, and
- each setting the session has set that Spark would have captured, but the view did not, has its default value.

A session (ANSI off) that set ``spark.sql.legacy.sizeOfNull=false`` after a view was made under its default reads
``size(NULL)`` as -1 in the view and as NULL in the same text read in its place. (Spark captures
``spark.sql.ansi.enabled`` and the session time zone in every view, set or not.)
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from dynsource.runtime import deployment, settings

# What Spark never captures in a view (each a key or a prefix), less the one key it captures all the same.
NOT_CAPTURED = ("spark.sql.view.maxNestedViewDepth", "spark.sql.optimizer.", "spark.sql.codegen.",
                "spark.sql.execution.", "spark.sql.shuffle.", "spark.sql.adaptive.",
                "spark.sql.hive.convertMetastoreParquet", "spark.sql.hive.convertMetastoreOrc",
                "spark.sql.hive.convertInsertingPartitionedTable",
                "spark.sql.hive.convertInsertingUnpartitionedTable", "spark.sql.hive.convertMetastoreCtas",
                "spark.sql.maven.additionalRemoteRepositories")
CAPTURED_ALL_THE_SAME = "spark.sql.optimizer.disableHints"
SESSIONS_OWN = "spark.sql.catalog."  # taken from the session when Spark analyses a view, whatever was captured

# Per Spark setting, whether a session may change it (fixed for a Spark version); per session, the defaults learned.
_modifiable: dict[str, bool] = {}
_defaults: weakref.WeakKeyDictionary[SparkSession, dict[str, str | None]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def difference(spark: SparkSession, captured: Sequence[tuple[str, str]]) -> str | None:
    """Why ``spark`` would analyse the text of a view made under the ``captured`` settings otherwise than Spark
    analyses the view; None when it would not."""
    session = session_settings(spark)
    for key, value in captured:
        now = session[key] if key in session else _default(spark, key, unset=True)
        if now != value:
            return f"it was made with {key}={value} and the session has {key}={now}"
    captured_keys = {key for key, _ in captured}
    for key, value in sorted(session.items()):
        if key in captured_keys or not _capturable(spark, key):
            continue
        default = _default(spark, key, unset=False)
        if value != default:
            shown = "" if default is None else f" ({default})"
            return f"the session has {key}={value}, and it was made with the default{shown}"
    return None


def session_settings(spark: SparkSession) -> Mapping[str, str]:
    """The settings ``spark`` has set (with Spark's, whether or not a SQL setting), in one call."""
    if deployment.is_connect(spark):
        return settings.all_set(spark)
    # One JVM call for the whole map: PySpark's getAll asks for each entry apart (two calls each).
    text = spark._jsparkSession.sessionState().conf().getAllConfs().mkString("\u0001")
    return dict(entry.split(" -> ", 1) for entry in text.split("\u0001") if " -> " in entry)


def _capturable(spark: SparkSession, key: str) -> bool:
    """Whether Spark captures ``key`` in a view made while the session has it set."""
    if not key.startswith("spark.sql.") or key.startswith(SESSIONS_OWN):
        return False
    if key != CAPTURED_ALL_THE_SAME and key.startswith(NOT_CAPTURED):
        return False
    with _lock:
        known = _modifiable.get(key)
    if known is None:
        known = bool(spark.conf.isModifiable(key))  # a registered SQL setting, not a static one
        with _lock:
            _modifiable[key] = known
    return known


def _default(spark: SparkSession, key: str, *, unset: bool) -> str | None:
    """``key``'s default, as a view's analysis gets it (``unset``: the session has not set it). None where the client
    cannot tell: over Spark Connect, a setting the session has set and whose default it never saw."""
    with _lock:
        known = _defaults.setdefault(spark, {})
        if key in known:
            return known[key]
    if not deployment.is_connect(spark):
        try:  # settings no session has touched: what Spark analyses a view under before setting the captured ones
            default = spark._jvm.org.apache.spark.sql.internal.SQLConf().getConfString(key)
        except Py4JError:  # a setting with no default
            default = None
    elif unset:
        try:
            default = spark.conf.get(key)  # unset: its value is its default
        except Exception:  # a key neither set nor known to this Spark
            default = None
    else:
        return None
    with _lock:
        known[key] = default
    return default
