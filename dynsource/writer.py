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
attempts Spark kept. It gathers each partition's files under the staging
directory, then publishes each partition directory: a directory new to the
table is renamed into place in one step; into an existing one the files are
moved one by one (append), or the old directory is moved aside and the new one
renamed in (overwrite). A static overwrite also moves aside every partition
(and file) the job did not write. What was moved aside is deleted last, with
the staging directory. :meth:`DynsourceWriter.abort` deletes the staging
directory: a failed job leaves nothing visible.

On a local or HDFS filesystem a rename is atomic, so a reader sees a new
partition whole or not at all, and a replaced one as before or after, absent for
the instant between its two renames. On object stores (``s3://`` through
fsspec) a rename is a copy and a delete of each file, as with Spark's own file
committer there: a reader during the commit can see part of it.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.orc as porc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from dynsource import files, partitions, storage, tableschema
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
        staging = f"{root}/{STAGING_PREFIX}{self.job}/{attempt}"
        sinks: dict[str, _Sink] = {}
        try:
            for batch in iterator:
                for directory, rows in _by_directory(batch, self.target.partition_columns):
                    if directory not in sinks:
                        name = f"part-{_task_id()}-{self.job[:12]}-{attempt}.{_EXTENSIONS[self.target.format]}"
                        sinks[directory] = _Sink(fs, f"{staging}/{directory}".rstrip("/"), name, self.target.format)
                    sinks[directory].write(rows)
        finally:
            for sink in sinks.values():
                sink.close()
        return TaskFiles(attempt, tuple(WrittenFile(d, s.name, s.rows) for d, s in sorted(sinks.items())))

    def commit(self, messages: Sequence[TaskFiles | None]) -> None:
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        staging = f"{root}/{STAGING_PREFIX}{self.job}"
        ready, replaced = f"{staging}/ready", f"{staging}/replaced"
        directories = _gather(fs, staging, ready, [m for m in messages if m is not None])
        if self.overwrite and (self.target.partition_overwrite_mode == "static" or not self.target.partition_columns):
            for entry in _visible_entries(fs, root):  # static: the table becomes what the job wrote
                _move(fs, entry, f"{replaced}/{entry.rsplit('/', 1)[-1]}")
        for directory in sorted(directories):
            final = f"{root}/{directory}".rstrip("/")
            if directory and self.overwrite and fs.exists(final):  # dynamic: only the partitions written
                _move(fs, final, f"{replaced}/{directory}")
            _publish(fs, f"{ready}/{directory}".rstrip("/"), final)
        with contextlib.suppress(FileNotFoundError):  # an object store has no empty directories left to remove
            fs.rm(staging, recursive=True)

    def abort(self, messages: Sequence[TaskFiles | None]) -> None:
        fs, root = files.open_table(self.target.url, self.target.storage_options)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(f"{root}/{STAGING_PREFIX}{self.job}", recursive=True)


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


def _gather(fs: Any, staging: str, ready: str, messages: Sequence[TaskFiles]) -> set[str]:
    """Move the kept attempts' files to ``ready/<directory>``; the partition directories they fill."""
    directories = set()
    for message in messages:
        for written in message.files:
            source = f"{staging}/{message.attempt}/{written.directory}".rstrip("/")
            target = f"{ready}/{written.directory}".rstrip("/")
            fs.makedirs(target, exist_ok=True)
            fs.mv(f"{source}/{written.name}", f"{target}/{written.name}")
            directories.add(written.directory)
    return directories


def _publish(fs: Any, ready: str, final: str) -> None:
    """Make the files gathered in ``ready`` the partition directory ``final``, or add them to it when it exists."""
    if not fs.exists(final):
        _move(fs, ready, final)
        return
    for path in fs.ls(ready, detail=False):
        fs.mv(path, f"{final}/{path.rstrip('/').rsplit('/', 1)[-1]}")


def _visible_entries(fs: Any, root: str) -> list[str]:
    """The table's top-level files and directories that readers list (not hidden, not the staging directories)."""
    try:
        listed = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    return [path.rstrip("/") for path in listed if not partitions.is_hidden(path.rstrip("/").rsplit("/", 1)[-1])]


def _move(fs: Any, path: str, target: str) -> None:
    """Move the file or directory ``path`` to ``target``: one rename on a local disk, else file by file (an
    object store has no directories to rename, and fsspec moves each object by a copy and a delete)."""
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    if storage.is_local(fs.unstrip_protocol(path)) or fs.isfile(path):
        fs.mv(path, target)
        return
    for file in fs.find(path):
        fs.mv(file, target + file[len(path):])


def plan_write(options: ScanOptions, schema: StructType) -> WriteTarget:
    """What a write of rows of ``schema`` into the table of ``options`` does, checked on the driver first: the
    partition columns (``partitionColumns``, else those of the table's existing directories, else none)."""
    fs, root = files.open_table(options.path, options.storage_options)
    if fs.isfile(root):
        raise ValueError(f"Option 'path' = {options.path!r} is a file; a write needs the table's directory.")
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    declared = dict(options.partition_columns)
    existing = _existing_branch(fs, root, options)
    columns = tuple(declared) or (existing.columns if existing is not None else ())
    if existing is not None and options.format in ("parquet", "orc"):  # csv and json files store no types
        _check_data_columns(types, columns, tableschema.table_schema(existing, fs, options), options.path)
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


def _existing_branch(fs: Any, root: str, options: ScanOptions) -> Listing | None:
    """The walk down the table's first branch to its first data file; None for a table with no data yet."""
    if not fs.exists(root):
        return None
    _, walk = tableschema.table_walk(options)
    listing = walk.enumerate(tableschema.first_branch)
    return listing if any(p.files for p in listing.partitions) else None


def _check_data_columns(types: dict[str, str], partition_columns: Sequence[str], table: StructType, path: str) -> None:
    """The rows' data columns must be those of the table's files, with their types (checked on its first file)."""
    stored = {f.name: f.dataType.simpleString() for f in table.fields if f.name not in partition_columns}
    given = {name: type_name for name, type_name in types.items() if name not in partition_columns}
    if set(stored) != set(given):
        raise ValueError(f"The rows to write have the data columns {sorted(given)}, but the files of table "
                         f"'{path}' have {sorted(stored)}.")
    for name, type_name in stored.items():
        if given[name] != type_name:
            raise ValueError(f"Column '{name}' is {given[name]} in the rows to write, but {type_name} in the files "
                             f"of table '{path}'; cast it first.")
