"""One directory of a table: what it holds, as a walk sees it, and on a local disk kept between walks.

:func:`read` returns a directory's visible data files, its plain
sub-directories and its ``key=value`` ones (hidden names skipped as Spark skips
them), from any fsspec filesystem. On a local disk it reads by ``os.scandir``,
which types entries without a ``stat`` each, and stats only the visible files
(Spark writes a hidden ``.crc`` beside each data file); fsspec's local ``ls``
stats every entry, ten times slower on a table root of 100k partition
directories.

A warm session walks a table at every query, so that files written since are
read. On a local disk, reading a directory again costs a ``scandir`` and Python
work on each entry, so :data:`LISTINGS` keeps each local directory's contents
and serves them while nothing in it changed. Where :mod:`dynsource.layout.watches` can
watch the directory (Linux, a local filesystem), the kernel's inotify queue
says so: checking TPC-DS ``store_sales`` (1,823 partition directories, 3,227
files) costs 1 ms instead of 20 ms by ``stat``. A watch is made before the
directory is read, so a change made while it is read shows at the next walk.

Elsewhere, checking costs a ``stat`` of the directory (an entry added, removed
or renamed changes its mtime and ctime) and of each data file it held (a file
rewritten in place changes its size, mtime or ctime, not its directory's; one
replaced by a rename has another inode). A change within the same tick of the
filesystem's clock as the listing would leave every time stamp as it was, so
there a directory is kept only when neither it nor any of its files changed
within ``settle_ns`` before it was listed (git's rule for "racily clean"
entries); a freshly written directory is listed again at each walk until it has
settled. ctime, unlike mtime, cannot be set back by a tool that preserves times
(``rsync -t``, ``touch -d``). A walk of ``store_sales`` from kept listings
takes 13 ms with watches, 27 ms by ``stat``, 66 ms reading each directory."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dynsource import directorynames, storage
from dynsource.layout import commits
from dynsource.layout.watches import Mark, Since, Watches
from dynsource.runtime.lru import LruMap

SETTLE_NS = 2_000_000_000
KEPT = 100_000  # directories, the least recently used dropped first
HELD_KEPT = 256  # walks' reads that held on watches alone (see DirectoryListings.hold)


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int


# A directory's visible files (by path), plain sub-directories and (path, column, raw value) of its key=value ones.
Contents = tuple[tuple[DataFile, ...], tuple[str, ...], tuple[tuple[str, str, str], ...]]
Directory = tuple[tuple[DataFile, ...], tuple[str, ...], tuple[tuple[str, str, str], ...], bool]  # + has records


def read(fs: fsspec.AbstractFileSystem, path: str, top: bool = False) -> Directory:
    """The :data:`Contents` of directory ``path``, and whether it holds the commit records' directory; on a local
    disk, those kept from an earlier walk while the directory and its files are unchanged. ``top``: the first
    directory of a walk, whose parent the walk did not read."""
    if isinstance(fs, LocalFileSystem):
        return LISTINGS.get(path, top)
    entries = []
    with storage.failing_as(f"list directory '{path}'"):
        listed = fs.ls(path, detail=True)
    for entry in listed:
        child = entry["name"].rstrip("/")
        entries.append((child.rsplit("/", 1)[-1], child, None if entry["type"] == "directory" else int(entry["size"])))
    return _directory(entries)


def read_alike(fs: fsspec.AbstractFileSystem, read: Sequence[tuple[str, Directory]]) -> bool:
    """Whether each directory of ``read`` (a walk's, with what it held) would be read now as it was then.

    Only on a local disk, and only when each is still kept as the very listing read then, and it and its data
    files unchanged since (a directory not settled then and not watched was not kept, so it never passes)."""
    return bool(read) and isinstance(fs, LocalFileSystem) and LISTINGS.hold(read)


def _directory(entries: Iterable[tuple[str, str, int | None]]) -> Directory:
    """A :data:`Directory` from its (name, path, size) entries, size None for a sub-directory."""
    files, plain, kv, has_records = [], [], [], False
    for name, child, size in entries:
        if directorynames.is_hidden(name):
            has_records = has_records or name == commits.DIRECTORY
        elif size is not None:
            files.append(DataFile(child, size))
        else:
            parsed = directorynames.parse_directory_name(name)
            if parsed is None:
                plain.append(child)
            else:
                kv.append((child, parsed[0], parsed[1]))
    return tuple(sorted(files, key=lambda f: f.path)), tuple(plain), tuple(sorted(kv)), has_records


def _read_local(path: str) -> tuple[Directory, list[str], list[os.stat_result]]:
    """A local directory read by ``os.scandir``, with its visible files' paths and the status each was read with
    (a file's size in the contents and its stamp come from one ``stat``)."""
    base = path.rstrip("/") + "/"
    entries, file_paths, statuses = [], [], []
    with os.scandir(path) as scan:
        for entry in scan:
            if entry.is_dir():
                entries.append((entry.name, base + entry.name, None))
            elif not directorynames.is_hidden(entry.name):
                status = entry.stat()
                entries.append((entry.name, base + entry.name, status.st_size))
                file_paths.append(base + entry.name)
                statuses.append(status)
    return _directory(entries), file_paths, statuses


@dataclass(frozen=True)
class _Kept:
    stamp: tuple[int, ...]
    file_paths: tuple[str, ...]
    file_stamps: tuple[tuple[int, ...], ...]
    contents: Directory
    mark: Mark | None  # its watch, if any: then checked by the watch instead of its stamps
    device: int


def stamp(status: os.stat_result) -> tuple[int, ...]:
    """What a change to a directory or file changes."""
    return status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


class DirectoryListings:
    """Listings of local directories by path, reused while their watches or their stamps hold."""

    def __init__(self, settle_ns: int = SETTLE_NS, kept: int = KEPT, watches: Watches | None = None) -> None:
        self.settle_ns = settle_ns
        self.kept = kept
        self.watches = watches
        self.reused = 0  # listings served without reading their directory
        self._listings: collections.OrderedDict[str, _Kept] = collections.OrderedDict()
        self._version = 0  # counts each directory read (its listing kept, replaced or not) and each dropped
        # By id: a walk's read that held on watches alone, kept with it, and the state it held at (see hold()).
        self._held: LruMap[tuple[Sequence[tuple[str, Directory]], tuple]] = LruMap(HELD_KEPT)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._listings)

    def get(self, path: str, top: bool = False) -> Directory:
        """Local directory ``path`` read by ``os.scandir``, or as kept while it and its data files are unchanged
        (``top``: see :func:`read`)."""
        with self._lock:
            kept = self._listings.get(path)
        if kept is not None:
            since = self._since([(path, kept)], top)[0]
            if since is Since.NOTHING:
                with self._lock:
                    self._listings.move_to_end(path)
                    self.reused += 1
                return kept.contents
            if since is Since.MOVED:  # the directories kept under it may be another tree's
                self._drop_under(path)
        listed_at = time.time_ns()
        status = os.stat(path)  # before reading: a change while it is read shows at the next walk
        mark = self.watches.watch(path, status.st_dev) if self.watches is not None else None
        directory = stamp(status)
        contents, file_paths, file_statuses = _read_local(path)
        file_stamps = tuple(stamp(status) for status in file_statuses)
        settled = listed_at - self.settle_ns
        with self._lock:
            self._version += 1
            if mark is not None or all(s[2] < settled and s[3] < settled for s in (directory, *file_stamps)):
                self._listings[path] = _Kept(directory, tuple(file_paths), file_stamps, contents, mark, status.st_dev)
                self._listings.move_to_end(path)
                while len(self._listings) > self.kept:
                    self._forget(self._listings.popitem(last=False)[0])
            elif self._listings.pop(path, None):
                self._forget(path)
        return contents

    def hold(self, read: Sequence[tuple[str, Directory]]) -> bool:
        """Whether each (path, contents) of ``read`` (a walk's, top first) is kept as those very contents,
        unchanged since.

        Where every directory of ``read`` is watched, a pass is remembered with the state it was found at: no
        directory read and no listing dropped since and no event read from the queue since means the same answer, so
        the next check costs a ``stat`` of the top directory instead of a look at each (3 ms of Python for TPC-DS
        ``store_sales``' 1,824 directories, held against the query's own work)."""
        state = self._state()  # before the look: anything after it shows as another state next time
        last = self._held.get(id(read))
        if last is not None and last[0] is read and last[1] == state:
            with self._lock:
                top = self._listings.get(read[0][0])
            return top is not None and _same_directory(read[0][0], top)
        with self._lock:
            kept = [self._listings.get(path) for path, _ in read]
        if any(entry is None or entry.contents is not held for (_, held), entry in zip(read, kept, strict=True)):
            return False
        entries = [(path, entry) for (path, _), entry in zip(read, kept, strict=True)]
        alike = all(since is Since.NOTHING for since in self._since(entries, top=True))
        if alike and all(entry.mark is not None for entry in kept):
            self._held.put(id(read), (read, state))
        return alike

    def _state(self) -> tuple:
        with self._lock:
            version = self._version
        return version, self.watches.state() if self.watches is not None else None

    def _since(self, entries: Sequence[tuple[str, _Kept]], top: bool) -> list[Since]:
        """What happened to each kept directory (path, kept) since it was read; ``top``: the first one is the top
        of a walk. A watch follows the directory, not its path, so the top is stat'ed too: a rename above it
        shows (one below it is an event of a watched directory). A directory found another is
        :attr:`Since.MOVED`: what is kept under it is dropped."""
        watched = iter(self.watches.since([kept.mark for _, kept in entries if kept.mark is not None])
                       if self.watches is not None else ())
        since = [self._stamped_since(path, kept) if kept.mark is None else next(watched) for path, kept in entries]
        if top and entries[0][1].mark is not None and since[0] is Since.NOTHING and not _same_directory(*entries[0]):
            since[0] = Since.MOVED
        return since

    @staticmethod
    def _stamped_since(path: str, kept: _Kept) -> Since:
        try:
            status = os.stat(path)
            if not _same_directory(path, kept, status):
                return Since.MOVED
            unchanged = (stamp(status) == kept.stamp
                         and tuple(stamp(os.stat(file_path)) for file_path in kept.file_paths) == kept.file_stamps)
        except OSError:  # removed since: listed again, which reports it as a walk does
            return Since.MOVED
        return Since.NOTHING if unchanged else Since.CHANGED

    def _drop_under(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        with self._lock:
            for under in [kept for kept in self._listings if kept.startswith(prefix)]:
                del self._listings[under]
                self._version += 1
                self._forget(under)

    def _forget(self, path: str) -> None:
        if self.watches is not None:
            self.watches.forget(path)


def _same_directory(path: str, kept: _Kept, status: os.stat_result | None = None) -> bool:
    """Whether ``path`` still names the very directory ``kept`` was read from."""
    try:
        status = status or os.stat(path)
    except OSError:
        return False
    return (status.st_dev, status.st_ino) == (kept.device, kept.stamp[0])


LISTINGS = DirectoryListings(watches=Watches())
