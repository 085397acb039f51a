"""Writes: a DataFrame's rows into a dynsource table's Hive layout, published by one commit on the driver.

Spark hands each write task's rows to :meth:`DynsourceWriter.write` as Arrow
batches. A task splits them by the values of the partition columns and writes
one file per partition directory under the job's staging directory,
``<table>/.dynsource-staging-<job>/<attempt>/<key=value/...>/part-<task>-<job>-<attempt>.<format>``:
a hidden name, which neither dynsource nor Spark lists, and a directory of its
own for each task attempt, so a retried or speculative attempt never adds a file
the commit would publish twice. The directory names are Spark's: values escaped
as Spark escapes them, ``__HIVE_DEFAULT_PARTITION__`` for null (and, as in
Spark, for an empty string); partition columns are not stored in the files.

:meth:`DynsourceWriter.commit` runs once, on the driver, with the files of the
attempts Spark kept. Under a pending commit record naming them it moves each
file into its partition directory; then the record says ``committed``, naming
the files an overwrite replaces (:mod:`dynsource.spark.writeplan`). That write is the
commit point: dynsource's readers see the table before it or after it, on any
filesystem (:mod:`dynsource.layout.commits`), and the write raises only if it did not
commit. What follows (deleting the replaced files and the staging directory,
removing abandoned writes, :mod:`dynsource.layout.abandoned`) is best effort: a failure
there is a WARNING, and the next commit or ``dynsource table vacuum`` finishes
it. :meth:`DynsourceWriter.abort` removes what a failed commit moved and the
staging directory: a failed job leaves nothing visible.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.orc as porc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from dynsource import directorynames, partitions
from dynsource.layout import abandoned, commits
from dynsource.scan import files
from dynsource.spark.writeplan import WriteTarget

log = logging.getLogger(__name__)
# Tests hold a write at a step to kill or fault it there: "<step>:<directory>" (see _pause_at).
PAUSE_ENV = "DYNSOURCE_WRITE_PAUSE"
_EXTENSIONS = {"parquet": "parquet", "orc": "orc", "csv": "csv", "json": "json"}


@dataclass(frozen=True)
class WrittenFile:
    directory: str  # the partition directory relative to the table ('' for a table without partitions)
    name: str
    rows: int

    @property
    def path(self) -> str:
        """Relative to the table (and to a task attempt's staging directory)."""
        return f"{self.directory}/{self.name}" if self.directory else self.name


@dataclass(frozen=True)
class TaskFiles(WriterCommitMessage):
    """A task attempt's commit message: its staging directory and the files it wrote there."""

    attempt: str
    files: tuple[WrittenFile, ...]


class DynsourceWriter(DataSourceArrowWriter):
    """Writes a job's rows under its staging directory; ``commit`` publishes them, ``abort`` removes them."""

    def __init__(self, target: WriteTarget, overwrite: bool) -> None:
        self.target = target
        self.overwrite = overwrite
        self.job = uuid.uuid4().hex  # made on the driver: every task of the job shares it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskFiles:
        attempt = uuid.uuid4().hex
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        staging = f"{self._staging(root)}/{attempt}"
        sinks: dict[str, _Sink] = {}
        try:
            for batch in iterator:
                for directory, rows in _by_directory(batch, self.target.partition_columns, self.target.zone):
                    if directory not in sinks:
                        name = commits.file_name(_task_id(), self.job, attempt, _EXTENSIONS[self.target.format])
                        sinks[directory] = _Sink(fs, f"{staging}/{directory}".rstrip("/"), name, self.target.format)
                    sinks[directory].write(rows)
        finally:
            for sink in sinks.values():
                sink.close()
        _pause_at("tasks")
        return TaskFiles(attempt, tuple(WrittenFile(d, s.name, s.rows) for d, s in sorted(sinks.items())))

    def commit(self, messages: Sequence[TaskFiles | None]) -> None:
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        kept = [m for m in messages if m is not None]
        self.target.check_written(fs, root, _directories(kept))
        commits.write(fs, root, self.job, "pending", files=[written.path for _, written in _files(kept)])
        _pause_at("pending")
        for message, written in _files(kept):
            target = f"{root}/{written.directory}".rstrip("/")
            fs.makedirs(target, exist_ok=True)
            fs.mv(f"{self._staging(root)}/{message.attempt}/{written.path}", f"{target}/{written.name}")
        _pause_at("moved")
        # Listed last, just before the commit point: a write that committed meanwhile is replaced too.
        replaced = self.target.replaced(fs, root, _directories(kept)) if self.overwrite else []
        self._publish(fs, root, replaced)
        _pause_at("committed")
        self._finish(fs, root, replaced)

    def abort(self, messages: Sequence[TaskFiles | None]) -> None:
        """Undo a commit that failed before its record said committed (finish one that committed), and remove the
        staging directory."""
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        recorded = commits.record(fs, root, self.job)
        if recorded is not None and recorded["state"] == "committed":
            self._finish(fs, root, recorded["replaced"])
            return
        if recorded is not None:  # pending: the files first, as without the record readers would list them
            moved = recorded["files"] or [w.path for _, w in _files([m for m in messages if m is not None])]
            commits.delete_files(fs, root, moved)
            commits.remove(fs, root, self.job)
        self._best_effort("its staging directory", self._remove_staging, fs, root)

    def _publish(self, fs: Any, root: str, replaced: Sequence[str]) -> None:
        """Write the committed record: the commit point. A failure whose outcome is unknown (a timeout, a reset
        after the request went out) is settled by reading the record back."""
        try:
            commits.write(fs, root, self.job, "committed", replaced)
        except Exception as error:
            state = commits.outcome(fs, root, self.job)
            if state == "committed":
                log.warning("dynsource: writing the commit record of '%s' failed (%s), but it reads back as "
                            "committed: the write committed.", self.target.url, error)
                return
            if state is None:
                raise CommitOutcomeUnknown(
                    f"The write to '{self.target.url}' may or may not have committed: writing its commit record "
                    f"failed ({error}) and the record could not be read back. Check the table's rows before "
                    "writing the same rows again."
                ) from error
            raise

    def _finish(self, fs: Any, root: str, replaced: Sequence[str]) -> None:
        """What follows the commit point, best effort: it can leave only hidden names behind."""
        self._best_effort("the files it replaced", commits.delete_files, fs, root, replaced)
        age_s = self.target.abandoned_age_ms / 1000
        self._best_effort("abandoned writes", abandoned.vacuum, fs, root, age_s)
        self._best_effort("its staging directory", self._remove_staging, fs, root)

    def _best_effort(self, what: str, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except Exception as error:  # the write has committed (or never will): a clean-up must not fail it
            log.warning("dynsource: removing %s of the write of job %s to '%s' failed (%s); it is hidden from "
                        "readers, and the next commit or `dynsource table vacuum` removes it.", what, self.job,
                        self.target.url, error)

    def _staging(self, root: str) -> str:
        return f"{root}/{commits.STAGING_PREFIX}{self.job}"

    def _remove_staging(self, fs: Any, root: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # an object store has no empty directories left to remove
            fs.rm(self._staging(root), recursive=True)


class CommitOutcomeUnknown(RuntimeError):
    """Writing a commit record failed in a way that may have written it, and reading it back failed too."""


def _pause_at(step: str) -> None:
    """Hold the write at ``step`` while a test's ``<directory>/<step>.hold`` exists (``$DYNSOURCE_WRITE_PAUSE`` =
    ``<step>:<directory>``), after creating ``<step>.reached`` there: a test kills or faults the write there."""
    wanted, _, directory = os.environ.get(PAUSE_ENV, "").partition(":")
    if wanted != step:
        return
    Path(directory, f"{step}.reached").touch()
    deadline = time.monotonic() + 600
    while Path(directory, f"{step}.hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _task_id() -> str:
    from pyspark import TaskContext

    context = TaskContext.get()
    return f"{context.partitionId():05d}" if context is not None else "00000"


def _by_directory(batch: pa.RecordBatch, columns: Sequence[str],
                  zone: dt.tzinfo | None) -> Iterator[tuple[str, pa.Table]]:
    """The rows of ``batch`` by their partition directory (``''`` without partition columns), those columns dropped."""
    table = pa.Table.from_batches([batch])
    if not table.num_rows:
        return
    if not columns:
        yield "", table
        return
    segments = [_segments(table.column(column), column, zone) for column in columns]
    directories = segments[0] if len(segments) == 1 else pc.binary_join_element_wise(*segments, "/")
    data = table.drop_columns(list(columns))
    order = pc.sort_indices(directories)
    directories, data = directories.take(order), data.take(order)
    changes = pc.indices_nonzero(pc.not_equal(directories[1:], directories[:-1])).to_pylist()
    starts = [0, *(index + 1 for index in changes)]
    for start, end in zip(starts, [*starts[1:], len(directories)], strict=True):
        yield directories[start].as_py(), data.slice(start, end - start)


def _segments(values: pa.ChunkedArray, column: str, zone: dt.tzinfo | None) -> pa.ChunkedArray:
    """``column=value`` for each row, as Spark names the directory: the value as Spark casts it to a string (a
    timestamp in the session's ``zone``), escaped; null and '' are Spark's null name."""
    distinct = pc.unique(values)
    names = [directorynames.escape_path_name(directory_value(value, zone)) for value in distinct.to_pylist()]
    prefix = directorynames.escape_path_name(column) + "="
    return pc.binary_join_element_wise(prefix, pc.take(pa.array(names, pa.string()), pc.index_in(values, distinct)),
                                       "")


class _Sink:
    """One data file being written: the format's Arrow writer over an fsspec file (JSON: lines written here)."""

    def __init__(self, fs: Any, directory: str, name: str, format_name: str) -> None:
        fs.makedirs(directory, exist_ok=True)
        self.name, self.format, self.rows = name, format_name, 0
        self._file = fs.open(f"{directory}/{name}", "wb")
        self._writer: Any = None

    def write(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        if self.format == "json":
            self._file.write("".join(json.dumps(row, default=_json_value) + "\n" for row in table.to_pylist()).encode())
        elif self.format == "orc":
            self._writer = self._writer or porc.ORCWriter(self._file)
            self._writer.write(table)
        else:
            writer = pq.ParquetWriter if self.format == "parquet" else pcsv.CSVWriter
            self._writer = self._writer or writer(self._file, table.schema)
            self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._file.close()


def _json_value(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _files(messages: Sequence[TaskFiles]) -> Iterator[tuple[TaskFiles, WrittenFile]]:
    return ((message, written) for message in messages for written in message.files)


def _directories(messages: Sequence[TaskFiles]) -> list[str]:
    return sorted({written.directory for _, written in _files(messages)})


def directory_value(value: Any, zone: dt.tzinfo | None) -> str:
    """The raw directory value (unescaped) Spark writes for a partition value: ``CAST(value AS STRING)`` in the
    session's ``zone`` (an instant is written as its wall-clock time there), null and ``''`` as the null name."""
    if value is None or value == "":
        return directorynames.DEFAULT_PARTITION_NAME
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            if zone is None:
                raise partitions.ZoneUnknownError(
                    f"Timestamp partition values need the session time zone ({partitions.TIME_ZONE_SETTING}).")
            value = value.astimezone(zone).replace(tzinfo=None)
        fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
        return f"{value.date().isoformat()} {value.hour:02d}:{value.minute:02d}:{value.second:02d}{fraction}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)
