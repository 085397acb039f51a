"""Reading sqlglot trees of Spark SQL: conjuncts, the one source an expression names, selectivity, names.

Helpers of :mod:`dynsource.dpp.starjoin`, on trees qualified by sqlglot's ``qualify``
(every column names its source).
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.scope import Scope
from sqlglot.tokens import Token

# The database the analysis gives the session's temporary views, which have none; never written out.
TEMPORARY = "__temporary__"
# Where a table's name starts in the text, kept when resolution renames it (its written catalog may go).
_WRITTEN_START = "written_start"


@functools.lru_cache(maxsize=64)
def tokens(text: str) -> tuple[Token, ...]:
    """``text``'s Spark SQL tokens, to be read, never changed: a warm session sends the same texts again, and each
    is scanned for ``WITH (...)`` options, then for placeholders once rewritten (0.2-1.5 ms a TPC-DS text)."""
    return tuple(Dialect.get_or_raise("spark").tokenize(text))


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """The terms of ``node``'s ANDs, parentheses around them and around ANDs inside them removed:
    ``WHERE (a = 1 AND (b = 2 AND c = 3))`` gives three, as generated SQL often writes them."""
    if node is None:
        return []
    node = (node.this if isinstance(node, exp.Where) else node).unnest()
    if isinstance(node, exp.And):
        return [term for side in (node.left, node.right) for term in conjuncts(side)]
    return [node]


def only_source(node: exp.Expression) -> str | None:
    """The one source alias all of ``node``'s columns name, or None (also when it holds a subquery)."""
    if node.find(exp.Query) is not None:
        return None
    tables = {column.table for column in node.find_all(exp.Column)}
    return next(iter(tables)) if len(tables) == 1 and "" not in tables else None


def selective_predicate(predicate: exp.Expression) -> bool:
    """A predicate that drops rows other than those with nulls (``IS NOT NULL`` alone does not)."""
    if isinstance(predicate, exp.Not) and isinstance(predicate.this, exp.Is):
        return False
    return not (isinstance(predicate, exp.Is) and isinstance(predicate.expression, exp.Null))


def filters_by_subquery(predicate: exp.Expression, source: str, scope: Scope) -> bool:
    """Whether ``predicate`` filters ``source`` alone by an uncorrelated subquery (``d.m = (SELECT ...)``,
    ``d.k IN (SELECT ...)``): the predicate :func:`only_source` leaves out of a dimension's own ones."""
    subqueries = list(predicate.find_all(exp.Query))
    if not subqueries or any(correlated(subquery, scope) for subquery in subqueries):
        return False
    inside = {id(column) for subquery in subqueries for column in subquery.find_all(exp.Column)}
    return {column.table for column in predicate.find_all(exp.Column) if id(column) not in inside} == {source}


def selective(query: exp.Expression) -> bool:
    """Whether a derived dimension filters, aggregates or limits anywhere inside."""
    for select in query.find_all(exp.Select):
        if any(selective_predicate(c) for c in conjuncts(select.args.get("where"))):
            return True
        if select.args.get("group") or select.args.get("limit") or select.args.get("having"):
            return True
    return False


def correlated(subquery: exp.Expression, outer: Scope) -> bool:
    inner_sources = {table.alias_or_name for table in subquery.find_all(exp.Table)}
    return any(column.table and column.table not in inner_sources and column.table in outer.sources
               for column in subquery.find_all(exp.Column))


def as_written(query: exp.Expression) -> exp.Expression:
    """``query`` with the database and catalog qualify() added to table names taken out again.

    Spark resolves an unqualified name to a temporary view first; ``default.name`` never does.
    """
    for table in query.find_all(exp.Table):
        for part in ("db", "catalog"):
            identifier = table.args.get(part)
            if identifier is not None and "start" not in identifier.meta:
                table.set(part, None)
    return query


def is_query(statement: exp.Expression) -> bool:
    """Whether parsed ``statement`` is a query, which ``spark.sql`` analyses and runs nothing of (not an INSERT,
    a CACHE TABLE, an EXPLAIN, ...)."""
    return isinstance(statement, exp.Query)


def error_text(error: Exception) -> str:
    """A sqlglot error as plain text: its first problem and where (its own message underlines with terminal codes)."""
    problems = getattr(error, "errors", None)
    if not problems:
        return str(error)
    first = problems[0]
    return (f"{first['description']} at line {first['line']}, column {first['col']} "
            f"(near {first['start_context'] + first['highlight']!r})")


def table_name(table: exp.Table) -> str:
    return ".".join(part.name.lower() for part in table.parts)


def shown_name(table: exp.Table) -> str:
    """The name reports give a table: a temporary view's without the database the analysis gave it."""
    name = table_name(table)
    return name.removeprefix(TEMPORARY + ".")


def resolve_as(table: exp.Table, database: str) -> None:
    """Name ``table`` as ``database.name``, remembering where the name starts in the text as written."""
    table.meta[_WRITTEN_START] = start(table)
    if table.args.get("catalog") is not None:
        table.set("catalog", None)
    written = table.args.get("db")
    if written is None or written.name.lower() != database:
        table.set("db", exp.to_identifier(database))


def start(table: exp.Table) -> int:
    if _WRITTEN_START in table.meta:
        return table.meta[_WRITTEN_START]
    # Parts qualify() added (the database) have no position in the text.
    return min(part.meta["start"] for part in table.parts if "start" in part.meta)


def correlation(predicate: exp.Expression, inner: str | None,
                facts: Collection[str]) -> tuple[str, str, exp.Expression] | None:
    """(fact alias, fact column, inner key) of ``inner.key = fact.column``, or None for any other predicate."""
    if not isinstance(predicate, exp.EQ):
        return None
    for fact_side, inner_side in ((predicate.this, predicate.expression), (predicate.expression, predicate.this)):
        if (isinstance(fact_side, exp.Column) and fact_side.table in facts and inner is not None
                and only_source(inner_side) == inner):
            return fact_side.table, fact_side.name, inner_side
    return None
