"""Walks of a local table reuse settled directory listings and still see every change (no Spark)."""

from __future__ import annotations

import os
import shutil
import time

import fsspec
import pytest

from dynsource.layout import directories
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.layout.watches import Watches


def write(path, data: bytes = b"x" * 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def walk(root) -> dict[tuple[str, ...], list[tuple[str, int]]]:
    listing = PartitionEnumerator(fsspec.filesystem("file"), str(root)).enumerate()
    return {p.raw_values: [(os.path.basename(f.path), f.size) for f in p.files] for p in listing.partitions}


@pytest.fixture(params=["watched", "stamped"])
def settled(request, monkeypatch, tmp_path):
    """A table of three partitions, each file with a hidden ``.crc`` beside it, and listings kept at once (checked
    by inotify watches, or by stat): the test's changes come at least 50 ms after the table was written, past
    any filesystem clock's tick."""
    watches = Watches() if request.param == "watched" else None
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0, watches=watches))
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
    watches = Watches()
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0, kept=2, watches=watches))
    walk(settled)
    walk(settled)
    assert directories.LISTINGS.reused == 0  # the walk's four directories never fit in two: each pushed one out
    assert len(directories.LISTINGS) == 2
    assert len(watches) == 2  # a dropped listing's watch is removed with it


@pytest.mark.parametrize("moved", ["table", "its parent"])
def test_a_table_renamed_away_and_another_put_at_its_path_is_walked_anew(settled, moved):
    table = settled / "table"
    for path in list(settled.iterdir()):
        shutil.move(path, table / path.name)
    time.sleep(0.05)
    walk(table)
    away = table if moved == "table" else settled  # renaming its parent changes no watched directory
    shutil.move(away, away.with_name(away.name + "-old"))
    write(table / "day=1" / "part-0.parquet", b"o" * 5)
    write(table / "day=2" / "part-7.parquet", b"t" * 6)
    time.sleep(0.05)
    assert walk(table) == {("1",): [("part-0.parquet", 5)], ("2",): [("part-7.parquet", 6)]}


@pytest.mark.parametrize("watched", [True, False])
def test_a_level_moved_aside_and_replaced_is_walked_anew_below_it(tmp_path, monkeypatch, watched):
    monkeypatch.setattr(directories, "LISTINGS",
                        directories.DirectoryListings(settle_ns=0, watches=Watches() if watched else None))
    for day in (1, 2):
        write(tmp_path / f"day={day}" / "hour=0" / "part-0.parquet")
    time.sleep(0.05)
    walk(tmp_path)
    (tmp_path / "day=1").rename(tmp_path / ".day-1-old")  # its sub-directory keeps its watch, at another path now
    write(tmp_path / "day=1" / "hour=0" / "part-0.parquet", b"n" * 3)
    time.sleep(0.05)
    assert walk(tmp_path) == {("1", "0"): [("part-0.parquet", 3)], ("2", "0"): [("part-0.parquet", 10)]}


def test_a_watched_directory_is_kept_at_once_and_a_change_in_the_same_clock_tick_is_seen(tmp_path, monkeypatch):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(watches=Watches()))
    write(tmp_path / "day=1" / "part-0.parquet")
    walk(tmp_path)
    assert walk(tmp_path) == {("1",): [("part-0.parquet", 10)]} and directories.LISTINGS.reused == 2
    written = tmp_path / "day=1" / "part-0.parquet"
    times = os.stat(written)
    written.write_bytes(b"y" * 10)  # same size, and its times set back: no stamp of it tells
    os.utime(written, ns=(times.st_atime_ns, times.st_mtime_ns))
    before = directories.LISTINGS.reused
    walk(tmp_path)
    assert directories.LISTINGS.reused - before == 1  # the root alone: the partition was listed again


def held_twice(root) -> tuple:
    """A walk's read of ``root`` that held twice (so the second pass was remembered), and its filesystem."""
    fs = fsspec.filesystem("file")
    read = PartitionEnumerator(fs, str(root)).enumerate().read
    assert directories.read_alike(fs, read) and directories.read_alike(fs, read)
    return fs, read


def rename_parent(root) -> None:
    """The table moved away with its parent, and another put at its path: no watched directory queues an event."""
    parent = root.parent
    shutil.move(parent, parent.with_name(parent.name + "-old"))
    write(root / "day=1" / "part-0.parquet", b"o" * 5)


CHANGES = {
    "a file written": lambda root: write(root / "day=2" / "part-1.parquet"),
    "a file rewritten in place": lambda root: (root / "day=3" / "part-0.parquet").write_bytes(b"z" * 10),
    "a partition removed": lambda root: shutil.rmtree(root / "day=1"),
    "the table's parent moved away and another table put at its path": rename_parent,
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_read_that_held_on_watches_is_remembered_and_any_change_after_is_still_seen(tmp_path, monkeypatch, change):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0, watches=Watches()))
    root = tmp_path / "parent" / "table"
    for day in (1, 2, 3):
        write(root / f"day={day}" / "part-0.parquet")
    time.sleep(0.05)
    fs, read = held_twice(root)
    assert directories.read_alike(fs, read)  # nothing changed: the remembered pass
    CHANGES[change](root)
    assert not directories.read_alike(fs, read)
    assert not directories.read_alike(fs, read)  # and not remembered as held


def test_a_read_is_remembered_only_while_its_listings_are_the_ones_kept(settled, monkeypatch, tmp_path_factory):
    fs, read = held_twice(settled)
    other = tmp_path_factory.mktemp("other")  # another table's walk lists directories: the pass is looked at again
    write(other / "day=1" / "part-0.parquet")
    time.sleep(0.05)
    walk(other)
    assert directories.read_alike(fs, read)
    monkeypatch.setattr(directories.LISTINGS, "kept", 2)
    more = tmp_path_factory.mktemp("more")
    write(more / "day=1" / "part-0.parquet")
    time.sleep(0.05)
    walk(more)  # its two directories, listed, push this table's listings out
    assert not directories.read_alike(fs, read)
