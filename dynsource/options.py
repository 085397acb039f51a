"""Reader options: their names, defaults and validation.

Spark may hand the options lower-cased (``WITH (...)`` in SQL), so names are
matched case-insensitively and reported in their documented camelCase form.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynsource import logs, storage, store
from dynsource.ddl import parse_ddl
from dynsource.partitionfilter import PartitionFilter
from dynsource.planner import DEFAULT_MAX_PARTITION_BYTES, DEFAULT_OPEN_COST_IN_BYTES
from dynsource.rowfilter import DEFAULT_TASK_FILTER_MAX_BYTES
from dynsource.storage import FilterStore, StorageOptions

FORMATS = ("parquet", "orc", "csv", "json")
READERS = ("auto", "spark", "python")  # who reads a registered table's kept files in dynsource.sql, dynamic_join
ON_ERROR = ("fallback", "fail")
DEFAULT_BATCH_SIZE = 65536
# openLooKeng's hive.dynamic-filtering-row-filtering-threshold default.
DEFAULT_ROW_FILTER_MAX_KEYS = 2000
DEFAULT_WAIT_MS = 10_000  # how long planning waits for a filter still being collected

_BYTES = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class ScanOptions:
    """The validated options of one ``dynsource`` read (see ``DynsourceDataSource`` for their meaning).

    Attributes are the options' names in snake_case (``dynamicFilter`` is ``dynamic_filter``; ``filterStore``,
    a URL, is ``filter_store_url``, and :attr:`filter_store` the store it names).
    """

    path: str
    format: str = "parquet"
    base_path: str | None = None
    dynamic_filter: str | None = None
    dynamic_filtering_enabled: bool = True
    dynamic_filter_on_error: str = "fallback"
    filter_store_url: str | None = None
    partition_columns: tuple[tuple[str, str], ...] = ()
    merge_schema: bool = False
    partition_filter: PartitionFilter | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost_in_bytes: int = DEFAULT_OPEN_COST_IN_BYTES
    min_partition_num: int = os.cpu_count() or 1
    batch_size: int = DEFAULT_BATCH_SIZE
    time_zone: str | None = None
    row_filter_max_keys: int = DEFAULT_ROW_FILTER_MAX_KEYS
    task_filter_max_bytes: int = DEFAULT_TASK_FILTER_MAX_BYTES
    dynamic_filter_wait_ms: int = DEFAULT_WAIT_MS
    storage_options: StorageOptions = storage.NO_OPTIONS
    filter_store_options: StorageOptions | None = None
    log_level: str | None = None
    reader: str = "auto"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ScanOptions:
        """Validate string options as Spark passes them; every problem names the option."""
        parsed = _parse(options)
        if "path" not in parsed:
            raise ValueError(_PATH_REQUIRED)
        return cls(**parsed)

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

_REGISTER = (
    "register the table with dynsource.register_table(spark, name, path=...) or `dynsource table create NAME "
    "--path URL` instead: Spark drops the OPTIONS of CREATE TABLE ... USING for Python data sources"
)
_PATH_REQUIRED = (
    f"Option 'path' is required: the fsspec URL or local path of the table directory. For a catalog table, {_REGISTER}."
)
# What Spark hands a Python data source for CREATE TABLE ... USING dynsource: its catalog properties, not the OPTIONS.
_TABLE_PROPERTIES = {"location", "owner", "provider", "comment", "external", "is_managed_location"}


def _parse(options: Mapping[str, str]) -> dict[str, Any]:
    """The ScanOptions attributes ``options`` set, validated."""
    canonical = {name.lower(): name for name in OPTION_NAMES}
    unknown = sorted(key for key in options if key.lower() not in canonical)
    if "provider" in unknown and {key.lower() for key in unknown} <= _TABLE_PROPERTIES:
        raise ValueError(f"Data source 'dynsource' got Spark's table properties {unknown} instead of reader options: "
                         f"CREATE TABLE ... USING dynsource cannot define a table; {_REGISTER}.")
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for data source 'dynsource'; valid options are {sorted(OPTION_NAMES)}."
        )
    given = {canonical[key.lower()]: value for key, value in options.items()}
    parsed = {_FIELDS.get(name, name): _PARSERS[name](name, value) for name, value in given.items() if name != "path"}
    if "path" in given:
        path = (given["path"] or "").strip()
        if not path:
            raise ValueError(_PATH_REQUIRED)
        parsed["path"] = path
    return parsed


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


def _text(name: str, value: str) -> str | None:
    return str(value).strip() or None


def _handle(name: str, value: str) -> str | None:
    # A string that is no handle at all (truncated, str(df)) is a programming error, not an unusable filter:
    # it fails whatever dynamicFilterOnError says, which only covers well-formed handles.
    handle = _text(name, value)
    if handle is not None:
        store.validate_handle(handle)
    return handle


def _ddl(name: str, value: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_ddl(value))
    except ValueError as error:
        raise ValueError(f"Option '{name}' = {value!r} is not valid: {error}") from None


def _partition_filter(name: str, value: str) -> PartitionFilter | None:
    return PartitionFilter.parse(str(value)) if str(value).strip() else None


def _time_zone(name: str, value: str) -> str:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(str(value).strip())
    except Exception:
        raise ValueError(
            f"Option '{name}' = {value!r} is not a known time zone; expected an IANA name such as 'UTC'."
        ) from None
    return str(value).strip()


_PARSERS = {
    "basePath": _text,
    "format": _choice(FORMATS),
    "dynamicFilter": _handle,
    "dynamicFilteringEnabled": _boolean,
    "dynamicFilterOnError": _choice(ON_ERROR),
    "filterStore": _text,
    "partitionColumns": _ddl,
    "mergeSchema": _boolean,
    "partitionFilter": _partition_filter,
    "maxPartitionBytes": _byte_size,
    "openCostInBytes": _byte_size,
    "minPartitionNum": _positive_int,
    "batchSize": _positive_int,
    "timeZone": _time_zone,
    "rowFilterMaxKeys": _non_negative_int,
    "taskFilterMaxBytes": _byte_size,
    "dynamicFilterWaitMs": _non_negative_int,
    "storageOptions": StorageOptions.parse,
    "filterStoreOptions": StorageOptions.parse,
    "logLevel": lambda name, value: logs.parse_level(f"Option '{name}'", value),
    "reader": _choice(READERS),
}
# The ScanOptions attribute of each option whose name is not one already (path, format).
_FIELDS = {
    "basePath": "base_path",
    "dynamicFilter": "dynamic_filter",
    "dynamicFilteringEnabled": "dynamic_filtering_enabled",
    "dynamicFilterOnError": "dynamic_filter_on_error",
    "filterStore": "filter_store_url",
    "partitionColumns": "partition_columns",
    "mergeSchema": "merge_schema",
    "partitionFilter": "partition_filter",
    "maxPartitionBytes": "max_partition_bytes",
    "openCostInBytes": "open_cost_in_bytes",
    "minPartitionNum": "min_partition_num",
    "batchSize": "batch_size",
    "timeZone": "time_zone",
    "rowFilterMaxKeys": "row_filter_max_keys",
    "taskFilterMaxBytes": "task_filter_max_bytes",
    "dynamicFilterWaitMs": "dynamic_filter_wait_ms",
    "storageOptions": "storage_options",
    "filterStoreOptions": "filter_store_options",
    "logLevel": "log_level",
}
# Every option's name as users type it (matched ignoring case).
OPTION_NAMES = ("path", *_PARSERS)
