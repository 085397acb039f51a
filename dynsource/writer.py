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
attempts Spark kept. Under a pending commit record it moves each file into its
partition directory; then the record says ``committed``, naming the files an
overwrite replaces (every data file of the table for a static overwrite, those
of the partitions written for a dynamic one), which are deleted. dynsource's
readers see the table before the record's switch or after it, on any
filesystem (:mod:`dynsource.commits`). :meth:`DynsourceWriter.abort` removes
what a failed commit moved and the staging directory: a failed job leaves
nothing visible.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.orc as porc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from dynsource import commits, files, partitions, tableschema
from dynsource.enumerator import Listing
from dynsource.options import ScanOptions
from dynsource.storage import StorageOptions
from dynsource.types import normalize_type

STAGING_PREFIX = ".dynsource-staging-"
_WRITABLE = re.compile(r"^(tinyint|smallint|int|bigint|decimal\(\d+,\d+\)|string|date|boolean)$")
_EXTENSIONS = {"parquet": "parquet", "orc": "orc", "csv": "csv", "json": "json"}


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a write puts its rows: what :meth:`DynsourceWriter.write` needs in the tasks."""

    url: str
    storage_options: StorageOptions
    format: str
    partition_columns: tuple[str, ...]
    partition_overwrite_mode: str = "static"


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
                for directory, rows in _by_directory(batch, self.target.partition_columns):
                    if directory not in sinks:
                        name = commits.file_name(_task_id(), self.job, attempt, _EXTENSIONS[self.target.format])
                        sinks[directory] = _Sink(fs, f"{staging}/{directory}".rstrip("/"), name, self.target.format)
                    sinks[directory].write(rows)
        finally:
            for sink in sinks.values():
                sink.close()
        return TaskFiles(attempt, tuple(WrittenFile(d, s.name, s.rows) for d, s in sorted(sinks.items())))

    def commit(self, messages: Sequence[TaskFiles | None]) -> None:
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        kept = [m for m in messages if m is not None]
        static = self.target.partition_overwrite_mode == "static" or not self.target.partition_columns
        replaced = [] if not self.overwrite else _data_files(fs, root, [""] if static else _directories(kept))
        commits.write(fs, root, self.job, "pending")
        for message, written in _files(kept):
            target = f"{root}/{written.directory}".rstrip("/")
            fs.makedirs(target, exist_ok=True)
            fs.mv(f"{self._staging(root)}/{message.attempt}/{written.path}", f"{target}/{written.name}")
        commits.write(fs, root, self.job, "committed", replaced)
        commits.delete_files(fs, root, replaced)
        commits.expire(fs, root)
        self._remove_staging(fs, root)

    def abort(self, messages: Sequence[TaskFiles | None]) -> None:
        """Undo a commit that failed before its record said committed (finish one that failed after), and
        remove the staging directory."""
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        recorded = commits.record(fs, root, self.job) or {"state": None}
        if recorded["state"] == "pending":
            commits.delete_files(fs, root, [w.path for _, w in _files([m for m in messages if m is not None])])
            commits.remove(fs, root, self.job)
        elif recorded["state"] == "committed":
            commits.delete_files(fs, root, recorded["replaced"])
        self._remove_staging(fs, root)

    def _staging(self, root: str) -> str:
        return f"{root}/{STAGING_PREFIX}{self.job}"

    def _remove_staging(self, fs: Any, root: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # an object store has no empty directories left to remove
            fs.rm(self._staging(root), recursive=True)


def _task_id() -> str:
    from pyspark import TaskContext

    context = TaskContext.get()
    return f"{context.partitionId():05d}" if context is not None else "00000"


def _by_directory(batch: pa.RecordBatch, columns: Sequence[str]) -> Iterator[tuple[str, pa.Table]]:
    """The rows of ``batch`` by their partition directory (``''`` without partition columns), those columns dropped."""
    table = pa.Table.from_batches([batch])
    if not table.num_rows:
        return
    if not columns:
        yield "", table
        return
    segments = [_segments(table.column(column), column) for column in columns]
    directories = segments[0] if len(segments) == 1 else pc.binary_join_element_wise(*segments, "/")
    data = table.drop_columns(list(columns))
    order = pc.sort_indices(directories)
    directories, data = directories.take(order), data.take(order)
    changes = pc.indices_nonzero(pc.not_equal(directories[1:], directories[:-1])).to_pylist()
    starts = [0, *(index + 1 for index in changes)]
    for start, end in zip(starts, [*starts[1:], len(directories)], strict=True):
        yield directories[start].as_py(), data.slice(start, end - start)


def _segments(values: pa.ChunkedArray, column: str) -> pa.ChunkedArray:
    """``column=value`` for each row, escaped as Spark escapes directory names; null and '' are Spark's null name."""
    text = pc.cast(values, pa.string())
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    text = pc.fill_null(text, partitions.DEFAULT_PARTITION_NAME)
    distinct = pc.unique(text)
    escaped = pa.array([partitions.escape_path_name(value) for value in distinct.to_pylist()], pa.string())
    prefix = partitions.escape_path_name(column) + "="
    return pc.binary_join_element_wise(prefix, pc.take(escaped, pc.index_in(text, distinct)), "")


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


def _data_files(fs: Any, root: str, directories: Sequence[str]) -> list[str]:
    """The data files readers list under these directories of the table, relative to its root (not the hidden
    ones: staging, commit records)."""
    found = []
    for directory in directories:
        try:
            paths = fs.find(f"{root}/{directory}".rstrip("/"))
        except FileNotFoundError:
            continue
        relative = [path[len(root) + 1:] for path in paths]
        found += [path for path in relative if not any(partitions.is_hidden(part) for part in path.split("/"))]
    return found


def plan_write(options: ScanOptions, schema: StructType) -> WriteTarget:
    """What a write of rows of ``schema`` into the table of ``options`` does, checked on the driver first: the
    partition columns (``partitionColumns``, else those of the table's existing directories, else none)."""
    fs, root = files.open_table(options.path, options.storage_options)
    try:
        kind = fs.info(root)["type"]
    except FileNotFoundError:
        kind = None  # a new table
    if kind not in (None, "directory"):
        raise ValueError(f"Option 'path' = {options.path!r} is a file; a write needs the table's directory.")
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    declared = dict(options.partition_columns)
    existing = _existing_branch(options) if kind == "directory" else None
    columns = tuple(declared) or (existing.columns if existing is not None else ())
    if existing is not None and options.format in ("parquet", "orc"):  # csv and json files store no types
        stored = tableschema.table_schema(existing, fs, options)
        check_columns({n: t for n, t in types.items() if n not in columns},
                      {f.name: f.dataType.simpleString() for f in stored.fields if f.name not in columns},
                      "the rows to write", f"the files of table '{options.path}'")
    for column in columns:
        if column not in types:
            raise ValueError(f"The rows to write have no partition column '{column}' (the table's partition columns "
                             f"are {list(columns)}); their columns are {list(types)}.")
        if declared and normalize_type(types[column]) != declared[column]:
            raise ValueError(f"Partition column '{column}' is {types[column]} in the rows to write, but option "
                             f"'partitionColumns' declares it {declared[column]}.")
        if not _WRITABLE.match(types[column]):
            raise ValueError(f"Partition column '{column}' is of type {types[column]}; dynsource writes partition "
                             "columns of integral, decimal, string, date and boolean types.")
    if columns and len(columns) == len(types):
        raise ValueError(f"Every column of the rows to write is a partition column ({list(columns)}): "
                         "the data files would have no column.")
    return WriteTarget(options.path, options.storage_options, options.format, columns,
                       options.partition_overwrite_mode)


def _existing_branch(options: ScanOptions) -> Listing | None:
    """The walk down the table's first branch to its first data file; None for a table with no data yet."""
    _, walk = tableschema.table_walk(options)
    listing = walk.enumerate(tableschema.first_branch)
    return listing if any(p.files for p in listing.partitions) else None


def check_columns(given: Mapping[str, str], expected: Mapping[str, str], given_name: str,
                  expected_name: str) -> None:
    """``given``'s columns (name -> type) must be ``expected``'s, with the same types."""
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing or extra:
        raise ValueError(f"The columns of {given_name} do not match those of {expected_name}, {sorted(expected)}: "
                         f"missing {missing}, unexpected {extra}.")
    for name, type_name in expected.items():
        if given[name] != type_name:
            raise ValueError(f"Column '{name}' is {given[name]} in {given_name}, but {type_name} in {expected_name}; "
                             "cast it first.")
