"""Commit records: what makes a write's files appear to dynsource's readers all at once.

A write's commit moves its files into the table one by one: a directory rename
cannot put files into a partition that already exists, and an object store has
no rename at all. So that no reader sees part of a write, the commit keeps a
record in the table's hidden ``_dynsource_commits`` directory, and the
partition enumerator, which plans every dynsource read, honours it:

1. ``pending``, written before the first file moves, naming the files the job
   moves in: they (their names carry the job's id,
   ``part-<task>-<job>-<attempt>.<format>``) are not listed.
2. ``committed``, written over the pending record in one step (a rename on a
   local disk, one PUT on an object store) once every file is in place:
   the job's files are listed, and the files it replaces (an overwrite's, named
   in the record) are not. This is the commit point: a write whose committed
   record is written has committed, whatever happens after. When writing the
   record fails in a way that leaves its outcome unknown (a timeout, a
   connection reset after the request was sent), :func:`outcome` reads it back.
   The replaced files are then deleted.
3. The committed record is deleted by a later commit, an hour
   (:data:`KEPT_SECONDS`) after it was written.

A walk reads the records before and after it lists the table, and walks again
when they differ: a write that committed meanwhile could have moved files
between two directories' listings. Equal records mean every file move and
delete during the walk was one the records hide, so a reader sees the table as
it was before a commit or after it, never half of one, on every filesystem.

Readers other than dynsource's (``spark.read.parquet`` on the directory,
pyarrow's dataset) do not read the records: during a commit they see the files
as they are moved, as with Spark's own file committer. A commit whose driver is
killed before its record says ``committed`` leaves the record pending: its
files stay hidden from dynsource's readers (the table is as before), and remain
in the partition directories for other readers until the abandoned write is
removed (:mod:`dynsource.layout.abandoned`: by a later commit, or a vacuum). Killed
after, its replaced files are hidden, and deleted when a later commit expires
the record.

Records are JSON (``{"job", "state", "replaced", "files", "written_at"}``), read
as data: nothing in them is executed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dynsource import directorynames, storage

log = logging.getLogger(__name__)
DIRECTORY = "_dynsource_commits"
KEPT_SECONDS = 3600  # how long a committed record outlives its commit: far longer than any walk of the table
WALKS = 5  # walks of a table whose records change during each of them, before giving up
STAGING_PREFIX = ".dynsource-staging-"  # a write job's hidden directory of task files, <table>/<prefix><job>
READ_BACK_ATTEMPTS = 5  # reads of a record whose write failed with an unknown outcome
READ_BACK_PAUSE_S = 0.5  # before the second read back, doubling
_JOB_IN_NAME = re.compile(r"^part-\d+-([0-9a-f]{12})-[0-9a-f]{32}\.")
_STATES = ("pending", "committed")


def job_token(job: str) -> str:
    """The part of a job's id its data files' names carry."""
    return job[:12]


def file_name(task: str, job: str, attempt: str, extension: str) -> str:
    """A data file's name: unique per task attempt, and telling which job wrote it."""
    return f"part-{task}-{job_token(job)}-{attempt}.{extension}"


def job_of(name: str) -> str | None:
    """The job token in a data file's name, None for a file no dynsource write named."""
    match = _JOB_IN_NAME.match(name)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Records:
    """The commit records of a table: which jobs are pending and which files committed jobs replaced."""

    states: frozenset[tuple[str, str]] = frozenset()  # (job, state)
    replaced: frozenset[str] = frozenset()  # paths relative to the table's root

    @property
    def pending(self) -> frozenset[str]:
        return frozenset(job_token(job) for job, state in self.states if state == "pending")

    def hides(self, relative_path: str) -> bool:
        """Whether a data file at ``relative_path`` (from the table's root) is not part of the table now."""
        if relative_path in self.replaced:
            return True
        return job_of(relative_path.rsplit("/", 1)[-1]) in self.pending


NONE = Records()


def read(fs: Any, table: str) -> Records:
    """The records of the table at ``table`` (a path of ``fs``); none when it has no records directory."""
    states, replaced = set(), set()
    for record in records(fs, table):
        states.add((record["job"], record["state"]))
        if record["state"] == "committed":
            replaced.update(record["replaced"])
    return Records(frozenset(states), frozenset(replaced))


def write(fs: Any, table: str, job: str, state: str, replaced: Sequence[str] = (), files: Sequence[str] = ()) -> None:
    """Write (or replace, in one step) ``job``'s record: ``pending`` with the ``files`` it moves in, or
    ``committed`` with the files it ``replaced`` (paths relative to the table)."""
    directory = f"{table.rstrip('/')}/{DIRECTORY}"
    record = json.dumps({"job": job, "state": state, "replaced": list(replaced), "files": list(files),
                         "written_at": time.time()})
    fs.makedirs(directory, exist_ok=True)
    final = f"{directory}/{job}.json"
    if not storage.is_local(fs.unstrip_protocol(directory)):
        fs.pipe_file(final, record.encode())  # one PUT: readers see the old object or the new one
        return
    temporary = f"{directory}/.{job}.json.{state}"  # hidden until renamed over the record
    fs.pipe_file(temporary, record.encode())
    fs.mv(temporary, final)


def outcome(fs: Any, table: str, job: str) -> str | None:
    """``job``'s recorded state (``pending``, ``committed``; ``absent`` without a record) as read back after a write
    of its record failed; None when it cannot be read in :data:`READ_BACK_ATTEMPTS` tries."""
    pause = READ_BACK_PAUSE_S
    for attempt in range(READ_BACK_ATTEMPTS):
        try:
            found = record(fs, table, job)
        except (OSError, ValueError) as error:  # the store still failing, or a record read half-written
            log.warning("dynsource: reading back the commit record of job %s of '%s' failed (%s)", job, table, error)
            if attempt + 1 < READ_BACK_ATTEMPTS:
                time.sleep(pause)
                pause *= 2
            continue
        return "absent" if found is None else found["state"]
    return None


def remove(fs: Any, table: str, job: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.rm(f"{table.rstrip('/')}/{DIRECTORY}/{job}.json")


def record(fs: Any, table: str, job: str) -> dict | None:
    """``job``'s record (its ``state`` and the files it ``replaced``), or None when it has none."""
    return next((found for found in records(fs, table) if found["job"] == job), None)


def delete_files(fs: Any, table: str, relative_paths: Sequence[str]) -> None:
    """Delete these files of the table, and on a local disk the directories they leave empty."""
    root = table.rstrip("/")
    for path in relative_paths:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{root}/{path}")
    if not storage.is_local(fs.unstrip_protocol(root)):
        return  # an object store has no directories to leave behind
    parents = {"/".join(path.split("/")[:depth]) for path in relative_paths for depth in range(1, path.count("/") + 1)}
    for directory in sorted(parents, key=lambda p: p.count("/"), reverse=True):
        with contextlib.suppress(OSError):  # not empty: it holds other files
            fs.rmdir(f"{root}/{directory}")


def records(fs: Any, table: str) -> list[dict]:
    """The table's commit records as stored (``job``, ``state``, ``replaced``, ``files``, ``written_at``)."""
    directory = f"{table.rstrip('/')}/{DIRECTORY}"
    # s3fs-like filesystems cache listings, so a record written since would not show. Only this directory's
    # listing is dropped: invalidate_cache(path) also drops its parents', which the walk lists from.
    fs.dircache.pop(directory, None)
    try:
        with storage.failing_as(f"list the commit records '{directory}'"):
            paths = fs.ls(directory, detail=False)
    except (FileNotFoundError, NotADirectoryError):  # no records; or the table is a single file
        return []
    found = []
    for path in sorted(paths):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if directorynames.is_hidden(name) or not name.endswith(".json"):
            continue
        try:
            with storage.failing_as(f"read the commit record '{path}'"):
                content = fs.cat_file(path)
            found.append(_parsed(content, path))
        except FileNotFoundError:
            continue  # expired while this walk read the records: they differ from the first read, which walks again
    return found


def _parsed(content: bytes, path: str) -> dict:
    try:
        record = json.loads(content)
        valid = (isinstance(record, dict) and isinstance(record.get("job"), str) and record.get("state") in _STATES
                 and isinstance(record.get("replaced"), list) and all(isinstance(p, str) for p in record["replaced"])
                 and isinstance(record.get("written_at"), (int, float))
                 and isinstance(record.setdefault("files", []), list)
                 and all(isinstance(p, str) for p in record["files"]))
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"Commit record '{path}' is not one dynsource writes (a JSON object with job, state "
                         f"'pending' or 'committed', replaced paths and written_at), so which files belong to the "
                         "table cannot be told. It is written in one step; remove it only if no write to the table "
                         "is running and its files are accounted for.")
    return record
