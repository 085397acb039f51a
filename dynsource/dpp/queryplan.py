"""Automatic dynamic partition pruning for :func:`dynsource.sql`: detect, collect, wire, report.

:mod:`dynsource.dpp.starjoin` finds the fact scans that dimension keys can prune.
For each fact scan this module runs the dimension query through the collector,
keeps the filter when Spark's benefit check passes (the keys keep at most
``fallback_filter_ratio`` of the fact's top-level partitions), publishes it, and
puts in the fact reference's place a DataFrame that reads the table through its
own source with the filter's handle and only the columns the query uses.
The rewritten query then runs in Spark as usual.

Names are resolved as Spark resolves them (:mod:`dynsource.dpp.nameresolution`). The rows a
dimension's keys are collected from are read once into a snapshot that the
rewritten query reads in the dimension's place (:mod:`dynsource.dpp.snapshots`), so
every action on the returned DataFrame joins the very dimension rows whose keys
pruned the fact. A query's dimensions are collected concurrently, each once,
within a time budget (:mod:`dynsource.dpp.dimensions`). The rewrite refers to DataFrames (the snapshots, the fact
scans) by placeholder names that :class:`dynsource.dpp.placeholders.Frames` hands to
``spark.sql``, which leaves no temporary view behind.

A fact scan joined to several dimensions gets one filter whose parts are the
filters worth applying (:mod:`dynsource.filtering.conjunction`: a row must match
every part, their sizes add up); an exceeded filter, or one on a fact column
another part already filters, is left out, those on the first partition column
kept first, and the report says so.
The query's own predicates on the fact's partition columns go to the same scan
as its ``partitionFilter``, so they prune directories too.

Not every filter is collected: one on partition columns of a local fact that
Spark's file reader reads is left to Spark's own dynamic partition pruning, and
one on data columns of a small such fact to the join (:mod:`dynsource.dpp.benefit`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot.errors import SqlglotError

from dynsource.dpp import benefit, detection, dimensions, nameresolution, snapshots, sqltree, starjoin, unfiltered
from dynsource.dpp.facttables import FactTables, declined_before, not_collected, remember_decline, verdict_key
from dynsource.dpp.partitionpredicates import WHOLE, partition_filter, unpruned
from dynsource.dpp.placeholders import Frames
from dynsource.dpp.queryreport import Assignment, QueryReport
from dynsource.dpp.relation import Relation
from dynsource.filtering import DynamicFilteringData, handles
from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime import settings
from dynsource.runtime.lru import LruMap
from dynsource.scan.options import filter_options
from dynsource.scan.origin import Reader
from dynsource.scan.planner import plan_scan
from dynsource.spark import catalog

log = logging.getLogger(__name__)
DETECTIONS_KEPT = 256
CASE_SENSITIVE = "spark.sql.caseSensitive"
# dynsource's analysis reads a query's names ignoring case (sqlglot's Spark dialect), so the dimension query it
# writes may name a column in another case than the query: Spark, told to match case, would not resolve it.
_CASE_SENSITIVE = (f"{CASE_SENSITIVE} is true, and dynsource.sql reads a query's names ignoring case: it collects no "
                   "dimension's keys under it (Spark reads the join as written)")
_detections: LruMap[detection.Detection] = LruMap(DETECTIONS_KEPT)
# By text: whether it is a query, and each table reference's name parts (see _shape).
_shapes: LruMap[tuple[bool, tuple[tuple[str, ...], ...]]] = LruMap(DETECTIONS_KEPT)


@dataclass
class Plan:
    """What :func:`plan` decided for a query: each fact scan's assignment, and the notes on other joins."""

    query: str
    store: FilterStore
    frames: Frames = field(default_factory=Frames)  # the DataFrames the query's text names by placeholders
    assignments: list[Assignment] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # refusals, and why nothing was analysed
    # Every scan of a dynsource table, with the reader options that prune it (dynamicFilter, partitionFilter) if any.
    reads: list[tuple[detection.FactScan, dict[str, str]]] = field(default_factory=list)
    pinned: list[snapshots.Pin] = field(default_factory=list)  # the dimension sources the query reads from snapshots
    prepared: dict[detection.FactScan, str] = field(default_factory=dict)  # placeholders of reads made in plan()
    is_query: bool = False  # the text is a query: spark.sql analyses it and runs nothing (not INSERT, CACHE, ...)
    sources: set[str] = field(default_factory=set)  # the fact tables of Python data sources that take a filter

    @property
    def report(self) -> QueryReport:
        return QueryReport(tuple(self.assignments), tuple(self.notes), self.store)

    def run(self, spark: SparkSession) -> DataFrame:
        """The rewritten query: each fact scan read with its filters, each pinned dimension from its snapshot.

        A fact scan reads the table by the reader its option ``reader`` chooses (the alias the query's
        columns use kept); text inside a replaced dimension source stays as written.
        """
        edits = [(pin.start, pin.end, pin.reference) for pin in self.pinned]
        for scan, options in self.reads:
            name = self.prepared.get(scan) or self.frames.add("fact", _read(spark, scan, options, self.sources))
            edits.append((scan.start, scan.end, name + ("" if scan.written_alias else f" AS {scan.alias}")))
        pieces, position = [], 0
        for start, end, text in sorted(edits):
            if start < position:
                continue  # inside a dimension source already read from its snapshot
            pieces += [self.query[position:start], text]
            position = end
        text = "".join([*pieces, self.query[position:]])
        return self.frames.query(spark, text) if self.is_query else self.frames.sql(spark, text)

    def plan_scans(self, spark: SparkSession) -> None:
        """Plan each scan here, as Spark would before running the query, so that the report has its figures."""
        for scan, options in self.reads:
            if scan.table in self.sources:
                continue  # planned by its own source, which reports nothing to dynsource
            definition = catalog.load_definition(spark, scan.table)
            schema = definition.schema
            if scan.columns is not None:
                schema = StructType([f for f in schema.fields if f.name in set(scan.columns)])
            reader = Reader.of(catalog.SOURCE_PREFIX + definition.table, options)
            plan_scan(definition.scan_options.with_options(options), schema, reader=reader)


def plan(spark: SparkSession, query: str, *, frames: Frames | None = None, store: FilterStore | None = None,
         fallback_filter_ratio: float = benefit.DEFAULT_FALLBACK_FILTER_RATIO,
         timeout_ms: int = dimensions.DEFAULT_TIMEOUT_MS, min_scan_bytes: int = 0, spark_prunes_local: bool = False,
         prepare: bool = False, given: Sequence[Assignment] = (), collect_unfiltered: bool = False) -> Plan:
    """Detect the prunable fact scans of ``query``, and collect and publish their filters.

    Runs the dimension queries (Spark jobs), not the query itself, spending at
    most ``timeout_ms`` on them. ``frames`` are the DataFrames ``query`` names by placeholders.
    A filter on data columns only of a fact Spark's reader reads is collected when the fact is estimated at
    ``min_scan_bytes`` or more (:func:`benefit.not_worth_collecting`); with ``spark_prunes_local``, a filter on
    partition columns only of a local fact Spark's reader reads is left to Spark (:func:`benefit.left_to_spark`).
    A dimension side that reads its tables whole is collected only with ``collect_unfiltered``
    (:mod:`dynsource.dpp.unfiltered`).
    With ``prepare``, the scans no dimension prunes are read for :meth:`Plan.run` while the dimensions are
    collected. ``given`` are the report's entries of the references ``frames`` read with their own options.
    """
    result = Plan(query, store or FilterStore.of(None), frames or Frames(), list(given))
    resolver = nameresolution.Resolver(spark, result.frames.frames, defer_unread=True)
    try:
        result.is_query, references = _shape(query)
    except SqlglotError as error:
        result.notes.append(f"the query could not be analysed: {sqltree.error_text(error)}")
        return result
    relations = resolver.resolve_all(references)
    result.notes += _connect_views(relations, resolver.global_database)
    tables, definitions = _table_infos(relations)
    sources = {relation.key: relation.source for relation in relations if relation is not None and relation.source}
    result.notes += [f"{table}: data source '{source.name}' does not implement dynsource.SupportsDynamicFiltering: "
                     "Spark reads it as the query says" for table, source in sources.items() if not source.filters]
    sources = {table: source for table, source in sources.items() if source.filters}
    result.sources = set(sources)
    # The current database qualifies only a one-part name that resolved to nothing here (missing, another catalog's);
    # over Spark Connect asking it is a round trip.
    unresolved = any(relation is None and len(parts) == 1
                     for parts, relation in zip(references, relations, strict=True))
    detected = _detect(query, tables, resolver.current_database if unresolved else sqltree.TEMPORARY, relations)
    result.notes += [
        r.reason if r.fact is None else f"{_scan_name(r.fact)}: {r.reason}" for r in detected.refusals]
    by_scan: dict[detection.FactScan, list[detection.Pruning]] = {scan: [] for scan in detected.scans}
    for pruning in detected.prunings:
        by_scan[pruning.fact].append(pruning)
    reading = functools.partial(_read_as_planned, spark, resolver, result.frames, {})
    facts = FactTables(spark, tables, definitions, sources, result.frames,
                       tuple((r.key, r.schema.simpleString()) for r in relations if r is not None))
    case_sensitive = (settings.get(spark, CASE_SENSITIVE) or "false").strip().lower() == "true"
    with dimensions.Dimensions(spark, result.frames, timeout_ms, reading) as collections:
        collected, verdicts = set(), {}
        for pruning in detected.prunings:
            why = _CASE_SENSITIVE if case_sensitive else (
                not_collected(facts, pruning, min_scan_bytes, spark_prunes_local)
                or unfiltered.not_collected(facts, pruning, collect_unfiltered))
            if why is None:
                verdicts[pruning] = verdict_key(facts, pruning, fallback_filter_ratio)
                why = declined_before(facts, pruning.fact.table, verdicts[pruning])
            if why is None:
                types = tables[pruning.fact.table].columns
                collections.submit(pruning, {column: types[column] for column in pruning.fact_columns})
                collected.add(pruning.fact)
            else:
                collections.decline(pruning, why)
        resolver.confirm_unread(before_given=bool(collected))  # the dimensions' columns type the keys collected
        statics = {scan: _static_filter(scan, facts) for scan in by_scan}
        if prepare:
            uncollected = [scan for scan in by_scan if scan not in collected and scan.table in definitions]
            _prepare_uncollected(spark, uncollected, statics, definitions, result)
        def declined(pruning: detection.Pruning, reason: str) -> None:
            remember_decline(facts, pruning.fact.table, verdicts.get(pruning), reason)

        _plan_reads(by_scan, statics, facts, collections, result, fallback_filter_ratio, declined)
    if not detected.prunings and not result.notes and not result.assignments:  # else they say what pruned
        result.notes.append("no join of a dynsource table with a filtered dimension was found")
    return result


def _prepare_uncollected(spark: SparkSession, scans: Sequence[detection.FactScan],
                         statics: Mapping[detection.FactScan, str | None],
                         definitions: Mapping[str, catalog.TableDefinition], result: Plan) -> None:
    """Read each of ``scans``, which no collected filter prunes, with its ``statics`` partitionFilter and its table's
    definition as resolved, into ``result.prepared`` (its listing overlaps the collections). Scans of one table with
    the same partitionFilter and columns share one read (TPC-DS q9 scans store_sales fifteen times): Spark reads
    each where it stands."""
    placeholders: dict[tuple, str] = {}
    for scan in scans:
        static = statics[scan]
        read = (scan.table, static, scan.columns)
        if read not in placeholders:
            try:
                whole_or_not = WHOLE if static is None else {"partitionFilter": static}
                df = catalog.read_table(spark, scan.table, whole_or_not,
                                        scan.columns, definitions[scan.table])
            except Exception:  # Plan.run reads it again and raises the error there, as without prepare
                continue
            placeholders[read] = result.frames.add("fact", df)
        result.prepared[scan] = placeholders[read]


def _static_filter(scan: detection.FactScan, facts: FactTables) -> str | None:
    """The scan's ``partitionFilter`` from the query's own predicates, None without any."""
    if not scan.predicates or scan.table in facts.sources:  # the query keeps them for Spark, as spark.sql does
        return None
    definition, columns = facts.definitions[scan.table], facts.tables[scan.table].columns
    return partition_filter(scan, definition.scan_options, columns, facts.survey(scan.table).columns)


def _plan_reads(by_scan: Mapping[detection.FactScan, list[detection.Pruning]],
                statics: Mapping[detection.FactScan, str | None], facts: FactTables, collections: dimensions.Dimensions,
                result: Plan, ratio: float, declined: Callable[[detection.Pruning, str], None]) -> None:
    """Each scan's read options (its filters worth applying, its ``statics`` partitionFilter) and report, into
    ``result``."""
    for scan, prunings in by_scan.items():
        shape = facts.survey(scan.table) if prunings and scan.table in facts.definitions else None
        static = statics[scan]
        assignment, notes = Assignment(_scan_name(scan)), []
        if prunings:
            assignment, notes = _assign(scan, prunings, shape, collections, result, ratio, declined)
        options = {} if static is None else {"partitionFilter": static}
        if assignment.handle is not None:
            options |= filter_options(assignment.handle, result.store)
        if options:
            result.reads.append((scan, options))
            assignment = dataclasses.replace(assignment, partition_filter=static, columns=scan.columns)
        elif scan.table not in facts.sources:  # (a Python data source's is read as the query names it)
            # Read whole: said here, where the query is known, and only where a predicate could have pruned.
            result.reads.append((scan, dict(WHOLE)))
            if scan.predicates:
                notes += unpruned(scan, _scan_name(scan), facts.survey(scan.table).columns)
        if prunings or static is not None:
            result.assignments.append(assignment)
        result.notes += notes


def _read(spark: SparkSession, scan: detection.FactScan, options: Mapping[str, str], sources: set[str]) -> DataFrame:
    """The scan's table read with ``options``: a dynsource table by :func:`catalog.read_table`, a Python data
    source's table as Spark reads it with the options added (they reach the source, as a reference's ``WITH``)."""
    if scan.table in sources:
        return spark.read.options(**options).table(scan.table)
    return catalog.read_table(spark, scan.table, options, scan.columns)


def _assign(scan: detection.FactScan, prunings: list[detection.Pruning], survey: benefit.Survey,
            collections: dimensions.Dimensions, result: Plan, ratio: float,
            declined: Callable[[detection.Pruning, str], None]) -> tuple[Assignment, list[str]]:
    """The filter of ``scan``: its prunings worth applying (judged on ``survey``), combined, and notes; each
    pruning collected and then found not to pay is told to ``declined``.

    The dimension sources of the applied prunings join ``result.pinned``.
    """
    done: dict[str, dimensions.Collected] = {}

    def collect(pruning: detection.Pruning) -> tuple[DynamicFilteringData | None, str | None]:
        collected = done[str(pruning)] = collections.collected(pruning)
        return collected.data, collected.reason

    candidates = [benefit.Candidate(str(p), p.fact_columns, functools.partial(collect, p)) for p in prunings]
    choice = benefit.worth_applying(candidates, survey, ratio)
    by_label = {str(p): p for p in prunings}
    for label, reason in choice.declined:
        if done[label].data is not None:  # collected, and judged not to pay
            declined(by_label[label], reason)
    # A declined dimension is read from its snapshot too when its rows read a dynsource table: evaluated again in
    # the query, they would scan that table twice (TPC-DS q14's cross_items intersects three facts: ~10 s).
    result.pinned += [item.pin for label, item in done.items()
                      if item.pin is not None and (label in choice.applied or item.reads_tables)]
    notes = [f"{label}: {reason}" for label, reason in choice.declined]
    if choice.data is None:
        return Assignment(_scan_name(scan), reason="; ".join(notes)), []
    # The candidates were collected side by side: the filter was ready when the slowest of them was.
    collection_ms = round(max(item.seconds for item in done.values()) * 1000, 1)
    handle = handles.publish(choice.data, result.store)
    return (Assignment(_scan_name(scan), " AND ".join(choice.applied), handle, choice.kind, len(choice.data),
                       collection_ms), notes + choice.left_out)


def _read_as_planned(spark: SparkSession, resolver: nameresolution.Resolver, frames: Frames,
                     placeholders: dict[str, str], text: str) -> str:
    """``text`` (a dimension's rows) with each dynsource table it reads named by a placeholder of that table read by
    :func:`catalog.read_table`, as the query's own references are: Spark's reader where it can open the files, and
    Spark then prunes its columns (a dimension such as TPC-DS q14's ``cross_items`` reads three facts). A table is
    planned once per query: ``placeholders`` holds its placeholder for every dimension text naming it."""
    try:
        parsed = sqlglot.parse_one(text, read="spark")
    except SqlglotError:
        return text  # read as written: by the tables' own source
    replaced = False
    for table in nameresolution.references(parsed):
        relation = resolver.resolve(tuple(part.name for part in table.parts))
        if relation is not None and relation.definition is not None:
            if relation.key not in placeholders:
                placeholders[relation.key] = frames.add("fact", catalog.read_table(spark, relation.key))
            table.replace(sqlglot.exp.alias_(sqlglot.exp.to_table(placeholders[relation.key]), table.alias_or_name,
                                             table=True))
            replaced = True
    return parsed.sql("spark") if replaced else text


def _detect(query: str, tables: Mapping[str, detection.TableInfo], database: str,
            relations: Sequence[Relation | None]) -> detection.Detection:
    """:func:`starjoin.detect`, given again for a text detected before with each table reference resolved to the
    same ``relations`` (None: another catalog, or a name Spark will report as missing), of the same columns and
    types, in the same current ``database``: a warm session runs the same texts again, and detection depends on
    nothing else (3-15 ms of a TPC-DS query's, sqlglot's qualification)."""
    resolved = tuple(relation.key if relation is not None else None for relation in relations)
    key = (query, database, resolved,
           tuple((name, tuple(info.columns.items()), info.dynsource, info.accepted) for name, info in tables.items()))
    detected = _detections.get(key)
    if detected is None:
        parsed = sqlglot.parse_one(query, read="spark")
        for table, relation in zip(nameresolution.references(parsed), relations, strict=True):
            if relation is not None:  # named as the analysis names it
                sqltree.resolve_as(table, relation.database)
        detected = starjoin.detect(query, tables, database, parsed)
        _detections.put(key, detected)
    return detected


def known_references(query: str) -> tuple[tuple[str, ...], ...]:
    """The name parts of each table reference of ``query``, where it was planned before (else none)."""
    shape = _shapes.get(query)
    return () if shape is None else shape[1]


def _shape(query: str) -> tuple[bool, tuple[tuple[str, ...], ...]]:
    """Whether ``query`` is a query (not INSERT, CACHE, ...), and the name parts of each of its table references in
    turn; parsed once per text (1-10 ms of sqlglot's for a TPC-DS query, its parse and scopes)."""
    shape = _shapes.get(query)
    if shape is None:
        parsed = sqlglot.parse_one(query, read="spark")
        shape = (sqltree.is_query(parsed),
                 tuple(tuple(part.name for part in table.parts) for table in nameresolution.references(parsed)))
        _shapes.put(query, shape)
    return shape


def _connect_views(relations: Sequence[Relation | None], global_database: str) -> list[str]:
    """Why each temporary view over a registered table that a Spark Connect lookup found is read as Spark reads it
    (a persistent view is seen through, or :mod:`dynsource.dpp.views` says why not)."""
    return list(dict.fromkeys(
        f"view {relation.name if relation.database == sqltree.TEMPORARY else relation.key} is read as Spark reads "
        f"it: it reads the registered table {relation.view_of}, and over Spark Connect the client cannot read a "
        "temporary view's settings, nor a DataFrame's view's plan, to see through it (name the table in the query, "
        "or make the view persistent)"
        for relation in relations if relation is not None and relation.view_of
        and relation.database in (sqltree.TEMPORARY, global_database)))


def _table_infos(relations: Sequence[Relation | None]) -> tuple[
        dict[str, detection.TableInfo], dict[str, catalog.TableDefinition]]:
    """What the table references resolve to (``relations``, as Spark resolves them; None: another catalog, or a
    name Spark will report as missing), by the qualified lower-case name the analysis gives them; and the
    definitions of the dynsource tables."""
    infos, definitions = {}, {}
    for relation in relations:
        if relation is None:
            continue
        if relation.definition is not None:
            definitions[relation.key] = relation.definition
        columns = {f.name: f.dataType.simpleString() for f in relation.schema.fields}
        accepted = relation.source.accepted if relation.source else None
        infos[relation.key] = detection.TableInfo(columns, relation.prunable, accepted)
    return infos, definitions


def _scan_name(scan: detection.FactScan) -> str:
    return f"{scan.table} AS {scan.alias}"
