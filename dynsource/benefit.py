"""The benefit check of a dynamic filter, as Spark's ``fallbackFilterRatio``: skip a filter that keeps most partitions.

It is judged on the fact table's top-level partition directories, which
:func:`survey` lists (the enumerator's walk, with its checks, down one branch:
the same walk tells the partition columns). A filter that does not constrain the
first partition column is assumed to pay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import files
from dynsource.enumerator import Level, PartitionEnumerator, PartitionTyping
from dynsource.filtering import DynamicFilteringData
from dynsource.options import ScanOptions

DEFAULT_FALLBACK_FILTER_RATIO = 0.5  # spark.sql.optimizer.dynamicPartitionPruning.fallbackFilterRatio


@dataclass(frozen=True)
class Survey:
    """What one walk down the fact table's first branch tells: its partition columns and its typed top level."""

    columns: tuple[str, ...]
    top: Level | None  # None when the table is not partitioned


def survey(fact: ScanOptions, column_types: Mapping[str, str], *, deep: bool = True) -> Survey:
    """Walk the fact table down its first directory at each level: one listing per partition level.

    ``deep=False`` lists the top level only (one listing); ``Survey.columns`` then names its column alone.
    """
    levels: list[Level] = []

    def first_only(level: Level) -> list[bool]:
        levels.append(level)
        return [deep and index == 0 for index in range(len(level.raw_rows))]

    enumerator = PartitionEnumerator(*files.open_table(fact.path, fact.storage_options))
    listing = enumerator.enumerate(first_only, PartitionTyping(column_types))
    return Survey(listing.columns, levels[0] if levels else None)


def no_benefit(data: DynamicFilteringData, level: Level | None, ratio: float) -> str | None:
    """Why filtering with ``data`` would not pay on the fact's top ``level``; None when it does."""
    if not data.is_filtering or level is None:
        return None  # an exceeded filter reads everything anyway, and the scan report says so
    column = level.columns[0]
    if column.lower() not in {name.lower() for name in data.field_names}:
        return None
    _, values, failed = level.typed(column)
    # A value with no image in the column's type cannot be judged: it counts as kept.
    kept = sum(pc.or_(data.matching_mask(pa.table({column: values})), failed).to_pylist())
    if kept > ratio * len(values):
        return (
            f"the filter keeps {kept} of {len(values)} partitions of '{column}' (more than {ratio:.0%}), "
            "so it is not worth applying (fallback_filter_ratio)"
        )
    return None
