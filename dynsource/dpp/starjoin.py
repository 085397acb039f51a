"""Star-join detection: which fact scans of a Spark SQL query a dimension's join keys can prune.

This is the planner half of FLIP-248 (Flink's ``DynamicPartitionPruningRule``,
Spark's ``PartitionPruning``): it finds, in a query parsed and qualified by
sqlglot's Spark dialect, each equi-join between a column of a dynsource table
(the *fact*) and a *dimension* side, and says which dimension query gives the
keys the fact scan may keep, and whether that side holds a selective predicate
(else the caller prunes with it only if it is a small relation). It runs nothing;
the caller collects the keys and rewires the scan.

A pairing is sound when every row of the query's result joins a fact row whose
key is among the dimension query's keys; then dropping the other fact rows
changes nothing. That holds for:

* an equality (``=``, or ``<=>`` when neither side can be null-extended) that is
  a top-level conjunct of ``WHERE``, or of the ``ON`` of an inner or left semi
  join, or of the ``ON`` of an outer join whose fact side is the null-supplying
  one (``dim LEFT JOIN fact``, ``fact RIGHT JOIN dim``);
* ``fact.k IN (SELECT ...)`` and ``(fact.a, fact.b) IN (SELECT ...)`` as a
  top-level conjunct of ``WHERE``.

The dimension query is the dimension source (a table, a subquery or a CTE, with
the statement's CTEs) filtered by every conjunct that names only that source,
projected to its key expressions. The fact key must be a plain column, or a
cast of an integral column to a wider integral type; the dimension key may be
any expression of the dimension's columns. Refused, with a reason: full outer
and anti joins, a fact side an outer join preserves, and anything else.
``IS NOT NULL`` alone is not a selective predicate.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from dynsource.dpp import sqltree
from dynsource.dpp.detection import Detection, FactScan, Pruning, Refusal, TableInfo
from dynsource.dpp.selectjoins import SelectJoins, Statement


def detect(query: str, tables: Mapping[str, TableInfo], database: str = "default",
           parsed: exp.Expression | None = None) -> Detection:
    """Find the fact scans of ``query`` that dimension keys can prune.

    Parameters
    ----------
    query : str
        One Spark SQL ``SELECT`` statement.
    tables : mapping of str to TableInfo
        Every table the query names, by lower-case qualified name (``db.t``).
    database : str, default "default"
        The database of the names the query does not qualify.
    parsed : sqlglot expression, optional
        ``query`` parsed, its table names already resolved (:mod:`dynsource.dpp.nameresolution`).

    Returns
    -------
    Detection
        Never raises for a query it cannot handle: it refuses, saying why.
    """
    try:
        tokens = sqltree.tokens(query)
        parsed = parsed or sqlglot.parse_one(query, read="spark")
        aliased = {sqltree.start(table) for table in parsed.find_all(exp.Table) if table.alias}
        schema: dict[str, dict[str, dict[str, str]]] = {}
        for name, info in tables.items():
            db, _, table = name.rpartition(".")
            schema.setdefault(db or database, {})[table] = dict(info.columns)
        qualified = qualify(parsed, schema=schema, db=database, dialect="spark", quote_identifiers=False)
    except SqlglotError as error:
        return Detection((), (Refusal(None, f"the query could not be analysed: {sqltree.error_text(error)}"),))
    if not isinstance(qualified, exp.Query):
        return Detection((), (Refusal(None, "only queries are analysed"),))
    # qualify() has expanded each * whose sources' schemas it knows into their columns.
    star = any(not isinstance(star.parent, exp.Count) for star in qualified.find_all(exp.Star))
    statement = Statement(tables, qualified.args.get("with_"), aliased, qualified, star, tokens)
    prunings: list[Pruning] = []
    refusals: list[Refusal] = []
    scans: list[FactScan] = []
    for scope in traverse_scope(qualified):
        if isinstance(scope.expression, exp.Select):
            scans += SelectJoins(scope, statement, prunings, refusals).detect()
    return Detection(tuple(_distinct(prunings)), tuple(refusals), tuple(scans))


def _distinct(prunings: list[Pruning]) -> list[Pruning]:
    seen, kept = set(), []
    for pruning in prunings:
        key = (pruning.fact, pruning.fact_columns, pruning.dimension_sql)
        if key not in seen:
            seen.add(key)
            kept.append(pruning)
    return kept
