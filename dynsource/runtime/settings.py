"""A query's session settings, read in one request over Spark Connect.

``dynsource.sql`` reads half a dozen session settings per query (its own ``spark.dynsource.*`` and a few of
Spark's). In a classic session each ``spark.conf.get`` is a JVM call of microseconds; over Spark Connect it is a
round trip to the server, about a millisecond each on one host. Inside :func:`read_at_once` the settings the
session has set are fetched once (``spark.conf.getAll``) and :func:`get` answers from them: a setting not among
them is unset, so its default applies, as ``spark.conf.get(key, default)`` would give. Outside the block, and in
other threads, :func:`get` asks the session.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence

from pyspark.sql import SparkSession

from dynsource.runtime import deployment

_set: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("dynsource_settings", default=None)


@contextlib.contextmanager
def read_at_once(spark: SparkSession) -> Iterator[None]:
    """Within the block, :func:`get` in this thread answers from the settings ``spark`` has set now (Spark Connect
    only; the block must not change the settings it reads)."""
    if not deployment.is_connect(spark) or _set.get() is not None:
        yield
        return
    token = _set.set(spark.conf.getAll)
    try:
        yield
    finally:
        _set.reset(token)


def get(spark: SparkSession, key: str, default: str | None = None) -> str | None:
    """``spark.conf.get(key, default)``: the session's value of ``key`` if it is set, else ``default``."""
    known = _set.get()
    if known is None:
        return spark.conf.get(key, default)
    return known.get(key, default)


def choice(spark: SparkSession, key: str, values: Sequence[str]) -> str:
    """The session's value of ``key``, one of ``values`` (the first is the default), ignoring case and spaces; any
    other value is an error that names ``key`` and ``values``."""
    text = get(spark, key) or values[0]
    value = text.strip().lower()
    if value not in values:
        raise ValueError(f"{key} must be one of {', '.join(values)}; got {text!r}.")
    return value


def all_set(spark: SparkSession) -> Mapping[str, str]:
    """Every setting ``spark`` has set (``spark.conf.getAll``), answered inside :func:`read_at_once` from what it
    read."""
    known = _set.get()
    return spark.conf.getAll if known is None else known
