"""Packing files into InputPartitions like Spark's FilePartition (no Spark session needed)."""

from __future__ import annotations

from dynsource.layout.directories import DataFile
from dynsource.layout.listing import Partition
from dynsource.scan.splits import pack

MB = 1024 * 1024


def partition(name: str, *sizes: int) -> Partition:
    return Partition(name, (name,), tuple(DataFile(f"{name}/f{i}", size) for i, size in enumerate(sizes)))


def splits_of(input_partitions):
    return [[(s.path, s.start, s.length) for s in p.splits] for p in input_partitions]


def test_small_files_are_packed_together_with_open_cost():
    parts = [partition(f"k={i}", MB) for i in range(10)]
    planned = pack(parts, [(i,) for i in range(10)], ["k"], splittable=True, max_partition_bytes=12 * MB,
                   open_cost_in_bytes=4 * MB, min_partition_num=1)
    # the overflow check counts the next file without its open cost, so three 1 MB files fit in 12 MB
    assert [len(p.splits) for p in planned] == [3, 3, 3, 1]
    assert all(p.partition_columns == ("k",) for p in planned)


def test_large_splittable_file_is_split_and_values_travel_with_splits():
    planned = pack([partition("k=1", 10 * MB)], [(1,)], ["k"], splittable=True, max_partition_bytes=4 * MB,
                   open_cost_in_bytes=MB, min_partition_num=1)
    ranges = sorted(r for group in splits_of(planned) for r in group)
    assert ranges == [("k=1/f0", 0, 4 * MB), ("k=1/f0", 4 * MB, 4 * MB), ("k=1/f0", 8 * MB, 2 * MB)]
    assert {s.partition_values for p in planned for s in p.splits} == {(1,)}


def test_unsplittable_file_stays_whole():
    planned = pack([partition("k=1", 10 * MB)], [(1,)], ["k"], splittable=False, max_partition_bytes=4 * MB,
                   open_cost_in_bytes=MB, min_partition_num=1)
    assert splits_of(planned) == [[("k=1/f0", 0, 10 * MB)]]


def test_split_size_follows_min_partition_num():
    parts = [partition("k=1", 64 * MB)]
    planned = pack(parts, [(1,)], ["k"], splittable=True, open_cost_in_bytes=4 * MB, min_partition_num=4)
    # (64 MB + 4 MB) / 4 cores = 17 MB per split, below the 128 MB default
    assert len(planned) == 4


def test_empty_plan_and_empty_files():
    assert pack([], [], [], splittable=True) == []
    assert pack([partition("k=1", 0)], [(1,)], ["k"], splittable=True) == []
