"""Planning a write: what a write into a table does, checked on the driver before any task writes a row.

:func:`plan_write` turns the writer's options and the rows' schema into a :class:`WriteTarget`: the partition
columns (``partitionColumns``, else those of the table's existing directories), the types the written values must
convert to, and for an overwrite what it replaces: the whole table (``partitionOverwriteMode`` ``static``), the
partitions written (``dynamic``), or the partitions ``partitionFilter`` keeps (a static overwrite of part of the
table, like Delta Lake's ``replaceWhere``; what ``INSERT OVERWRITE t PARTITION (k = v)`` does). The checks that
need the written directories run once more at the commit (:meth:`WriteTarget.check_written`), on the driver, before
anything is moved into the table.

Spark does not hand a Python data source its session's ``spark.sql.sources.partitionOverwriteMode``, so an
overwrite of a partitioned table must say its mode, on the write or on the registered table: one that does not is
refused before anything is deleted (a session set to ``dynamic``, common practice, would otherwise lose every
partition the write does not have rows for).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from dynsource import directorynames, partitions, sparkcast, storage
from dynsource.layout import commits
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.layout.levels import Level, PartitionTyping, PartitionValues
from dynsource.layout.listing import Listing
from dynsource.layout.partitionfilter import PartitionFilter
from dynsource.scan import files, tableschema
from dynsource.scan.options import DEFAULT_ABANDONED_AGE_MS, ScanOptions
from dynsource.storage import StorageOptions
from dynsource.types import normalize_type

_WRITABLE = re.compile(r"^(tinyint|smallint|int|bigint|decimal\(\d+,\d+\)|string|date|timestamp(_ntz)?|boolean)$")
_ZONE_UNSET = (
    "Partition column '{column}' of the write into '{path}' is a TIMESTAMP: Spark names its directories by the "
    "values' wall-clock time in the session time zone (spark.sql.session.timeZone), which Spark does not pass to a "
    "Python data source. Set option 'timeZone' on the write (.option('timeZone', "
    "spark.conf.get('spark.sql.session.timeZone'))); dynsource.write and dynsource.sql pass the session's. Nothing was "
    "written."
)
_OVERWRITE_MODE_UNSET = (
    "An overwrite of partitioned table '{path}' needs option 'partitionOverwriteMode': 'static' replaces the whole "
    "table, 'dynamic' only the partitions written (as Spark's spark.sql.sources.partitionOverwriteMode, which Spark "
    "does not pass to a Python data source). Set it on the write (.option('partitionOverwriteMode', 'dynamic')) or "
    "on the table (dynsource.register_table(..., partitionOverwriteMode='dynamic')); dynsource.write and "
    "dynsource.sql follow the session's setting. Nothing was written."
)


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a write puts its rows (what the tasks need), and what its commit checks and replaces."""

    url: str
    storage_options: StorageOptions
    format: str
    partition_columns: tuple[str, ...]
    partition_overwrite_mode: str = "static"
    abandoned_age_ms: int = DEFAULT_ABANDONED_AGE_MS
    # The rows' type of each partition column, and the type its values must convert to, inferred from the table's
    # first directories ('': any, the column is declared or the table new).
    column_types: tuple[str, ...] = ()
    inferred_types: tuple[str, ...] = ()
    replace_within: PartitionFilter | None = None  # a static overwrite replaces the partitions it keeps
    time_zone: str | None = None  # where a timestamp partition value's directory is its wall-clock time

    @property
    def zone(self) -> dt.tzinfo | None:
        return None if self.time_zone is None else sparkcast.resolve_zone(self.time_zone)

    @property
    def settings(self) -> partitions.PartitionSettings:
        return partitions.PartitionSettings(self.time_zone)

    def check_written(self, fs: Any, root: str, directories: Sequence[str]) -> None:
        """The written directories' values must convert to the table's types, and lie within ``partitionFilter``."""
        if any(self.inferred_types):
            _check_values(fs, root, self, directories)
        if self.replace_within is not None and directories:
            holds = self.replace_within.holds(self._level(directories))
            outside = next((d for d, kept in zip(directories, holds or [], strict=True) if not kept), None)
            if holds is None or outside is not None:
                raise ValueError(f"The rows to write include partition '{outside}', which option 'partitionFilter' = "
                                 f"{self.replace_within.text!r} does not keep: an overwrite with partitionFilter "
                                 "replaces those partitions, and writes only into them. Nothing was written.")

    def replaced(self, fs: Any, root: str, directories: Sequence[str]) -> list[str]:
        """The table's data files an overwrite writing ``directories`` replaces, relative to its root: those its
        readers see now (not the files of another write still pending, nor the overwrite's own)."""
        if self.partition_overwrite_mode == "dynamic" and self.partition_columns:
            return _data_files(fs, root, directories)
        if self.replace_within is None:
            return _data_files(fs, root, [""])
        types = dict(zip(self.partition_columns, self.column_types, strict=True))
        listing = DynamicPartitionEnumerator(PartitionEnumerator(fs, root), types, settings=self.settings,
                                             static_filter=self.replace_within.level_filter()).enumerate()
        return [f.path[len(root.rstrip("/")) + 1:] for f in listing.files]

    def _level(self, directories: Sequence[str]) -> Level:
        """The written directories as one level of every partition column, typed as the rows are."""
        rows = [tuple(segment.split("=", 1)[1] for segment in directory.split("/")) for directory in directories]
        typing = PartitionTyping(dict(zip(self.partition_columns, self.column_types, strict=True)), self.settings)
        values = PartitionValues()
        for index, column in enumerate(self.partition_columns):
            values = values.extend(typing.type_level(column, [row[index] for row in rows]))
        return Level(self.partition_columns, rows, values)


def plan_write(options: ScanOptions, schema: StructType, overwrite: bool = False) -> WriteTarget:
    """What a write of rows of ``schema`` into the table of ``options`` does, checked on the driver before any task
    writes: the partition columns (``partitionColumns``, else those of the table's existing directories, else
    none) and the types their values must convert to, and for an overwrite what it replaces."""
    fs, root = files.open_table(options.path, options.storage_options)
    try:
        kind = storage.root_info(fs, root)["type"]
    except FileNotFoundError:
        kind = None  # a new table
    if kind not in (None, "directory"):
        raise ValueError(f"Option 'path' = {options.path!r} is a file; a write needs the table's directory.")
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    existing = _existing_branch(options) if kind == "directory" else None
    columns = tuple(name for name, _ in options.partition_columns) or (existing.columns if existing else ())
    if existing is not None and existing.columns != columns:
        raise ValueError(f"Option 'partitionColumns' names {list(columns)}, but table '{options.path}' is "
                         f"partitioned by {list(existing.columns)}; write with those (or leave the option out).")
    if existing is not None and options.format in ("parquet", "orc"):  # csv and json files store no types
        stored = tableschema.table_schema(existing, fs, options)
        check_columns({n: t for n, t in types.items() if n not in columns},
                      {f.name: f.dataType.simpleString() for f in stored.fields if f.name not in columns},
                      "the rows to write", f"the files of table '{options.path}'")
    _check_partition_columns(columns, types, options.declared_types)
    column_types = tuple(normalize_type(types[column]) for column in columns)
    if "timestamp" in column_types and options.time_zone is None:
        raise ValueError(_ZONE_UNSET.format(path=options.path, column=columns[column_types.index("timestamp")]))
    replace_within = _replace_within(options, columns, column_types) if overwrite else None
    if overwrite and columns and options.partition_overwrite_mode is None:
        raise ValueError(_OVERWRITE_MODE_UNSET.format(path=options.path))
    # An undeclared column's values must convert to the type of the table's existing ones (a declared column's
    # type is the rows' own, checked above).
    inferred = tuple("" if existing is None or column in options.declared_types
                     else partitions.infer_type(p.raw_values[index] for p in existing.partitions)
                     for index, column in enumerate(columns))
    return WriteTarget(options.path, options.storage_options, options.format, columns,
                       options.partition_overwrite_mode or "static", options.abandoned_write_age_ms, column_types,
                       inferred, replace_within, options.time_zone)


def _replace_within(options: ScanOptions, columns: Sequence[str],
                    column_types: Sequence[str]) -> PartitionFilter | None:
    """An overwrite's ``partitionFilter``, checked: it names partition columns of the write only."""
    if options.partition_filter is None:
        return None
    partition_filter = options.partition_filter.under(options.partition_settings)
    if not columns:
        raise ValueError(f"Option 'partitionFilter' = {partition_filter.text!r} on an overwrite names the partitions "
                         f"it replaces, but table '{options.path}' has no partition columns.")
    others = sorted(partition_filter.columns() - {column.lower() for column in columns})
    if others:
        raise ValueError(f"Option 'partitionFilter' = {partition_filter.text!r} on an overwrite names the partitions "
                         f"it replaces, but {others} are not partition columns of the write: {list(columns)}.")
    partition_filter.check_types(dict(zip(columns, column_types, strict=True)))
    return partition_filter


def _check_partition_columns(columns: Sequence[str], types: Mapping[str, str], declared: Mapping[str, str]) -> None:
    for column in columns:
        if column not in types:
            raise ValueError(f"The rows to write have no partition column '{column}' (the table's partition columns "
                             f"are {list(columns)}); their columns are {list(types)}.")
        if column in declared and normalize_type(types[column]) != declared[column]:
            raise ValueError(f"Partition column '{column}' is {types[column]} in the rows to write, but option "
                             f"'partitionColumns' declares it {declared[column]}.")
        if not _WRITABLE.match(types[column]):
            raise ValueError(f"Partition column '{column}' is of type {types[column]}; dynsource writes partition "
                             "columns of integral, decimal, string, date, timestamp and boolean types.")
    if columns and len(columns) == len(types):
        raise ValueError(f"Every column of the rows to write is a partition column ({list(columns)}): "
                         "the data files would have no column.")


def _check_values(fs: Any, root: str, target: WriteTarget, directories: Sequence[str]) -> None:
    """Each written directory's values must convert to the types readers infer for their columns, or they would
    fail on them or type the column otherwise: those of the table's first directories, and when a value does not
    convert to that, of all of them (a table with a value that is no date, say, takes any text)."""
    raws = [segment.split("=", 1)[1] for directory in directories for segment in directory.split("/")]
    width = len(target.partition_columns)
    for index, (column, type_name) in enumerate(zip(target.partition_columns, target.inferred_types, strict=True)):
        values = sorted(set(raws[index::width]))
        bad = _unconvertible(values, column, type_name, target.settings)
        if bad is not None:
            listing = PartitionEnumerator(fs, root).enumerate()
            type_name = partitions.infer_type(p.raw_values[index] for p in listing.partitions)
            bad = _unconvertible(values, column, type_name, target.settings)
        if bad is not None:
            raise ValueError(
                f"Partition column '{column}' of table '{target.url}' is {type_name} (inferred from its "
                f"directories), but the rows to write have the value '{directorynames.unescape_path_name(bad)}', which "
                f"cannot be converted to {type_name}; nothing was written. Fix or cast the value, or declare the "
                f"column's type with option partitionColumns (e.g. '{column} STRING') on every read of the table.")


def _unconvertible(raw_values: Sequence[str], column: str, type_name: str,
                   settings: partitions.PartitionSettings) -> str | None:
    """The first of ``raw_values`` (escaped) with no image in ``type_name``, None when all convert."""
    if not type_name or not raw_values:
        return None
    failed = PartitionTyping({column: type_name}, settings).type_level(column, raw_values)[2].to_pylist()
    return raw_values[failed.index(True)] if True in failed else None


def _data_files(fs: Any, root: str, directories: Sequence[str]) -> list[str]:
    """The data files readers list under these directories of the table, relative to its root (not the hidden
    ones: staging, commit records; nor those the commit records hide: a pending write's, a replaced one)."""
    records, found = commits.read(fs, root), []
    for directory in directories:
        try:
            paths = fs.find(f"{root}/{directory}".rstrip("/"))
        except FileNotFoundError:
            continue
        relative = [path[len(root) + 1:] for path in paths]
        found += [path for path in relative if not any(directorynames.is_hidden(part) for part in path.split("/"))
                  and not records.hides(path)]
    return found


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
