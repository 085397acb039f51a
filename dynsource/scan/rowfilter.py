"""Row-group and row filtering in ``read()``: the filter fields that are data columns, not partition columns.

A field that names a data column cannot prune partition directories, so the
reader drops what cannot join instead: Parquet row groups whose statistics
exclude every key are not read (Trino's row-group skipping), and the rows of the
others are filtered with :meth:`DynamicFilteringData.matching_mask` when the
filter has few enough keys (openLooKeng's row-filtering threshold).

Dropping rows by a data column is only valid because passing ``dynamicFilter``
declares an inner or semi join with the dimension on the filter fields: a row
whose key no dimension row matches cannot be in the result.

Planning resolves the handle once and puts what the read tasks need into every
InputPartition (as Flink's coordinator hands splits to its readers): the
payload reduced to the compared columns, in its checksummed wire format. Read
tasks never open the filter store, which executors on a cluster may not reach.
The payload is copied into every task, so each of its parts (one per dimension,
see :mod:`dynsource.filtering.conjunction`) is capped (``taskFilterMaxBytes``):
an exact part over the cap travels as its per-column bounds, which still skip
row groups but filter no rows; a Bloom part over the cap does not travel. The
other parts still skip row groups and filter rows.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dynsource import types
from dynsource.filtering import DynamicFilteringData
from dynsource.scan.taskfigures import ReadCounts

log = logging.getLogger(__name__)

_DECODED_CACHE_SIZE = 8
_FILTER_ERRORS = (TypeError, ValueError, pa.ArrowException)
# Spark warns about tasks over 1000 KiB; the payload is in every task beside its file list.
DEFAULT_TASK_FILTER_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class RowFilterSpec:
    """What ``read()`` needs to filter rows: the payload itself, never a reference to the store.

    ``payload`` is the wire format (:meth:`DynamicFilteringData.to_bytes`) of the
    filter as the tasks apply it: the parts with a data-column field, each reduced
    to the compared columns. ``data_columns`` are the data-column fields as
    (read-schema column, Spark SQL type); ``mask_columns`` every read-schema
    column the row mask compares (the data columns and the comparable
    partition-column fields); ``row_parts`` the payload's parts that filter rows
    (all parts skip row groups); ``uses`` what the tasks do with each part of the
    planned filter, for the report ("" for a part they leave to the directories).
    """

    handle: str
    scan_id: str
    payload: bytes
    data_columns: tuple[tuple[str, str], ...]
    mask_columns: tuple[str, ...]
    row_parts: tuple[int, ...]
    uses: tuple[str, ...] = ()

    @property
    def filter_rows(self) -> bool:
        return bool(self.row_parts)


def plan_row_filter(
    data: DynamicFilteringData,
    partition_columns: Sequence[str],
    column_types: Mapping[str, str],
    *,
    handle: str,
    scan_id: str,
    max_keys: int,
    max_bytes: int = DEFAULT_TASK_FILTER_MAX_BYTES,
    on_error: str,
) -> tuple[RowFilterSpec | None, str | None]:
    """The spec for the data-column fields of ``data``, or None, and what the tasks cannot do (or None).

    ``column_types`` maps the read schema's columns to their Spark SQL types. No
    data-column field (or non-filtering data) gives (None, None). A data column
    the filter cannot be compared with raises under ``on_error="fail"``. Each part
    of ``data`` is judged on its own: one over ``max_bytes`` travels as bounds
    (exact) or not at all (Bloom, range), one of more than ``max_keys`` keys skips
    row groups but filters no rows; the others still filter rows.
    """
    if not data.is_filtering:
        return None, None
    by_name = {column.lower(): column for column in column_types}
    partitioned = {column.lower() for column in partition_columns}
    fields = [by_name[name.lower()] for name in data.field_names if name.lower() in by_name]
    data_columns = [column for column in fields if column.lower() not in partitioned]
    if not data_columns:
        return None, None
    for column in data_columns:
        error = _comparison_error(data, column, column_types[column])
        if error is None:
            continue
        if on_error == "fail":
            raise error
        reason = f"cannot filter rows by data column '{column}': {error}"
        log.warning("dynsource: %s; reading its rows unfiltered.", reason)
        return None, reason
    # A partition-column field the filter cannot compare was not used to prune either: leave it out.
    mask_columns = [
        column for column in fields
        if column in data_columns or _comparison_error(data, column, column_types[column]) is None
    ]
    shipped, row_parts, uses, notes = [], [], [], []
    for part in data.parts:
        task_part, use, note = _task_part(part, mask_columns, data_columns, max_keys, max_bytes)
        uses.append(use)
        notes += [note] if note else []
        if task_part is not None:
            row_parts += [len(shipped)] if use == ROWS else []
            shipped.append(task_part)
    reason = "; ".join(notes) or None
    if not shipped:
        return None, reason
    spec = RowFilterSpec(
        handle=handle,
        scan_id=scan_id,
        payload=DynamicFilteringData.all_of(shipped).to_bytes(),
        data_columns=tuple((column, column_types[column]) for column in data_columns),
        mask_columns=tuple(mask_columns),
        row_parts=tuple(row_parts),
        uses=tuple(uses),
    )
    return spec, reason


ROWS, ROW_GROUPS, BOUNDS = "row groups and rows", "row groups", "row groups, by its bounds"


def _task_part(part: DynamicFilteringData, mask_columns: Sequence[str], data_columns: Sequence[str], max_keys: int,
               max_bytes: int) -> tuple[DynamicFilteringData | None, str, str | None]:
    """What the tasks get of one part (None: nothing), what they do with it, and why not more (or None)."""
    compared = {column.lower() for column in mask_columns}
    if not {name.lower() for name in part.field_names} & {column.lower() for column in data_columns}:
        return None, "", None  # on partition columns only: the directories were pruned by it
    task_part = _projected(part, [name for name in part.field_names if name.lower() in compared])
    size = len(task_part.to_bytes())
    if size > max_bytes:
        over = (f"the task filter of {', '.join(task_part.field_names)} is {size} bytes, over option "
                f"'taskFilterMaxBytes' ({max_bytes})")
        if task_part.kind != "exact":
            return None, "", f"{over}: read tasks neither skip row groups nor filter rows by it"
        bounds = DynamicFilteringData.from_table(task_part.fields, task_part.table, kind="range",
                                                 null_safe=task_part.null_safe)
        return bounds, BOUNDS, f"{over}: read tasks skip row groups by its bounds and filter no rows by it"
    return task_part, ROWS if len(task_part) <= max_keys else ROW_GROUPS, None


def _projected(data: DynamicFilteringData, fields: Sequence[str]) -> DynamicFilteringData:
    """Exact data reduced to ``fields`` (fewer distinct rows); other kinds as they are."""
    if data.kind != "exact" or len(fields) == len(data.fields):
        return data
    wanted = [field for field in data.fields if field[0] in fields]
    return DynamicFilteringData.from_table(wanted, data.table.select(list(fields)), null_safe=data.null_safe)


def _comparison_error(data: DynamicFilteringData, column: str, type_name: str) -> Exception | None:
    """Why the filter cannot compare a column of this type, or None: asked on an empty column."""
    try:
        data.matching_mask(pa.table({column: pa.array([], types.arrow_type(type_name))}))
    except _FILTER_ERRORS as error:
        return error
    return None


def open_row_filter(spec: RowFilterSpec | None) -> RowFilter | None:
    """The row filter of a planned scan in this task, or None: read every row of the planned files."""
    if spec is None:
        return None
    try:
        decoded = _decode(spec.payload)
    except ValueError as error:
        log.warning("dynsource: the plan's copy of dynamic filter '%s' cannot be read, reading rows unfiltered: %s",
                    spec.handle, error)
        return None
    return RowFilter(decoded, spec)


@functools.lru_cache(maxsize=_DECODED_CACHE_SIZE)
def _decode(payload: bytes) -> DynamicFilteringData:
    # Python workers are reused across tasks: verify and parse each payload once per process.
    return DynamicFilteringData.from_bytes(payload)


class RowFilter:
    """Skips row groups and filters rows of one task, counting both."""

    def __init__(self, data: DynamicFilteringData, spec: RowFilterSpec) -> None:
        self.data = data
        self.spec = spec
        self.counts = ReadCounts()
        parts = data.parts
        owners = {name.lower(): part for part in parts for name in part.field_names}
        # (column, its Spark SQL type, the part filtering it) for each data column the payload filters.
        self._columns = [(column, column_type, owners[column.lower()])
                         for column, column_type in spec.data_columns if column.lower() in owners]
        # (part, the batch columns it compares) for each part that filters rows.
        self._row_masks = [
            (parts[index], [c for c in spec.mask_columns if c.lower() in {n.lower() for n in parts[index].field_names}])
            for index in spec.row_parts
        ]
        self._filter_rows = bool(self._row_masks)

    @property
    def figures(self) -> ReadCounts:
        """What this task counted, and whether it filtered rows to the end (a comparison error stops it)."""
        return dataclasses.replace(self.counts, row_filtering_tasks=int(self._filter_rows))

    def keep_row_groups(self, metadata: pq.FileMetaData, row_groups: Sequence[int]) -> list[int]:
        """Those of ``row_groups`` whose statistics may hold a matching row."""
        leaves = _leaves(metadata)
        kept = [index for index in row_groups if self._row_group_may_match(metadata.row_group(index), leaves)]
        self.counts.row_groups_total += len(row_groups)
        self.counts.row_groups_skipped += len(row_groups) - len(kept)
        return kept

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (typed as the read schema) without the rows no filter row matches."""
        self.counts.rows_read += batch.num_rows
        if not self._filter_rows or batch.num_rows == 0:
            return batch
        table = pa.Table.from_batches([batch])
        try:
            # A row must match every part; one part's "no" outweighs another's unknown (null).
            mask = functools.reduce(pc.and_kleene, [part.matching_mask(table.select(columns))
                                                    for part, columns in self._row_masks])
        except _FILTER_ERRORS as error:
            self._filter_rows = False
            log.warning("dynsource: cannot filter rows with dynamic filter '%s', reading them unfiltered: %s",
                        self.spec.handle, error)
            return batch
        kept = batch.filter(pc.fill_null(mask, True))  # an unknown answer keeps the row
        self.counts.rows_filtered += batch.num_rows - kept.num_rows
        return kept

    def _row_group_may_match(self, row_group: pq.RowGroupMetaData, leaves: Mapping[str, _Leaf]) -> bool:
        # A row joins only if every field matches: one column whose values no key can equal rules the group out.
        return all(
            self._column_may_match(row_group, leaves.get(column), column_type, column, part)
            for column, column_type, part in self._columns
        )

    def _column_may_match(
        self, row_group: pq.RowGroupMetaData, leaf: _Leaf | None, column_type: str, column: str,
        part: DynamicFilteringData,
    ) -> bool:
        if leaf is None or not types.holds(leaf.type, column_type):
            return True  # statistics of values read() converts order differently from what it compares
        statistics = row_group.column(leaf.index).statistics
        if statistics is None:
            return True
        maybe_null = not statistics.has_null_count or statistics.null_count > 0
        if part.null_safe and maybe_null:
            return True  # a null key matches a null value
        if not statistics.has_min_max:
            # Only an all-null chunk has nulls counted and no bounds; with `=` nulls join nothing.
            return not (statistics.has_null_count and statistics.null_count == row_group.num_rows)
        try:
            return bool(part.may_overlap(column, statistics.min, statistics.max, leaf.type))
        except _FILTER_ERRORS:
            return True


class _Leaf(NamedTuple):
    index: int  # of the column chunk in a row group
    type: pa.DataType  # the Arrow type of the statistics' values


def _leaves(metadata: pq.FileMetaData) -> dict[str, _Leaf]:
    """The column chunk of each top-level primitive column.

    Nested columns have several leaves with dotted paths, which a top-level name
    containing a dot could be mistaken for: count leaves by the Arrow schema instead.
    """
    leaves, index = {}, 0
    for arrow_field in metadata.schema.to_arrow_schema():
        arrow = arrow_field.type
        if pa.types.is_dictionary(arrow):
            arrow = arrow.value_type  # statistics hold the values, not the indices
        if arrow.num_fields == 0:
            leaves[arrow_field.name] = _Leaf(index, arrow)
        index += _leaf_count(arrow)
    return leaves


def _leaf_count(arrow: pa.DataType) -> int:
    if arrow.num_fields == 0:
        return 1
    return sum(_leaf_count(arrow.field(index).type) for index in range(arrow.num_fields))
