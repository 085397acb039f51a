"""What Spark's session catalog (the metastore) records of a table, read without resolving the table's source.

``spark.catalog.tableExists`` and reading a table resolve its data source,
which fails for a dynsource table before its source is registered and runs a
Python worker after; ``SHOW TABLES`` and ``SHOW TABLE EXTENDED`` ask the
metastore alone. A view's definition comes from a classic session's JVM
catalog, or over Spark Connect from the server's ``DESCRIBE TABLE EXTENDED ...
AS JSON`` (persistent views only).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dynsource.runtime import deployment
from dynsource.runtime.lru import LruMap
from dynsource.spark.tablesource import TableDefinitionError

IDENTIFIERS_KEPT = 256


@dataclass(frozen=True)
class SessionCatalog:
    """A classic session's JVM session catalog and SQL parser, and its global temporary database.

    All three are fixed for the session's life (the database is a static setting), so they are looked up once:
    reaching them costs three JVM calls, a millisecond of a warm query that asks several times.
    """

    catalog: Any
    parser: Any
    global_database: str
    # A TableIdentifier is immutable and parsing one is a JVM call, a warm query's several for each name it reads.
    identifiers: LruMap[Any] = field(default_factory=lambda: LruMap(IDENTIFIERS_KEPT), compare=False)
    # Each temporary view's schema as last seen: the JVM's schema object and its parsed copy.
    view_schemas: LruMap[tuple[Any, StructType]] = field(default_factory=lambda: LruMap(IDENTIFIERS_KEPT),
                                                         compare=False)

    def identifier(self, *parts: str) -> Any:
        """Spark's ``TableIdentifier`` of the name ``parts``."""
        parsed = self.identifiers.get(parts)
        if parsed is None:
            parsed = self.parser.parseTableIdentifier(quoted(*parts))
            self.identifiers.put(parts, parsed)
        return parsed

    def temporary_view_schema(self, name: str) -> StructType:
        """The schema of the session's temporary view ``name``, which must exist.

        Rendered by the JVM as JSON and parsed (1-2 ms for a TPC-DS dimension) only when it differs from the one
        last seen under that name: comparing the JVM's schema objects is one call. Only the schema is held, not the
        view's plan, which may hold a local relation's rows.
        """
        schema = self.catalog.getTempView(name).get().schema()
        seen = self.view_schemas.get(name)
        if seen is not None and schema.equals(seen[0]):
            return seen[1]
        parsed = StructType.fromJson(json.loads(schema.json()))
        self.view_schemas.put(name, (schema, parsed))
        return parsed


@dataclass(frozen=True)
class ViewDefinition:
    """What Spark stored of a view defined by SQL text, all Spark needs to analyse the view again.

    Spark analyses the text with its names resolved in ``namespace`` (the catalog and database current when the
    view was made), under the SQL settings ``configs`` captured then (None for text dynsource wrote from a
    DataFrame's analysed plan, whose meaning no setting changes); a temporary view's text may name the
    temporary views in ``temporary_views`` (as their name parts), no other. The view's columns are the text's
    output columns named ``query_columns``, renamed ``columns`` (``CREATE VIEW v (a, b) AS ...``).
    """

    text: str
    namespace: tuple[str, ...]
    query_columns: tuple[str, ...]
    columns: tuple[str, ...]
    configs: tuple[tuple[str, str], ...] | None
    temporary_views: tuple[tuple[str, ...], ...]
    temporary: bool
    unseen: str = ""  # why it cannot be seen through, where that is known before reading its text


@dataclass(frozen=True)
class PlanView:
    """A temporary view made from a DataFrame: Spark keeps its analysed plan, not text. ``plan`` is the JVM's
    ``Option`` of it, ``tree`` its tree string."""

    plan: Any
    tree: str


def temporary_view(session: SessionCatalog, name: str) -> tuple[bool, ViewDefinition | PlanView | None]:
    """Whether the session has a temporary view ``name``, and its definition: SQL text, or a DataFrame's plan."""
    raw = session.catalog.getRawTempView(name)
    return (True, _view_definition(raw, temporary=True)) if raw.isDefined() else (False, None)


def global_view(session: SessionCatalog, name: str) -> ViewDefinition | PlanView | None:
    """The global temporary view ``name``: SQL text, or a DataFrame's plan."""
    return _view_definition(session.catalog.getRawGlobalTempView(name), temporary=True)


def catalog_view(session: SessionCatalog, database: str, name: str) -> ViewDefinition | None:
    """The catalog's view ``database.name``; None when that names no view (a table, nothing)."""
    try:
        table = session.catalog.getTableMetadata(session.identifier(database, name))
    except AnalysisException:  # no such table or database
        return None
    return _definition(table, temporary=False) if table.tableType().name() == "VIEW" else None


def _view_definition(raw: Any, temporary: bool) -> ViewDefinition | PlanView | None:
    if not raw.isDefined():
        return None
    view = raw.get()
    found = _definition(view.tableMeta(), temporary)
    if found is None:
        plan = view.plan()
        tree = plan.toString()  # "Some(<the plan's tree string>)": two JVM calls for the check most views need
        return PlanView(plan, tree[5:-1]) if tree.startswith("Some(") else None
    return found


def _definition(table: Any, temporary: bool) -> ViewDefinition | None:
    text = table.viewText()
    if not text.isDefined():
        return None
    # Every property in one JVM call: "key -> value" per line (no key holds " -> "; values may).
    properties = dict(line.split(" -> ", 1) for line in table.properties().mkString("\u0001").split("\u0001")
                      if " -> " in line)

    def numbered(prefix: str, count: str) -> tuple[str, ...]:
        return tuple(properties[f"{prefix}.{i}"] for i in range(int(properties.get(count, "0"))))

    config = "view.sqlConfig."
    collation = table.collation()
    return ViewDefinition(
        text=text.get(),
        namespace=numbered("view.catalogAndNamespace.part", "view.catalogAndNamespace.numParts"),
        query_columns=numbered("view.query.out.col", "view.query.out.numCols"),
        columns=tuple(field.name for field in StructType.fromJson(json.loads(table.schema().json())).fields),
        configs=tuple(sorted((k.removeprefix(config), v) for k, v in properties.items() if k.startswith(config))),
        temporary_views=tuple(tuple(parts) for parts in json.loads(properties.get("view.referredTempViewNames",
                                                                                  "[]"))),
        temporary=temporary,
        unseen=_collated(collation.get() if collation.isDefined() else None))


def persistent_view(spark: SparkSession, parts: tuple[str, ...]) -> tuple[tuple[str, ...], ViewDefinition] | None:
    """Over Spark Connect, the persistent view the name ``parts`` means now, as the server describes it (one
    request), with the name it resolved to (``("spark_catalog", database, name)``); None when it means something
    else (a temporary view, a table) or nothing."""
    try:
        described = json.loads(_command_value(spark.sql(f"DESCRIBE TABLE EXTENDED {quoted(*parts)} AS JSON")))
    except AnalysisException:
        return None
    found = described_view(described)
    if found is None:
        return None
    return ("spark_catalog", described["namespace"][0].lower(), described["table_name"].lower()), found


def _command_value(df: DataFrame) -> Any:
    """The first value of a command's result over Spark Connect. The server sends the rows with its reply to the
    command (a local relation of Arrow data), which ``first()`` would send back to it to run: a round trip of
    30-40 ms."""
    relation = getattr(df._plan, "_plan", None)  # pyspark's CachedRelation of the reply
    if relation is not None and relation.WhichOneof("rel_type") == "local_relation" and \
            relation.local_relation.HasField("data"):
        rows = pa.ipc.open_stream(relation.local_relation.data).read_all()
        if rows.num_rows and rows.num_columns:
            return rows.column(0)[0].as_py()
    return df.first()[0]


def described_view(described: Mapping[str, Any]) -> ViewDefinition | None:
    """The persistent view that Spark's ``DESCRIBE TABLE EXTENDED name AS JSON`` describes (the one way a Spark
    Connect client reads a view's definition); None when it describes anything else. Spark describes a temporary
    view without the settings it was made under, so it is not one of these."""
    if described.get("type") != "VIEW" or described.get("catalog_name") != "spark_catalog" or \
            len(described.get("namespace", ())) != 1 or "view_text" not in described:
        return None
    namespace = described.get("view_catalog_and_namespace", "")
    return ViewDefinition(
        text=described["view_text"],
        # Spark writes it with dots, each part in backquotes where it needs them: those are not seen through.
        namespace=tuple(namespace.split(".")) if "`" not in namespace else (namespace,),
        query_columns=tuple(described.get("view_query_output_columns", ())),
        columns=tuple(column["name"] for column in described["columns"]),
        configs=tuple(sorted(described.get("view_creation_spark_configuration", {}).items())),
        temporary_views=(),
        temporary=False,
        unseen=_collated(described.get("collation")))


def _collated(collation: str | None) -> str:
    """Why a view made with the default ``collation`` is not seen through: its string literals compare under it
    there, under the session's default in its place (``'ABC' = 'abc'`` is true in a view of ``UTF8_LCASE``)."""
    if collation is None or collation == "UTF8_BINARY":
        return ""
    return f"it was made with the default collation {collation}"


def quoted(*parts: str) -> str:
    """The name ``parts`` as Spark SQL text, each part in backquotes."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in parts)


def global_temp_database(spark: SparkSession) -> str:
    """The session's global temporary database (a static setting, asked once; Spark keeps it in lower case)."""
    if spark not in _GLOBAL_DATABASES:
        _GLOBAL_DATABASES[spark] = spark.conf.get("spark.sql.globalTempDatabase", "global_temp").lower()
    return _GLOBAL_DATABASES[spark]


_GLOBAL_DATABASES: weakref.WeakKeyDictionary[SparkSession, str] = weakref.WeakKeyDictionary()


_CATALOGS: weakref.WeakKeyDictionary[SparkSession, SessionCatalog] = weakref.WeakKeyDictionary()
_CATALOGS_LOCK = threading.Lock()


def session_catalog(spark: SparkSession) -> SessionCatalog | None:
    """``spark``'s :class:`SessionCatalog`; None over Spark Connect, whose client has no JVM."""
    if deployment.is_connect(spark):
        return None
    with _CATALOGS_LOCK:  # tables are resolved on several threads
        if spark not in _CATALOGS:
            state = spark._jsparkSession.sessionState()
            _CATALOGS[spark] = SessionCatalog(state.catalog(), state.sqlParser(), global_temp_database(spark))
        return _CATALOGS[spark]


def in_catalog(spark: SparkSession, table: str) -> bool:
    """Whether the session catalog has qualified ``table``, asked of the metastore alone.

    ``spark.catalog.tableExists`` resolves the table's source, which fails before
    it is registered and runs a Python worker after.
    """
    database, name = table.split(".")
    try:
        listed = spark.sql(f"SHOW TABLES IN {database} LIKE '{name}'").collect()
    except AnalysisException:  # no such database
        return False
    return any(row.tableName == name and not row.isTemporary for row in listed)


def provider(spark: SparkSession, table: str) -> str | None:
    """The provider the catalog records for qualified ``table`` (None when it has no such table), from the
    metastore alone, as :func:`in_catalog`.

    A classic session asks its session catalog in two JVM calls; ``SHOW TABLE EXTENDED`` (Spark Connect) takes
    ~40 ms, a sixth of a small TPC-DS query, for each dynsource table a query names.
    """
    session = session_catalog(spark)
    if session is not None:
        try:
            return _recorded_provider(session, table)
        except Py4JError:
            pass  # an internal API this Spark version does not have: ask by SQL
    return _extended(spark, table).get("Provider")


def location(spark: SparkSession, table: str) -> str | None:
    """The location the catalog records for qualified ``table`` (None when it has none, or no such table), as
    ``SHOW TABLE EXTENDED`` gives it: a URI such as ``file:/data/t``."""
    return _extended(spark, table).get("Location")


def _extended(spark: SparkSession, table: str) -> dict[str, str]:
    """What ``SHOW TABLE EXTENDED`` says of qualified ``table`` ({} when there is no such table), from the
    metastore alone."""
    database, name = table.split(".")
    try:
        listed = spark.sql(f"SHOW TABLE EXTENDED IN {database} LIKE '{name}'").collect()
    except AnalysisException:  # no such database
        return {}
    for row in listed:
        if row.tableName == name and not row.isTemporary:
            return dict(line.partition(": ")[::2] for line in row.information.splitlines())
    return {}


def _recorded_provider(session: SessionCatalog, table: str) -> str | None:
    identifier = session.identifier(*table.split("."))
    try:  # three JVM calls: a data source table always records its provider
        return session.catalog.getTableMetadata(identifier).provider().get()
    except AnalysisException:  # no such table or database
        return None
    except Py4JJavaError as error:
        if error.java_exception.getClass().getName() == "java.util.NoSuchElementException":
            return None  # no provider recorded: a view, a Hive table
        raise


class UnregisteredCatalogTable(TableDefinitionError):
    """A catalog table of the plain ``dynsource`` source (``CREATE TABLE ... USING dynsource``, a ``saveAsTable``
    that could not be registered): Spark reads it with no option, so no door can; the message names the
    registration to make."""


def unregistered_table(spark: SparkSession, table: str) -> UnregisteredCatalogTable:
    """The error for catalog table ``table`` of the ``dynsource`` source itself, naming the registration to make."""
    # Spark hands a Python data source neither a catalog table's name nor its location, so it reads a table of the
    # plain source with no option: one of CREATE TABLE ... USING dynsource, which runs in Spark's SQL, or of a
    # saveAsTable that dynsource.register's wrappers did not register (dynsource.spark.catalogwrites).
    recorded = location(spark, table)
    path = unquote(urlparse(recorded).path) if recorded and recorded.startswith("file:") else recorded or "..."
    return UnregisteredCatalogTable(
        f"Table '{table}' is a catalog table of data source 'dynsource' at '{path}', as CREATE TABLE ... USING "
        "dynsource leaves one (and df.write.format('dynsource').saveAsTable(...) where dynsource.register(spark) "
        "did not make it a registered table): Spark gives a Python data source neither a catalog table's name nor "
        "its location, so no door can read it (spark.table fails on \"Option 'path' is required\"). Register it "
        f"over its files: dynsource.register_table(spark, '{table}', path='{path}', replace=True), with the reader "
        "options its files need (format, partitionColumns...)."
    )
