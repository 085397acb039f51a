"""Planning a scan: the table's schema, then resolve the filter, enumerate, check, type, pack and report.

Both run in Spark's Python workers on the driver's host: :func:`table_schema`
when a DataFrame is loaded, :func:`plan_scan` when its first action plans the
query (``DataSourceReader.partitions``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructField, StructType

from dynsource import figures, files, partitions, planner, report, rowfilter, schemas, storage, store
from dynsource.enumerator import DynamicPartitionEnumerator, Listing, PartitionEnumerator
from dynsource.filtering import DynamicFilteringData
from dynsource.levels import Level
from dynsource.options import ScanOptions
from dynsource.scanned import Reader
from dynsource.types import arrow_type, normalize_type, spark_schema

log = logging.getLogger(__name__)
# What turns an exceeded filter (no key, prunes nothing) into one that prunes: the collector's own arguments.
_EXCEEDED_FIX = "collect it with a larger max_rows or max_bytes, or with kinds that allow 'bloom' or 'range'"
# The tables (registered names or paths) this worker process has said were read whole: once per table is enough.
_warned_whole: set[str] = set()


def table_walk(options: ScanOptions) -> tuple[Any, PartitionEnumerator]:
    """The table's filesystem and its walk: from ``path``, or from ``basePath`` down through ``path``."""
    fs, root = files.open_table(options.path, options.storage_options)
    base = None if options.base_path is None else storage.filesystem(options.base_path, options.storage_options)[1]
    return fs, PartitionEnumerator(fs, root, base)


def table_schema(listing: Listing, fs: Any, options: ScanOptions) -> StructType:
    """Data columns of the first data file (of them all with ``mergeSchema``), then the partition columns, as
    ``spark.read.parquet`` gives them."""
    paths = [f.path for p in listing.partitions for f in p.files]
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
    listing = walk.enumerate() if options.merge_schema else walk.enumerate(_first_branch)
    paths = [f.path for p in listing.partitions for f in p.files][: None if options.merge_schema else 1]
    stored = _stored_schema(paths, fs, options) if paths else None
    one_file = paths and not options.merge_schema
    stored_in = f"data file '{paths[0]}'" if one_file else f"the data files of '{options.path}'"
    schemas.check_declared(schema, listing, stored, stored_in, merged=options.merge_schema,
                           time_zone=options.time_zone)


def _first_branch(level: Level) -> list[bool]:
    return [index == 0 for index in range(len(level.raw_rows))]


def _stored_schema(paths: list[str], fs: Any, options: ScanOptions) -> StructType:
    """The data columns of the files ``paths``: the first one's, or with ``mergeSchema`` the union of them all."""
    arrow_fs = files.arrow_filesystem(fs)
    if options.merge_schema:
        return schemas.merged_schema(paths, arrow_fs, options.format)
    return spark_schema(files.file_schema(paths[0], arrow_fs, options.format))


def _partition_fields(listing: Listing, options: ScanOptions) -> list[StructField]:
    declared = dict(options.partition_columns)
    undeclared = sorted(set(declared) - set(listing.columns))
    if undeclared:
        raise ValueError(
            f"Option 'partitionColumns' names {undeclared}, which are not partition columns of '{options.path}'; "
            f"its partition columns are {list(listing.columns)}."
        )
    fields = []
    for index, column in enumerate(listing.columns):
        type_name = declared.get(column) or partitions.infer_type(p.raw_values[index] for p in listing.partitions)
        fields.append(spark_schema(pa.schema([(column, arrow_type(type_name))]))[0])
    return fields


def _read_column_types(options: ScanOptions, schema: StructType) -> dict[str, str]:
    """Spark SQL type of each read-schema column, with ``partitionColumns`` declarations taking precedence."""
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    return {**schema_types, **dict(options.partition_columns)}


def plan_scan(
    options: ScanOptions, schema: StructType,
    task_figures: figures.Channel | figures.Unavailable = figures.PLANNED_ONLY, reader: Reader | None = None,
) -> list[InputPartition]:
    """Enumerate (pruning with ``partitionFilter`` and the dynamic filter if any), then pack the kept files.

    Every scan logs an INFO line and saves its report, under its ``reader``'s table (by default the one at
    ``path``) and its handle if any; a partitioned table read whole without any filter logs a WARNING.
    ``task_figures`` is the channel its read tasks count through; without one, the scan is planned but not
    read (an explain), and its report says so.
    """
    started = time.perf_counter()
    fs, walk = table_walk(options)
    schema_types = {f.name: normalize_type(f.dataType.simpleString()) for f in schema.fields}
    column_types = _read_column_types(options, schema)
    partition_filter = options.partition_filter
    if partition_filter is not None:
        partition_filter.check_types(column_types)
    enumerator = DynamicPartitionEnumerator(
        walk, column_types, data_columns=schema.names, time_zone=options.time_zone,
        on_error=options.dynamic_filter_on_error,
        static_filter=partition_filter.level_filter() if partition_filter else None,
    )
    waited = time.perf_counter()
    data, unusable = _filter_data(options)
    wait_ms = round((time.perf_counter() - waited) * 1000, 1)
    if data is not None:
        enumerator.set_dynamic_filtering_data(data)
    listing = enumerator.enumerate()
    if partition_filter is not None:
        partition_filter.check_listing(listing.columns, listed_leaves=bool(listing.partitions))
    read_columns = [c for c in listing.columns if c in column_types]
    _check_data_columns(schema, listing, fs, options)
    values = listing.typed_rows(read_columns)
    scan_id = uuid.uuid4().hex
    row_filter, rows_unusable = None, None
    if enumerator.data is not None:  # None also when the enumerator set the filter aside
        row_filter, rows_unusable = rowfilter.plan_row_filter(
            data, listing.columns, schema_types, handle=options.dynamic_filter, scan_id=scan_id,
            max_keys=options.row_filter_max_keys, max_bytes=options.task_filter_max_bytes,
            on_error=options.dynamic_filter_on_error,
        )
    input_partitions = planner.plan(
        listing.partitions, values, read_columns,
        splittable=options.format == "parquet",
        max_partition_bytes=options.max_partition_bytes,
        open_cost_in_bytes=options.open_cost_in_bytes,
        min_partition_num=options.min_partition_num,
        row_filter=row_filter,
    )
    dynamic, reason = bool(options.dynamic_filter and options.dynamic_filtering_enabled), None
    if dynamic:
        reason = unusable or enumerator.fallback_reason
        if data is not None and not data.is_filtering:
            reason = f"the filter exceeded the collector's threshold: {_EXCEEDED_FIX}"
    _report(options, reader, data, listing, dynamic=dynamic, reason=reason, rows_reason=rows_unusable,
            wait_ms=wait_ms, input_partitions=len(input_partitions), started=started, scan_id=scan_id,
            row_filter=row_filter, task_figures=task_figures)
    if not dynamic and partition_filter is None:
        _warn_whole_table(options, reader.table if reader else None, listing)
    return input_partitions


def _warn_whole_table(options: ScanOptions, table: str | None, listing: Listing) -> None:
    """Say once per table in this worker process that a partitioned table was read whole, and how to prune it."""
    if not listing.columns or listing.directories_pruned or (table or options.path) in _warned_whole:
        return
    _warned_whole.add(table or options.path)
    column = listing.columns[0]
    if table:
        read, option = f"table {table}", f"SELECT ... FROM {table} WITH ('partitionFilter' = '{column} = ...')"
        sql = "run the query with dynsource.sql(spark, query)"
    else:
        read, option = options.path, f"spark.read.format('dynsource').option('partitionFilter', '{column} = ...')"
        sql = "register the table (dynsource.register_table) and run the query with dynsource.sql(spark, query)"
    log.warning(
        "dynsource: the scan of %s read all %d partitions. Spark does not pass a query's WHERE to a Python data "
        "source, so WHERE %s ... does not prune. To prune, give the partitionFilter option (%s), or %s, which "
        "turns WHERE predicates on partition columns into partitionFilter. (Said once per table in each Python "
        "worker.)", read, len(listing.partitions), column, option, sql,
    )


def _filter_data(options: ScanOptions) -> tuple[DynamicFilteringData | None, str | None]:
    """The filter to apply, or None and why it cannot be used (under ``dynamicFilterOnError=fallback``)."""
    if not options.dynamic_filter or not options.dynamic_filtering_enabled:
        return None, None
    try:
        data = store.resolve(options.dynamic_filter, options.filter_store, wait_ms=options.dynamic_filter_wait_ms)
        if data.exceed_threshold:
            log.warning("dynsource: dynamic filter '%s' exceeded the collector's threshold and holds no key, so the "
                        "scan of %s reads every partition%s; to prune, %s.", options.dynamic_filter, options.path,
                        " its partitionFilter keeps" if options.partition_filter else "", _EXCEEDED_FIX)
        return data, None
    except (LookupError, ValueError, OSError, store.FilterFailedError) as error:
        if options.dynamic_filter_on_error == "fail":
            raise
        log.warning("dynsource: dynamic filter '%s' is not usable, reading every partition: %s",
                    options.dynamic_filter, error)
        return None, str(error)


def _check_data_columns(schema: StructType, listing: Listing, fs: Any, options: ScanOptions) -> None:
    """A requested column must be a partition column or stored in the files (checked on the first kept file).

    With ``mergeSchema`` files may lack columns, which then read as null, as in Spark.
    """
    first = next((f.path for p in listing.partitions for f in p.files), None)
    wanted = [f.name for f in schema.fields if f.name not in listing.columns]
    if first is None or not wanted or options.merge_schema:
        return
    stored = set(files.file_schema(first, files.arrow_filesystem(fs), options.format).names)
    missing = [name for name in wanted if name not in stored]
    if missing:
        raise ValueError(
            f"Column(s) {missing} of the read schema are neither partition columns {list(listing.columns)} "
            f"nor stored in data file '{first}' (columns {sorted(stored)})."
        )


def _report(
    options, reader, data, listing, *, dynamic, reason, rows_reason, wait_ms, input_partitions, started, scan_id,
    row_filter, task_figures,
) -> None:
    # A data column the filter cannot compare leaves the partition pruning standing: filtering stays true.
    kept_files = [f for p in listing.partitions for f in p.files]
    scan = report.ScanReport(
        handle=options.dynamic_filter if dynamic else None,
        path=options.path,
        payload_kind=data.kind if data is not None else None,
        keys=len(data) if data is not None else None,
        payload_bytes=data.size_bytes if data is not None else None,
        payload_exceeded=data is not None and data.exceed_threshold,
        filtering=dynamic and reason is None,
        partitions_total=listing.leaf_total,
        partitions_kept=len(listing.partitions),
        files_kept=len(kept_files),
        bytes_kept=sum(f.size for f in kept_files),
        listings=len(listing.listed_paths),
        input_partitions=input_partitions,
        planning_ms=round((time.perf_counter() - started) * 1000, 1),
        wait_ms=wait_ms,
        fallback_reason=reason or rows_reason,
        scan_id=scan_id,
        pruned_by_column=dict(listing.pruned),
        data_columns=tuple(column for column, _ in row_filter.data_columns) if row_filter else (),
        row_filtering=row_filter is not None and row_filter.filter_rows,
        figures_owner=task_figures.owner if row_filter and isinstance(task_figures, figures.Channel) else None,
        task_figures_unavailable=(
            task_figures.reason if row_filter and isinstance(task_figures, figures.Unavailable) else None),
        table=reader.table if reader else None,
        partition_columns=tuple(listing.columns),
        partition_filter=options.partition_filter.text if options.partition_filter else None,
        options_digest=reader.options_digest if reader else None,
    )
    scan.log()
    try:
        report.save(scan, options.filter_store)
    except OSError as error:  # the scan itself is sound: losing its report must not fail the query
        log.warning("dynsource: could not save the report of a scan of '%s': %s", options.path, error)
