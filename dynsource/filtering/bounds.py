"""Range payloads: each field's least and greatest key (Trino's min/max collapse) against candidates and bounds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import types
from dynsource.filtering import compare, keyrows
from dynsource.filtering.keyrows import Candidate


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
