"""The ``partitionFilter`` reader option: a SQL predicate on partition columns, applied while listing.

Spark gives a Python data source no safe way to prune by a query's WHERE: the
read planned while it pushes filters is kept on the relation and reused by a
later query of the same DataFrame, view or table that pushes none (see the
docs/spark-known-issues.md). An option cannot go stale that way: it belongs
to the DataFrame (or table reference) itself, so every query of it reads the
same partitions.

The predicate is parsed with sqlglot's Spark dialect into a small tree of
:class:`Predicate` nodes; each top-level conjunct is evaluated, with Spark's
three-valued logic, on the typed values of a directory level as soon as its
columns are known, so nothing below a pruned directory is listed. A partition is
read only when the whole predicate is true for it, so the scan returns exactly
``spark.read.parquet(path).where(predicate)``.

Supported: comparisons (``=``, ``<>``, ``!=``, ``<``, ``<=``, ``>``, ``>=``,
``<=>``) of a column with a literal, ``[NOT] IN``, ``[NOT] BETWEEN``,
``IS [NOT] NULL``, ``NOT``, ``AND``, ``OR`` and parentheses, on partition columns
of integral, decimal, string, date, timestamp, timestamp_ntz and boolean type.
Anything else is an error naming the option, never a silent full read.

A string or ``TIMESTAMP`` literal compared with a timestamp column is a
wall-clock time in the session's time zone, as Spark casts it: the filter is
evaluated :meth:`PartitionFilter.under` the scan's :class:`PartitionSettings`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from dynsource import directorynames, partitions, types
from dynsource.layout.levels import Level, LevelFilter

OPTION = "partitionFilter"
_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.NullSafeEQ: "<=>",
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
_EXACT_TYPES = ("string", "date", "timestamp", "timestamp_ntz", "boolean")
SUPPORTED_TYPES = "integral, decimal, string, date, timestamp, timestamp_ntz or boolean"
# sqlglot's names of the typed literals partitionFilter takes (``DATE '...'``, ``TIMESTAMP '...'``...).
_TYPED_LITERALS = {"date": "date", "timestamptz": "timestamp", "timestampltz": "timestamp_ltz",
                   "timestampntz": "timestamp_ntz"}
_KERNELS: dict[str, Callable[[Any, Any], Any]] = {
    "=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Literal:
    """A literal as written: ``kind`` is "number", "string", "date", "timestamp" (whose type follows
    ``spark.sql.timestampType``), "timestamp_ltz", "timestamp_ntz", "boolean" or "null"."""

    kind: str
    value: Any


@dataclass(frozen=True)
class Compare:
    column: str
    op: str
    literal: Literal


@dataclass(frozen=True)
class InList:
    column: str
    literals: tuple[Literal, ...]


@dataclass(frozen=True)
class IsNull:
    column: str


@dataclass(frozen=True)
class Not:
    child: Predicate


@dataclass(frozen=True)
class And:
    children: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Predicate, ...]


Predicate = Compare | InList | IsNull | Not | And | Or


@dataclass(frozen=True)
class PartitionFilter:
    """A parsed ``partitionFilter``: its text, its top-level conjuncts and the settings that type its literals."""

    text: str
    conjuncts: tuple[Predicate, ...]
    settings: partitions.PartitionSettings = field(default=partitions.DEFAULT_SETTINGS, compare=False)

    @classmethod
    def parse(cls, text: str) -> PartitionFilter:
        """Parse ``text``; a syntax error or an unsupported construct raises ``ValueError`` naming the option."""
        try:
            tree = sqlglot.parse_one(text, read="spark", into=exp.Condition)
        except sqlglot.errors.SqlglotError as error:
            raise _error(text, f"it is not a SQL predicate ({str(error).splitlines()[0]})") from None
        predicate = _translate(tree, text)
        conjuncts = predicate.children if isinstance(predicate, And) else (predicate,)
        return cls(text, conjuncts)

    def under(self, settings: partitions.PartitionSettings) -> PartitionFilter:
        """This filter with its literals typed under ``settings`` (the session time zone types timestamps)."""
        return replace(self, settings=settings)

    def columns(self) -> set[str]:
        """The columns the predicate names, lower-cased (Spark resolves names ignoring case)."""
        return {column.lower() for conjunct in self.conjuncts for column in _columns(conjunct)}

    def check_types(self, column_types: Mapping[str, str]) -> None:
        """Every column named must be in the read schema, of a type evaluated exactly, with literals of that type."""
        known = {name.lower(): type_name for name, type_name in column_types.items()}
        for column in sorted(self.columns()):
            if column not in known:
                raise _error(self.text, f"column '{column}' is not a column of the table: {sorted(column_types)}")
            if not _supported(known[column]):
                raise _error(self.text, f"column '{column}' is of type {known[column]}; expected a partition column "
                                        f"of {SUPPORTED_TYPES} type")
        for column, literal in _literals(self.conjuncts):
            try:
                _scalar(literal, known[column.lower()], self.settings)
            except partitions.ZoneUnknownError:
                raise partitions.zone_unknown(column) from None
            except ValueError as error:
                raise _error(self.text, f"column '{column}': {error}") from None

    def level_filter(self) -> LevelFilter:
        """An enumerator level filter: keeps the directories of a level for which every decidable conjunct holds.

        A conjunct is decided at the level where its last column appears; deeper
        levels inherit the answer, since their parent directories were pruned.
        The walk must type its values (see ``PartitionTyping``).
        """

        def keep(level: Level) -> list[bool] | None:
            named = {column.lower() for column in level.columns}
            newest = level.columns[-1].lower()
            due = [c for c in self.conjuncts if newest in _lower(_columns(c)) and _lower(_columns(c)) <= named]
            return _holds(due, level, self.settings) if due else None  # planning reports a kept value that fails typing

        return keep

    def holds(self, level: Level) -> list[bool] | None:
        """Whether the whole predicate is true for each candidate of ``level``, whose columns include every one
        it names; None when a value has no image in its column's type."""
        return _holds(self.conjuncts, level, self.settings)

    def check_listing(self, partition_columns: Sequence[str], listed_leaves: bool) -> None:
        """Once listed: every column named must have been a partition column (when leaves were reached)."""
        missing = sorted(self.columns() - _lower(partition_columns))
        if missing and listed_leaves:
            raise _error(self.text, f"column(s) {missing} are not partition columns; the partition columns are "
                                    f"{list(partition_columns)}")


def _holds(conjuncts: Sequence[Predicate], level: Level, settings: partitions.PartitionSettings) -> list[bool] | None:
    known = {column.lower(): column for column in level.columns}
    values, types_by_name = {}, {}
    for name in set().union(*(_lower(_columns(c)) for c in conjuncts)):
        types_by_name[name], values[name], failed = level.typed(known[name])
        if pc.any(failed).as_py():
            return None
    answers = [_evaluate(conjunct, values, types_by_name, settings) for conjunct in conjuncts]
    return pc.fill_null(functools.reduce(pc.and_kleene, answers), False).to_pylist()


def _error(text: str, reason: str) -> ValueError:
    return ValueError(f"Option '{OPTION}' = {text!r} cannot be applied: {reason}.")


def _lower(columns) -> set[str]:
    return {column.lower() for column in columns}


def _supported(type_name: str) -> bool:
    return type_name in (*types.INTEGRAL, *_EXACT_TYPES) or type_name.startswith("decimal")


def _columns(predicate: Predicate) -> set[str]:
    if isinstance(predicate, (Compare, InList, IsNull)):
        return {predicate.column}
    if isinstance(predicate, Not):
        return _columns(predicate.child)
    return set().union(*(_columns(child) for child in predicate.children))


def _literals(predicates: Sequence[Predicate]) -> list[tuple[str, Literal]]:
    found = []
    for predicate in predicates:
        if isinstance(predicate, Compare):
            found.append((predicate.column, predicate.literal))
        elif isinstance(predicate, InList):
            found.extend((predicate.column, literal) for literal in predicate.literals)
        elif isinstance(predicate, Not):
            found.extend(_literals([predicate.child]))
        elif isinstance(predicate, (And, Or)):
            found.extend(_literals(predicate.children))
    return found


def _translate(node: exp.Expression, text: str) -> Predicate:
    """sqlglot's tree -> :class:`Predicate`; anything outside the supported subset is an error."""
    if isinstance(node, exp.Paren):
        return _translate(node.this, text)
    if isinstance(node, exp.And):
        return And(tuple(_flatten(node, exp.And, text)))
    if isinstance(node, exp.Or):
        return Or(tuple(_flatten(node, exp.Or, text)))
    if isinstance(node, exp.Not):
        return Not(_translate(node.this, text))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return IsNull(_column(node.this, text))
    if isinstance(node, exp.In) and not node.args.get("query"):
        return InList(_column(node.this, text), tuple(_literal(item, text) for item in node.expressions))
    if isinstance(node, exp.Between):
        column = node.this
        return And((_compare(column, ">=", node.args["low"], text), _compare(column, "<=", node.args["high"], text)))
    if type(node) in _COMPARISONS:
        op = _COMPARISONS[type(node)]
        if isinstance(node.this, exp.Column):
            return _compare(node.this, op, node.expression, text)
        return _compare(node.expression, _FLIPPED[op], node.this, text)
    raise _error(text, f"'{node.sql('spark')}' is not supported; expected comparisons, [NOT] IN, [NOT] BETWEEN, "
                       "IS [NOT] NULL of partition columns with literals, combined with AND, OR and NOT")


def _flatten(node: exp.Expression, kind: type[exp.Expression], text: str) -> list[Predicate]:
    if isinstance(node, kind):
        return _flatten(node.this, kind, text) + _flatten(node.expression, kind, text)
    return [_translate(node, text)]


def _compare(column: exp.Expression, op: str, literal: exp.Expression, text: str) -> Compare:
    return Compare(_column(column, text), op, _literal(literal, text))


def _column(node: exp.Expression, text: str) -> str:
    if not isinstance(node, exp.Column) or node.table:
        raise _error(text, f"'{node.sql('spark')}' is not a column name")
    return node.name


def _literal(node: exp.Expression, text: str) -> Literal:
    if isinstance(node, exp.Null):
        return Literal("null", None)
    if isinstance(node, exp.Boolean):
        return Literal("boolean", node.this)
    if isinstance(node, exp.Literal):
        return Literal("string", node.this) if node.is_string else Literal("number", _number(node.this, text))
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return Literal("number", -_number(node.this.this, text))
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        kind = _TYPED_LITERALS.get(node.to.this.value.lower())
        if kind is not None:
            return Literal(kind, node.this.this)
    raise _error(text, f"'{node.sql('spark')}' is not a literal")


def _number(digits: str, text: str) -> Decimal:
    try:
        return Decimal(digits)
    except InvalidOperation:
        raise _error(text, f"'{digits}' is not a number") from None


def _evaluate(predicate: Predicate, values: Mapping[str, pa.Array], column_types: Mapping[str, str],
              settings: partitions.PartitionSettings) -> pa.Array:
    """Spark's three-valued answer (true, false or null: unknown) for each directory."""
    if isinstance(predicate, (And, Or)):
        kernel = pc.and_kleene if isinstance(predicate, And) else pc.or_kleene
        return functools.reduce(kernel, [_evaluate(c, values, column_types, settings) for c in predicate.children])
    if isinstance(predicate, Not):
        return pc.invert(_evaluate(predicate.child, values, column_types, settings))
    column = values[predicate.column.lower()]
    type_name = column_types[predicate.column.lower()]
    if isinstance(predicate, IsNull):
        return pc.is_null(column)
    if isinstance(predicate, InList):
        return _is_in(column, [_scalar(literal, type_name, settings) for literal in predicate.literals])
    value = _scalar(predicate.literal, type_name, settings)
    if predicate.op == "<=>":
        return pc.is_null(column) if not value.is_valid else pc.fill_null(pc.equal(*_common(column, value)), False)
    return _KERNELS[predicate.op](*_common(column, value))


def _is_in(column: pa.Array, scalars: list[pa.Scalar]) -> pa.Array:
    present = [scalar for scalar in scalars if scalar.is_valid]
    matched = functools.reduce(pc.or_kleene, [pc.equal(*_common(column, s)) for s in present],
                               pa.repeat(pa.scalar(False), len(column)))
    if len(present) < len(scalars):  # `x IN (.., NULL)` is unknown where no listed value matched
        matched = pc.if_else(pc.fill_null(matched, False), True, pa.scalar(None, pa.bool_()))
    return matched


def _common(column: pa.Array, value: pa.Scalar) -> tuple[pa.Array, pa.Scalar]:
    """Decimals of different scales compare exactly at the larger scale."""
    if pa.types.is_decimal(column.type) and pa.types.is_decimal(value.type) and column.type != value.type:
        scale = max(column.type.scale, value.type.scale)
        wide = pa.decimal128(38, scale)
        return column.cast(wide), value.cast(wide)
    return column, value


def _scalar(literal: Literal, type_name: str, settings: partitions.PartitionSettings) -> pa.Scalar:
    """``literal`` as a value of the column's type, as Spark coerces it; a literal of another kind is an error."""
    arrow = types.arrow_type(type_name)
    if literal.kind == "null":
        return pa.scalar(None, arrow)
    if literal.kind == "string" and type_name == "string":
        return pa.scalar(literal.value, arrow)
    # Spark casts a string literal to the column's type, as it types partition directory names. (A string
    # column compared with a DATE literal is cast to date instead: refused rather than emulated.)
    if literal.kind == "string" or _literal_type(literal, settings) == type_name:
        try:
            escaped = directorynames.escape_path_name(literal.value)
            return partitions.to_arrow([escaped], type_name, time_zone=settings.time_zone)[0]
        except partitions.ZoneUnknownError:
            raise
        except (ValueError, pa.ArrowException):
            raise ValueError(f"literal '{literal.value}' cannot be converted to {type_name}") from None
    if literal.kind == "boolean" and type_name == "boolean":
        return pa.scalar(literal.value, arrow)
    if literal.kind == "number" and type_name in types.INTEGRAL and literal.value == literal.value.to_integral_value():
        return pa.scalar(int(literal.value), pa.int64())
    if literal.kind == "number" and type_name.startswith("decimal"):
        exponent = literal.value.as_tuple().exponent
        return pa.scalar(literal.value, pa.decimal128(38, max(0, -exponent) if isinstance(exponent, int) else 0))
    raise ValueError(f"literal {literal.value!r} is not a {type_name} value")


def _literal_type(literal: Literal, settings: partitions.PartitionSettings) -> str:
    """The Spark type of a typed literal (``TIMESTAMP '...'`` is of the session's ``spark.sql.timestampType``)."""
    if literal.kind == "timestamp":
        return settings.timestamp_type()
    return "timestamp" if literal.kind == "timestamp_ltz" else literal.kind
