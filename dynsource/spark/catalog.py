"""Registered tables: dynsource tables in Spark's catalog that plain SQL reads, registered, read and dropped here.

Each table reads through a source of its own, ``dynsource.<db>.<table>``, which finds its stored definition
(:mod:`dynsource.spark.tablesource`); this module registers those sources with the session and the tables with the
catalog, and reads a table the way ``auto`` chooses (:mod:`dynsource.spark.filereader`).

A definition is JSON (path, reader options, schema) in an fsspec directory: the
``definitions`` argument, else ``$DYNSOURCE_DEFINITIONS``, else
``<spark.sql.warehouse.dir>/_dynsource``. The schema is inferred (or declared)
once, when the table is registered, and given to the catalog, so a query lists no
files to learn it. One definitions directory belongs to one metastore: registering
the tables of a new session deletes the definitions whose table is gone.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime.lru import LruMap
from dynsource.scan import tableschema, taskfigures
from dynsource.scan.options import OPTION_NAMES, session_options
from dynsource.spark import filereader, metastore
from dynsource.spark.metastore import in_catalog
from dynsource.spark.source import DynsourceDataSource
from dynsource.spark.tablesource import (
    DEFINITIONS_ENV,
    SOURCE_PREFIX,
    SUFFIX,
    TableDefinition,
    TableDefinitionError,
    TableSource,
    read_definition,
    table_source,
)

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_]+$")
# Where this process registered each table's source, for tables stored outside the default location.
_locations: dict[str, str] = {}
_changes = itertools.count(1)
changes = 0  # registrations and drops by this process, counted: a name resolved before one may mean another table
# Definitions as read in a session (its settings typing partition values), by definition and settings.
_in_session: LruMap[tuple[TableDefinition, TableDefinition]] = LruMap(256)


def _changed() -> None:
    global changes
    changes = next(_changes)


def register_table(
    spark: SparkSession,
    name: str,
    path: str,
    *,
    schema: StructType | str | None = None,
    definitions: str | None = None,
    replace: bool = False,
    **options: Any,
) -> TableDefinition:
    """Create table ``name`` in Spark's catalog reading ``path`` through dynsource; plain SQL then reads it.

    The schema is inferred now (as ``spark.read.parquet`` would: from the first
    data file, or every file with ``mergeSchema=True``), or declared, and stored
    with the options: every query of the table reads that schema, and lists no
    files to learn it. Options of a table reference override the stored ones:
    ``SELECT ... FROM name WITH ('dynamicFilter' = '<handle>')``.

    Parameters
    ----------
    spark : SparkSession
        The session whose catalog gets the table. With ``enableHiveSupport()`` the
        table outlives the session; call :func:`dynsource.register` in a new one.
    name : str
        ``table`` (in the current database) or ``db.table``; letters, digits and ``_``.
    path : str
        The table directory, as the ``path`` option of ``DynsourceDataSource``.
    schema : StructType or str, optional
        The declared schema instead of an inferred one, as ``spark.read.schema``
        takes it (``"v INT, name STRING, day INT"``): declared partition columns'
        types type the partition values. Stored as ``spark.read.schema(schema)``
        reads the directory, every column nullable: the declared data columns in
        their order, then every partition column in the directories' order (one
        left out typed as ``partitionColumns`` declares it, else inferred). It is
        checked against the first partition directory and its first file (every
        file with ``mergeSchema``): a column that is neither a partition column
        nor stored there, or whose type cannot hold the partition value, or that
        Spark's Parquet or ORC reader does not read as the declared type (it
        widens, as INT to BIGINT, DOUBLE or DECIMAL(10,0)), is an error naming it.
    definitions : str, optional
        fsspec directory for the definition; default ``$DYNSOURCE_DEFINITIONS``,
        else ``<spark.sql.warehouse.dir>/_dynsource``.
    replace : bool, default False
        Drop an existing table of that name first; otherwise it is an error.
    **options
        More reader options of ``DynsourceDataSource`` (``format``, ``partitionColumns``...).
        ``storageOptions`` (credentials, endpoint of an object store) may be a
        mapping or its JSON; it is stored in the definition, which therefore
        holds any secret it contains: keep the definitions location private.

    Returns
    -------
    TableDefinition
        What was stored.

    Examples
    --------
    >>> import dynsource, pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> root = tempfile.mkdtemp()
    >>> pq.write_to_dataset(pa.table({"price": [1.5, 2.5], "day": [1, 2]}), root, partition_cols=["day"])
    >>> _ = dynsource.register_table(spark, "prices", path=root, definitions=tempfile.mkdtemp())
    >>> spark.sql("SELECT price FROM prices WHERE day = 2").collect()
    [Row(price=2.5)]
    >>> dynsource.drop_table(spark, "prices")
    """
    table = qualified_name(spark, name)
    stored = _canonical({"path": _absolute(path), **{key: _option_text(value) for key, value in options.items()}})
    if "dynamicFilter" in stored:
        raise ValueError("Option 'dynamicFilter' belongs to a query, not a table: pass it with WITH (...) instead.")
    # Validates the options before anything changes; infers the schema as the session's spark.read.parquet would.
    reader = DynsourceDataSource({**session_options(spark, stored), **stored})
    exists = in_catalog(spark, table)
    if exists and not replace:
        raise ValueError(f"Table '{table}' already exists{_same_options(table, stored, spark, definitions)}; pass "
                         "replace=True to replace it.")
    if schema is None:  # inferred in the driver as a Python worker would, leaving the driver's logging as it is
        schema = reader.table_schema()
    else:
        schema = tableschema.fit_declared_schema(tableschema.declared_schema(spark, schema), reader.scan_options)
    if exists:  # only now: a path whose schema cannot be inferred leaves the old table standing
        spark.sql(f"DROP TABLE {table}")
    definition = TableDefinition(table, stored, schema)
    location = definitions_location(spark, definitions)
    FilterStore.of(location).put(table + SUFFIX, definition.to_json())
    source = _register_source(spark, table, location)
    spark.catalog.createTable(table, source=source.name(), schema=schema)
    _changed()
    return definition


def _same_options(table: str, stored: Mapping[str, str], spark: SparkSession, definitions: str | None) -> str:
    """For the error of a table registered again: whether its stored options are these (nothing would change)."""
    try:
        same = read_definition(table, definitions_location(spark, definitions)).options == dict(stored)
    except TableDefinitionError:
        return ""
    return " with these very options (nothing changed)" if same else " with other options"


def drop_table(spark: SparkSession, name: str, *, definitions: str | None = None, if_exists: bool = False) -> None:
    """Drop registered table ``name`` from the catalog and delete its definition.

    As Spark's ``DROP TABLE``, a name that is neither in the catalog nor has a definition is an error, and with
    ``if_exists`` (``DROP TABLE IF EXISTS``) it is not: either one left by an interrupted registration is removed.
    """
    table = qualified_name(spark, name)
    location = _location_of(spark, table, definitions)
    # in_catalog, not spark.catalog.tableExists: that resolves the table's source, unregistered where its
    # definition is elsewhere.
    if not if_exists and not in_catalog(spark, table) and table not in stored_tables(location):
        raise ValueError(f"Table '{table}' is not registered (no catalog table and no definition in {location}); "
                         "`dynsource table list` shows the registered ones (drop_table(..., if_exists=True) takes a "
                         "name that is not).")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    _changed()
    _delete(location, table)


def register_tables(spark: SparkSession, *, definitions: str | None = None) -> list[str]:
    """Register the source of every stored table that is in the catalog; delete the definitions of the others.

    Only a Hive-enabled catalog keeps tables across sessions; with the in-memory
    catalog there is nothing to restore (and nothing is deleted, since another
    session may be using the definitions).

    Returns
    -------
    list of str
        The tables whose sources were registered.
    """
    if spark.conf.get("spark.sql.catalogImplementation") != "hive":
        return []
    location = definitions_location(spark, definitions)
    registered = []
    for table in stored_tables(location):
        if in_catalog(spark, table):
            # Also when the definition is damaged: reading the table then says so instead of "source not found".
            _register_source(spark, table, location)
            registered.append(table)
        else:
            log.info("dynsource: table '%s' is no longer in the catalog; deleting its definition", table)
            _delete(location, table)
    return registered


def stored_tables(location: str) -> list[str]:
    """Qualified names of the tables with a definition in ``location``, sorted."""
    fs, root = fsspec.core.url_to_fs(location)
    try:
        names = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    tables = [entry.rstrip("/").rsplit("/", 1)[-1].removesuffix(SUFFIX) for entry in names if entry.endswith(SUFFIX)]
    return sorted(table for table in tables if _is_qualified(table))


def load_definition(spark: SparkSession, name: str, *, definitions: str | None = None) -> TableDefinition:
    """The stored definition of registered table ``name``.

    Raises
    ------
    TableDefinitionError
        The table is not in Spark's catalog, or it has no definition, or that cannot
        be read; the message names the table and the location.
    metastore.UnregisteredCatalogTable
        The table is a catalog table of the ``dynsource`` source itself, which Spark made
        (``CREATE TABLE ... USING dynsource``, a ``saveAsTable`` where :func:`dynsource.register` did not
        wrap it); the message names the ``register_table`` call that makes it readable.
    """
    table = qualified_name(spark, name)
    try:
        return in_session(spark, read_definition(table, _location_of(spark, table, definitions)))
    except TableDefinitionError:
        recorded = metastore.provider(spark, table)
        if recorded is not None and recorded.lower() == DynsourceDataSource.name():
            raise metastore.unregistered_table(spark, table) from None
        if recorded is not None or spark.catalog.tableExists(table):
            raise
        raise TableDefinitionError(f"Table '{table}' is not registered: register it first with "
                                   f"dynsource.register_table(spark, '{name}', path=...).") from None


def in_session(spark: SparkSession, definition: TableDefinition) -> TableDefinition:
    """``definition`` as read in ``spark``: with the session's settings that type partition values where its stored
    options leave them out (:func:`dynsource.scan.options.session_options`)."""
    session = tuple(sorted(session_options(spark, definition.options).items()))
    key = (id(definition), session)  # a definition holds a dict: kept with its copy, so that the id stays its own
    found = _in_session.get(key)
    if found is None or found[0] is not definition:
        found = (definition, dataclasses.replace(definition, session=session))
        _in_session.put(key, found)
    return found[1]


def read_table(
    spark: SparkSession, name: str, options: Mapping[str, str] | None = None, columns: Sequence[str] | None = None,
    definition: TableDefinition | None = None,
) -> DataFrame:
    """Registered table ``name`` read with ``options`` over the stored ones, by the reader option ``reader``
    chooses: Spark's file source handed the files dynsource plans now (:mod:`dynsource.spark.filereader`), or the
    table's own Python source, which plans at each action.

    With ``columns``, only those are read (Spark does not prune a Python source's
    columns; the source reads the columns of the schema it is given).

    Unlike ``spark.read.options(...).table(name)``, no table name is resolved by
    Spark: a query naming the table again (or a temporary view of this DataFrame
    used next to another reference) cannot swap in another reference's options.

    ``definition`` is the table's, as the caller has just read it (else it is read now).

    Raises
    ------
    TableDefinitionError
        ``name`` is not a registered dynsource table (no definition).
    """
    definition = definition or load_definition(spark, name)
    options = {**dict(definition.session), **(options or {})}  # the Python source reads the stored definition
    return filereader.read_by_choice(spark, SOURCE_PREFIX + definition.table, options,
                                      definition.scan_options.with_options(options), definition.schema, columns)


@dataclass(frozen=True)
class TableRead:
    """What :func:`table` read: the registered table, the reader options given and the columns."""

    table: str
    options: tuple[tuple[str, str], ...]
    columns: tuple[str, ...] | None


# The DataFrames table() returned, weakly: dynamic_join takes one as its fact.
_table_reads: weakref.WeakKeyDictionary[DataFrame, TableRead] = weakref.WeakKeyDictionary()


def table(spark: SparkSession, name: str, columns: Sequence[str] | None = None, **options: Any) -> DataFrame:
    """Registered table ``name`` as a DataFrame, planned as :func:`dynsource.sql` plans its scans: the DataFrame
    door to a registered table.

    The table's files are looked up now (a kept listing of a local table is checked for changes; commit records
    are honoured) and read by the reader option ``reader`` chooses: Spark's own file reader where Spark's Hadoop
    filesystem opens the table (a local disk, Parquet or ORC), so that DataFrame joins with it get Spark's own
    dynamic partition pruning and column pruning; else dynsource's Python reader. ``spark.table(name)``, by
    contrast, reads the whole table through the Python reader at every action (Spark passes it no WHERE).

    Like ``spark.read.parquet``, the DataFrame reads the files found when it was made: call ``table`` again to
    see files written since. :func:`dynsource.dynamic_join` takes it as its fact.

    Parameters
    ----------
    columns : sequence of str, optional
        Only these columns (Spark prunes the others of its own reader; dynsource's reads only these).
    **options
        Reader options over the table's stored ones (``partitionFilter``, ``dynamicFilter``...).
    """
    definition = load_definition(spark, name)
    given = {key: _option_text(value) for key, value in options.items()}
    df = read_table(spark, definition.table, given, columns, definition)
    _table_reads[df] = TableRead(definition.table, tuple(sorted(given.items())),
                                 None if columns is None else tuple(columns))
    return df


def table_read(df: DataFrame) -> TableRead | None:
    """What :func:`table` read into ``df``; None for a DataFrame it did not return."""
    return _table_reads.get(df)


def definitions_location(spark: SparkSession, definitions: str | None = None) -> str:
    """Where definitions are stored: ``definitions``, else ``$DYNSOURCE_DEFINITIONS``, else next to the warehouse."""
    configured = definitions or os.environ.get(DEFINITIONS_ENV)
    if configured:
        return configured.rstrip("/")
    return spark.conf.get("spark.sql.warehouse.dir").rstrip("/") + "/_dynsource"


def qualified_name(spark: SparkSession, name: str) -> str:
    """``db.table`` in lower case (as the catalog keeps it), the current database when ``name`` has none."""
    parts = name.strip().lower().split(".")
    if len(parts) == 1:
        parts.insert(0, spark.catalog.currentDatabase().lower())
    table = ".".join(parts)
    if not _is_qualified(table):
        raise ValueError(f"Table name '{name}' is not valid; expected 'table' or 'db.table' of letters, digits and _.")
    return table


def _register_source(spark: SparkSession, table: str, location: str) -> type[TableSource]:
    source = table_source(table, location, taskfigures.channel(spark))
    spark.dataSource.register(source)
    _locations[table] = location
    return source


def _location_of(spark: SparkSession, table: str, definitions: str | None) -> str:
    return definitions or _locations.get(table) or definitions_location(spark)


def _delete(location: str, table: str) -> None:
    fs, root = fsspec.core.url_to_fs(location)
    target = f"{root.rstrip('/')}/{table}{SUFFIX}"
    if fs.exists(target):
        fs.rm(target)


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    # Stored under their documented names, so that a lookup such as options["path"] needs no case folding.
    names = {name.lower(): name for name in OPTION_NAMES}
    return {names.get(key.lower(), key): value for key, value in options.items()}


def _option_text(value: Any) -> str:
    # Reader options are strings; a mapping (storageOptions) is stored as the JSON the reader parses.
    return json.dumps(dict(value)) if isinstance(value, Mapping) else str(value)


def _absolute(path: str) -> str:
    # Later sessions and their workers may run in another directory than the one registering the table.
    return path if "://" in path or path.startswith("file:") else os.path.abspath(path)


def _is_qualified(table: str) -> bool:
    parts = table.split(".")
    return len(parts) == 2 and all(_NAME.match(part) for part in parts)
