"""The benefit check of a dynamic filter, as Spark's ``fallbackFilterRatio``: skip a filter that keeps most partitions.

It is judged on the fact table's top-level partition directories, which
:func:`survey` lists (the enumerator's walk, with its checks, down one branch:
the same walk tells the partition columns). A filter that does not constrain the
first partition column is assumed to pay. :func:`worth_applying` applies the
check to each dimension's filter and makes those that pay the parts of the scan's
one filter (:meth:`DynamicFilteringData.all_of`: a row must match every part),
for :func:`dynsource.sql` and :func:`dynsource.dynamic_join` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import files
from dynsource.enumerator import PartitionEnumerator
from dynsource.filtering import DynamicFilteringData
from dynsource.levels import Level, PartitionTyping
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


@dataclass(frozen=True)
class Candidate:
    """A dimension's filter that may prune the fact scan: its label, the fact columns it filters, its collection."""

    label: str
    fact_columns: Sequence[str]
    collect: Callable[[], tuple[DynamicFilteringData | None, str | None]]  # the data, or None and why not


@dataclass(frozen=True)
class Choice:
    """What :func:`worth_applying` chose: the labels applied, their conjunction, and what was left out."""

    applied: list[str]
    data: DynamicFilteringData | None  # None when no filter pays
    declined: list[tuple[str, str]]  # (label, why): not collected, or not paying
    left_out: list[str]  # notes on filters that pay but do not join those applied

    @property
    def kind(self) -> str | None:
        """The filter's kind as reports name it: ``exact``, ``bloom``, ``range`` or ``all of N parts``."""
        if self.data is None:
            return None
        return f"all of {len(self.data.parts)} parts" if self.data.kind == "all" else self.data.kind


def worth_applying(candidates: Sequence[Candidate], level: Level | None, ratio: float) -> Choice:
    """Collect each candidate (those on the fact's first partition column first), keep those that pay, conjoin them."""
    first = level.columns[0].lower() if level is not None else None
    ordered = sorted(candidates, key=lambda c: first not in {column.lower() for column in c.fact_columns})
    worth, declined = [], []
    for candidate in ordered:
        data, reason = candidate.collect()
        reason = reason or no_benefit(data, level, ratio)
        if reason is None:
            worth.append((candidate.label, data))
        else:
            declined.append((candidate.label, reason))
    if not worth:
        return Choice([], None, declined, [])
    applied, data, left_out = conjoin(worth)
    return Choice(applied, data, declined, left_out)


def conjoin(filters: Sequence[tuple[str, DynamicFilteringData]]) -> tuple[list[str], DynamicFilteringData, list[str]]:
    """``filters`` (labelled, best first) as the parts of one filter: the labels applied, the filter, and a note
    for each left out (one exceeded, which holds no key, unless all are; one on a field a part already filters)."""
    (label, combined), *rest = sorted(filters, key=lambda item: not item[1].is_filtering)
    applied, notes = [label], []
    for label, data in rest:
        if not data.is_filtering:
            notes.append(f"{label}: not applied: it exceeded the collector's threshold and holds no key")
            continue
        try:
            combined = DynamicFilteringData.all_of([combined, data])
            applied.append(label)
        except ValueError as reason:
            notes.append(f"{label}: not applied with {' AND '.join(applied)} on one scan: {reason}")
    return applied, combined, notes
