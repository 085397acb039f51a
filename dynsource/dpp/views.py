"""Views over registered dynsource tables, seen through by :func:`dynsource.sql`.

Views are how teams share tables: ``CREATE TEMP VIEW sales AS SELECT * FROM store_sales``. Read as Spark reads
it, a view over a registered dynsource table reads the table through its Python source, whole. :func:`expand`
puts each view defined by SQL text that reads a registered table (itself or through other views) in its
reference's place as a derived table, so that the table inside is planned, pruned and read as if the query named
it::

    FROM sales JOIN date_dim ...
    FROM (SELECT `ss_item_sk` AS `ss_item_sk`, ... FROM (SELECT * FROM `spark_catalog`.`default`.`store_sales`)
          AS `__dynsource_view`) AS `sales` JOIN date_dim ...

Spark does the same with a view (it analyses the view's text in the view's place); what it guarantees is kept:

- a name in the view's text means what it meant to the view: it is resolved as Spark resolves a view's names (in
  the catalog and database current when the view was made; a temporary view's text names only the temporary views
  it named then) and written out in full, so that neither a temporary view of the session nor a common table
  expression of the query can capture it;
- the view's columns are the text's output columns it recorded, taken by name and renamed as the view renames
  them (``CREATE VIEW v (a, b) AS ...``), so a column added to the table since does not appear;
- Spark analyses a view under the SQL settings captured when it was made (the others at their defaults): a view
  made under settings that differ from those the session would analyse its text under is not seen through
  (:mod:`dynsource.spark.viewsettings`).

A view not seen through is read as Spark reads it, and the query's report says why (its text is one sqlglot cannot
parse, it was made under other settings, it names a view in another catalog, ...). A temporary view of a
DataFrame holds a plan, not text: :mod:`dynsource.dpp.dataframeviews` writes the plans it can as text. Over Spark
Connect, whose client cannot read the session catalog, the server describes a persistent view (``DESCRIBE TABLE
EXTENDED ... AS JSON``), one request per view and query; it describes a temporary view without the settings it was
made under, so those are read as Spark reads them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import sqlglot
from pyspark.sql import SparkSession
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dynsource.dpp import nameresolution, sqltree
from dynsource.runtime.lru import LruMap
from dynsource.spark import metastore, viewsettings

MAX_DEPTH = 32  # views over views: deeper ones are read as Spark reads them
SHAPES_KEPT = 256
_INNER_ALIAS = "`__dynsource_view`"
_PLAIN = frozenset({"this", "db", "catalog", "alias"})  # a reference with anything else (TABLESAMPLE, ...) is kept


@dataclass(frozen=True)
class Expanded:
    """A query with the views it reads through seen through, and why others were not."""

    text: str
    notes: tuple[str, ...] = ()


class NotSeenThrough(Exception):
    """Why a view is read as Spark reads it."""


@dataclass(frozen=True)
class _Reference:
    """A table reference of a query as written: its name parts, span, alias and shown name."""

    parts: tuple[str, ...]
    start: int
    end: int
    aliased: bool
    shown: str


_shapes: LruMap[tuple[tuple[_Reference, ...], frozenset[str]]] = LruMap(SHAPES_KEPT)


def expand(spark: SparkSession, query: str, parsed_text: str, kept: Collection[int] = ()) -> Expanded:
    """``query`` with each reference to a view over a registered dynsource table replaced by the view's text.

    ``parsed_text`` is ``query`` as sqlglot can parse it (its ``WITH (...)`` table options blanked out, positions
    unchanged); references starting at ``kept`` (those with options) stay as written.
    """
    try:
        references, ctes = _shape(parsed_text)
    except SqlglotError:
        return Expanded(query)  # nothing can be analysed: the query runs as written
    try:
        return _expanded(spark, query, [r for r in references if r.start not in kept], ctes)
    except Exception as error:  # seeing through must never fail a query spark.sql runs
        return Expanded(query, (f"the query's views could not be analysed, each is read as Spark reads it: {error}",))


def _shape(text: str) -> tuple[tuple[_Reference, ...], frozenset[str]]:
    """The plain table references of ``text`` (no TABLESAMPLE or time travel) and its CTEs' names, parsed once
    per text: a warm session runs the same texts again (sqlglot's parse is 1-3 ms of a TPC-DS query)."""
    shape = _shapes.get(text)
    if shape is None:
        parsed = sqlglot.parse_one(text, read="spark")
        references = tuple(
            _Reference(tuple(part.name.lower() for part in table.parts), sqltree.start(table), _end(table),
                       bool(table.args.get("alias")), sqltree.shown_name(table))
            for table in nameresolution.references(parsed)
            if not any(value for key, value in table.args.items() if key not in _PLAIN))
        shape = (references, frozenset(cte.alias_or_name.lower() for cte in parsed.find_all(exp.CTE)))
        _shapes.put(text, shape)
    return shape


def _expanded(spark: SparkSession, query: str, references: Sequence[_Reference], ctes: Collection[str]) -> Expanded:
    resolver = nameresolution.Resolver(spark)
    resolver.look_up_unknown([reference.parts for reference in references])
    edits, notes = [], []
    for reference in references:
        found = resolver.view(reference.parts)
        if found is None:
            continue
        try:
            text = _seen_through(spark, resolver, found[1], ctes, 1)
        except NotSeenThrough as why:
            notes.append(f"view {reference.shown} is read as Spark reads it: {why}")
            continue
        if text is not None:
            alias = "" if reference.aliased else f" AS {metastore.quoted(found[0][-1])}"
            edits.append((reference.start, reference.end, f"({text}){alias}"))
    return Expanded(_spliced(query, edits), tuple(notes))


def _seen_through(spark: SparkSession, resolver: nameresolution.Resolver, view: metastore.ViewDefinition,
                  ctes: Collection[str], depth: int) -> str | None:
    """The text to read in ``view``'s place; None when it reads no registered dynsource table."""
    if depth > MAX_DEPTH:
        raise NotSeenThrough(f"it is nested in views more than {MAX_DEPTH} deep")
    if view.unseen:
        raise NotSeenThrough(view.unseen)
    _check_settings(spark, view)
    if len(view.namespace) != 2 or view.namespace[0] != "spark_catalog":
        raise NotSeenThrough(f"its names resolve in {'.'.join(view.namespace)}, not in Spark's session catalog")
    if not view.query_columns:
        raise NotSeenThrough("Spark recorded no output columns for it")
    try:
        parsed = sqlglot.parse_one(view.text, read="spark")
    except SqlglotError as error:
        raise NotSeenThrough(f"its text could not be parsed: {sqltree.error_text(error)}") from error
    edits, reads = [], False
    for table in nameresolution.references(parsed):
        name, inner = _inner(spark, resolver, view, tuple(p.name.lower() for p in table.parts), ctes, depth)
        reads = reads or inner is not None
        replacement = metastore.quoted(*name) if not isinstance(inner, str) else (
            f"({inner})" + ("" if table.args.get("alias") else f" AS {metastore.quoted(name[-1])}"))
        edits.append((sqltree.start(table), _end(table), replacement))
    if not reads:
        return None
    columns = ", ".join(f"{metastore.quoted(query_column)} AS {metastore.quoted(column)}"
                        for query_column, column in zip(view.query_columns, view.columns, strict=True))
    # Line breaks: the view's text may end in a comment.
    return f"SELECT {columns} FROM (\n{_spliced(view.text, edits)}\n) AS {_INNER_ALIAS}"


def _inner(spark: SparkSession, resolver: nameresolution.Resolver, view: metastore.ViewDefinition,
           parts: tuple[str, ...], ctes: Collection[str], depth: int) -> tuple[tuple[str, ...], str | bool | None]:
    """A name of ``view``'s text as Spark resolves it there, and what it reads: its own text (a view seen through),
    True (a registered dynsource table) or None (anything else, left to Spark under the full name)."""
    if view.temporary and parts in view.temporary_views and (len(parts) == 1 or parts[0] == resolver.global_database):
        if len(parts) == 1 and not resolver.is_temporary_view(parts[0]):
            raise NotSeenThrough(f"the temporary view {parts[0]} it reads no longer exists")
        found = resolver.view(parts)
        inner = None if found is None else _seen_through(spark, resolver, found[1], ctes, depth + 1)
        if inner is None and len(parts) == 1 and parts[0] in ctes:  # kept as written, the query's CTE would read
            raise NotSeenThrough(f"the query's common table expression {parts[0]} has the name of the temporary "
                                 "view it reads")
        return parts, inner
    qualified = {1: ("spark_catalog", view.namespace[1], *parts), 2: ("spark_catalog", *parts)}.get(len(parts), parts)
    if qualified[0] != "spark_catalog" or len(qualified) != 3:
        return qualified, None  # another catalog's table: Spark reads it
    found = resolver.view(qualified)
    if found is not None:
        return qualified, _seen_through(spark, resolver, found[1], ctes, depth + 1)
    return qualified, True if resolver.definition(*qualified[1:]) is not None else None


def _check_settings(spark: SparkSession, view: metastore.ViewDefinition) -> None:
    """Raise when the session would analyse ``view``'s text under other SQL settings than Spark analyses the view."""
    why = None if view.configs is None else viewsettings.difference(spark, view.configs)
    if why is not None:
        raise NotSeenThrough(why)


def _end(table: exp.Table) -> int:
    """Where ``table``'s name ends in the text (exclusive)."""
    return table.this.meta["end"] + 1


def _spliced(text: str, edits: Sequence[tuple[int, int, str]]) -> str:
    pieces, position = [], 0
    for start, end, replacement in sorted(edits):
        pieces += [text[position:start], replacement]
        position = end
    return "".join([*pieces, text[position:]])
