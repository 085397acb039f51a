"""A table's schema, as ``spark.read.parquet`` works it out: the data columns of its files, then the partition
columns of its directories; and the checks of a declared one.

:func:`table_schema` runs when a DataFrame is loaded (in a Spark Python worker on the driver's host) and when a
table is registered (in the driver); planning a scan is :mod:`dynsource.scanplanner`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from dynsource import files, partitions, schemas, storage
from dynsource.enumerator import Listing, PartitionEnumerator
from dynsource.levels import Level
from dynsource.options import ScanOptions
from dynsource.types import arrow_type, normalize_type, spark_schema


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
    return table_schema(walk.enumerate(), fs, options)


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


def check_declared_schema(schema: StructType, options: ScanOptions) -> None:
    """Check a declared schema against the table: the walk down its first branch and that branch's first file;
    with ``mergeSchema``, the whole walk and every file (see :func:`schemas.check_declared`)."""
    fs, walk = table_walk(options)
    listing = walk.enumerate() if options.merge_schema else walk.enumerate(first_branch)
    paths = [f.path for f in listing.files][: None if options.merge_schema else 1]
    stored = _stored_schema(paths, fs, options) if paths else None
    one_file = paths and not options.merge_schema
    stored_in = f"data file '{paths[0]}'" if one_file else f"the data files of '{options.path}'"
    schemas.check_declared(schema, listing, stored, stored_in, merged=options.merge_schema,
                           time_zone=options.time_zone)


def first_branch(level: Level) -> list[bool]:
    """A level filter keeping only the first directory of each level."""
    return [index == 0 for index in range(len(level.raw_rows))]


def _stored_schema(paths: list[str], fs: Any, options: ScanOptions) -> StructType:
    """The data columns of the files ``paths``: the first one's, or with ``mergeSchema`` the union of them all."""
    arrow_fs = files.arrow_filesystem(fs)
    if options.merge_schema:
        return schemas.merged_schema(paths, arrow_fs, options.format)
    return spark_schema(files.file_schema(paths[0], arrow_fs, options.format))


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
        type_name = declared.get(column) or partitions.infer_type(p.raw_values[index] for p in listing.partitions)
        fields.append(spark_schema(pa.schema([(column, arrow_type(type_name))]))[0])
    return fields


def read_column_types(options: ScanOptions, schema: StructType) -> dict[str, str]:
    """Spark SQL type of each read-schema column, with ``partitionColumns`` declarations taking precedence."""
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    return {**schema_types, **options.declared_types}
