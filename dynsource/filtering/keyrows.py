"""Typed key rows: filter fields and their Spark SQL types, rows cast to them, and small Arrow helpers."""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import types

if TYPE_CHECKING:
    from pybloom_live import BloomFilter

KINDS = ("exact", "bloom", "range")  # what a collector builds
PAYLOAD_KINDS = (*KINDS, "all")  # and a conjunction of them
Fields = tuple[tuple[str, str], ...]
Candidate = tuple[str, tuple[str, str]]  # a candidate column and the field it is compared with


CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


INTEGRAL = ("tinyint", "smallint", "int", "bigint")


# One shared NaN object: set membership checks identity first, so NaN finds NaN as in Spark's joins.
_NAN = float("nan")


def check_count(key_count: int) -> int:
    if isinstance(key_count, bool) or not isinstance(key_count, int) or key_count < 0:
        raise ValueError(f"key_count is a non-negative integer, not {key_count!r}.")
    return key_count


def column_bounds(column: pa.ChunkedArray) -> tuple[Any, Any]:
    """Spark's ``min`` and ``max`` of a column: nulls ignored, NaN the greatest float."""
    values = column.drop_null()
    has_nan = pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py()
    if has_nan:
        values = values.filter(pc.invert(pc.is_nan(values)))
    extremes = pc.min_max(values)
    lower, upper = extremes["min"].as_py(), extremes["max"].as_py()
    if has_nan:
        return (_NAN if lower is None else lower), _NAN
    return lower, upper


def check_bounds(bounds: pa.Table, key_count: int, null_safe: bool) -> None:
    lower, upper = row_tuples(bounds)
    for name, low, high in zip(bounds.column_names, lower, upper, strict=True):
        if (low is None) != (high is None):
            raise ValueError(f"Range bounds of field '{name}' must both be set or both be null, got {low!r}, {high!r}.")
        if low is not None and key_count == 0:
            raise ValueError(f"Range data of no keys has no bounds, but field '{name}' has [{low!r}, {high!r}].")
        if low is None and key_count and not null_safe:
            raise ValueError(f"Range bounds of field '{name}' are null, but {key_count} keys without nulls have some.")
        if low is not None and _order_key(low) > _order_key(high):
            raise ValueError(f"Range bounds of field '{name}' are reversed: {low!r} > {high!r}.")


def _order_key(value: Any) -> tuple[bool, Any]:
    # Spark orders NaN above every float.
    nan = isinstance(value, float) and math.isnan(value)
    return nan, (0.0 if nan else value)


def check_fields(fields: Sequence[tuple[str, str]]) -> Fields:
    checked, seen = [], set()
    for field in fields:
        if not isinstance(field, (tuple, list)) or len(field) != 2:
            raise ValueError(f"A filter field is a (name, type) pair, not {field!r}.")
        name, type_name = field
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"A filter field name must be a non-empty string, not {name!r}.")
        if not isinstance(type_name, str):
            raise ValueError(f"Filter field '{name}' needs a Spark SQL type name, not {type_name!r}.")
        if name.lower() in seen:
            raise ValueError(f"Filter field '{name}' is declared twice (names are case-insensitive).")
        seen.add(name.lower())
        checked.append((name, types.normalize_type(type_name)))
    if not checked:
        raise ValueError("A filter needs at least one field.")
    return tuple(checked)


def schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, types.arrow_type(type_name)) for name, type_name in fields])


def empty_table(fields: Sequence[tuple[str, str]]) -> pa.Table:
    return schema(fields).empty_table()


def row_values(row: Sequence[Any], fields: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    values = tuple(row) if isinstance(row, (tuple, list)) else (row,)
    if len(values) != len(fields):
        raise ValueError(
            f"row has {len(values)} values but the filter has {len(fields)} field(s): "
            f"{[name for name, _ in fields]}"
        )
    return values


def table_from_rows(fields: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]]) -> pa.Table:
    values = [row_values(row, fields) for row in rows]
    arrays = [
        column(name, type_name, [row[i] for row in values]) for i, (name, type_name) in enumerate(fields)
    ]
    return pa.Table.from_arrays(arrays, schema=schema(fields))


def column(name: str, type_name: str, values: list[Any]) -> pa.Array:
    arrow = types.arrow_type(type_name)
    try:
        array = pa.array(values, type=arrow)
    except CONVERSION_ERRORS as error:
        culprit = next((value for value in values if not _storable(value, arrow)), values)
        raise _unstorable(name, type_name, culprit, error) from error
    if type_name in INTEGRAL:
        # pyarrow truncates floats into integer columns; 1.5 is not a key of an int field.
        for value, stored in zip(values, array.to_pylist(), strict=True):
            if value != stored:
                raise _unstorable(name, type_name, value, "it is not an integer")
    return array


def _storable(value: Any, arrow: pa.DataType) -> bool:
    try:
        pa.scalar(value, type=arrow)
    except CONVERSION_ERRORS:
        return False
    return True


def _unstorable(name: str, type_name: str, value: Any, reason: object) -> ValueError:
    return ValueError(f"Filter field '{name}' of type {type_name} cannot hold the value {value!r}: {reason}")


def cast_table(fields: Sequence[tuple[str, str]], table: pa.Table) -> pa.Table:
    by_name: dict[str, list[str]] = {}
    for column in table.column_names:
        by_name.setdefault(column.lower(), []).append(column)
    arrays = []
    for name, type_name in fields:
        matches = by_name.get(name.lower(), [])
        if len(matches) != 1:
            problem = "is missing from" if not matches else f"matches several columns {matches} of"
            raise ValueError(f"Filter field '{name}' {problem} the table with columns {table.column_names}.")
        column = table.column(matches[0])
        try:
            arrays.append(column.cast(types.arrow_type(type_name), safe=True))
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise ValueError(
                f"Column '{matches[0]}' of type {column.type} cannot be cast to filter field '{name}' "
                f"of type {type_name}: {error}"
            ) from error
    return pa.Table.from_arrays(arrays, schema=schema(fields))


def normalize_floats(table: pa.Table) -> pa.Table:
    # Spark's joins treat -0.0 as 0.0 and all NaNs as one value; so do dedup, equality and matching.
    for index, field in enumerate(table.schema):
        if pa.types.is_floating(field.type):
            table = table.set_column(index, field, normalize_float(table.column(index)))
    return table


def normalize_float(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    zero_fixed = pc.if_else(pc.equal(values, 0), pa.scalar(0.0, values.type), values)
    return pc.if_else(pc.is_nan(values), pa.scalar(math.nan, values.type), zero_fixed)


def distinct(table: pa.Table) -> pa.Table:
    if table.num_columns == 0:
        return table  # grouping by no column would make one row out of none
    # use_threads=False keeps first-seen order, so the same rows always give the same bytes.
    return table.group_by(table.column_names, use_threads=False).aggregate([])


def canonical(value: Any) -> Any:
    return _NAN if isinstance(value, float) and math.isnan(value) else value


def row_tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [[canonical(value) for value in column.to_pylist()] for column in table.columns]
    return list(zip(*columns, strict=True))


def constant(value: bool, count: int) -> pa.BooleanArray:
    return pa.repeat(pa.scalar(value, pa.bool_()), count)


def plain(values: pa.ChunkedArray) -> pa.Array:
    array = values.combine_chunks()
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def field(fields: Fields, column: str) -> tuple[str, str]:
    """The field ``column`` names, ignoring case."""
    for candidate in fields:
        if candidate[0].lower() == column.lower():
            return candidate
    raise ValueError(f"Column '{column}' is not a filter field; the fields are {[name for name, _ in fields]}.")


def candidate_fields(fields: Fields, candidates: pa.Table) -> list[Candidate]:
    """Each candidate column with the field it names; a column naming no field, or one named twice, raises."""
    resolved, seen = [], set()
    for name in candidates.column_names:
        named = field(fields, name)
        if named[0] in seen:
            raise ValueError(f"Column '{name}' names filter field '{named[0]}' twice.")
        seen.add(named[0])
        resolved.append((name, named))
    return resolved


def summarised(table: pa.Table, null_safe: bool) -> pa.Table:
    """The distinct rows a Bloom filter or bounds summarise: with ``=``, rows holding a null match nothing."""
    return distinct(normalize_floats(table if null_safe else table.drop_null()))


class Keys(abc.ABC):
    """What one kind of payload holds and how it matches; :class:`DynamicFilteringData` delegates to it.

    Subclasses set the one attribute of their kind (``table``, ``bloom`` or
    ``limits``) and implement matching, overlap, identity and the wire body.
    """

    kind: ClassVar[str]
    table: pa.Table | None = None  # exact: the distinct rows
    bloom: BloomFilter | None = None  # bloom: the filter
    limits: pa.Table | None = None  # range: two rows, each field's least and greatest key

    def __init__(self, fields: Fields, key_count: int, null_safe: bool) -> None:
        self.fields = fields
        self.key_count = key_count
        self.null_safe = null_safe

    @classmethod
    @abc.abstractmethod
    def from_body(cls, fields: Fields, header: dict[str, Any], body: bytes) -> Keys:
        """The keys of a checked wire header and body."""

    @property
    @abc.abstractmethod
    def size_bytes(self) -> int:
        """The payload's size: the rows' or bounds' Arrow size, or the Bloom filter's bit array."""

    @abc.abstractmethod
    def mask(self, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
        """Which candidates some key may match on ``columns``; never false for one that matches."""

    def contains(self, row: pa.Table) -> bool:
        """Whether the one-row, field-typed table ``row`` may be a key."""
        return self.mask(row, candidate_fields(self.fields, row))[0].as_py()

    @abc.abstractmethod
    def overlaps(self, field: tuple[str, str], interval: pa.Array, source: str, target: str) -> bool:
        """Whether some key's ``field`` value may lie in ``interval`` (type ``source``, compared as ``target``)."""

    @abc.abstractmethod
    def identity(self) -> Any:
        """A value equal for equal payloads of this kind."""

    def header(self) -> dict[str, Any]:
        """Wire header entries only this kind has."""
        return {}

    @abc.abstractmethod
    def body(self) -> bytes:
        """The wire body."""
