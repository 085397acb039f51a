"""An HTTP API source that accepts a dynamic filter on its key column (``dynsource.SupportsDynamicFiltering``).

The API at option ``url`` lists its keys (``GET <url>/keys``: a JSON list) and serves one page of rows per key
(``GET <url>/items/<the key, URL-quoted>``: ``{"rows": [{"key": ..., "v": ...}, ...]}``). A key has the Spark SQL
type ``keyType``: bigint (a customer id) or string (a stock symbol); a path cannot name a null key, so the API has
none. Each key costs a request: what the filter saves is requests, not only rows. In ``partitions()`` the reader
resolves the filter its ``dynamicFilter`` option names, requests the index once, and keeps the keys whose rows the
filter may match:

- exact keys: the index's keys among them;
- a range: the index's keys within it;
- a Bloom filter, or keys of another type than the column's (which Python would compare its own way, ``"07"``
  unequal to ``7``): the keys the filter's vectorized mask keeps, compared as Spark compares them;
- nothing to filter by: every key.

Each input partition is up to ``keysPerPartition`` (8 by default) of the kept keys, and its read requests those
keys' pages only; a filter that keeps no key leaves no partition.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

import dynsource
from dynsource.filtering.fieldview import FieldFilter
from dynsource.types import arrow_type

NAME = "http_keys"
KEY = "key"
KEY_TYPES = ("bigint", "string")
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class KeyPages(InputPartition):
    """The pages of these keys."""

    keys: tuple[Any, ...]


class HttpKeysSource(dynsource.SupportsDynamicFiltering, DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return f"`{KEY}` {self.options['keyType']}, v BIGINT"

    def accepted_filter_fields(self) -> list[str]:
        return [KEY]

    def reader(self, schema: Any) -> HttpKeysReader:
        return HttpKeysReader(self.options, self.accepted_filter_fields())


class HttpKeysReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], accepted: list[str]) -> None:
        self.options = options
        self.accepted = accepted
        self.url = options["url"].rstrip("/")
        self.key_type = options["keyType"]
        if self.key_type not in KEY_TYPES:
            raise ValueError(f"Option keyType is one of {list(KEY_TYPES)}, not {self.key_type!r}.")

    def partitions(self) -> Sequence[InputPartition]:
        # The filter first: a handle that fails the read (dynamicFilterOnError=fail) costs no request.
        keys = dynsource.dynamic_filter(self.options, self.accepted).field_filter(KEY)
        kept = _kept(_get(f"{self.url}/keys"), keys, self.key_type)
        size = int(self.options.get("keysPerPartition", "8"))
        return [KeyPages(tuple(kept[start:start + size])) for start in range(0, len(kept), size)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, int]]:
        if not isinstance(partition, KeyPages):  # Spark reads an empty plan as one empty partition
            return
        for key in partition.keys:
            page = _get(f"{self.url}/items/{urllib.parse.quote(str(key), safe='')}")
            yield from ((row["key"], row["v"]) for row in page["rows"])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS) as response:
        return json.load(response)


def _comparable(keys: FieldFilter, key_type: str) -> bool:
    """Whether Python compares the filter's keys with the column's as Spark does: both strings, or both integral."""
    return keys.type_name == key_type or (keys.type_name in _INTEGRAL and key_type in _INTEGRAL)


def _kept(index: list[Any], keys: FieldFilter, key_type: str) -> list[Any]:
    """The keys of the API's ``index`` whose rows the filter may match, in the index's order."""
    if not keys.is_filtering:
        return index
    if keys.kind == "exact" and _comparable(keys, key_type):
        wanted = set(keys.to_pylist())
        return [key for key in index if key in wanted]
    if keys.kind == "range" and _comparable(keys, key_type):
        return [] if keys.min is None else [key for key in index if keys.min <= key <= keys.max]
    mask = keys.mask(pa.array(index, arrow_type(key_type))).to_pylist()
    return [key for key, keep in zip(index, mask, strict=True) if keep]
