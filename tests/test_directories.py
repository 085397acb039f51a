"""Walks of a local table reuse settled directory listings and still see every change (no Spark)."""

from __future__ import annotations

import os
import shutil
import time

import fsspec
import pytest

from dynsource import directories
from dynsource.enumerator import PartitionEnumerator


def write(path, data: bytes = b"x" * 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def walk(root) -> dict[tuple[str, ...], list[tuple[str, int]]]:
    listing = PartitionEnumerator(fsspec.filesystem("file"), str(root)).enumerate()
    return {p.raw_values: [(os.path.basename(f.path), f.size) for f in p.files] for p in listing.partitions}


@pytest.fixture
def settled(monkeypatch, tmp_path):
    """A table of three partitions, each file with a hidden ``.crc`` beside it, and listings kept at once: the
    test's changes come at least 50 ms after the table was written, past any filesystem clock's tick."""
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))
    for day in (1, 2, 3):
        write(tmp_path / f"day={day}" / "part-0.parquet")
        write(tmp_path / f"day={day}" / ".part-0.parquet.crc")
    time.sleep(0.05)
    return tmp_path


def test_a_settled_table_is_walked_from_kept_listings(settled):
    first = walk(settled)
    before = directories.LISTINGS.reused
    assert walk(settled) == first == {(str(d),): [("part-0.parquet", 10)] for d in (1, 2, 3)}
    assert directories.LISTINGS.reused - before == 4  # the root and its three partitions


def test_files_added_removed_or_rewritten_in_place_are_seen(settled):
    walk(settled)
    write(settled / "day=1" / "part-1.parquet", b"y" * 7)
    (settled / "day=2" / "part-0.parquet").unlink()
    with open(settled / "day=3" / "part-0.parquet", "r+b") as rewritten:  # same name, same size, new bytes
        rewritten.write(b"z")
    before = directories.LISTINGS.reused
    assert walk(settled) == {("1",): [("part-0.parquet", 10), ("part-1.parquet", 7)],
                             ("3",): [("part-0.parquet", 10)]}
    assert directories.LISTINGS.reused - before == 1  # the root alone: none of its entries was added or removed


def test_partitions_added_replaced_or_removed_are_seen(settled):
    walk(settled)
    write(settled / "day=4" / "part-0.parquet", b"n" * 4)
    shutil.rmtree(settled / "day=1")
    staged = settled / "_staging" / "day=2"  # replaced by a rename, as Spark's dynamic partition overwrite does
    write(staged / "part-9.parquet", b"r" * 3)
    shutil.rmtree(settled / "day=2")
    staged.rename(settled / "day=2")
    shutil.rmtree(settled / "_staging")
    assert walk(settled) == {("2",): [("part-9.parquet", 3)], ("3",): [("part-0.parquet", 10)],
                             ("4",): [("part-0.parquet", 4)]}


def test_a_directory_changed_within_the_settle_time_is_listed_at_each_walk(tmp_path, monkeypatch):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings())
    write(tmp_path / "day=1" / "part-0.parquet")
    walk(tmp_path)
    walk(tmp_path)
    assert directories.LISTINGS.reused == 0


def test_the_least_recently_used_listings_are_dropped_past_the_bound(settled, monkeypatch):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0, kept=2))
    walk(settled)
    walk(settled)
    assert directories.LISTINGS.reused == 0  # the walk's four directories never fit in two: each pushed one out
    assert len(directories.LISTINGS) == 2
