"""Exact payloads: matching candidates and row-group bounds against the key rows themselves."""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dynsource.filtering import compare, keyrows, wire
from dynsource.filtering.keyrows import Candidate


class ExactKeys(keyrows.Keys):
    """The distinct key rows themselves: exact answers."""

    kind = "exact"

    def __init__(self, fields: keyrows.Fields, table: pa.Table, null_safe: bool) -> None:
        """``table``: field-typed rows; floats are normalized and duplicates dropped."""
        self.table = keyrows.distinct(keyrows.normalize_floats(table))
        super().__init__(fields, self.table.num_rows, null_safe)

    @classmethod
    def from_body(cls, fields: keyrows.Fields, header: dict[str, Any], body: bytes) -> ExactKeys:
        count = header["row_count"]
        table = wire.read_body(body, fields, count, f"its header declares {count} rows")
        wire.check_rows(header, table)
        return cls(fields, keyrows.cast_table(fields, table), header["null_safe"])

    @property
    def size_bytes(self) -> int:
        return self.table.nbytes

    @functools.cached_property
    def rows(self) -> frozenset[tuple[Any, ...]]:
        # Python tuples compare by value: rows whose hashes collide stay apart.
        return frozenset(keyrows.row_tuples(self.table))

    @functools.cached_property
    def matchable(self) -> pa.Table:
        # With `=`, a row holding a null matches no full partition, so neither does any prefix of one.
        return self.table if self.null_safe else self.table.drop_null()

    def mask(self, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
        return mask(self.matchable, self.null_safe, candidates, columns)

    def contains(self, row: pa.Table) -> bool:
        canonical = tuple(keyrows.canonical(column[0].as_py()) for column in row.columns)
        if not self.null_safe and any(value is None for value in canonical):
            return False
        return canonical in self.rows

    def overlaps(self, field: tuple[str, str], interval: pa.Array, source: str, target: str) -> bool:
        keys = keyrows.plain(self.matchable.column(field[0]))
        return overlaps(keys, self.null_safe, field[1], interval, source, target)

    def identity(self) -> Any:
        return self.rows

    def body(self) -> bytes:
        return wire.ipc_bytes(self.table)


def mask(keys: pa.Table, null_safe: bool, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
    """Which candidates some key row may match on ``columns``; ``keys`` are the rows that can match."""
    count = candidates.num_rows
    if not columns:
        return keyrows.constant(keys.num_rows > 0, count)
    # A key string that partitions.to_arrow rejects may still be one Spark's CAST accepts (it
    # trims, and outside ANSI mode reads '1.0' as 1): such a column cannot prune.
    compared = [compare.compare(resolved, candidates, keys) for resolved in columns]
    compared = [side for side in compared if side.prunes]
    if not compared:
        return keyrows.constant(keys.num_rows > 0, count)
    failed = functools.reduce(pc.or_, [side.failed for side in compared])
    # A key with no value in the comparison type equals nothing (Spark's cast gives null).
    key_failed = functools.reduce(pc.or_, [side.keys_failed for side in compared])
    key_table = pa.table([side.keys for side in compared], names=[f"k{i}" for i in range(len(compared))])
    day_columns = [position for position, side in enumerate(compared) if side.by_day]
    key_table = compare.with_day_slack(key_table.filter(pc.invert(key_failed)), day_columns)
    matched = compare.members([side.values for side in compared], key_table, null_safe)
    return pc.or_(matched, failed)


def overlaps(keys: pa.Array, null_safe: bool, field_type: str, bounds: pa.Array, source: str, target: str) -> bool:
    """Whether some key of one field (``keys``) lies within ``bounds`` in the comparison type."""
    if null_safe and keys.null_count:
        return True
    by_day = compare.depends_on_time_zone(source, field_type, target)
    key_values, keys_failed = compare.comparable(keys.drop_null(), field_type, target, by_day)
    if field_type == "string" and source != "string" and pc.any(keys_failed).as_py():
        return True  # Spark's CAST may read a key partitions.to_arrow rejects
    interval = compare.comparable_interval(bounds, source, target, by_day)
    if interval is None or compare.has_nan(key_values):
        return True
    low, high = compare.with_slack(interval, by_day)
    inside = pc.and_(pc.greater_equal(key_values, low), pc.less_equal(key_values, high))
    return bool(pc.any(inside).as_py())
