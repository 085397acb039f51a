"""Range payloads: each field's least and greatest key (Trino's min/max collapse) against candidates and bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import types
from dynsource.filtering import compare, keyrows, wire
from dynsource.filtering.keyrows import Candidate


class RangeKeys(keyrows.Keys):
    """Each field's least and greatest key: Trino's min/max collapse."""

    kind = "range"

    def __init__(
        self, fields: keyrows.Fields, lower: Sequence[Any], upper: Sequence[Any], key_count: int, null_safe: bool
    ) -> None:
        """``lower``, ``upper``: a value per field, in the field's type; both None for a field with no non-null key."""
        self.limits = keyrows.normalize_floats(keyrows.table_from_rows(fields, [lower, upper]))
        keyrows.check_bounds(self.limits, keyrows.check_count(key_count), null_safe)
        super().__init__(fields, key_count, null_safe)

    @classmethod
    def from_keys(cls, fields: keyrows.Fields, keys: pa.Table, null_safe: bool) -> RangeKeys:
        """The bounds of ``keys`` (field-typed, distinct), as Spark's ``min`` and ``max`` give them."""
        lower, upper = zip(*(keyrows.column_bounds(column) for column in keys.columns), strict=True)
        return cls(fields, lower, upper, keys.num_rows, null_safe)

    @classmethod
    def from_body(cls, fields: keyrows.Fields, header: dict[str, Any], body: bytes) -> RangeKeys:
        table = wire.read_body(body, fields, 2, "range bounds are 2 rows")
        if table.num_rows != 2:
            raise ValueError(f"Filter payload body holds {table.num_rows} rows, but range bounds are 2 rows.")
        lower, upper = keyrows.row_tuples(table)
        return cls(fields, lower, upper, header["row_count"], header["null_safe"])

    @property
    def bounds(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        lower, upper = keyrows.row_tuples(self.limits)
        return lower, upper

    @property
    def size_bytes(self) -> int:
        return self.limits.nbytes

    def mask(self, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
        targets = compare.targets(candidates, columns)
        if self.key_count == 0:
            return keyrows.constant(False, candidates.num_rows)
        return mask(self.limits, self.null_safe, candidates, columns, targets)

    def overlaps(self, field: tuple[str, str], interval: pa.Array, source: str, target: str) -> bool:
        if self.null_safe:
            return True  # statistics leave nulls out
        return overlaps(self.limits, field[0], field[1], interval, source, target)

    def identity(self) -> Any:
        return keyrows.row_tuples(self.limits)

    def body(self) -> bytes:
        return wire.ipc_bytes(self.limits)


def mask(
    bounds: pa.Table, null_safe: bool, candidates: pa.Table, columns: list[Candidate], targets: list[str]
) -> pa.BooleanArray:
    """Which candidates lie within every compared field's bounds (two rows: least, greatest)."""
    keep = keyrows.constant(True, candidates.num_rows)
    for (column, (name, field_type)), target in zip(columns, targets, strict=True):
        values = keyrows.plain(candidates.column(column))
        source = types.type_name(values.type)
        interval = _key_interval(bounds, name, field_type, source, target)
        if interval is None:
            continue
        by_day = compare.depends_on_time_zone(source, field_type, target)
        converted, failed = compare.comparable(values, source, target, by_day)
        inside = compare.within(converted, interval) if interval else keyrows.constant(False, len(values))
        column_keep = pc.or_(pc.fill_null(inside, False), failed)
        if null_safe:
            column_keep = pc.or_(column_keep, pc.is_null(values))
        keep = pc.and_(keep, column_keep)
    return keep


def overlaps(bounds: pa.Table, name: str, field_type: str, interval: pa.Array, source: str, target: str) -> bool:
    """Whether field ``name``'s bounds meet ``interval`` (a row group's statistics) in the comparison type."""
    keys = _key_interval(bounds, name, field_type, source, target)
    by_day = compare.depends_on_time_zone(source, field_type, target)
    statistics = compare.comparable_interval(interval, source, target, by_day)
    if keys is None or statistics is None:
        return True
    if not keys:
        return False
    low, high = statistics
    return bool(pc.less_equal(keys[0], high).as_py() and pc.less_equal(low, keys[1]).as_py())


def _key_interval(
    bounds: pa.Table, name: str, field_type: str, source: str, target: str
) -> tuple[pa.Scalar, pa.Scalar] | tuple[()] | None:
    """The field's bounds in the comparison type, with a day of slack when compared by day.

    ``()`` when the field holds no non-null value; ``None`` when the bounds cannot prune.
    """
    if field_type == "string" and source != "string":
        return None  # Spark casts the keys: their string order is not their order as values
    by_day = compare.depends_on_time_zone(source, field_type, target)
    field_bounds = keyrows.plain(bounds.column(name))
    if field_bounds.null_count:
        return ()
    interval = compare.comparable_interval(field_bounds, field_type, target, by_day)
    return None if interval is None else compare.with_slack(interval, by_day)
