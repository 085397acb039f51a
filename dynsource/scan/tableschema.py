"""A table's schema, as ``spark.read.parquet`` works it out: the data columns of its files, then the partition
columns of its directories; the union of every file's (option ``mergeSchema``); and the checks of a declared one.

:func:`table_schema` runs when a DataFrame is loaded (in a Spark Python worker on the driver's host) and when a
table is registered (in the driver); planning a scan is :mod:`dynsource.scan.planner`.

Merging follows Spark's ``mergeSchema``: each file's schema is typed as Spark types it first (so
``timestamp[ms]`` and ``timestamp[us]`` are one type), then pyarrow's ``unify_schemas`` makes the union; columns
of the same name with two types are an error, as Spark's ``CANNOT_MERGE_SCHEMAS``. A JSON file's fields are
sorted by name, nested ones too, as Spark's JSON schema inference sorts them. A declared schema
(``register_table(..., schema=...)``) is checked against what the walk found in the files, naming the first
column that does not fit, and completed with the partition columns it leaves out, as ``spark.read.schema``
completes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dynsource import partitions, storage
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.layout.levels import Level
from dynsource.layout.listing import Listing
from dynsource.scan import files
from dynsource.scan.options import ScanOptions
from dynsource.types import arrow_type, normalize_type, read_arrow_schema, spark_schema

log = logging.getLogger(__name__)
_said_walked: set[str] = set()  # the remote tables whose whole walk for a schema this process has said
_FOOTER_THREADS = 16  # footers of an object store are one request each: read them side by side
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)  # narrowest first
# Conversions of a stored type to a declared one that Spark's reader of the format makes and dynsource's Python
# reader (a pyarrow cast) makes alike, beyond the widenings of every format (see _spark_reads): the Parquet reader
# reads bytes as strings, dates as TIMESTAMP_NTZ and either timestamp as the other; the ORC reader reads a
# timestamp without a zone (which pyarrow gives for ORC's TIMESTAMP) as TIMESTAMP.
_FORMAT_CONVERSIONS = {
    "parquet": {(BinaryType, StringType), (DateType, TimestampNTZType), (TimestampType, TimestampNTZType),
                (TimestampNTZType, TimestampType)},
    "orc": {(TimestampNTZType, TimestampType)},
}


def merged_schema(paths: Sequence[str], fs: pafs.FileSystem, format_name: str) -> StructType:
    """The union of the schemas of data files ``paths``, their columns in first-seen order.

    Raises
    ------
    ValueError
        Two files store a column with different types; the message names the column and both files.
    """
    merged, origins = None, {}
    for struct, path in _distinct_schemas(paths, fs, format_name).items():
        arrow = read_arrow_schema(struct)
        try:
            merged = arrow if merged is None else pa.unify_schemas([merged, arrow])
        except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
            raise _conflict(spark_schema(merged), struct, origins, path, error) from None
        for field in struct.fields:
            if not isinstance(field.dataType, NullType):  # a null column takes any type: it is no origin
                origins.setdefault(field.name, path)
    return spark_schema(merged)


def _distinct_schemas(paths: Sequence[str], fs: pafs.FileSystem, format_name: str) -> dict[StructType, str]:
    """Each different schema of the files, in Spark's types, with the first file (in ``paths`` order) that has it."""
    with ThreadPoolExecutor(_FOOTER_THREADS) as pool:
        structs = list(pool.map(lambda path: spark_schema(files.file_schema(path, fs, format_name)), paths))
    distinct: dict[StructType, str] = {}
    for struct, path in zip(structs, paths, strict=True):
        distinct.setdefault(struct, path)
    return distinct


def _conflict(
    merged: StructType, struct: StructType, origins: dict[str, str], path: str, error: Exception
) -> ValueError:
    before = {field.name: field.dataType for field in merged.fields}
    for field in struct.fields:
        earlier = before.get(field.name)
        if _clash(earlier, field.dataType):
            return ValueError(
                f"Option 'mergeSchema': column '{field.name}' is {earlier.simpleString()} in data file "
                f"'{origins[field.name]}' and {field.dataType.simpleString()} in data file '{path}'; Spark cannot "
                "merge them either (CANNOT_MERGE_SCHEMAS). Rewrite the files with one type, or declare the schema."
            )
    return ValueError(f"Option 'mergeSchema': the schema of data file '{path}' cannot be merged with those of the "
                      f"files before it: {error}")


def _clash(earlier: DataType | None, later: DataType) -> bool:
    """Whether a column's types in two files differ; a column of nulls only (void) takes the other's."""
    return earlier is not None and earlier != later and not isinstance(earlier, NullType) and not isinstance(
        later, NullType)


def declared_schema(spark: SparkSession, schema: StructType | str) -> StructType:
    """A declared schema as ``spark.read.schema`` takes it (a ``StructType`` or DDL), every column nullable.

    Nullable as Spark's file sources make it: a column some files lack, or a null partition, reads as null.
    """
    if isinstance(schema, str):
        schema = spark.createDataFrame([], schema).schema  # Spark's own DDL parser, classic and Connect alike
    if not isinstance(schema, StructType):
        raise TypeError(f"schema must be a StructType or a DDL string such as 'v INT, day INT'; got {schema!r}.")
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def check_declared(
    schema: StructType, listing: Listing, stored: StructType | None, stored_in: str, *, merged: bool,
    time_zone: str | None, format_name: str,
) -> None:
    """Check ``schema`` against a walk of the table and the data columns ``stored`` (None: no file was read).

    ``listing`` gives the partition columns and, in its first partition, values to
    type; ``stored_in`` says where ``stored`` comes from, for the messages, and
    ``merged`` whether it is every file's columns (``mergeSchema``) or one file's;
    the files are of format ``format_name``.

    Raises
    ------
    ValueError
        Naming the first column that is neither a partition column nor stored,
        or whose type cannot hold the partition values or be read from the files.
    """
    first = listing.partitions[0] if listing.partitions else None
    stored_types = {f.name: f.dataType for f in stored.fields} if stored is not None else None
    for field in schema.fields:
        target = _arrow_type(field)
        if field.name in listing.columns:
            raw = first.raw_values[listing.columns.index(field.name)] if first is not None else None
            _check_partition_column(field, raw, time_zone)
        elif stored_types is None:
            continue
        elif field.name not in stored_types:
            raise ValueError(
                f"Column '{field.name}' of the declared schema is not a partition column (the table's are "
                f"{list(listing.columns)}) and is not stored in {stored_in} (columns {sorted(stored_types)})."
                + ("" if merged else " A column that only some files store needs option mergeSchema=true: every "
                   "file's columns are then read.")
            )
        else:
            _check_readable(field, target, stored_types[field.name], stored_in, format_name)


def _arrow_type(field: StructField) -> pa.DataType:
    try:
        return read_arrow_schema(StructType([field])).field(0).type
    except TypeError as error:  # pyspark's: the type has no Arrow form, which a Python data source returns
        raise ValueError(f"Column '{field.name}' of the declared schema cannot be read: {error}") from None


def _check_partition_column(field: StructField, raw: str | None, time_zone: str | None) -> None:
    try:
        type_name = normalize_type(field.dataType.simpleString())
        if raw is not None:  # whether Spark can type it at all: any zone tells (the session's is not known here)
            partitions.to_arrow([raw], type_name, time_zone=time_zone or "UTC")
    except ValueError as error:
        raise ValueError(f"Partition column '{field.name}' of the declared schema: {error}") from None


def _check_readable(field: StructField, target: pa.DataType, stored: DataType, stored_in: str,
                    format_name: str) -> None:
    declared = field.dataType.simpleString()
    if format_name in _FORMAT_CONVERSIONS:  # typed files: Spark's reader converts the stored type, or fails
        if not _spark_reads(stored, field.dataType, format_name):
            raise ValueError(
                f"Column '{field.name}' of the declared schema is {declared}, but it is stored as "
                f"{stored.simpleString()} in {stored_in}, which cannot be read as {declared}: Spark's {format_name} "
                f"reader fails on it, or reads other values than those stored. Declare it {stored.simpleString()} "
                "(or a type Spark widens it to: a wider integer, decimal or floating-point type)."
            )
        return
    # CSV and JSON are text that Spark parses as the declared type; the Python reader casts what pyarrow parsed,
    # and a cast pyarrow does not have cannot be read.
    try:
        pa.array([], _arrow_type(StructField(field.name, stored))).cast(target)
    except pa.ArrowNotImplementedError:
        raise ValueError(
            f"Column '{field.name}' of the declared schema is {declared}, but it is stored as "
            f"{stored.simpleString()} in {stored_in}, which cannot be read as {declared}."
        ) from None


def _spark_reads(stored: DataType, declared: DataType, format_name: str) -> bool:
    """Whether Spark's reader of ``format_name`` reads a column stored as ``stored`` as ``declared`` with the values
    dynsource's Python reader gives. Spark's widenings: integers to wider integers, to DOUBLE up to INT, to a decimal
    with room for their digits; FLOAT to DOUBLE; a decimal to one of no fewer integer and fraction digits; STRING to
    BINARY. Spark reads more (a DATE's days as an INT, a decimal's bytes as BINARY): other values than the Python
    reader's, so those are refused too."""
    if stored == declared or isinstance(stored, NullType):
        return True
    if isinstance(stored, StructType) and isinstance(declared, StructType):
        fields = {f.name: f.dataType for f in stored.fields}
        return all(f.name in fields and _spark_reads(fields[f.name], f.dataType, format_name) for f in declared.fields)
    if isinstance(stored, ArrayType) and isinstance(declared, ArrayType):
        return _spark_reads(stored.elementType, declared.elementType, format_name)
    if isinstance(stored, MapType) and isinstance(declared, MapType):
        return _spark_reads(stored.keyType, declared.keyType, format_name) and _spark_reads(
            stored.valueType, declared.valueType, format_name)
    return _widens(stored, declared) or (type(stored), type(declared)) in _FORMAT_CONVERSIONS[format_name]


def _widens(stored: DataType, declared: DataType) -> bool:
    if isinstance(stored, _INTEGRAL):
        if isinstance(declared, _INTEGRAL):
            return _width(stored) <= _width(declared)
        if isinstance(declared, DecimalType):  # room for every value: 10 digits up to INT, 20 for a BIGINT
            return declared.precision - declared.scale >= (20 if isinstance(stored, LongType) else 10)
        return isinstance(declared, DoubleType) and not isinstance(stored, LongType)
    if isinstance(stored, DecimalType) and isinstance(declared, DecimalType):
        return declared.scale >= stored.scale and \
            declared.precision - declared.scale >= stored.precision - stored.scale
    return (isinstance(stored, FloatType) and isinstance(declared, DoubleType)) or (
        isinstance(stored, StringType) and isinstance(declared, BinaryType))


def _width(integral: DataType) -> int:
    return next(index for index, kind in enumerate(_INTEGRAL) if isinstance(integral, kind))


def table_walk(options: ScanOptions) -> tuple[Any, PartitionEnumerator]:
    """The table's filesystem and its walk: from ``path``, or from ``basePath`` down through ``path``."""
    fs, root = files.open_table(options.path, options.storage_options)
    base = None if options.base_path is None else storage.filesystem(options.base_path, options.storage_options)[1]
    return fs, PartitionEnumerator(fs, root, base)


def infer_schema(options: ScanOptions) -> StructType:
    """The table's schema, listing only what it takes: the first branch of the walk when ``partitionColumns``
    declares every partition column it meets (their types need no values), else the whole table, whose
    partition values give the undeclared columns' types (and, with ``mergeSchema``, whose files are merged)."""
    fs, walk = table_walk(options)
    if options.declared_types and not options.merge_schema:
        branch = walk.enumerate(first_branch)
        if branch.partitions and set(branch.columns) <= set(options.declared_types):
            return table_schema(branch, fs, options)
    listing = walk.enumerate()
    schema = table_schema(listing, fs, options)
    if listing.columns and not storage.is_local(options.path) and options.path not in _said_walked:
        _said_walked.add(options.path)
        declared = ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in schema.fields
                             if f.name in listing.columns)
        log.warning("dynsource: the schema of '%s' took a walk of the whole table (%d listings) to type its "
                    "partition columns; with them declared, partitionColumns='%s', one branch is listed. (Said once "
                    "per table in each process.)", options.path, len(listing.listed_paths), declared)
    return schema


def table_schema(listing: Listing, fs: Any, options: ScanOptions) -> StructType:
    """Data columns of the first data file (of them all with ``mergeSchema``), then the partition columns, as
    ``spark.read.parquet`` gives them."""
    paths = [f.path for f in listing.files]
    if not paths:
        raise ValueError(f"Option 'path': table '{options.path}' has no data files, so its schema cannot be inferred.")
    data = _stored_schema(paths, fs, options)
    partition_fields = {f.name: f for f in _partition_fields(listing, options)}
    # A partition column also stored in the files keeps its place but takes the partition's type (as Spark).
    fields = [partition_fields.pop(f.name, f) for f in data.fields] + list(partition_fields.values())
    # Spark's file sources declare every column nullable, whatever the files say.
    return StructType([StructField(f.name, f.dataType, nullable=True) for f in fields])


def fit_declared_schema(schema: StructType, options: ScanOptions) -> StructType:
    """A declared schema checked against the table (the walk down its first branch and that branch's first file;
    with ``mergeSchema``, the whole walk and every file: see :func:`check_declared`), in the columns
    ``spark.read.schema(schema)`` reads the table's directory with: its data columns in the declared order, then
    every partition column in the directories' order, of its declared type, else as ``partitionColumns`` declares
    it, else inferred from every partition directory."""
    fs, walk = table_walk(options)
    listing = walk.enumerate() if options.merge_schema else walk.enumerate(first_branch)
    paths = [f.path for f in listing.files][: None if options.merge_schema else 1]
    stored = _stored_schema(paths, fs, options) if paths else None
    one_file = paths and not options.merge_schema
    stored_in = f"data file '{paths[0]}'" if one_file else f"the data files of '{options.path}'"
    check_declared(schema, listing, stored, stored_in, merged=options.merge_schema,
                   time_zone=options.time_zone, format_name=options.format)
    declared = {f.name: f for f in schema.fields}
    if not options.merge_schema and set(listing.columns) - set(declared) - set(options.declared_types):
        listing = walk.enumerate()  # a column left out is typed by every directory's value, as Spark infers it
    partition_fields = [declared.get(column, inferred)
                        for column, inferred in zip(listing.columns, _partition_fields(listing, options), strict=True)]
    data_fields = [f for f in schema.fields if f.name not in listing.columns]
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in data_fields + partition_fields])


def first_branch(level: Level) -> list[bool]:
    """A level filter keeping only the first directory of each level."""
    return [index == 0 for index in range(len(level.raw_rows))]


def _stored_schema(paths: list[str], fs: Any, options: ScanOptions) -> StructType:
    """The data columns of the files ``paths``: the first one's, or with ``mergeSchema`` the union of them all."""
    arrow_fs = files.arrow_filesystem(fs)
    if options.merge_schema:
        stored = merged_schema(paths, arrow_fs, options.format)
    else:
        stored = spark_schema(files.file_schema(paths[0], arrow_fs, options.format))
    return _by_name(stored) if options.format == "json" else stored


def _by_name(struct: StructType) -> StructType:
    """``struct`` with its fields, nested ones too, sorted by name, as Spark infers a JSON file's."""
    return StructType([StructField(f.name, _nested_by_name(f.dataType), f.nullable, f.metadata)
                       for f in sorted(struct.fields, key=lambda f: f.name)])


def _nested_by_name(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return _by_name(data_type)
    if isinstance(data_type, ArrayType):
        return ArrayType(_nested_by_name(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _nested_by_name(data_type.valueType), data_type.valueContainsNull)
    return data_type


def _partition_fields(listing: Listing, options: ScanOptions) -> list[StructField]:
    declared = options.declared_types
    unknown = sorted({name for name, _ in options.partition_columns} - set(listing.columns))
    if unknown:
        raise ValueError(
            f"Option 'partitionColumns' names {unknown}, which are not partition columns of '{options.path}'; "
            f"its partition columns are {list(listing.columns)}."
        )
    fields = []
    for index, column in enumerate(listing.columns):
        type_name = declared.get(column) or partitions.infer_type((p.raw_values[index] for p in listing.partitions),
                                                                  options.partition_settings)
        fields.append(spark_schema(pa.schema([(column, arrow_type(type_name))]))[0])
    return fields


def read_column_types(options: ScanOptions, schema: StructType) -> dict[str, str]:
    """Spark SQL type of each read-schema column, with ``partitionColumns`` declarations taking precedence."""
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    return {**schema_types, **options.declared_types}
