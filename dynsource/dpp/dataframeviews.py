"""Temporary views made from DataFrames over a registered dynsource table, written as SQL text to be seen through.

``spark.table("store_sales").where(col("ss_quantity") > 0).select(...).createOrReplaceTempView("sales")`` stores
Spark's analysed plan, not text, so :mod:`dynsource.dpp.views` has no text to put in the view's place. Where that
plan projects and filters one registered table, :func:`definition` writes it as the SQL text that Spark analyses
to the same plan, and the view is seen through as a view of that text::

    SELECT `v` AS `v`, `date_key` AS `dk` FROM `spark_catalog`.`default`.`s` WHERE (`region` = 'east')

Only what the session analyses to the same meaning is written: column references, literals of the types below,
comparisons, ``AND``/``OR``/``NOT``, ``IN`` lists, ``IS [NOT] NULL``, casts that cannot fail or depend on a setting
(widening a number, a literal that fits, a typed ``NULL``), and ``+ - *`` of integers and floating point numbers
analysed under the session's ``spark.sql.ansi.enabled`` (read from the JVM's plan: Spark's JSON leaves it out). A
plan that computes anything else (a division, decimals, a function, a UDF), joins or aggregates is read as Spark
reads it, and the query's report names what stopped it.

The plan is the view's as Spark made it: its columns are the table's columns then, taken by name; when the table's
registered columns differ now (a table registered again under the name), the view is read as Spark reads it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError

from dynsource.runtime.lru import LruMap
from dynsource.spark import metastore

PLANS_KEPT = 256
_ALIAS = "`__dynsource_plan`"
# The tree string's leaf reading a catalog table by a data source V2 (Spark 4.0 writes the name twice, 4.1+ once).
_V2_LEAF = re.compile(r"^[+|: -]*(?:RelationV2|TableReference)\[.*\] (spark_catalog\.[^\s.`]+\.[^\s.`]+)(?: \1)?$",
                      re.MULTILINE)
# Nodes whose output is their child's: a name for it (df.alias, a table's name), a view read (whose analysed plan,
# below it, is written like the rest: what is written does not depend on the settings the view was made under).
_PASSED = frozenset({"SubqueryAlias", "View"})
_LEAVES = frozenset({"DataSourceV2Relation", "V2TableReference"})
_COMPARISONS = {"EqualTo": "=", "EqualNullSafe": "<=>", "LessThan": "<", "LessThanOrEqual": "<=",
                "GreaterThan": ">", "GreaterThanOrEqual": ">=", "And": "AND", "Or": "OR"}
# Arithmetic of numbers other than decimals (whose result type depends on a setting), as the session computes it
# now where the view computed it under the same spark.sql.ansi.enabled (Spark's JSON leaves out its evalMode).
_ARITHMETIC = {"Add": "+", "Subtract": "-", "Multiply": "*"}
_ANSI = {"ANSI": "true", "LEGACY": "false"}
_INTEGRAL = {"byte": (8, "TINYINT"), "short": (16, "SMALLINT"), "integer": (32, "INT"), "long": (64, "BIGINT")}
_OTHER_TYPES = {"double": "DOUBLE", "float": "FLOAT", "string": "STRING", "boolean": "BOOLEAN", "date": "DATE"}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_PLAIN_STRING = re.compile(r"[ -&(-\[\]-~]*")  # printable ASCII without a quote or a backslash


class NotWritable(ValueError):
    """Why a DataFrame view's plan cannot be written as SQL text."""


@dataclass(frozen=True)
class Written:
    """A DataFrame view's plan as SQL text: its output columns, the table it reads and that table's columns as the
    plan knows them (name and Spark's JSON type name); or why it cannot be written (``reason``)."""

    text: str = ""
    columns: tuple[str, ...] = ()
    table: tuple[str, ...] = ()
    fields: tuple[tuple[str, Any], ...] = ()
    reason: str = ""
    ansi: str | None = None  # the spark.sql.ansi.enabled its arithmetic was analysed under; None: it has none


@dataclass(frozen=True)
class _Tree:
    """One node of Spark's JSON of a plan or an expression, with its subtrees."""

    fields: dict[str, Any]
    children: tuple[_Tree, ...]

    @property
    def kind(self) -> str:
        return self.fields["class"].rsplit(".", 1)[-1]


@dataclass(frozen=True)
class _Column:
    key: tuple[Any, Any]  # Spark's expression id
    name: str
    data_type: Any  # Spark's JSON of the type: "integer", "decimal(7,2)", {"type": "struct", ...}


@dataclass(frozen=True)
class _Query:
    """One SELECT: its FROM clause, output columns and the leaf table's columns; a projection (``items``) and the
    conditions of its WHERE. Without items it selects its source's columns by name, so a filter or a projection
    above it joins this SELECT instead of wrapping it, as the text a user would write: a filter on a partition
    column stays next to the table, where :func:`dynsource.sql` turns it into a ``partitionFilter``."""

    source: str
    columns: list[_Column]
    fields: tuple[tuple[str, Any], ...]
    items: tuple[str, ...] | None = None
    conditions: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        items = self.items or [metastore.quoted(column.name) for column in self.columns]
        where = f" WHERE {' AND '.join(self.conditions)}" if self.conditions else ""
        return f"SELECT {', '.join(items)} FROM {self.source}{where}"


_written: LruMap[tuple[Any, Written | None]] = LruMap(PLANS_KEPT)


def definition(view: metastore.PlanView, registered: Callable[[str, str], Any | None],
               ansi: Callable[[], str]) -> metastore.ViewDefinition | None:
    """``view`` as a view of SQL text over a registered dynsource table; None when its plan reads none.

    ``registered(database, name)`` is the registered table's definition, or None; ``ansi()`` the session's
    ``spark.sql.ansi.enabled``. A plan that reads one but cannot be written gives a definition whose ``unseen``
    says why.
    """
    written = _plan_written(view)
    if written is None:
        return None
    if written.reason:
        return metastore.ViewDefinition("", ("spark_catalog", "default"), (), (), None, (), True,
                                        unseen=written.reason)
    table = registered(*written.table[1:])
    if table is None:
        return None
    now = {field.name.lower(): field.dataType.jsonValue() for field in table.schema.fields}
    changed = [name for name, data_type in written.fields if now.get(name.lower()) != data_type]
    unseen = (f"the columns {', '.join(changed)} of {'.'.join(written.table)} are not what they were when the view "
              "was made") if changed else ""
    if not unseen and written.ansi is not None and written.ansi != (now_ansi := ansi()):
        unseen = (f"its arithmetic was analysed with spark.sql.ansi.enabled={written.ansi} and the session has "
                  f"spark.sql.ansi.enabled={now_ansi}")
    return metastore.ViewDefinition(written.text, written.table[:2], written.columns, written.columns, None, (), True,
                                    unseen=unseen)


def _plan_written(view: metastore.PlanView) -> Written | None:
    """``view``'s plan written (None: it reads no catalog table by a data source V2), kept by its tree string and
    compared whole: a warm session's views are the same objects query after query."""
    tree = view.tree
    kept = _written.get(tree)
    if kept is not None and kept[0] is None:
        return kept[1]
    plan = view.plan.get()
    if kept is not None and _same(kept[0], plan):
        return kept[1]
    leaf = _V2_LEAF.search(tree)
    written = None
    if leaf is not None:
        try:
            _check_leaf(plan)
            nodes = json.loads(plan.toJSON())
            _read_eval_modes(plan, nodes)
            written = write(nodes, tuple(leaf[1].split(".")))
        except NotWritable as why:
            written = Written(reason=str(why))
    _written.put(tree, (plan if written is not None else None, written))
    return written


def _check_leaf(plan: Any) -> None:
    """Raise where ``plan`` reads more than one relation (before Spark's JSON of it, which would hold a local
    relation's rows), or reads its table with options (``spark.read.option(...).table(name)``): SQL text of the
    table's name reads without them, and Spark's JSON of a plan leaves them out."""
    leaves = plan.collectLeaves()
    if leaves.size() != 1:
        raise NotWritable(f"its plan reads {leaves.size()} relations (written as SQL are projections and filters of "
                          "one registered table)")
    leaf = leaves.apply(0)
    if leaf.getClass().getSimpleName() in _LEAVES and not leaf.options().isEmpty():
        keys = leaf.options().asCaseSensitiveMap().keySet().toString()  # not the values: one may be a secret
        raise NotWritable(f"it reads its table with options {keys}")


def _read_eval_modes(plan: Any, nodes: Sequence[dict[str, Any]]) -> None:
    """Give each arithmetic node of ``nodes`` (Spark's JSON of ``plan``) its ``evalMode``, read from the JVM's plan:
    the JSON lists a plan's nodes, and each expression's, in the order of a walk from the root."""
    if not any(_kind(expression) in _ARITHMETIC for node in nodes for expression in _expression_nodes(node)):
        return
    for node, jvm in zip(nodes, _walk(plan), strict=True):
        if _kind(node) == "Project":
            items = jvm.projectList()
            roots = [items.apply(i) for i in range(items.size())]
        elif _kind(node) == "Filter":
            roots = [jvm.condition()]
        else:
            continue
        walked = [expression for root in roots for expression in _walk(root)]
        for expression, jvm_expression in zip(_expression_nodes(node), walked, strict=True):
            if _kind(expression) in _ARITHMETIC:
                expression["evalMode"] = jvm_expression.evalMode().toString()


def _walk(node: Any) -> list[Any]:
    """The JVM tree ``node`` and its subtrees, root first, children in order."""
    children = node.children()
    return [node, *(walked for i in range(children.size()) for walked in _walk(children.apply(i)))]


def _expression_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON nodes of a Project's or a Filter's expressions, in order."""
    if _kind(node) == "Project":
        return [expression for item in node["projectList"] for expression in item]
    return list(node["condition"]) if _kind(node) == "Filter" else []


def _kind(node: dict[str, Any]) -> str:
    return node["class"].rsplit(".", 1)[-1]


def _same(kept: Any, plan: Any) -> bool:
    try:
        return bool(kept.equals(plan))
    except Py4JError:  # kept from a session whose JVM has stopped
        return False


def write(nodes: Sequence[dict[str, Any]], table: tuple[str, ...]) -> Written:
    """The plan whose Spark JSON is ``nodes``, over ``table`` (catalog, database, name), as SQL text."""
    query = _plan(_tree(nodes), table)
    modes = {expression.get("evalMode") for node in nodes for expression in _expression_nodes(node)
             if _kind(expression) in _ARITHMETIC}
    if len(modes) > 1:
        raise NotWritable(f"its arithmetic was analysed under several settings ({', '.join(sorted(map(str, modes)))})")
    return Written(query.text, tuple(column.name for column in query.columns), table, query.fields,
                   ansi=_ANSI[modes.pop()] if modes else None)


def _tree(nodes: Sequence[dict[str, Any]]) -> _Tree:
    """Spark's JSON of a tree (its nodes in pre-order, each with its number of children) as a tree."""

    def read(position: int) -> tuple[_Tree, int]:
        node, position = nodes[position], position + 1
        children = []
        for _ in range(node["num-children"]):
            child, position = read(position)
            children.append(child)
        return _Tree(node, tuple(children)), position

    return read(0)[0]


def _plan(node: _Tree, table: tuple[str, ...]) -> _Query:
    """``node`` as one SELECT."""
    if node.kind in _LEAVES:
        columns = [_column(_tree(attribute)) for attribute in node.fields["output"]]
        return _Query(metastore.quoted(*table), columns, tuple((column.name, column.data_type) for column in columns))
    if node.kind not in ("Project", "Filter", *_PASSED) or len(node.children) != 1:
        raise NotWritable(f"its plan holds a {node.kind} (written as SQL are projections and filters of one "
                          "registered table)")
    child = _plan(node.children[0], table)
    if node.kind in _PASSED:
        return child
    query = child if child.items is None else _Query(f"({child.text}) AS {_ALIAS}", child.columns, child.fields)
    scope = {column.key: column for column in query.columns}
    if node.kind == "Filter":
        condition = _expression(_tree(node.fields["condition"]), scope)
        return dataclasses.replace(query, conditions=(*query.conditions, condition))
    items, outputs = [], []
    for item in node.fields["projectList"]:
        expression = _tree(item)
        if expression.kind == "Alias":
            output = _Column(_key(expression), expression.fields["name"], "")
            items.append(f"{_expression(expression.children[0], scope)} AS {metastore.quoted(output.name)}")
        else:
            output = _reference(expression, scope)
            items.append(f"{metastore.quoted(scope[output.key].name)} AS {metastore.quoted(output.name)}")
        outputs.append(output)
    names = [column.name.lower() for column in outputs]
    if len(set(names)) < len(names):  # a name the text would refer to could not tell them apart
        raise NotWritable("two of its columns have the same name")
    return dataclasses.replace(query, columns=outputs, items=tuple(items))


def _expression(node: _Tree, scope: dict[tuple[Any, Any], _Column]) -> str:
    """``node`` as SQL text, its column references resolved in ``scope`` (the input's columns by expression id)."""
    kind, children = node.kind, node.children
    if kind == "AttributeReference":
        return metastore.quoted(scope[_reference(node, scope).key].name)
    if kind == "Literal":
        return _literal(node.fields["value"], node.fields["dataType"])
    if kind in _COMPARISONS:
        return f"({_expression(children[0], scope)} {_COMPARISONS[kind]} {_expression(children[1], scope)})"
    if kind in ("Not", "IsNull", "IsNotNull"):
        inner = _expression(children[0], scope)
        return {"Not": f"(NOT {inner})", "IsNull": f"({inner} IS NULL)", "IsNotNull": f"({inner} IS NOT NULL)"}[kind]
    if kind == "In":
        values = ", ".join(_expression(child, scope) for child in children[1:])
        return f"({_expression(children[0], scope)} IN ({values}))"
    if kind == "Cast":
        return _cast(node, scope)
    if kind in _ARITHMETIC:
        if node.fields.get("evalMode") not in _ANSI:
            raise NotWritable(f"it computes {kind} in {node.fields.get('evalMode')} mode")
        if _type(node) not in _INTEGRAL and _type(node) not in ("double", "float"):
            raise NotWritable(f"it computes {kind} of {_type(node)} values (written as SQL is arithmetic of integers "
                              "and floating point numbers)")
        return f"({_expression(children[0], scope)} {_ARITHMETIC[kind]} {_expression(children[1], scope)})"
    raise NotWritable(f"it computes {kind} (written as SQL are comparisons, AND, OR, NOT, IN, IS NULL, +, - and * "
                      "of columns and literals)")


def _cast(node: _Tree, scope: dict[tuple[Any, Any], _Column]) -> str:
    """A cast that gives the same value whatever the session's settings: a typed NULL, a number widened, a literal
    that fits its type."""
    child, target = node.children[0], node.fields["dataType"]
    if child.kind == "Literal" and child.fields["value"] is None:
        return f"CAST(NULL AS {_sql_type(target)})"
    if child.kind not in ("Literal", "AttributeReference", "Cast"):  # the kinds whose JSON gives their type
        raise NotWritable(f"it casts a {child.kind}")
    source = child.fields["dataType"]
    inner = _expression(child, scope)
    if source == target:
        return inner
    widened = (source in _INTEGRAL and (target in ("double", "float") or
                                        (target in _INTEGRAL and _INTEGRAL[target][0] > _INTEGRAL[source][0])))
    if widened or (source == "float" and target == "double"):
        return f"CAST({inner} AS {_sql_type(target)})"
    if child.kind == "Literal" and source in _INTEGRAL and target in _INTEGRAL:
        bits = _INTEGRAL[target][0]
        if -(2 ** (bits - 1)) <= int(child.fields["value"]) < 2 ** (bits - 1):
            return f"CAST({inner} AS {_sql_type(target)})"
    raise NotWritable(f"it casts {source} to {target} (written as SQL are casts that cannot fail: a number widened, "
                      "a literal that fits)")


def _type(node: _Tree) -> Any:
    """The type of ``node``: given by Spark's JSON of a column, a literal and a cast; an arithmetic's is its left
    operand's (Spark casts both operands to one type)."""
    if node.kind in _ARITHMETIC:
        return _type(node.children[0])
    if "dataType" not in node.fields:
        raise NotWritable(f"its arithmetic takes a {node.kind}")
    return node.fields["dataType"]


def _literal(value: str | None, data_type: str) -> str:
    sql_type = _sql_type(data_type)
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if data_type == "integer":
        return value
    if data_type == "boolean":
        return value.upper()
    if data_type == "date":
        return f"DATE '{value}'"
    if data_type == "string":
        if _PLAIN_STRING.fullmatch(value):
            return f"'{value}'"
        return f"CAST(X'{value.encode().hex().upper()}' AS STRING)"
    return f"CAST('{value}' AS {sql_type})"  # numbers: exact, NaN and Infinity included


def _sql_type(data_type: str) -> str:
    if data_type in _INTEGRAL:
        return _INTEGRAL[data_type][1]
    if data_type in _OTHER_TYPES:
        return _OTHER_TYPES[data_type]
    decimal = _DECIMAL.fullmatch(data_type)
    if decimal is None:
        raise NotWritable(f"it holds a value of type {data_type}")
    return f"DECIMAL({decimal[1]},{decimal[2]})"


def _column(node: _Tree) -> _Column:
    if node.kind != "AttributeReference":
        raise NotWritable(f"its table's output holds a {node.kind}")
    return _Column(_key(node), node.fields["name"], node.fields["dataType"])


def _reference(node: _Tree, scope: dict[tuple[Any, Any], _Column]) -> _Column:
    """The column ``node`` refers to, which must be one of its input's."""
    column = _column(node)
    if column.key not in scope:
        raise NotWritable(f"it refers to a column {column.name} its input does not have")
    return column


def _key(node: _Tree) -> tuple[Any, Any]:
    expression_id = node.fields["exprId"]
    return expression_id["id"], expression_id["jvmId"]
