"""What a session's table names resolved to over Spark Connect, and their confirmation.

Over Spark Connect each lookup is a round trip to the server (15-25 ms), on
the way of every query. There a name a session's earlier query resolved is
given on trust inside :func:`dynsource.scan.latechecks.checked_later` (as
``dynsource.sql`` resolves) and confirmed beside the caller, which meanwhile
has the server analyse the rewritten query: by the semantic hash and schema of
the name's analysed plan, two cheap analyses, where the hash stays the same
while the name means the same (Spark's canonical plan; it holds no column
names, hence the schema too); for a registered dynsource table, whose plan's
hash changes at every analysis, by its ``LIMIT 0`` analysed plan and its
registered definition. Where a name means something else now, the caller
resolves the query again.

Only the names a query's rewrite reads in its own way must be confirmed before
the query is given: registered tables and views over them (read by dynsource), and,
where the query collects a filter, every name (the dimensions' columns type the
keys). Any other name stays in the rewritten text as written, so the server
resolves it as it resolves it now, whatever it resolved to before: with a
resolver made with ``defer_unread``, such a name is confirmed after the query is
given, at most every :data:`RECONFIRM_S` seconds, and what it means now is kept
for later queries. Until then a name that has become a registered table is read
as Spark reads it (its rows, unpruned), and one whose columns changed may make
the query fail where ``spark.sql`` would not (a column it took for another
table's); never does a query give other rows.

:class:`ConnectNames` is that part of :class:`~dynsource.dpp.nameresolution.Resolver`: what a session's names
resolved to, kept between its queries, and their confirmation before and after a query.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dynsource.dpp.relation import Relation
from dynsource.dpp.sqltree import TEMPORARY
from dynsource.runtime import deployment
from dynsource.runtime.lru import LruMap
from dynsource.scan import latechecks
from dynsource.spark import catalog, metastore, pythonsources

log = logging.getLogger(__name__)
_CONNECT_LOOKUPS = 8  # a query's names looked up at once over Spark Connect
# The analysis requests of those lookups: leaf tasks only (none waits for another), so the pool cannot deadlock.
_REQUESTS = ThreadPoolExecutor(max_workers=3 * _CONNECT_LOOKUPS, thread_name_prefix="dynsource-lookup")
# A query's names looked up or confirmed side by side: each waits only on _REQUESTS. Kept: a thread started per
# query costs a warm query about a millisecond.
NAME_LOOKUPS = ThreadPoolExecutor(max_workers=_CONNECT_LOOKUPS, thread_name_prefix="dynsource-name")
_RECONFIRMS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynsource-reconfirm")
RECONFIRM_S = 60.0  # a name no rewrite reads is confirmed after its query at most this often
KNOWN_NAMES = 256  # a session's names kept over Spark Connect
# In the analysed plan of spark.table(name): what the name resolved to, and the Python data source reading it.
_ALIAS = re.compile(r"^== Analyzed Logical Plan ==\n.*\n(?:[+|: -]*)SubqueryAlias (\S+)$", re.MULTILINE)
_PYTHON_SCAN = re.compile(r"BatchScan (\S+?)\[.*\(Python\)")
# In the analysed plan of spark.table(name).limit(0): a catalog table read by a data source V2, and its columns
# (Spark 4.0 writes the table's name twice after them, 4.1+ once).
_V2_RELATION = re.compile(r"^[+|: -]*SubqueryAlias (\S+)\n[+|: -]*RelationV2\[([^\]]*)\] (\S+)", re.MULTILINE)
_ATTRIBUTE_ID = re.compile(r"#\d+L?$")  # a column's id, and the L Spark adds to a BIGINT column's


@dataclass(frozen=True)
class Known:
    """What a name resolved to over Spark Connect, and how to confirm it cheaply."""

    relation: Relation
    semantic_hash: int | None  # of the name's analysed plan; None: confirmed by a full lookup
    current_database: str | None  # learned from a one-part name that resolved to a catalog table
    confirmed_at: float = dataclasses.field(default_factory=time.monotonic, compare=False)
    registrations: int = dataclasses.field(default_factory=lambda: catalog.changes, compare=False)


known_names: weakref.WeakKeyDictionary[SparkSession, LruMap[Known]] = weakref.WeakKeyDictionary()
# The names of the registered tables a session's names resolved to: a name that now means something else (a
# temporary view shadowing one) may mean the table again.
_registered_names: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()
# The relations whose names confirmed_ahead is confirming for the late checks of this thread's query.
confirming_ahead: contextvars.ContextVar[Mapping[tuple[str, ...], Relation] | None] = contextvars.ContextVar(
    "dynsource_names_confirmed_ahead", default=None)


class ConnectNames:
    """The Spark Connect part of a resolver: names an earlier query of the session resolved, given on trust and
    confirmed beside the query, and the server's lookups. Mixed into ``Resolver``, whose state it shares: ``spark``,
    ``frames``, ``global_database``, the names resolved and those given on trust that no rewrite reads."""

    spark: SparkSession
    frames: dict[str, DataFrame]
    global_database: str
    _defer_unread: bool
    _unread: dict[tuple[str, ...], Known]
    _resolved: dict[tuple[str, ...], Relation | None]
    resolve: Callable[[tuple[str, ...]], Relation | None]  # the resolver's: a name resolved, looked up once

    def _may_be_registered(self, parts: tuple[str, ...], found: Known) -> bool:
        """Whether ``parts`` may name a registered table now: it did, or a table of its name was registered, or
        a table was registered or dropped by this process since it was confirmed."""
        return (found.relation.read_by_dynsource or found.registrations != catalog.changes
                or parts[-1] in _registered_names.get(self.spark, ()))

    def confirm_unread(self, before_given: bool) -> None:
        """Confirm the names given on trust that no rewrite reads: ``before_given`` (the query collects a filter,
        whose keys their columns type) as the others are, else after the query is given, each at most every
        :data:`RECONFIRM_S` seconds, what it means now kept for later queries."""
        unread, self._unread = self._unread, {}
        if before_given and unread:
            latechecks.current().submit(functools.partial(self._confirmed, unread))
            return
        now = time.monotonic()
        due = {parts: found for parts, found in unread.items() if now - found.confirmed_at >= RECONFIRM_S}
        if due:
            _RECONFIRMS.submit(self._confirmed, due).add_done_callback(_said_if_failed)

    def _trusted(self, names: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], Known]:
        """Those of ``names`` resolved as an earlier query of the session resolved them, to be confirmed beside the
        caller (inside :func:`~dynsource.scan.latechecks.checked_later` only)."""
        known = known_names.get(self.spark)
        if latechecks.current() is None or known is None:
            return {}
        trusted = {parts: found for parts in names if parts[0] not in self.frames
                   and (found := known.get(parts)) is not None}
        for parts, found in trusted.items():
            self._resolved[parts] = found.relation
            if found.current_database is not None:
                self.__dict__.setdefault("current_database", found.current_database)
        return trusted

    def _confirmed(self, trusted: Mapping[tuple[str, ...], Known]) -> bool:
        """Whether each name of ``trusted`` still resolves to the relation it resolved to (asked side by side)."""
        return all(list(NAME_LOOKUPS.map(self._still, trusted, trusted.values())))

    def _still(self, parts: tuple[str, ...], found: Known) -> bool:
        """Whether ``parts`` still resolves as ``found``; what it resolves to now is kept for later queries."""
        df = self.spark.table(metastore.quoted(*parts))
        try:  # None: not told, looked up in full
            if found.semantic_hash is not None:
                still = _at_once(df.semanticHash, lambda: df.schema) == (found.semantic_hash,
                                                                          found.relation.schema) or None
            elif found.relation.definition is not None:
                still = _still_registered(self.spark, found.relation, df.limit(0)._explain_string(extended=True))
            else:
                still = None
        except AnalysisException:
            still = False
        if still:
            self._keep(parts, dataclasses.replace(found, confirmed_at=time.monotonic()))
            return True
        return self._connect_lookup(parts, found) == found.relation and still is None

    def _connect_lookup(self, parts: tuple[str, ...], known: Known | None = None) -> Relation | None:
        """A name as the server resolves it, in analysis requests sent at once (no catalog command, which costs a
        query's round trip each): the relation's analysed plan names what the name resolved to (its
        ``SubqueryAlias``: a temporary view's name, ``global_temp.v``, ``spark_catalog.db.t``) and, for a Python
        data source, the source that reads it (``BatchScan dynsource.db.t``); its schema and semantic hash. What it
        finds is kept for the session's later queries; ``known`` is what was kept before."""
        df = self.spark.table(metastore.quoted(*parts))
        try:
            plan, schema, semantic_hash = _at_once(lambda: df._explain_string(extended=True), lambda: df.schema,
                                                   df.semanticHash)
        except AnalysisException:
            known_names.setdefault(self.spark, LruMap(KNOWN_NAMES)).pop(parts)
            return None  # a name Spark will report as missing
        relation, current_database = self._analysed(parts, plan, schema)
        if relation is None:
            known_names.setdefault(self.spark, LruMap(KNOWN_NAMES)).pop(parts)
            return None
        if relation.definition is not None or (
                known is not None and known.relation == relation and known.semantic_hash != semantic_hash):
            semantic_hash = None  # a hash that changes while the name means the same confirms nothing
        if current_database is not None:
            self.__dict__.setdefault("current_database", current_database)
        self._keep(parts, Known(relation, semantic_hash, current_database))
        return relation

    def _keep(self, parts: tuple[str, ...], found: Known) -> None:
        known_names.setdefault(self.spark, LruMap(KNOWN_NAMES)).put(parts, found)
        if found.relation.definition is not None:
            _registered_names.setdefault(self.spark, set()).add(found.relation.name)

    def _analysed(self, parts: tuple[str, ...], plan: str,
                  schema: StructType) -> tuple[Relation | None, str | None]:
        """The relation the analysed ``plan`` of ``parts`` shows, and the current database it tells."""
        alias = _ALIAS.search(plan)
        if alias is None:
            return None, None
        resolved = alias[1].lower().split(".")
        source = _PYTHON_SCAN.search(plan)
        source = None if source is None else source[1].lower()
        if len(resolved) == 1:
            return Relation(TEMPORARY, resolved[0], schema, view_of=_view_of(source, "")), None
        if len(resolved) == 2 and resolved[0] == self.global_database:
            return Relation(self.global_database, resolved[1], schema, view_of=_view_of(source, "")), None
        if len(resolved) != 3 or resolved[0] != "spark_catalog":
            return None, None
        database, name = resolved[1:]
        current_database = database if len(parts) == 1 else None  # a catalog table named alone lies in the current
        if source == f"{catalog.SOURCE_PREFIX}{database}.{name}":
            try:
                definition = catalog.load_definition(self.spark, f"{database}.{name}")
                return Relation(database, name, definition.schema, definition), current_database
            except ValueError:
                pass  # its definition is gone: read as Spark reads it
        view_of = _view_of(source, f"{database}.{name}")
        python = None if view_of is not None else pythonsources.python_source(self.spark, source)
        return Relation(database, name, schema, view_of=view_of, source=python), current_database

    def _connect_view(self, parts: tuple[str, ...]) -> tuple[tuple[str, ...], metastore.ViewDefinition] | None:
        """Over Spark Connect, the persistent view over a registered table that ``parts`` names, as the server
        describes it now (``DESCRIBE TABLE EXTENDED name AS JSON``, one request), with the name it resolved to; the
        names worth describing are known by what they resolved to at an earlier query of the session (see
        :meth:`look_up_unknown`). Given on trust and confirmed beside the query, a kept description saved no
        measurable time: the request competes for the same server cores. A temporary view is described without
        the settings it was made under: it is read as Spark reads it."""
        relation = self._connect_known(parts)
        if relation is None or relation.view_of is None or relation.database in (TEMPORARY, self.global_database):
            return None
        return metastore.persistent_view(self.spark, parts)

    def look_up_unknown(self, names: Sequence[tuple[str, ...]]) -> None:
        """Over Spark Connect, look up side by side those of ``names`` that no earlier query of the session
        resolved (the others are confirmed by the query's own resolution)."""
        if not deployment.is_connect(self.spark):
            return
        known = known_names.get(self.spark)
        unknown = [parts for parts in dict.fromkeys(tuple(p.lower() for p in parts) for parts in names)
                   if parts[0] not in self.frames and (known is None or known.get(parts) is None)]
        list(NAME_LOOKUPS.map(self.resolve, unknown))

    def _connect_known(self, parts: tuple[str, ...]) -> Relation | None:
        """What ``parts`` resolved to at an earlier query of the session, else what it resolves to now."""
        known = known_names.get(self.spark)
        found = None if known is None else known.get(parts)
        return self.resolve(parts) if found is None else found.relation


def _said_if_failed(confirmation: Future[bool]) -> None:
    """A confirmation after the query only refreshes what later queries trust: its failure is logged, not raised."""
    if confirmation.exception() is not None:
        log.debug("dynsource: confirming a query's names after it failed: %s", confirmation.exception())


def _view_of(source: str | None, name: str) -> str | None:
    """The registered table that the Python data source ``source`` (of a name's plan, resolved to ``name``) reads,
    where that is another name's: the name is a view over it."""
    if source is None or not source.startswith(catalog.SOURCE_PREFIX) or source == catalog.SOURCE_PREFIX + name:
        return None
    return source.removeprefix(catalog.SOURCE_PREFIX)


def _still_registered(spark: SparkSession, relation: Relation, plan: str) -> bool:
    """Whether the analysed ``plan`` of a name's ``limit(0)`` shows the registered table ``relation`` it resolved to
    before: the same catalog table, read by a data source V2 (as a Python data source is), with the same columns,
    and the same definition registered. The limit keeps Spark from planning the scan, which for a Python data source
    starts a Python worker (the full lookup's physical plan named the source itself)."""
    if v2_relation(plan) != (f"spark_catalog.{relation.key}", relation.schema.names):
        return False
    try:
        return catalog.load_definition(spark, relation.key) == relation.definition
    except ValueError:
        return False  # its definition is gone


def v2_relation(plan: str) -> tuple[str, list[str]] | None:
    """The catalog table (lower case) and its columns that an analysed ``plan`` reads by a data source V2 (as a
    Python data source is) under its own name; None for anything else."""
    found = _V2_RELATION.search(plan)
    if found is None or found[1].lower() != found[3].lower():
        return None
    return found[1].lower(), [_ATTRIBUTE_ID.sub("", column) for column in found[2].split(", ")]


def _at_once(*requests: Callable[[], Any]) -> tuple[Any, ...]:
    """The results of ``requests`` (round trips to a Spark Connect server) sent side by side; the first one's
    error, in their order, is raised."""
    futures = [_REQUESTS.submit(request) for request in requests]
    return tuple(future.result() for future in futures)
