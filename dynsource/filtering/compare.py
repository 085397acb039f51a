"""Comparing keys with candidate values the way Spark compares the join columns (its comparison type).

Each side is converted to the type Spark would compare them in; a value that cannot be
converted is reported as failed, and callers keep such candidates.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dynsource import partitions, types
from dynsource.filtering import keyrows

# Extreme dates have no microsecond timestamp (int64 microseconds span about +-106751991 days).
_TIMESTAMP_DAYS = 106_751_991


def to_field_type(values: pa.Array, field_type: str, target: str) -> tuple[pa.Array, pa.Array] | None:
    """Candidates as field values, with where one has none (kept); ``None`` when a Bloom filter cannot judge."""
    source = types.type_name(values.type)
    if source == field_type:
        return comparable(values, source, source, False)
    lossy = target == "double" and (field_type == "bigint" or field_type.startswith("decimal"))
    # A string field's keys are cast to the candidate's type by Spark, a bigint or decimal meets a double as
    # a double, a timestamp meets a date in the session's zone: many keys may equal one candidate.
    if field_type == "string" or lossy or depends_on_time_zone(source, field_type, target):
        return None
    try:
        converted, failed = comparable(values, source, target, False)
        if target == field_type:
            return converted, failed
        # Only the comparison-type values that some field value maps to can equal a key.
        narrowed = pc.cast(converted, types.arrow_type(field_type), safe=False)
        exact = pc.fill_null(pc.equal(pc.cast(narrowed, converted.type), converted), False)
    except keyrows.CONVERSION_ERRORS:
        return None
    failed = pc.or_(failed, pc.and_(pc.is_valid(converted), pc.invert(exact)))
    return pc.if_else(exact, narrowed, pa.scalar(None, narrowed.type)), failed


def interval(low: Any, high: Any, value_type: pa.DataType) -> pa.Array:
    """``[low, high]`` as a two-value array (a scalar's own type wins); null for an unknown bound."""
    scalars = [bound for bound in (low, high) if isinstance(bound, pa.Scalar)]
    arrow = scalars[0].type if scalars else value_type
    values = [bound.as_py() if isinstance(bound, pa.Scalar) else bound for bound in (low, high)]
    return pa.array(values, arrow)


def comparable_interval(
    bounds: pa.Array, source: str, target: str, by_day: bool
) -> tuple[pa.Scalar, pa.Scalar] | None:
    """Two non-null bounds in the comparison type (day numbers when compared by day); None if not there."""
    converted, failed = comparable(bounds, source, target, by_day)
    if pc.any(failed).as_py() or has_nan(converted):
        return None
    return converted[0], converted[1]


def with_slack(interval: tuple[pa.Scalar, pa.Scalar], by_day: bool) -> tuple[pa.Scalar, pa.Scalar]:
    # As in with_day_slack: a day number stands for its neighbours too.
    low, high = interval
    return (pc.subtract(low, 1), pc.add(high, 1)) if by_day else interval


def within(values: pa.Array, interval: tuple[pa.Scalar, pa.Scalar]) -> pa.BooleanArray:
    low, high = interval
    return pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))


def has_nan(values: pa.Array) -> bool:
    return pa.types.is_floating(values.type) and bool(pc.any(pc.is_nan(values)).as_py())


class _Compared(NamedTuple):
    """One candidate column and its field's keys, both in the comparison domain."""

    values: pa.Array
    failed: pa.BooleanArray  # candidate values that could not be converted: always kept
    keys: pa.Array
    keys_failed: pa.BooleanArray  # keys that could not be converted: they match nothing
    by_day: bool  # compared as day numbers, see depends_on_time_zone
    prunes: bool  # false when a key string failed to parse: Spark's CAST might still read it


def comparison_target(column: str, arrow: pa.DataType, field: tuple[str, str]) -> str:
    """The Spark SQL type a ``column`` of Arrow type ``arrow`` and ``field`` are compared in."""
    name, field_type = field
    source = types.type_name(arrow.value_type if pa.types.is_dictionary(arrow) else arrow)
    target = types.comparison_type(source, field_type)
    if target is None:
        raise TypeError(
            f"Column '{column}' of type {source} cannot be compared with filter field '{name}' "
            f"of type {field_type}."
        )
    return target


def targets(candidates: pa.Table, columns: list[tuple[str, tuple[str, str]]]) -> list[str]:
    """:func:`comparison_target` of each candidate column and its field."""
    return [comparison_target(column, candidates.column(column).type, field) for column, field in columns]


def compare(resolved: tuple[str, tuple[str, str]], candidates: pa.Table, keys: pa.Table) -> _Compared:
    column, (name, field_type) = resolved
    values = keyrows.plain(candidates.column(column))
    source = types.type_name(values.type)
    target = comparison_target(column, values.type, (name, field_type))
    by_day = depends_on_time_zone(source, field_type, target)
    converted, failed = comparable(values, source, target, by_day)
    key_values, keys_failed = comparable(keyrows.plain(keys.column(name)), field_type, target, by_day)
    prunes = field_type == source or field_type != "string" or not pc.any(keys_failed).as_py()
    return _Compared(converted, failed, key_values, keys_failed, by_day, prunes)


def depends_on_time_zone(source: str, field_type: str, target: str) -> bool:
    # Spark turns a date or a local time into an instant with the session time zone, which a
    # filter does not know: such comparisons are made on days, allowing for any offset.
    return target == "timestamp" and source != field_type


def comparable(values: pa.Array, source: str, target: str, by_day: bool) -> tuple[pa.Array, pa.Array]:
    """``values`` in the comparison domain, and where a non-null value has no image there."""
    # Same Spark type, maybe another Arrow layout (a zone other than UTC, nanoseconds, large_string).
    values = values.cast(types.arrow_type(source), safe=False)
    if by_day:
        converted = _days(values, source)
    elif source == target:
        converted = values
    elif source == "string":
        converted = _parse(values, target)
    elif target in ("float", "double"):
        converted = _to_floating(values, source, target)
    else:
        converted = pc.cast(_representable(values, source, target), types.arrow_type(target))
    if pa.types.is_floating(converted.type):
        converted = keyrows.normalize_float(converted)
    return converted, pc.and_(pc.is_valid(values), pc.is_null(converted))


def _to_floating(values: pa.Array, source: str, target: str) -> pa.Array:
    """Spark's cast to double (which rounds, as does this one) of integral or decimal values."""
    if source.startswith("decimal"):
        # Arrow scales the unscaled integer by a power of ten in floating point (19.99 becomes
        # 19.990000000000002); Spark's conversion, like Arrow's parsing of the decimal text, is correctly rounded.
        values = pc.cast(values, pa.string())
    return pc.cast(values, types.arrow_type(target), safe=False)


def _parse(values: pa.Array, target: str) -> pa.Array:
    """Strings cast with Spark's semantics; a string Spark cannot cast becomes null."""
    present = pc.is_valid(values)
    # UTC: a string without an offset then keeps its wall-clock day, within a day of any session's instant.
    parsed = partitions.to_arrow(values.drop_null().to_pylist(), target, time_zone="UTC", strict=False)
    parsed = parsed.cast(types.arrow_type(target))
    if values.null_count == 0:
        return parsed
    return pc.replace_with_mask(pa.nulls(len(values), parsed.type), present, parsed)


def _representable(values: pa.Array, source: str, target: str) -> pa.Array:
    """``values`` with null where the (safe) cast to ``target`` would overflow."""
    if target == "timestamp_ntz" and source == "date":
        days = pc.cast(values, pa.int32())
        fits = pc.and_(pc.greater_equal(days, -_TIMESTAMP_DAYS), pc.less_equal(days, _TIMESTAMP_DAYS))
        return pc.if_else(fits, values, pa.scalar(None, values.type))
    if not target.startswith("decimal"):
        return values  # integral widening and same-kind casts are exact
    scale = values.type.scale if pa.types.is_decimal(values.type) else 0
    wide = pc.cast(values, pa.decimal128(38, scale))
    integer_digits = types.arrow_type(target).precision - types.arrow_type(target).scale
    if integer_digits >= 38 - scale:
        return wide
    bound = pa.scalar(Decimal(10) ** integer_digits, pa.decimal128(38, scale))
    fits = pc.and_(pc.less(wide, bound), pc.greater(wide, pc.negate(bound)))
    return pc.if_else(fits, wide, pa.scalar(None, wide.type))


def _days(values: pa.Array, source: str) -> pa.Array:
    """Day numbers (UTC days for instants, local days for dates and local times)."""
    if source == "string":
        values = _parse(values, "timestamp")
    return pc.cast(pc.cast(pc.cast(values, pa.date32()), pa.int32()), pa.int64())


def with_day_slack(keys: pa.Table, day_columns: list[int]) -> pa.Table:
    # A time-zone offset is under a day, so an instant and a local time Spark finds equal are at
    # most one day apart: each key day also stands for its neighbours.
    for position in day_columns:
        days = keys.column(position)
        keys = pa.concat_tables(
            [keys.set_column(position, keys.field(position), pc.add(days, shift)) for shift in (-1, 0, 1)]
        )
    return keys


def members(columns: list[pa.Array], keys: pa.Table, null_safe: bool) -> pa.BooleanArray:
    """Whether each candidate row (``columns``) equals some row of ``keys``, vectorized."""
    skip_nulls = not null_safe
    if len(columns) == 1:
        return pc.is_in(columns[0], value_set=keyrows.plain(keys.column(0)), skip_nulls=skip_nulls)
    # pc.is_in has no kernel for structs, and a hash join never matches null keys: join on
    # per-column codes instead, where a null that matches is an ordinary code.
    names = [f"k{i}" for i in range(len(columns))]
    candidate_codes, key_codes = [], []
    for values, key in zip(columns, keys.columns, strict=True):
        value_set = pc.unique(keyrows.plain(key))
        candidate_codes.append(pc.index_in(values, value_set=value_set, skip_nulls=skip_nulls))
        key_codes.append(pc.index_in(keyrows.plain(key), value_set=value_set, skip_nulls=skip_nulls))
    count = len(columns[0])
    left = pa.table([*candidate_codes, pa.array(np.arange(count, dtype=np.int64))], names=[*names, "row"])
    matched = left.drop_null().join(pa.table(key_codes, names=names), keys=names, join_type="left semi")
    mask = np.zeros(count, dtype=bool)
    mask[matched.column("row").to_numpy()] = True
    return pa.array(mask)
