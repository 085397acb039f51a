"""Which relation each table name of a query means, decided as Spark decides it.

Spark resolves a table reference of a statement in this order: a common table
expression in scope (the innermost first); for a name of one part, a temporary
view of the session, then a table or view of the current database. Two and
three parts name ``db.table`` and ``spark_catalog.db.table``; ``global_temp.v``
(Spark's global temporary database) is a global temporary view, and
``session.v`` and ``system.session.v`` are the session's temporary view ``v``.

:func:`dynsource.sql` analyses a query only through this resolution: a
reference is a dynsource table only when Spark resolves it to a catalog table
whose provider is that table's dynsource source, so a temporary view, a CTE or
another source with the same name is read as Spark reads it.

Over Spark Connect, where each lookup is a round trip to the server, names an earlier query of the session
resolved are given on trust and confirmed beside the query (:mod:`dynsource.dpp.connectnames`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from dynsource.dpp import dataframeviews
from dynsource.dpp.connectnames import NAME_LOOKUPS, ConnectNames, Known, confirming_ahead, known_names
from dynsource.dpp.relation import Relation
from dynsource.dpp.sqltree import TEMPORARY
from dynsource.runtime import deployment
from dynsource.scan import latechecks
from dynsource.spark import catalog, metastore, pythonsources

log = logging.getLogger(__name__)


@contextlib.contextmanager
def confirmed_ahead(spark: SparkSession, names: Sequence[tuple[str, ...]]) -> Iterator[None]:
    """Over Spark Connect, inside :func:`~dynsource.scan.latechecks.checked_later`, before anything else of the
    query: those of ``names`` that an earlier query resolved to a relation dynsource reads are confirmed from the
    block's start (the confirmation a warm query waits for, beside its other requests), not again in it."""
    checks, known, found = latechecks.current(), known_names.get(spark), {}
    if checks is not None and known is not None and names:  # known: over Spark Connect only
        resolver = Resolver(spark)
        found = {parts: entry for parts in dict.fromkeys(tuple(p.lower() for p in parts) for parts in names)
                 if (entry := known.get(parts)) is not None and resolver._may_be_registered(parts, entry)}
        if found:
            checks.submit(functools.partial(resolver._confirmed, found))
    token = confirming_ahead.set({parts: entry.relation for parts, entry in found.items()})
    try:
        yield
    finally:
        confirming_ahead.reset(token)


def references(parsed: exp.Expression) -> list[exp.Table]:
    """The table references of ``parsed`` that name a table or view, not a common table expression in scope."""
    return [table for scope in traverse_scope(parsed) for table in scope.tables
            if scope.sources.get(table.alias_or_name) is table]


class Resolver(ConnectNames):
    """Resolves table names as the session ``spark`` would now; ``frames`` are DataFrames the query names. With
    ``defer_unread``, names given on trust that no rewrite reads are confirmed only by :meth:`confirm_unread`."""

    def __init__(self, spark: SparkSession, frames: Mapping[str, DataFrame] | None = None,
                 defer_unread: bool = False) -> None:
        self.spark = spark
        self.frames = dict(frames or {})
        self._defer_unread = defer_unread
        self._unread: dict[tuple[str, ...], Known] = {}  # given on trust, their confirmation deferred
        self._session_catalog = metastore.session_catalog(spark)
        self.global_database = (metastore.global_temp_database(spark) if self._session_catalog is None
                                else self._session_catalog.global_database)
        self._resolved: dict[tuple[str, ...], Relation | None] = {}  # a name a query repeats is looked up once

    @functools.cached_property
    def current_catalog(self) -> str:
        """The session's current catalog, asked once: a query's names are resolved at one time."""
        return self.spark.catalog.currentCatalog()

    @functools.cached_property
    def current_database(self) -> str:
        """The session's current database, lower case, asked once (over Spark Connect, learned from a lookup)."""
        return self.spark.catalog.currentDatabase().lower()

    def resolve(self, parts: tuple[str, ...]) -> Relation | None:
        """The relation ``parts`` names; None when it names nothing Spark can read now or lies in another catalog."""
        parts = tuple(part.lower() for part in parts)
        if parts not in self._resolved:
            self._resolved[parts] = self._lookup(parts)
        return self._resolved[parts]

    def resolve_all(self, names: Sequence[tuple[str, ...]]) -> list[Relation | None]:
        """Each of ``names`` resolved. On Spark Connect, where each lookup is a round trip to the server, they are
        looked up side by side."""
        if deployment.is_connect(self.spark):
            unresolved = list(dict.fromkeys(tuple(p.lower() for p in parts) for parts in names) - self._resolved.keys())
            trusted = self._trusted(unresolved)
            confirmed = {parts: found for parts, found in trusted.items()
                         if not self._defer_unread or self._may_be_registered(parts, found)}
            self._unread.update((parts, found) for parts, found in trusted.items() if parts not in confirmed)
            ahead = confirming_ahead.get() or {}
            confirmed = {parts: found for parts, found in confirmed.items() if ahead.get(parts) != found.relation}
            if confirmed:
                latechecks.current().submit(functools.partial(self._confirmed, confirmed))
            list(NAME_LOOKUPS.map(self.resolve, [parts for parts in unresolved if parts not in trusted]))
        return [self.resolve(parts) for parts in names]


    def _lookup(self, parts: tuple[str, ...]) -> Relation | None:
        if len(parts) == 1 and parts[0] in self.frames:
            return Relation(TEMPORARY, parts[0], self.frames[parts[0]].schema)
        if deployment.is_connect(self.spark):
            return self._connect_lookup(parts)
        in_session_catalog = len(parts) == 3 and parts[0] == "spark_catalog" and parts[1] != self.global_database
        if self._session_catalog is not None and (len(parts) == 1 or in_session_catalog):
            try:
                return self._one_part(parts[0]) if len(parts) == 1 else self._catalog_relation(*parts[1:])
            except Py4JError:
                self._session_catalog = None  # an internal API this Spark version lacks: ask as below
        try:  # Spark's own lookup: which qualifiers name a temporary view differs between Spark versions
            table = self.spark.catalog.getTable(metastore.quoted(*parts))
        except AnalysisException:
            return None  # a name Spark will report as missing
        if table.isTemporary:
            database = self.global_database if table.namespace == [self.global_database] else TEMPORARY
            return self._relation(database, table.name.lower(), metastore.quoted(*parts))
        if table.catalog != "spark_catalog" or len(table.namespace or []) != 1:
            return None
        return self._catalog_relation(table.namespace[0].lower(), table.name.lower())

    def _one_part(self, name: str) -> Relation | None:
        """A one-part name as Spark resolves it: the session's temporary view, else a table or view of the current
        database when the current catalog is the session catalog. Asked of the session catalog directly: Spark's
        ``getTable`` analyses the name, 2-4 ms of a warm query per table."""
        if self.is_temporary_view(name):
            return self._temporary_view(name)
        if self.current_catalog != "spark_catalog":
            return None
        return self._catalog_relation(self.current_database, name)


    def _temporary_view(self, name: str) -> Relation | None:
        """A temporary view of the session. One made from a DataFrame holds its analysed plan, whose schema the
        session catalog gives without analysing the name again (0.5 ms against 4 ms); one of SQL text holds an
        unresolved plan, read as Spark reads it."""
        try:
            schema = self._session_catalog.temporary_view_schema(name)
        except Py4JError:  # Spark's error for the unresolved plan of a view of SQL text
            return self._relation(TEMPORARY, name, metastore.quoted(name))
        return Relation(TEMPORARY, name, schema)

    def _relation(self, database: str, name: str, spark_name: str) -> Relation | None:
        try:
            return Relation(database, name, self.spark.table(spark_name).schema)
        except AnalysisException:
            return None  # a name Spark will report as missing

    def _catalog_relation(self, database: str, name: str) -> Relation | None:
        definition = self.definition(database, name)
        if definition is not None:
            return Relation(database, name, definition.schema, definition)
        relation = self._relation(database, name, metastore.quoted(database, name))
        source = pythonsources.python_source(self.spark, metastore.provider(self.spark, f"{database}.{name}"))
        return relation if relation is None or source is None else dataclasses.replace(relation, source=source)

    def definition(self, database: str, name: str) -> catalog.TableDefinition | None:
        """The definition of the registered dynsource table ``database.name`` of the session catalog; None when
        that names another table, or nothing, or a table replaced since it was registered."""
        if deployment.is_connect(self.spark):  # the name's lookup tells
            relation = self._connect_known(("spark_catalog", database, name))
            return None if relation is None else relation.definition
        qualified = f"{database}.{name}"
        try:
            definition = catalog.load_definition(self.spark, qualified)
        except metastore.UnregisteredCatalogTable:
            raise  # Spark would fail to read it, on a message that cannot name the table
        except ValueError:
            return None
        return definition if metastore.provider(self.spark, qualified) == catalog.SOURCE_PREFIX + qualified else None

    def view(self, parts: tuple[str, ...]) -> tuple[tuple[str, ...], metastore.ViewDefinition] | None:
        """The view defined by SQL text that ``parts`` names, as Spark resolves the name, with the name it resolved to
        (``(name,)`` for a temporary view, ``(global database, name)``, ``("spark_catalog", database, name)``); a
        temporary view of a DataFrame over a registered table as its plan written as text; None for anything else.
        Over Spark Connect, only a persistent view over a registered table (see :meth:`_connect_view`)."""
        session = self._session_catalog
        parts = tuple(part.lower() for part in parts)
        if len(parts) == 1 and parts[0] in self.frames:
            return None
        if deployment.is_connect(self.spark):
            return self._connect_view(parts)
        if session is None:
            return None
        try:
            if len(parts) == 1:
                temporary, found = metastore.temporary_view(session, parts[0])
                if temporary:
                    found = self._written(found)
                    return None if found is None else (parts, found)
            if len(parts) == 2 and parts[0] == self.global_database:
                found = self._written(metastore.global_view(session, parts[1]))
                return None if found is None else (parts, found)
            if len(parts) == 1 and self.current_catalog == "spark_catalog":
                parts = (self.current_database, *parts)
            if len(parts) == 3 and parts[0] == "spark_catalog":
                parts = parts[1:]
            if len(parts) != 2:
                return None  # another catalog
            found = metastore.catalog_view(session, *parts)
        except Py4JError:
            return None  # an internal API this Spark version lacks: the view is read as Spark reads it
        return None if found is None else (("spark_catalog", *parts), found)


    def _written(self, found: metastore.ViewDefinition | metastore.PlanView | None) -> metastore.ViewDefinition | None:
        """A DataFrame's view written as SQL text where it reads a registered table (see dataframeviews)."""
        if not isinstance(found, metastore.PlanView):
            return found
        return dataframeviews.definition(found, self.definition, lambda: self.spark.conf.get("spark.sql.ansi.enabled"))

    def is_temporary_view(self, name: str) -> bool:
        """Whether the session has a temporary view ``name`` (classic sessions only)."""
        session = self._session_catalog
        return session is not None and session.catalog.isTempView(session.identifier(name))


