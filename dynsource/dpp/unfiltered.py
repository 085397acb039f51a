"""Dimension sides that nothing filters: not collected, as Spark's dynamic partition pruning does not prune by them.

A star query often joins a dimension only to group by one of its columns (``date_dim`` joined to group by
``d_year``). Its keys are then every row's, and a fact rarely holds a partition whose key the dimension lacks:
collecting them costs a Spark job at every call, and the benefit check then drops the filter ("keeps 2404 of
2404 partitions ... not worth applying"). Spark's own dynamic partition pruning asks for a selective predicate on
the dimension side.

So a dimension side without a selective predicate in the query's text is looked at as Spark analyses it: where
its analysed plan reads its relations whole (only projections, aliases, views, hints and ``IS NOT NULL`` filters
over them: no other filter, no join, aggregate or limit, also none inside a view or a DataFrame's temporary
view), its keys are not collected, and the report says so. Any other plan is collected as before: where it is a
small relation (:mod:`dynsource.dpp.dimensions`) and judged by the benefit check.

The session setting ``spark.dynsource.unfilteredDimensions`` chooses: ``skip`` (the default) as above, or
``collect``, which collects such a side too where it is a small relation (a fact holding partitions its
dimension lacks: a calendar that ends before the fact does).

The plan is asked for at every query, as the dimension's tables or views may have changed since the last (a
temporary view replaced by one that filters): an analysis of milliseconds, no Spark job.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession

from dynsource.dpp import detection
from dynsource.dpp.facttables import FactTables
from dynsource.runtime import deployment, settings

UNFILTERED_CONF = "spark.dynsource.unfilteredDimensions"
UNFILTERED_MODES = ("skip", "collect")
REASON = ("not collected: nothing filters the dimension (it reads its tables whole), so its keys would keep about "
          "every fact partition, and Spark's dynamic partition pruning does not prune by it either "
          f"({UNFILTERED_CONF} = skip; collect collects a small one)")
# The analysed plan's nodes that pass every row of the relations under them on.
_WHOLE_NODES = frozenset({
    "Project", "SubqueryAlias", "View", "ResolvedHint", "WithCTE", "CTERelationDef", "CTERelationRef",
    # the relations read
    "Relation", "RelationV2", "HiveTableRelation", "LocalRelation", "LogicalRDD", "Range",
})
_NODE = re.compile(r"^[\s:|+\-]*([A-Za-z][A-Za-z0-9]*)")
_ANALYSED = "== Analyzed Logical Plan =="
_LIMIT_0 = re.compile(r"^[\s+\-]*(Global|Local)Limit 0$")
_IS_NOT_NULL = re.compile(r"isnotnull\([^()]*\)|NOT isnull\([^()]*\)")  # the second: sqlglot's IS NOT NULL


def collects_unfiltered(spark: SparkSession) -> bool:
    """Whether the session collects unfiltered dimension sides (``spark.dynsource.unfilteredDimensions`` is
    ``collect``); an unknown value is an error that names the setting and its values."""
    return settings.choice(spark, UNFILTERED_CONF, UNFILTERED_MODES) == "collect"


def not_collected(facts: FactTables, pruning: detection.Pruning, collect_unfiltered: bool = False) -> str | None:
    """:data:`REASON` where ``pruning``'s dimension side (as the plan's ``facts`` analyse it) reads its tables whole
    and the session does not ``collect_unfiltered``; None where its keys may be collected."""
    if collect_unfiltered or pruning.selective or pruning.filtered_by_subquery or pruning.pin is None:
        return None
    try:
        plan = analysed_plan(facts.dimension(pruning.pin.rows_sql))
    except Exception:  # the collection meets the same error and reports it
        return None
    return REASON if reads_whole(plan) else None


def analysed_plan(df: DataFrame) -> str:
    """Spark's analysed logical plan of ``df`` as its tree string: one request in a classic session and over
    Spark Connect alike.

    Over Spark Connect the server explains every plan of the request, the physical one included, which would
    plan a Python data source's or dynsource's scan (list a table): it explains ``df.limit(0)``, which the
    optimizer reads as empty, and the two limits are left out of the analysed plan returned."""
    if not deployment.is_connect(df.sparkSession):
        return str(df._jdf.queryExecution().analyzed().treeString())
    text = df.limit(0)._explain_string(extended=True)
    section = text.split(_ANALYSED, 1)[1].split("\n== ", 1)[0].strip("\n")
    lines = section.split("\n")[1:]  # its first line is the schema
    limits = [line for line in lines[:2] if _LIMIT_0.match(line)]
    return "\n".join(lines[len(limits):])


def reads_whole(plan: str) -> bool:
    """Whether the analysed ``plan`` (a tree string) passes every row of its relations on, but those of null
    keys: each node is one of :data:`_WHOLE_NODES`, or a filter of ``isnotnull`` conditions only (Spark's
    dynamic partition pruning counts none of them as selective)."""
    nodes = [match for match in map(_NODE.match, plan.splitlines()) if match]
    return bool(nodes) and all(
        node.group(1) in _WHOLE_NODES or (node.group(1) == "Filter" and _drops_nulls_only(node.string[node.end():]))
        for node in nodes)


def _drops_nulls_only(condition: str) -> bool:
    """Whether a filter's ``condition`` is a conjunction of ``isnotnull(column)`` (or ``NOT isnull(column)``)
    tests."""
    rest = _IS_NOT_NULL.sub("", condition)
    return rest != condition and not rest.replace(" AND ", "").strip(" ()")
