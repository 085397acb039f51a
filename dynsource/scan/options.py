"""Reader options: their names, defaults and validation.

Spark may hand the options lower-cased (``WITH (...)`` in SQL), so names are
matched case-insensitively and reported in their documented camelCase form.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dynsource import partitions, sparkcast, storage
from dynsource.ddl import parse_ddl
from dynsource.filtering import filterstore
from dynsource.filtering.filterstore import FilterStore
from dynsource.layout.partitionfilter import PartitionFilter
from dynsource.runtime import logs, settings
from dynsource.scan.rowfilter import DEFAULT_TASK_FILTER_MAX_BYTES
from dynsource.scan.splits import DEFAULT_MAX_PARTITION_BYTES, DEFAULT_OPEN_COST_IN_BYTES
from dynsource.storage import StorageOptions

FORMATS = ("parquet", "orc", "csv", "json")
READERS = ("auto", "spark", "python")  # who reads a registered table's kept files in dynsource.sql, dynamic_join
ON_ERROR = ("fallback", "fail")
OVERWRITE_MODES = ("static", "dynamic")  # what a write's overwrite replaces: the whole table, or its partitions
TIMESTAMP_TYPES = ("timestamp_ltz", "timestamp_ntz")  # spark.sql.timestampType's values
DEFAULT_BATCH_SIZE = 65536
# openLooKeng's hive.dynamic-filtering-row-filtering-threshold default.
DEFAULT_ROW_FILTER_MAX_KEYS = 2000
DEFAULT_WAIT_MS = 10_000  # how long planning waits for a filter still being collected
DEFAULT_ABANDONED_AGE_MS = 24 * 3600 * 1000  # a day: a running write's staging changes, and a commit takes seconds

_BYTES = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


_REGISTER = (
    "register the table with dynsource.register_table(spark, name, path=...) or `dynsource table create NAME "
    "--path URL` instead: Spark drops the OPTIONS of CREATE TABLE ... USING for Python data sources"
)
_PATH_REQUIRED = (
    "Option 'path' is required: the fsspec URL or local path of the table directory. For a catalog table (of "
    "CREATE TABLE ... USING dynsource, or of df.write.format('dynsource').saveAsTable(...) in a process that did "
    f"not call dynsource.register, which Spark reads without the path it recorded), {_REGISTER}."
)
# What Spark hands a Python data source for CREATE TABLE ... USING dynsource: its catalog properties, not the OPTIONS.
_TABLE_PROPERTIES = {"location", "owner", "provider", "comment", "external", "is_managed_location"}


def _choice(allowed: tuple[str, ...]):
    def parse(name: str, value: str) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            raise ValueError(f"Option '{name}' = {value!r} is not valid; expected one of {list(allowed)}.")
        return text

    return parse


def _boolean(name: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"Option '{name}' = {value!r} is not valid; expected 'true' or 'false'.")
    return text == "true"


def _byte_size(name: str, value: str) -> int:
    match = _BYTES.match(str(value))
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f"Option '{name}' = {value!r} is not a positive byte size; expected e.g. 134217728 or '128m'.")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _positive_int(name: str, value: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"Option '{name}' = {value!r} is not valid; expected a positive integer.")
    return int(text)


def _non_negative_int(name: str, value: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"Option '{name}' = {value!r} is not valid; expected a non-negative integer.")
    return int(text)


def session_ms(spark: Any, setting: str, default: int) -> int:
    """The session's ``setting`` (e.g. ``spark.dynsource.collectTimeoutMs``), whole milliseconds, 0 or more."""
    text = settings.get(spark, setting)
    if text is None:
        return default
    if not str(text).strip().isdigit():
        raise ValueError(f"{setting} must be a whole number of milliseconds, 0 or more; got {text!r}.")
    return int(text)


def _text(name: str, value: str) -> str | None:
    return str(value).strip() or None


def _handle(name: str, value: str) -> str | None:
    # A string that is no handle at all (truncated, str(df)) is a programming error, not an unusable filter:
    # it fails whatever dynamicFilterOnError says, which only covers well-formed handles.
    handle = _text(name, value)
    if handle is not None:
        filterstore.validate_handle(handle)
    return handle


def _ddl(name: str, value: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_ddl(value, untyped=True))
    except ValueError as error:
        raise ValueError(f"Option '{name}' = {value!r} is not valid: {error}") from None


def _partition_filter(name: str, value: str) -> PartitionFilter | None:
    return PartitionFilter.parse(str(value)) if str(value).strip() else None


def _time_zone(name: str, value: str) -> str:
    # The zone IDs Spark's spark.sql.session.timeZone takes: regions, offsets, UTC+h and the short IDs.
    try:
        sparkcast.resolve_zone(str(value).strip())
    except ValueError:
        raise ValueError(
            f"Option '{name}' = {value!r} is not a known time zone; expected a zone ID such as 'UTC', "
            "'America/Los_Angeles' or '+05:30'."
        ) from None
    return str(value).strip()


def _log_level(name: str, value: str) -> str:
    return logs.parse_level(f"Option '{name}'", value)


def _path(name: str, value: str) -> str:
    path = (value or "").strip()
    if not path:
        raise ValueError(_PATH_REQUIRED)
    return path


def _option(name: str, parse: Callable[[str, str], Any], default: Any = dataclasses.MISSING,
            render: Callable[[Any], str] = str) -> Any:
    """The :class:`ScanOptions` field of reader option ``name``: its parser, default and string form (``render``)."""
    return dataclasses.field(default=default, metadata={"option": name, "parse": parse, "render": render})


def _boolean_text(value: bool) -> str:
    return "true" if value else "false"


def _ddl_text(columns: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"`{name.replace('`', '``')}` {type_name}".rstrip() for name, type_name in columns)


def _json_text(value: StorageOptions) -> str:
    return value.to_json()


@dataclass(frozen=True)
class ScanOptions:
    """The validated options of one ``dynsource`` read (see ``DynsourceDataSource`` for their meaning).

    Attributes are the options' names in snake_case (``dynamicFilter`` is ``dynamic_filter``; ``filterStore``,
    a URL, is ``filter_store_url``, and :attr:`filter_store` the store it names). Each field is the one
    definition of its option: name, parser, default and string form.
    """

    path: str = _option("path", _path)
    format: str = _option("format", _choice(FORMATS), "parquet")
    base_path: str | None = _option("basePath", _text, None)
    dynamic_filter: str | None = _option("dynamicFilter", _handle, None)
    dynamic_filtering_enabled: bool = _option("dynamicFilteringEnabled", _boolean, True, _boolean_text)
    dynamic_filter_on_error: str = _option("dynamicFilterOnError", _choice(ON_ERROR), "fallback")
    filter_store_url: str | None = _option("filterStore", _text, None)
    partition_columns: tuple[tuple[str, str], ...] = _option("partitionColumns", _ddl, (), _ddl_text)
    merge_schema: bool = _option("mergeSchema", _boolean, False, _boolean_text)
    partition_filter: PartitionFilter | None = _option("partitionFilter", _partition_filter, None,
                                                       lambda predicate: predicate.text)
    max_partition_bytes: int = _option("maxPartitionBytes", _byte_size, DEFAULT_MAX_PARTITION_BYTES)
    open_cost_in_bytes: int = _option("openCostInBytes", _byte_size, DEFAULT_OPEN_COST_IN_BYTES)
    min_partition_num: int = _option("minPartitionNum", _positive_int, os.cpu_count() or 1)
    batch_size: int = _option("batchSize", _positive_int, DEFAULT_BATCH_SIZE)
    time_zone: str | None = _option("timeZone", _time_zone, None)
    partition_column_type_inference: bool = _option("partitionColumnTypeInference", _boolean, True, _boolean_text)
    timestamp_type: str = _option("timestampType", _choice(TIMESTAMP_TYPES), "timestamp_ltz")
    row_filter_max_keys: int = _option("rowFilterMaxKeys", _non_negative_int, DEFAULT_ROW_FILTER_MAX_KEYS)
    task_filter_max_bytes: int = _option("taskFilterMaxBytes", _byte_size, DEFAULT_TASK_FILTER_MAX_BYTES)
    dynamic_filter_wait_ms: int = _option("dynamicFilterWaitMs", _non_negative_int, DEFAULT_WAIT_MS)
    storage_options: StorageOptions = _option("storageOptions", StorageOptions.parse, storage.NO_OPTIONS, _json_text)
    filter_store_options: StorageOptions | None = _option("filterStoreOptions", StorageOptions.parse, None,
                                                          _json_text)
    log_level: str | None = _option("logLevel", _log_level, None)
    warn_unpruned: bool = _option("warnUnpruned", _boolean, True, _boolean_text)
    reader: str = _option("reader", _choice(READERS), "auto")
    partition_overwrite_mode: str | None = _option("partitionOverwriteMode", _choice(OVERWRITE_MODES), None)
    abandoned_write_age_ms: int = _option("abandonedWriteAgeMs", _non_negative_int, DEFAULT_ABANDONED_AGE_MS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ScanOptions:
        """Validate string options as Spark passes them; every problem names the option."""
        parsed = _parse(options)
        if "path" not in parsed:
            raise ValueError(_PATH_REQUIRED)
        return cls(**parsed)

    @property
    def partition_settings(self) -> partitions.PartitionSettings:
        """The session settings under which this scan types partition values (as Spark would)."""
        return partitions.PartitionSettings(self.time_zone, self.partition_column_type_inference,
                                            self.timestamp_type == "timestamp_ntz")

    @property
    def declared_types(self) -> dict[str, str]:
        """The Spark SQL types ``partitionColumns`` declares, by column (a column named without one is left out)."""
        return {name: type_name for name, type_name in self.partition_columns if type_name}

    def with_options(self, options: Mapping[str, str]) -> ScanOptions:
        """These options overridden by ``options`` (string options, validated as by :meth:`parse`).

        A registered table's stored options are parsed once, when its definition is
        read; a table reference's ``WITH (...)`` options only override some of them.
        """
        return dataclasses.replace(self, **_parse(options)) if options else self

    @functools.cached_property  # the default store is resolved once per scan, not at each use
    def filter_store(self) -> FilterStore:
        """The filter store: ``filterStore`` (default: this process's) opened with ``filterStoreOptions``, else with
        ``storageOptions`` when it is on the table's kind of filesystem (an ``s3://`` store beside an ``s3://``
        table), else with none."""
        url = self.filter_store_url or storage.default_store()
        if self.filter_store_options is not None:
            return FilterStore(url, self.filter_store_options)
        return FilterStore(url, self.storage_options if storage.same_protocol(url, self.path) else storage.NO_OPTIONS)

    def to_options(self) -> dict[str, str]:
        """The reader options (strings, as Spark passes them) that :meth:`parse` reads back as these options;
        defaults are left out."""
        return reader_options(**{field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                                 if getattr(self, field.name) != field.default})


# Every option's field by its name as users type it (matched ignoring case).
_OPTIONS = {field.metadata["option"]: field for field in dataclasses.fields(ScanOptions)}
OPTION_NAMES = tuple(_OPTIONS)
_BY_ATTRIBUTE = {field.name: field for field in _OPTIONS.values()}


def reader_options(**attributes: Any) -> dict[str, str]:
    """The reader options that set these :class:`ScanOptions` attributes, by their documented names (None: unset).

    What dynsource uses wherever it builds a read itself, e.g.
    ``reader_options(dynamic_filter=handle, filter_store_url=url)``.
    """
    return {_BY_ATTRIBUTE[name].metadata["option"]: _BY_ATTRIBUTE[name].metadata["render"](value)
            for name, value in attributes.items() if value is not None}


# The reader options that carry the session settings typing partition values, and the settings they carry.
_SESSION_OPTIONS = {
    "timeZone": partitions.TIME_ZONE_SETTING,
    "partitionColumnTypeInference": partitions.INFERENCE_SETTING,
    "timestampType": partitions.TIMESTAMP_TYPE_SETTING,
}


def session_options(spark: Any, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The reader options that type partition values as the session ``spark`` does now, but those ``given``.

    Spark's Python workers are not told the session's settings: wherever dynsource builds a read on the driver it
    passes these, so a scan planned in a worker types ``ts=2024-01-01 05%3A00%3A00`` in the session's time zone,
    and infers partition types (or not) as ``spark.read.parquet`` would. Options ``given`` (a table's stored ones,
    a reference's) are the user's and win, as Spark's file-source option ``timeZone`` wins over the session's.
    """
    taken = {key.lower() for key in given or ()}
    wanted = {option: setting for option, setting in _SESSION_OPTIONS.items() if option.lower() not in taken}
    found = {option: settings.get(spark, setting) for option, setting in wanted.items()}
    if "timeZone" in found and found["timeZone"] is None:
        found["timeZone"] = _default_zone(spark)
    return {option: str(value) for option, value in found.items() if value is not None}


# A session's zone where it sets none: its JVM's default zone, asked once (over Spark Connect a round trip).
_default_zones: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _default_zone(spark: Any) -> str:
    zone = _default_zones.get(spark)
    if zone is None:
        zone = _default_zones[spark] = spark.conf.get(partitions.TIME_ZONE_SETTING)
    return zone


def filter_options(handle: str, store: FilterStore) -> dict[str, str]:
    """The reader options that prune a scan by the filter published under ``handle`` in ``store``."""
    return reader_options(dynamic_filter=handle, filter_store_url=store.url,
                          filter_store_options=store.options if store.options else None)


def _with_guess(key: str, canonical: Mapping[str, str]) -> str:
    """``'key'``, and the valid option it is closest to (Spark may hand options lower-cased: the guess has the case
    the option is documented with)."""
    close = difflib.get_close_matches(key.lower(), list(canonical), n=1, cutoff=0.75)
    return f"'{key}' (did you mean '{canonical[close[0]]}'?)" if close else f"'{key}'"


def _parse(options: Mapping[str, str]) -> dict[str, Any]:
    """The ScanOptions attributes ``options`` set, validated."""
    canonical = {name.lower(): name for name in OPTION_NAMES}
    unknown = sorted(key for key in options if key.lower() not in canonical)
    if "provider" in unknown and {key.lower() for key in unknown} <= _TABLE_PROPERTIES:
        raise ValueError(f"Data source 'dynsource' got Spark's table properties {unknown} instead of reader options: "
                         f"CREATE TABLE ... USING dynsource cannot define a table; {_REGISTER}.")
    if unknown:
        raise ValueError(f"Unknown option(s) {', '.join(_with_guess(key, canonical) for key in unknown)} for data "
                         f"source 'dynsource'; valid options are {sorted(OPTION_NAMES)}.")
    fields = (_OPTIONS[canonical[key.lower()]] for key in options)
    return {field.name: field.metadata["parse"](field.metadata["option"], value)
            for field, value in zip(fields, options.values(), strict=True)}
