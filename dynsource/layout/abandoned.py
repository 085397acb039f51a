"""Abandoned writes: what a write killed before it finished leaves in a table, and its removal.

A write killed in its task phase leaves its staging directory
(``<table>/.dynsource-staging-<job>/``); one killed during its commit leaves a
*pending* commit record, whose files dynsource's readers do not list but other
readers of the directories (``spark.read.parquet``) do. Both are hidden names
that no reader of the table lists, so they cost only storage until removed.

:func:`vacuum` removes those older than an age (a write still running keeps
writing into its staging directory, and a commit takes seconds), and the
committed records past :data:`~dynsource.layout.commits.KEPT_SECONDS` with what they
replaced. Every commit runs it after its commit point, best effort, with the
write option ``abandonedWriteAgeMs``; :func:`dynsource.vacuum` and ``dynsource
table vacuum`` run it on demand, with a dry run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynsource.layout import commits


@dataclass(frozen=True)
class Abandoned:
    """What :func:`vacuum` found to remove (or removed), each path relative to the table."""

    staging: tuple[str, ...] = ()  # staging directories of writes that never committed
    pending: tuple[str, ...] = ()  # jobs whose commit was left pending
    files: tuple[str, ...] = ()  # the data files those pending commits had moved into the table
    expired: tuple[str, ...] = ()  # jobs whose committed record is past its time, with what they replaced

    def __bool__(self) -> bool:
        return bool(self.staging or self.pending or self.expired)

    def lines(self) -> list[str]:
        """One line per directory, record and file, for the command's output."""
        return ([f"staging directory {path}" for path in self.staging]
                + [f"pending commit record of job {job}" for job in self.pending]
                + [f"data file of a pending commit {path}" for path in self.files]
                + [f"expired commit record of job {job}" for job in self.expired])


def vacuum(fs: Any, table: str, older_than_s: float, *, dry_run: bool = False, now: float | None = None) -> Abandoned:
    """Remove (with ``dry_run``, only find) the abandoned writes of the table at ``table`` (a path of ``fs``) older
    than ``older_than_s``, and its expired commit records."""
    now = time.time() if now is None else now
    root = table.rstrip("/")
    staging = _stale_staging(fs, root, now - older_than_s)
    records = commits.records(fs, root)
    pending = [r for r in records if r["state"] == "pending" and r["written_at"] < now - older_than_s]
    pending_files = [path for r in pending for path in (r["files"] or _files_of_job(fs, root, r["job"]))]
    expired = [r for r in records if r["state"] == "committed" and now - r["written_at"] > commits.KEPT_SECONDS]
    found = Abandoned(tuple(staging), tuple(r["job"] for r in pending), tuple(pending_files),
                      tuple(r["job"] for r in expired))
    if dry_run:
        return found
    for record in pending:  # files first: a record removed before its files would let readers see them
        commits.delete_files(fs, root, record["files"] or _files_of_job(fs, root, record["job"]))
        commits.remove(fs, root, record["job"])
    for record in expired:
        commits.delete_files(fs, root, record["replaced"])
        commits.remove(fs, root, record["job"])
    for directory in staging:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(f"{root}/{directory}", recursive=True)
    return found


def _stale_staging(fs: Any, root: str, before: float) -> list[str]:
    """The staging directories under ``root`` whose newest entry was modified before ``before``."""
    try:
        entries = fs.ls(root, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    stale = []
    for entry in sorted(entries):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(commits.STAGING_PREFIX) and _newest(fs, f"{root}/{name}") < before:
            stale.append(name)
    return stale


def _newest(fs: Any, directory: str) -> float:
    """When anything in ``directory`` (itself included, where the store keeps directories) last changed."""
    times = [_modified(info) for info in fs.find(directory, withdirs=True, detail=True).values()]
    with contextlib.suppress(FileNotFoundError):
        times.append(_modified(fs.info(directory)))
    return max((t for t in times if t is not None), default=0.0)


def _modified(info: Mapping[str, Any]) -> float | None:
    """An fsspec entry's modification time as a POSIX timestamp: ``mtime`` (local), ``LastModified`` (S3),
    ``created`` (memory)."""
    for key in ("mtime", "LastModified", "created"):
        value = info.get(key)
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _files_of_job(fs: Any, root: str, job: str) -> list[str]:
    """The table's data files a job wrote, by the job token in their names (for a pending record naming none)."""
    token = commits.job_token(job)
    return [path[len(root) + 1:] for path in fs.find(root)
            if commits.job_of(path.rsplit("/", 1)[-1]) == token]
