"""inotify watches tell a directory unchanged, changed or moved, and are not used where they would miss a change
(no Spark)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from dynsource.layout.watches import Since, Watches

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/fs/inotify"), reason="inotify is Linux's")


def watched(watches: Watches, path) -> object:
    mark = watches.watch(str(path), os.stat(path).st_dev)
    assert mark is not None
    return mark


def test_reads_leave_a_directory_unchanged_and_writes_and_touches_change_it(tmp_path):
    data = tmp_path / "part-0.parquet"
    data.write_bytes(b"x" * 10)
    watches = Watches()
    mark = watched(watches, tmp_path)
    assert data.read_bytes() and os.listdir(tmp_path) and watches.since([mark])[0] is Since.NOTHING
    os.utime(data, ns=(1, 1))
    assert watches.since([mark])[0] is Since.CHANGED
    again = watched(watches, tmp_path)
    assert again.wd == mark.wd and watches.since([again])[0] is Since.NOTHING
    (tmp_path / "part-1.parquet").write_bytes(b"y")
    assert watches.since([again])[0] is Since.CHANGED


def test_a_directory_moved_or_deleted_is_told_apart_from_one_changed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    watches = Watches()
    moved, deleted, parent = (watched(watches, path) for path in (tmp_path / "a", tmp_path / "b", tmp_path))
    (tmp_path / "a").rename(tmp_path / "c")
    (tmp_path / "b").rmdir()
    assert watches.since([moved, deleted, parent]) == [Since.MOVED, Since.MOVED, Since.CHANGED]


def test_a_lost_event_moves_every_directory(tmp_path):
    """Past ``fs.inotify.max_queued_events`` the kernel drops events and queues an overflow: nothing is known."""
    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        events = int(limit.read())
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    files = [tmp_path / "two" / "a", tmp_path / "two" / "b"]
    for path in files:
        path.write_bytes(b"")
    watches = Watches()
    quiet, busy = watched(watches, tmp_path / "one"), watched(watches, tmp_path / "two")
    for i in range(events + 1):  # two files in turn: the kernel merges an event equal to the last one queued
        os.utime(files[i % 2], ns=(i, i))
    assert watches.since([quiet, busy]) == [Since.MOVED, Since.MOVED]


def test_filesystems_another_machine_writes_to_are_not_watched():
    watches = Watches()
    assert watches.watch("/proc", os.stat("/proc").st_dev) is None  # no local disk type: checked by stat
    assert watches.watch("/nowhere", os.makedev(4095, 4095)) is None  # a device no mount names
    assert len(watches) == 0


def _since_in_child(watches: Watches, mark, answer) -> None:
    answer.send(watches.since([mark])[0])


def test_a_forked_child_does_not_trust_its_parents_queue(tmp_path):
    watches = Watches()
    mark = watched(watches, tmp_path)
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_since_in_child, args=(watches, mark, send))
    child.start()
    child.join(30)
    assert receive.recv() is Since.MOVED
    assert watches.since([mark])[0] is Since.NOTHING


def test_a_directory_forgotten_is_no_longer_watched(tmp_path):
    watches = Watches()
    watched(watches, tmp_path)
    assert len(watches) == 1
    watches.forget(str(tmp_path))
    watches.forget(str(tmp_path))  # twice: nothing left to remove
    assert len(watches) == 0
