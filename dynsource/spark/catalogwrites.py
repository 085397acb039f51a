"""Spark's own table-creating writes of format ``dynsource``, made registered tables once Spark has written them.

Spark calls the source of ``df.write.format("dynsource").option("path", P).saveAsTable("t")`` and of
``df.writeTo("t").using("dynsource").option("path", P).create()`` (``createOrReplace``, ``replace``) as it calls
that of ``save()``: with the path and the write's options, without the table's name. The source writes the files,
and Spark's catalog records a table of provider ``dynsource`` that Spark reads with no option at all. Nothing the
source is handed tells such a write from ``save()``, so it is made a table from the other side: :func:`install`
(called by :func:`dynsource.register`) wraps those pyspark methods, and once Spark's write has returned, a table of
provider ``dynsource`` is registered over its files (:func:`dynsource.spark.catalog.register_table`) with the
write's options and the written DataFrame's schema. ``CREATE TABLE ... USING dynsource`` runs in Spark's SQL, which
no wrapper sees: such a table is still registered by hand.

Where the write's options are: a Spark Connect client's writer keeps them in Python (its ``_write`` operation); a
classic one keeps them in its JVM writer, whose members pyspark 4.0 and 4.3 name alike: ``DataFrameWriter``'s
public methods ``source()`` and ``extraOptions()``, and ``DataFrameWriterV2``'s private fields ``tableName``,
``provider`` and ``options``, read by reflection. So the table is registered with the options it was written
with, not with ones guessed back from its files: ``format`` (orc, csv, json), ``storageOptions``,
``partitionColumns``; and with the DataFrame's schema, so that a partition column keeps the type the rows had (a
zero-padded zip code STRING that inference from the directories would make INT). Where a writer's members cannot
be read (a Spark that renamed them), nothing is done, and the table's doors name the ``register_table`` call to
make (:func:`dynsource.spark.metastore.unregistered_table`).

Another table-creating write costs a look at its writer's format, and asks the catalog nothing.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from dynsource.runtime import deployment
from dynsource.scan.options import OPTION_NAMES
from dynsource.spark import catalog, metastore
from dynsource.spark.source import DynsourceDataSource

_CANONICAL = {name.lower(): name for name in OPTION_NAMES}
# A write's options that are not its table's: the path is the table's location; on an overwrite partitionFilter
# names the partitions it replaces, and stored it would filter every read; a dynamic filter is a query's. The
# others are stored, as Spark stores a file source's saveAsTable options with its table.
_NOT_STORED = {"path", "partitionFilter", "dynamicFilter"}
# Options shown in an error as their name alone: they may hold credentials.
_SECRET = {"storageOptions", "filterStoreOptions"}
_WRAPPED = "__dynsource_catalog_write__"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
_PART = re.compile(r"`([A-Za-z0-9_]+)`|([A-Za-z0-9_]+)")
_NAME = re.compile(rf"\s*(?:{_PART.pattern})(?:\s*\.\s*(?:{_PART.pattern})){{0,2}}\s*")
_LOCK = threading.Lock()


@dataclass(frozen=True)
class TableWrite:
    """A table-creating write of format ``dynsource``: the call (for messages), the table's name parts (None: a
    name no registered table can have), the write's options, and how to get the written DataFrame's schema."""

    call: str
    parts: tuple[str, ...] | None
    options: Mapping[str, str]
    schema: Callable[[], StructType] = field(compare=False)


def install(spark: SparkSession) -> None:
    """Wrap pyspark's table-creating writes (classic, and Spark Connect's when ``spark`` is a Connect session) so
    that the tables of format ``dynsource`` they make are registered; once per process, calling it again is
    harmless."""
    from pyspark.sql import readwriter

    with _LOCK:
        _wrap(readwriter.DataFrameWriter, "saveAsTable", _classic_table_write)
        for method in ("create", "createOrReplace", "replace"):
            _wrap(readwriter.DataFrameWriterV2, method, _classic_v2_write)
        if deployment.is_connect(spark):  # its client module is imported then, never by a classic process
            from pyspark.sql.connect import readwriter as connect_readwriter

            _wrap(connect_readwriter.DataFrameWriter, "saveAsTable", _connect_table_write)
            for method in ("create", "createOrReplace", "replace"):
                _wrap(connect_readwriter.DataFrameWriterV2, method, _connect_v2_write)


def _wrap(cls: type, method: str, read: Callable[[Any, str, tuple, dict], TableWrite | None]) -> None:
    original = getattr(cls, method)
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            made = read(self, method, args, kwargs)
        except (AttributeError, Py4JError):
            # A pyspark or Spark that renamed its writer's members: the table's doors say what to register.
            made = None
        if made is not None:
            register_written(self._spark, made)
        return result

    setattr(write, _WRAPPED, True)
    setattr(cls, method, write)


def register_written(spark: SparkSession, write: TableWrite) -> None:
    """Register the table ``write`` made where it is a catalog table of the ``dynsource`` source itself.

    Raises
    ------
    metastore.UnregisteredCatalogTable
        It is one, and registering it failed: the files are written, the message names the call to make.
    """
    table = _session_table(spark, write.parts)
    if table is None or (metastore.provider(spark, table) or "").lower() != DynsourceDataSource.name():
        return  # a registered table's provider is its own source, dynsource.<db>.<table>
    given = {_CANONICAL.get(key.lower(), key): value for key, value in write.options.items()}
    path = _recorded_path(spark, table) or given.get("path", "...")
    options = {key: value for key, value in given.items() if key in OPTION_NAMES and key not in _NOT_STORED}
    try:
        catalog.register_table(spark, table, path, replace=True, schema=write.schema(), **options)
    except Exception as error:
        raise _unregistered(write, table, path, options, error) from error


def _session_table(spark: SparkSession, parts: tuple[str, ...] | None) -> str | None:
    """The session catalog's qualified ``db.table`` of name ``parts``; None for another catalog's."""
    if parts and len(parts) == 3 and parts[0].lower() == "spark_catalog":
        parts = parts[1:]
    return catalog.qualified_name(spark, ".".join(parts)) if parts and len(parts) <= 2 else None


def _recorded_path(spark: SparkSession, table: str) -> str | None:
    """The table's location as ``register_table`` takes it: a local one as a path (Spark records a URI)."""
    recorded = metastore.location(spark, table)
    return unquote(urlparse(recorded).path) if recorded and recorded.startswith("file:") else recorded


def _unregistered(write: TableWrite, table: str, path: str, options: Mapping[str, str],
                  error: Exception) -> metastore.UnregisteredCatalogTable:
    given = [f"{key}=..." if key in _SECRET else f"{key}={value!r}" for key, value in options.items()]
    call = ", ".join([f"dynsource.register_table(spark, '{table}', path='{path}', replace=True", *given]) + ")"
    return metastore.UnregisteredCatalogTable(
        f"{write.call} wrote its files at '{path}' for table '{table}' of data source 'dynsource', which Spark "
        f"reads with no option, so that no door can read it; making it a registered dynsource table failed "
        f"({type(error).__name__}: {error}). Register it over its files: {call}."
    )


def _is_dynsource(spark: SparkSession, source: str | None) -> bool:
    """Whether a writer's format is dynsource (None: the session's default source)."""
    return (source or spark.conf.get("spark.sql.sources.default")).lower() == DynsourceDataSource.name()


def _classic_table_write(writer: Any, method: str, args: tuple, kwargs: dict) -> TableWrite | None:
    jwrite = writer._jwrite  # Spark's writer: source() is its format, never unset
    if jwrite.source().lower() != DynsourceDataSource.name():
        return None
    name = args[0] if args else kwargs["name"]
    return TableWrite(f"df.write.format('dynsource').saveAsTable({name!r})", _name_parts(name),
                      _java_map(writer._spark, jwrite.extraOptions().originalMap()), lambda: writer._df.schema)


def _classic_v2_write(writer: Any, method: str, args: tuple, kwargs: dict) -> TableWrite | None:
    jwriter = writer._jwriter
    provider = _private(jwriter, "provider")
    if not _is_dynsource(writer._spark, provider.get() if provider.isDefined() else None):
        return None
    parts = tuple(writer._spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(_private(jwriter, "tableName")))
    registrable = all(_IDENTIFIER.fullmatch(part) for part in parts)
    name = ".".join(parts) if registrable else metastore.quoted(*parts)
    return TableWrite(f"df.writeTo({name!r}).using('dynsource').{method}()", parts if registrable else None,
                      _java_map(writer._spark, _private(jwriter, "options")), lambda: writer._df.schema)


def _connect_table_write(writer: Any, method: str, args: tuple, kwargs: dict) -> TableWrite | None:
    if not _is_dynsource(writer._spark, writer._write.source):
        return None
    name = args[0] if args else kwargs["name"]
    return TableWrite(f"df.write.format('dynsource').saveAsTable({name!r})", _name_parts(name),
                      _given(writer._write.options), lambda: _connect_schema(writer))


def _connect_v2_write(writer: Any, method: str, args: tuple, kwargs: dict) -> TableWrite | None:
    if not _is_dynsource(writer._spark, writer._write.provider):
        return None
    name = writer._table_name
    return TableWrite(f"df.writeTo({name!r}).using('dynsource').{method}()", _name_parts(name),
                      _given(writer._write.options), lambda: _connect_schema(writer))


def _connect_schema(writer: Any) -> StructType:
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame(writer._df, writer._spark).schema  # a Connect writer holds the DataFrame's plan, not it


def _given(options: Mapping[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in options.items() if value is not None}


def _private(jobject: Any, name: str) -> Any:
    """A JVM object's private field ``name``, declared by its own class."""
    declared = jobject.getClass().getDeclaredField(name)
    declared.setAccessible(True)
    return declared.get(jobject)


def _java_map(spark: SparkSession, scala_map: Any) -> dict[str, str]:
    return dict(spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_map))


def _name_parts(name: str) -> tuple[str, ...] | None:
    """The parts of table name ``name`` (``t``, ``db.t``, ```spark_catalog`.db.t``); None for a name that no
    registered table can have (letters, digits and ``_``), which is left alone."""
    match = _NAME.fullmatch(name)
    return tuple(part for pair in _PART.findall(name) for part in pair if part) if match else None
