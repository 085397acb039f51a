"""Static partition pruning from WHERE: the filters Spark pushes (pyspark >= 4.1) as an enumerator level filter.

Spark hands ``DataSourceReader.pushFilters`` the conjuncts of a WHERE clause it
could translate (``p = 1`` arrives as ``IsNotNull(p)`` and ``EqualTo(p, 1)``).
Those on a partition column are evaluated on the typed values of each directory
level as it is listed, so nothing below a pruned directory is listed (like the
dynamic filter). A filter evaluated exactly on every partition is claimed: every
row of a kept partition satisfies it. Anything else goes back to Spark.

Filters on data columns cannot prune directories; :class:`RowGroupFilter` turns
them into a pyarrow expression that skips the Parquet row groups whose
statistics rule out every row, and Spark still evaluates them on what is read.

Filters are told apart by class name, so this module imports on pyspark 4.0,
which has no filter classes and never calls ``pushFilters``.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader

from dynsource import partitions, types

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# The worker that calls reader(), pushFilters and partitions() in one process (pyspark >= 4.1).
_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"

_COMPARISONS: dict[str, Callable[[pa.Array, pa.Scalar], pa.Array]] = {
    "EqualTo": pc.equal,
    "LessThan": pc.less,
    "LessThanOrEqual": pc.less_equal,
    "GreaterThan": pc.greater,
    "GreaterThanOrEqual": pc.greater_equal,
}
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
# Floats are left out (Spark orders NaN above everything and NaN = NaN, Arrow does not), and so are
# timestamps (the literal's time zone is not the partition value's).
_EXACT_TYPES = (*_INTEGRAL, "string", "date", "boolean")


def is_supported() -> bool:
    """Whether this pyspark pushes filters to Python data sources (4.1 and later)."""
    return hasattr(DataSourceReader, "pushFilters")


def enable(spark: SparkSession) -> None:
    """Turn on filter pushdown for Python data sources where pyspark has it (a no-op on 4.0)."""
    if is_supported():
        spark.conf.set(PUSHDOWN_CONF, "true")


def called_from_pushdown_worker() -> bool:
    """Whether the caller runs inside Spark's filter-pushdown planning worker.

    With the pushdown conf on, Spark plans in ``data_source_pushdown_filters``,
    which calls ``reader()``, then ``pushFilters``, then ``partitions()``. With it
    off, ``plan_data_source_read`` plans instead and fails with
    DATA_SOURCE_PUSHDOWN_DISABLED for any reader whose class overrides
    ``pushFilters`` (it compares ``reader.pushFilters.__func__`` with the base
    class's). Spark tells the source nothing else, so ``reader()`` looks for that
    worker's module on the call stack: only there is a reader with ``pushFilters``
    both called and allowed. Missing it is harmless: the pushdown worker then gets
    the base class's ``pushFilters``, which hands every filter back to Spark.
    """
    frame = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        # Without the worker daemon the module runs as __main__; its spec still names it.
        if _PUSHDOWN_WORKER in (frame.f_globals.get("__name__"), getattr(spec, "name", None)):
            return True
        frame = frame.f_back
    return False


class PartitionFilter:
    """The pushed filters that name partition columns, as a level filter for the enumerator.

    Parameters
    ----------
    filters : sequence of pyspark.sql.datasource.Filter
        What Spark pushed, in its order.
    column_types : mapping of str to str
        Spark SQL types of the read schema's columns (partition values are typed as ``read()`` types them).
    """

    def __init__(self, filters: Sequence[Any], column_types: Mapping[str, str]) -> None:
        self.filters = list(filters)
        self.column_types = dict(column_types)
        self._applied: set[int] = set()

    def keep(self, columns: tuple[str, ...], raw_rows: Sequence[tuple[str, ...]]) -> list[bool] | None:
        """Which directories of the newest level some row of may satisfy every filter on its column."""
        # Names match exactly, as the planner matches partition directories to read-schema columns: a column
        # differing in case is not filled from the directory, so its directory values must not prune it.
        column = columns[-1]
        on_column = [(i, f) for i, f in enumerate(self.filters) if _column(f) == column]
        type_name = self.column_types.get(column)
        if not on_column or not _is_exact(type_name):
            return None
        try:
            values = partitions.to_arrow([row[-1] for row in raw_rows], type_name)
        except ValueError:
            return None  # planning reports the unconvertible value; pruning must not hide it
        kept = pa.array([True] * len(raw_rows), pa.bool_())
        for index, pushed in on_column:
            satisfied = _evaluate(pushed, values, type_name)
            if satisfied is not None:
                kept = pc.and_kleene(kept, satisfied)
                self._applied.add(index)
        # An unknown answer (a null partition value compared) drops the rows in Spark's WHERE as well.
        return pc.fill_null(kept, False).to_pylist()

    def unapplied(self) -> list[Any]:
        """The filters Spark must still evaluate: those not applied to every partition of their column."""
        return [pushed for index, pushed in enumerate(self.filters) if index not in self._applied]

    def row_group_filter(self, partition_columns: Sequence[str]) -> RowGroupFilter | None:
        """The filters on data columns that Parquet statistics can decide, or None if there are none."""
        conjuncts = []
        for pushed in self.filters:
            column = _column(pushed)
            type_name = self.column_types.get(column)
            if column is None or column in partition_columns or not _is_exact(type_name):
                continue
            expression = _expression(pushed, pc.field(column), types.arrow_type(type_name), type_name)
            if expression is not None:
                conjuncts.append((column, type_name, expression))
        return RowGroupFilter(tuple(conjuncts)) if conjuncts else None


@dataclass(frozen=True)
class RowGroupFilter:
    """WHERE filters on data columns, kept to skip Parquet row groups no row of which can satisfy them all.

    Each conjunct is (column, its Spark SQL type, a pyarrow expression true
    wherever Spark's filter is true). pyarrow's row-group statistics (min, max,
    null count) decide which row groups may hold such a row; Spark evaluates the
    filters again on the rows read, so this only has to never skip a row group
    with a row Spark keeps. It travels pickled in every InputPartition.
    """

    conjuncts: tuple[tuple[str, str, pc.Expression], ...]

    def keep_row_groups(self, fragment: ds.ParquetFileFragment, row_groups: Sequence[int]) -> list[int]:
        """Those of ``row_groups`` of ``fragment`` whose statistics may hold a row satisfying every conjunct."""
        schema = fragment.physical_schema
        # Statistics order values as the file stores them: a column stored as another type than the read
        # schema's is converted by read(), so its statistics must not decide.
        usable = [
            expression for column, type_name, expression in self.conjuncts
            if column in schema.names and types.holds(schema.field(column).type, type_name)
        ]
        if not usable:
            return list(row_groups)
        try:
            subset = fragment.subset(filter=functools.reduce(operator.and_, usable))
        except (TypeError, ValueError, pa.ArrowException):
            return list(row_groups)
        matching = {row_group.id for row_group in subset.row_groups}
        return [index for index in row_groups if index in matching]


def _expression(pushed: Any, field: pc.Expression, arrow: pa.DataType, type_name: str) -> pc.Expression | None:
    """An expression true on every value for which Spark's answer to ``pushed`` is true, or None if unknown.

    It may also be true where Spark's answer is false or unknown (``NOT (x IN (1, NULL))``): the row groups
    kept for it are a superset, never a subset, of those Spark needs.
    """
    kind = type(pushed).__name__
    if kind == "Not":
        inner = _expression(pushed.child, field, arrow, type_name)
        return None if inner is None else ~inner
    if kind == "IsNull":
        return field.is_null()
    if kind == "IsNotNull":
        return field.is_valid()
    try:
        if kind == "In":
            present = [_literal(item, arrow, type_name) for item in pushed.value if item is not None]
            return pc.is_in(field, value_set=pa.array([item.as_py() for item in present], arrow)) if present else None
        if kind == "EqualNullSafe":
            if pushed.value is None:
                return field.is_null()
            # Never null, so that its negation is true on null values, as NOT (x <=> 1) is in Spark.
            return field.is_valid() & (field == _literal(pushed.value, arrow, type_name))
        if kind in _COMPARISONS and pushed.value is not None:
            return _COMPARISONS[kind](field, _literal(pushed.value, arrow, type_name))
    except (TypeError, ValueError, pa.ArrowException):
        return None
    return None


def _column(pushed: Any) -> str | None:
    while type(pushed).__name__ == "Not":
        pushed = pushed.child
    attribute = getattr(pushed, "attribute", ())
    return attribute[0] if len(attribute) == 1 else None  # a nested field is never a partition column


def _is_exact(type_name: str | None) -> bool:
    return type_name is not None and (type_name in _EXACT_TYPES or type_name.startswith("decimal"))


def _evaluate(pushed: Any, values: pa.Array, type_name: str) -> pa.Array | None:
    """Spark's three-valued answer of ``pushed`` for each value (null: unknown), or None if not exactly known."""
    kind = type(pushed).__name__
    if kind == "Not":
        inner = _evaluate(pushed.child, values, type_name)
        return None if inner is None else pc.invert(inner)
    if kind == "IsNull":
        return pc.is_null(values)
    if kind == "IsNotNull":
        return pc.is_valid(values)
    try:
        if kind == "In":
            return _is_in(values, pushed.value, type_name)
        if kind == "EqualNullSafe":
            if pushed.value is None:
                return pc.is_null(values)
            return pc.fill_null(pc.equal(values, _literal(pushed.value, values.type, type_name)), False)
        if kind in _COMPARISONS:
            if pushed.value is None:
                return pa.nulls(len(values), pa.bool_())
            return _COMPARISONS[kind](values, _literal(pushed.value, values.type, type_name))
    except (TypeError, ValueError, pa.ArrowException):
        return None
    return None  # string matching and any filter a later pyspark adds stay with Spark


def _is_in(values: pa.Array, items: Sequence[Any], type_name: str) -> pa.Array:
    present = [item for item in items if item is not None]
    value_set = pa.array([_literal(item, values.type, type_name).as_py() for item in present], values.type)
    matched = pc.is_in(values, value_set=value_set)
    # `null IN (...)` is unknown, and so is a miss when the list holds a null.
    unknown = pc.is_null(values)
    if len(present) < len(items):
        unknown = pc.or_(unknown, pc.invert(matched))
    return pc.if_else(unknown, pa.scalar(None, pa.bool_()), matched)


def _literal(value: Any, arrow: pa.DataType, type_name: str) -> pa.Scalar:
    """``value`` as a scalar of the column's type; a value of another kind is refused, not converted."""
    if not _same_kind(value, type_name):
        raise TypeError(f"literal {value!r} is not a {type_name} value")
    return pa.scalar(value, arrow)  # raises rather than losing digits or range


def _same_kind(value: Any, type_name: str) -> bool:
    # bool is an int and datetime a date in Python; neither is the other's kind in Spark.
    if type_name == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if type_name in _INTEGRAL:
        return isinstance(value, int)
    if type_name.startswith("decimal"):
        return isinstance(value, (int, Decimal))
    if type_name == "date":
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    return type_name == "string" and isinstance(value, str)
