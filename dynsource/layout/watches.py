"""Watches on local directories: whether a directory, or a file in it, changed since it was read, told by the
kernel's inotify queue instead of a ``stat`` of each file.

A warm session checks, at every query, that the directories a kept listing
read and their data files are as they were. By ``stat`` that is one call per
directory and per file, 20 ms for TPC-DS ``store_sales`` (1,823
directories, 3,227 files). With an inotify watch on each directory read, it is
one read of a file descriptor (1 ms for ``store_sales``): the kernel queues an event when an entry of a
watched directory is created, deleted, renamed, written, truncated or has its
times or mode changed, within the call that changes it, so any change that
returned before the check is in the queue the check reads. Reads queue
nothing (the mask leaves out ``IN_ACCESS`` and ``IN_OPEN``), so scans do not
fill the queue.

A watch is used only where it sees every change; elsewhere :meth:`Watches.watch`
returns None and the caller checks by ``stat``:

- on Linux, on a filesystem whose every change passes through this kernel
  (ext4, xfs, btrfs, tmpfs...: :data:`LOCAL_TYPES`, found from the directory's
  device in ``/proc/self/mountinfo``), not on NFS, SMB, FUSE or a container's
  share of its host's disk, where another machine's writes queue nothing here;
- within the user's watch limit (``fs.inotify.max_user_watches``).

A file changed through a shared memory mapping queues no event; no Parquet, ORC,
CSV or JSON writer writes that way. A watch follows the directory, not its
path: a rename of a directory above it queues nothing for it, which is why
:class:`Mark` tells a directory that moved (or was deleted, or the queue
overflowed) from one whose contents changed, and why the caller stats the top
directory of a walk."""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

try:
    import inotify_simple
    from inotify_simple import flags
except ImportError:  # not on Linux: every directory is checked by stat
    inotify_simple = None

LOCAL_TYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "jfs", "bcachefs",
                         "overlay"})
if inotify_simple is not None:
    _MASK = (flags.MODIFY | flags.ATTRIB | flags.CLOSE_WRITE | flags.CREATE | flags.DELETE | flags.MOVED_FROM
             | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF)
    _GONE = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED | flags.UNMOUNT


class Since(Enum):
    """What happened to a watched directory since its :class:`Mark`."""

    NOTHING = "nothing"
    CHANGED = "changed"  # an entry of it was added, removed, renamed, written or touched
    MOVED = "moved"  # it was itself moved or deleted, or events were lost: what is under it may be another tree


@dataclass(frozen=True)
class Mark:
    """A watched directory's place in the event queue when it was read."""

    epoch: int
    wd: int
    changes: int
    moves: int


class Watches:
    """The inotify watches of one process on the directories it read, with a count of events per watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._inotify: inotify_simple.INotify | None = None
        self._epoch = 0
        self._by_path: dict[str, int] = {}
        self._paths: collections.Counter[int] = collections.Counter()  # by watch: the paths reaching it
        self._changes: dict[int, int] = {}
        self._moves: dict[int, int] = {}
        self._events = 0  # read from the queue, of any kind
        self._local: dict[int, bool] = {}  # by st_dev

    def __len__(self) -> int:
        """The directories watched."""
        return len(self._by_path)

    def watch(self, path: str, device: int) -> Mark | None:
        """Watch directory ``path`` on ``device`` (its ``st_dev``) from now, to be read after this call; None
        where a watch would not see every change."""
        if inotify_simple is None or not self._is_local(device):
            return None
        with self._lock:
            try:
                wd = self._open().add_watch(path, _MASK)
            except OSError:  # past the user's inotify limits, or the directory is gone: checked by stat
                return None
            old = self._by_path.get(path)
            if old is not None and old != wd:
                self._remove(path)
            if old != wd:
                self._by_path[path] = wd
                self._paths[wd] += 1
            self._drain()
            return Mark(self._epoch, wd, self._changes.setdefault(wd, 0), self._moves.setdefault(wd, 0))

    def since(self, marks: Sequence[Mark]) -> list[Since]:
        """What happened to each directory watched at ``marks`` since (the queue read once for them all)."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: its parent's queue is not its own
                return [Since.MOVED] * len(marks)
            self._drain()
            return [self._since(mark) for mark in marks]

    def _since(self, mark: Mark) -> Since:
        if mark.epoch != self._epoch or self._moves.get(mark.wd) != mark.moves:
            return Since.MOVED
        return Since.NOTHING if self._changes.get(mark.wd) == mark.changes else Since.CHANGED

    def state(self) -> tuple[int, int, int]:
        """What every :meth:`since` answer depends on, the queue read first: equal states mean equal answers for
        the same marks, so a caller that saw nothing happen at one state knows nothing happened at an equal one."""
        with self._lock:
            if self._pid == os.getpid():  # a forked child must not read its parent's queue
                self._drain()
            return os.getpid(), self._epoch, self._events

    def forget(self, path: str) -> None:
        """Stop watching ``path`` (its listing is no longer kept)."""
        with self._lock:
            if self._pid == os.getpid():
                self._remove(path)

    def _open(self) -> inotify_simple.INotify:
        if self._inotify is None or self._pid != os.getpid():
            self._inotify = inotify_simple.INotify()
            self._pid = os.getpid()
            self._epoch += 1
            for kept in (self._by_path, self._paths, self._changes, self._moves):
                kept.clear()
        return self._inotify

    def _drain(self) -> None:
        if self._inotify is None:
            return
        for event in self._inotify.read(timeout=0):
            self._events += 1
            if event.mask & flags.Q_OVERFLOW:
                self._epoch += 1
            elif event.mask & _GONE:
                self._moves[event.wd] = self._moves.get(event.wd, 0) + 1
            else:
                self._changes[event.wd] = self._changes.get(event.wd, 0) + 1

    def _remove(self, path: str) -> None:
        wd = self._by_path.pop(path, None)
        if wd is None:
            return
        self._paths[wd] -= 1
        if self._paths[wd] <= 0 and self._inotify is not None:
            del self._paths[wd]
            with contextlib.suppress(OSError):  # already dropped by the kernel (the directory was deleted)
                self._inotify.rm_watch(wd)

    def _is_local(self, device: int) -> bool:
        local = self._local.get(device)
        if local is None:
            local = self._local[device] = _filesystem_type(device) in LOCAL_TYPES
        return local


def _filesystem_type(device: int) -> str | None:
    """The type of the filesystem mounted from ``device``, from ``/proc/self/mountinfo``; None if not found (a
    btrfs subvolume's directories, for one, show another device than its mount)."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo") as mounts:
            for line in mounts:
                fields, _, rest = line.partition(" - ")
                if fields.split(" ")[2] == wanted:
                    return rest.split(" ", 1)[0]
    except OSError:
        pass
    return None
