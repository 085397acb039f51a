"""Splits: the files of kept partitions packed into Spark InputPartitions (the partition planner).

Packs file splits the way Spark's ``FilePartition.getFilePartitions`` does, so a
dynsource scan has the same task sizes as ``spark.read.parquet``: split size
``min(maxPartitionBytes, max(openCostInBytes, totalBytes / minPartitionNum))``,
largest splits first, a new partition when the next split would overflow it,
each file charged ``openCostInBytes`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from dynsource.layout.listing import Partition
from dynsource.scan.rowfilter import RowFilterSpec

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_OPEN_COST_IN_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class FileSplit:
    """A byte range of one data file and the typed values of its partition columns."""

    path: str
    start: int
    length: int
    file_size: int
    partition_values: tuple[Any, ...]


@dataclass(frozen=True)
class SplitGroup(InputPartition):
    """One InputPartition: everything ``read()`` needs, as Spark pickles the reader before ``partitions()`` runs.

    ``index`` is the InputPartition's position in the scan, which names its task's figures in the report;
    ``row_filter`` applies the dynamic filter's data-column fields.
    """

    partition_columns: tuple[str, ...]
    splits: tuple[FileSplit, ...]
    index: int = 0
    row_filter: RowFilterSpec | None = None


def pack(
    partitions: Sequence[Partition],
    partition_values: Sequence[tuple[Any, ...]],
    partition_columns: Sequence[str],
    *,
    splittable: bool,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
    open_cost_in_bytes: int = DEFAULT_OPEN_COST_IN_BYTES,
    min_partition_num: int = 1,
    row_filter: RowFilterSpec | None = None,
) -> list[SplitGroup]:
    """InputPartitions for the files of ``partitions``.

    ``partition_values[i]`` are the typed values of ``partition_columns`` for ``partitions[i]``;
    ``row_filter``, if any, goes into every one of them.
    """
    files = [
        (file, values)
        for partition, values in zip(partitions, partition_values, strict=True)
        for file in partition.files
    ]
    total = sum(file.size + open_cost_in_bytes for file, _ in files)
    max_split = min(max_partition_bytes, max(open_cost_in_bytes, total // max(1, min_partition_num)))
    splits = [
        split
        for file, values in files
        if file.size > 0
        for split in _split_file(file.path, file.size, values, max_split if splittable else file.size)
    ]
    splits.sort(key=lambda split: split.length, reverse=True)
    columns = tuple(partition_columns)
    groups = _pack(splits, max_split, open_cost_in_bytes)
    return [
        SplitGroup(columns, tuple(group), index, row_filter) for index, group in enumerate(groups)
    ]


def _split_file(path: str, size: int, values: tuple[Any, ...], max_split: int) -> list[FileSplit]:
    return [FileSplit(path, start, min(max_split, size - start), size, values) for start in range(0, size, max_split)]


def _pack(splits: Sequence[FileSplit], max_split: int, open_cost: int) -> list[list[FileSplit]]:
    groups: list[list[FileSplit]] = []
    current: list[FileSplit] = []
    current_size = 0
    for split in splits:
        if current and current_size + split.length > max_split:
            groups.append(current)
            current, current_size = [], 0
        current.append(split)
        current_size += split.length + open_cost
    if current:
        groups.append(current)
    return groups
