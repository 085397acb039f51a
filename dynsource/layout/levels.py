"""Typed partition levels: how a walk types each level's directory values, and what a level filter sees.

The walk types each level's new column once, as it lists the level, and
carries the typed values down to the leaves, so the dynamic filter, the
``partitionFilter`` and planning never convert the same strings twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import directorynames, partitions


@dataclass(frozen=True)
class PartitionTyping:
    """How a walk types directory values: a column's known Spark SQL type, else Spark's inference over its level,
    under the session ``settings`` (the time zone of timestamp values among them)."""

    column_types: Mapping[str, str]
    settings: partitions.PartitionSettings = partitions.DEFAULT_SETTINGS

    def type_level(self, column: str, raw: Sequence[str]) -> tuple[str, pa.Array, pa.Array]:
        """The type, the typed values (null where Spark cannot convert one), and where that happened."""
        known = {name.lower(): type_name for name, type_name in self.column_types.items()}
        type_name = known.get(column.lower()) or partitions.infer_type(raw, self.settings)
        if type_name == "timestamp" and self.settings.time_zone is None:
            raise partitions.zone_unknown(column)
        typed = partitions.to_arrow(raw, type_name, time_zone=self.settings.time_zone, strict=False)
        not_null = pc.not_equal(pa.array(raw, pa.string()), directorynames.DEFAULT_PARTITION_NAME)
        return type_name, typed, pc.and_(not_null, pc.is_null(typed))


@dataclass(frozen=True)
class PartitionValues:
    """The typed values of some partition directories: per partition column its type, values and failures.

    ``failed`` marks values other than the null partition that have no image in
    their type: Spark ignores such a directory unless it holds files, and then
    fails the scan.
    """

    types: tuple[str, ...] = ()
    arrays: tuple[pa.Array, ...] = ()
    failed: tuple[pa.Array, ...] = ()

    def take(self, indices: Sequence[int]) -> PartitionValues:
        chosen = pa.array(indices, pa.int64())
        return PartitionValues(self.types, tuple(a.take(chosen) for a in self.arrays),
                               tuple(f.take(chosen) for f in self.failed))

    def filter(self, keep: Sequence[bool]) -> PartitionValues:
        mask = pa.array(keep, pa.bool_())
        return PartitionValues(self.types, tuple(a.filter(mask) for a in self.arrays),
                               tuple(f.filter(mask) for f in self.failed))

    def extend(self, level: tuple[str, pa.Array, pa.Array]) -> PartitionValues:
        type_name, typed, failed = level
        return PartitionValues((*self.types, type_name), (*self.arrays, typed), (*self.failed, failed))


@dataclass(frozen=True)
class Level:
    """The candidate directories of one level of a walk, in order.

    ``columns`` are the partition columns so far (the last one is this level's),
    ``raw_rows`` each candidate's raw (escaped) values, one per column, and
    ``values`` their typed values, or None when the walk types nothing.
    """

    columns: tuple[str, ...]
    raw_rows: Sequence[tuple[str, ...]]
    values: PartitionValues | None = None

    def typed(self, column: str) -> tuple[str, pa.Array, pa.Array]:
        """Column ``column``'s type, typed values and failures (see :class:`PartitionValues`)."""
        index = self.columns.index(column)
        return self.values.types[index], self.values.arrays[index], self.values.failed[index]


# Decides, for the candidate directories of one level, which to descend into; None keeps them all.
LevelFilter = Callable[[Level], Sequence[bool] | None]
