"""The Python data sources a session has registered that accept a dynamic filter (:class:`SupportsDynamicFiltering`).

``dynsource.sql`` and ``dynamic_join`` prune a table of such a source as they prune a dynsource table. Spark's
own steps are all it takes: ``spark.dataSource.register(cls)``, then ``CREATE TABLE t USING <name>`` or
``spark.read.format(<name>)``. A classic session learns the class from the session itself: its JVM keeps every
registered Python data source as the class this very process pickled (cloudpickle) at ``register``, which is
unpickled here, once per registration. Nothing read from storage is unpickled: the bytes come from the session's
memory, put there by this process. Spark Connect's client has no JVM to ask: there,
:func:`register_filtering_source` registers the class and remembers it for the session.

A catalog table of a Python data source is read with no option (Spark keeps ``CREATE TABLE ... OPTIONS`` in
the catalog but gives the source none of them; a reference's ``WITH (...)`` options and
``spark.read.option(...).table(...)``'s do reach it), so the fields it accepts are those of the source made
with no option.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict

from dynsource.runtime import deployment
from dynsource.runtime.lru import LruMap
from dynsource.spark.dynamicfiltering import SupportsDynamicFiltering

CLASSES_KEPT = 64
DYNSOURCE = "dynsource"
_classes: LruMap[type] = LruMap(CLASSES_KEPT)  # by the registration's name, JVM identity and pickle's size
_registered: weakref.WeakKeyDictionary[SparkSession, dict[str, type]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class FilteringSource:
    """A registered Python data source: its name, and the fields it accepts a dynamic filter on (lower case; None
    when it does not implement :class:`SupportsDynamicFiltering`)."""

    name: str
    accepted: frozenset[str] | None

    @property
    def filters(self) -> bool:
        return self.accepted is not None


def register_filtering_source(spark: SparkSession, source: type) -> None:
    """Register the Python data source class ``source`` with ``spark`` (``spark.dataSource.register``), and
    remember it for :func:`dynsource.sql` and :func:`dynsource.dynamic_join`.

    Needed over Spark Connect only, whose client cannot read back a class it registered; in a classic session
    ``spark.dataSource.register(source)`` is enough.

    Raises
    ------
    TypeError
        ``source`` is not a class of ``pyspark.sql.datasource.DataSource`` mixing in ``SupportsDynamicFiltering``.
    """
    from pyspark.sql.datasource import DataSource

    if not (isinstance(source, type) and issubclass(source, DataSource)
            and issubclass(source, SupportsDynamicFiltering)):
        raise TypeError(f"register_filtering_source takes a DataSource class that mixes in "
                        f"dynsource.SupportsDynamicFiltering, not {source!r}.")
    spark.dataSource.register(source)
    with _LOCK:
        _registered.setdefault(spark, {})[source.name().lower()] = source


def python_source(spark: SparkSession, name: str | None,
                  options: Mapping[str, str] | None = None) -> FilteringSource | None:
    """The Python data source registered in ``spark`` as ``name``, with the fields it accepts a dynamic filter on
    when made with ``options`` (none: as Spark reads its catalog tables); None for any other name (a file source,
    no source)."""
    if name is None or name.lower() == DYNSOURCE or name.lower().startswith(DYNSOURCE + "."):
        return None  # dynsource's own source and its registered tables' (dynsource.<db>.<table>) are read as such
    cls = source_class(spark, name)
    if cls is None:
        return None
    if not issubclass(cls, SupportsDynamicFiltering):
        return FilteringSource(name.lower(), None)
    accepted = cls(CaseInsensitiveDict(options or {})).accepted_filter_fields()
    return FilteringSource(name.lower(), frozenset(field.lower() for field in accepted))


def source_class(spark: SparkSession, name: str) -> type | None:
    """The class of the Python data source ``spark`` has registered as ``name``; None where it has none (or it is
    not known: over Spark Connect, a source not registered by :func:`register_filtering_source`)."""
    with _LOCK:
        remembered = _registered.get(spark, {}).get(name.lower())
    if remembered is not None or deployment.is_connect(spark):
        return remembered
    registration = _registration(spark, name)
    if registration is None:
        return None
    key, command = registration
    cls = _classes.get(key)
    if cls is None:
        # 40-50 ms for a class of 24 kB through py4j, so once per registration: a new one is a new object.
        cls = cloudpickle.loads(bytes(command.unsafeArray()))  # this process's own pickle (module docstring)
        _classes.put(key, cls)
    return cls


def _registration(spark: SparkSession, name: str) -> tuple[tuple[str, int, int], Any] | None:
    """In a classic session's JVM, the Python data source ``name``'s registration, identified by the name, the
    record's identity and the pickle's size, and its pickled class (a JVM object); None without one."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        if not manager.dataSourceExists(name):
            return None
        record = manager.lookupDataSource(name)
        command = record.dataSourceCls().command()
        return (name.lower(), spark._jvm.System.identityHashCode(record), command.length()), command
    except Py4JError:  # an internal API this Spark version does not have: the source is read as Spark reads it
        return None
