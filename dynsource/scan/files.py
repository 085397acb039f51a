"""Data files: fsspec URLs to filesystems, file formats, schemas and reading splits as Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.json as pj
import pyarrow.parquet as pq

from dynsource import storage
from dynsource.scan.rowfilter import RowFilter
from dynsource.scan.splits import FileSplit


def open_table(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem (opened with ``storage_options``) and in-filesystem root of a table URL.

    A plain path is a local URL.
    """
    try:
        fs, root = storage.filesystem(url, storage_options)
    except (ValueError, ImportError) as error:  # an unknown protocol, or its package is not installed
        raise ValueError(
            f"Option 'path' = {url!r} cannot be opened: {error}. Expected a local path or an fsspec URL of an "
            "installed filesystem (file://, memory://, s3:// with s3fs...)."
        ) from None
    # fsspec shares one instance per URL kind and options, and s3fs-like ones cache listings in it: a reused
    # Python worker would otherwise plan a later query with partitions listed before the table changed.
    fs.invalidate_cache()
    return fs, root


def arrow_filesystem(fs: fsspec.AbstractFileSystem, sizes: Mapping[str, int] | None = None) -> pafs.FileSystem:
    """pyarrow's native filesystem where there is one (local), else fsspec wrapped for pyarrow; ``sizes`` are the
    files' sizes as a listing gave them (path -> bytes), which opening them then does not ask the store again."""
    if isinstance(fs, fsspec.implementations.local.LocalFileSystem):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(_ListedFiles(fs, dict(sizes or {})))


class _ListedFiles(pafs.FSSpecHandler):
    """fsspec for pyarrow, opening a file without first asking whether it exists: fsspec's ``isfile`` turns any
    error (a store's 500) into "no such file" and costs a request, while ``open`` raises what the store said. A
    file of known size opens without a request at all (s3fs asks for its size otherwise)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, sizes: dict[str, int]) -> None:
        super().__init__(fs)
        self.sizes = sizes

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        asked = iter(super().get_file_info([path for path in paths if path not in self.sizes]))
        return [pafs.FileInfo(path, pafs.FileType.File, size=self.sizes[path]) if path in self.sizes else next(asked)
                for path in paths]

    def open_input_file(self, path: str) -> pa.NativeFile:
        size = self.sizes.get(path)
        if size is None:
            return pa.PythonFile(self.fs.open(path, mode="rb"), mode="r")
        opened = self.fs.open(path, mode="rb", size=size)
        if isinstance(opened, fsspec.spec.AbstractBufferedFile):  # else it asks the store (s3fs: at its first read)
            opened.details = {"name": path, "size": size, "type": "file"}
        return pa.PythonFile(opened, mode="r")

    open_input_stream = open_input_file


def file_format(name: str) -> ds.FileFormat:
    if name == "parquet":
        # Spark writes timestamps as INT96 by default; read them at Spark's microsecond precision.
        return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
    return {"orc": ds.OrcFileFormat, "csv": ds.CsvFileFormat, "json": ds.JsonFileFormat}[name]()


def file_schema(path: str, fs: pafs.FileSystem, format_name: str) -> pa.Schema:
    """The Arrow schema of one data file, with Parquet INT96 columns typed as Spark reads them."""
    try:
        if format_name == "json":
            return _read_json(path, fs).schema
        fragment = file_format(format_name).make_fragment(path, filesystem=fs)
        schema = fragment.physical_schema
        # The fragment has read the footer for its schema: reuse it rather than open the file again.
        return _int96_as_instants(fragment.metadata.schema, schema) if format_name == "parquet" else schema
    except (OSError, pa.ArrowException) as error:
        raise ValueError(
            f"Cannot read the schema of data file '{path}' as {format_name}: {_described(error)}") from None


def read_columns(path: str, fs: pafs.FileSystem, format_name: str, columns: Sequence[str]) -> pa.Table:
    """``columns`` of one data file (a sample of the table's rows)."""
    if format_name == "json":
        return _read_json(path, fs).select(list(columns))
    return file_format(format_name).make_fragment(path, filesystem=fs).to_table(columns=list(columns))


def _described(error: Exception) -> str:
    """An error as its kind and message: a storage error's message may be the path alone (``FileNotFoundError``)."""
    return f"{type(error).__name__}: {error}"


def _int96_as_instants(parquet_schema: pq.ParquetSchema, schema: pa.Schema) -> pa.Schema:
    # INT96 carries no time-zone flag, but Spark reads it as an instant (timestamp, not timestamp_ntz).
    columns = [parquet_schema.column(i) for i in range(len(parquet_schema))]
    int96 = {column.path for column in columns if column.physical_type == "INT96"}
    for index, arrow_field in enumerate(schema):
        if arrow_field.name in int96:
            schema = schema.set(index, arrow_field.with_type(pa.timestamp("us", tz="UTC")))
    return schema


def read_split(
    split: FileSplit,
    fs: pafs.FileSystem,
    format_name: str,
    target: pa.Schema,
    partition_columns: Sequence[str],
    batch_size: int,
    row_filter: RowFilter | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``target`` for one split: data columns cast exactly, partition columns as constants.

    With ``row_filter``, Parquet row groups it rules out are not read and the rows it rules out are dropped.
    """
    constants = dict(zip(partition_columns, split.partition_values, strict=True))
    columns = [f.name for f in target if f.name not in constants]
    try:
        for batch in _batches(split, fs, format_name, columns, batch_size, row_filter):
            conformed = _conform(batch, target, constants)
            if row_filter is not None:
                conformed = row_filter.apply(conformed)
            if conformed.num_rows:
                yield conformed
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"Cannot read data file '{split.path}' as {format_name}: {_described(error)}") from error


def _batches(
    split: FileSplit,
    fs: pafs.FileSystem,
    format_name: str,
    columns: list[str],
    batch_size: int,
    row_filter: RowFilter | None,
) -> Iterator[pa.RecordBatch]:
    if format_name == "json":
        table = _read_json(split.path, fs)
        yield from table.select([c for c in columns if c in table.schema.names]).to_batches(batch_size)
        return
    fragment = _fragment(split, fs, format_name, row_filter)
    if fragment is None:
        return
    present = set(fragment.physical_schema.names)
    yield from fragment.to_batches(columns=[c for c in columns if c in present], batch_size=batch_size,
                                   use_threads=False)


def _read_json(path: str, fs: pafs.FileSystem) -> pa.Table:
    # pyarrow.dataset's JSON fragments return nulls for a one-line file without a final newline
    # (pyarrow 26); pyarrow.json reads it right.
    with fs.open_input_stream(path) as stream:
        return pj.read_json(stream)


def _fragment(
    split: FileSplit, fs: pafs.FileSystem, format_name: str, row_filter: RowFilter | None
) -> ds.Fragment | None:
    fragment = file_format(format_name).make_fragment(split.path, filesystem=fs)
    if format_name != "parquet":
        return fragment
    fragment.ensure_complete_metadata()  # the footer read once: the schema and the scan below reuse it
    whole = split.start == 0 and split.length == split.file_size
    if whole and row_filter is None:
        return fragment
    groups = list(range(fragment.metadata.num_row_groups))
    if not whole:
        # Like Spark: a split owns the row groups whose midpoint falls inside its byte range.
        groups = [
            index for index in groups
            if split.start <= _midpoint(fragment.metadata.row_group(index)) < split.start + split.length
        ]
    if row_filter is not None:
        groups = row_filter.keep_row_groups(fragment.metadata, groups)
    return fragment.subset(row_group_ids=list(groups)) if groups else None


def _midpoint(row_group: pq.RowGroupMetaData) -> int:
    first = row_group.column(0)
    start = first.data_page_offset
    if first.has_dictionary_page and 0 < first.dictionary_page_offset < start:
        start = first.dictionary_page_offset
    size = sum(row_group.column(i).total_compressed_size for i in range(row_group.num_columns))
    return start + size // 2


def _conform(batch: pa.RecordBatch, target: pa.Schema, constants: dict[str, Any]) -> pa.RecordBatch:
    rows = batch.num_rows
    if not len(target):  # a read of no column (count(*)): from_arrays would make a batch of no rows
        return batch.select([])
    columns = []
    for target_field in target:
        if target_field.name in constants:
            columns.append(pa.repeat(pa.scalar(constants[target_field.name], target_field.type), rows))
        elif target_field.name in batch.schema.names:
            columns.append(batch.column(target_field.name).cast(target_field.type))
        else:
            columns.append(pa.nulls(rows, target_field.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)
