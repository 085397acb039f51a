"""A database source on SQLite that accepts a dynamic filter on its key column (``dynsource.SupportsDynamicFiltering``).

The table (option ``table`` of the database file ``database``) has a key column (``key``, of Spark SQL type
``keyType``: bigint, string, double or date, a date stored as ISO text) and a ``v BIGINT`` column. Each input
partition is a range of the table's distinct keys; the rows whose key is null are one more partition. In
``partitions()`` the reader resolves the filter its ``dynamicFilter`` option names and pushes it into SQLite:

- exact keys: ranges holding none are not read; each read sends ``WHERE key IN (...)`` of its range's keys,
  chunked under SQLite's variable limit (option ``maxVariables`` lowers it);
- a range: ranges outside it are not read; each read sends ``WHERE key BETWEEN ? AND ?``;
- a Bloom filter (or keys of another type than the column's, which SQLite would compare its own way): the read
  fetches its range and keeps the rows the filter's vectorized mask keeps;
- nothing to filter by: the read fetches its range.

The null partition is read only when the filter may match a null key. Each read task writes the rows it fetched
from SQLite and the statements it sent into a file of option ``countsDir`` (when given), so tests can tell what
pushing the filter saved.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import CaseInsensitiveDict, DataSource, DataSourceReader, InputPartition

import dynsource
from dynsource import DynamicFilteringData
from dynsource.filtering.fieldview import FieldFilter
from dynsource.types import arrow_type

NAME = "sqlite_keys"
SQLITE_TYPES = {"bigint": "INTEGER", "string": "TEXT", "double": "REAL", "date": "TEXT"}
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


def write_table(database: Path, table: str, key: str, key_type: str, rows: Iterable[tuple[Any, int]]) -> None:
    """A real SQLite file holding ``rows`` (key, v), indexed on the key as a table joined on it would be: what the
    source reads."""
    with contextlib.closing(sqlite3.connect(database)) as connection, connection:
        connection.execute(f'CREATE TABLE "{table}" ("{key}" {SQLITE_TYPES[key_type]}, v INTEGER)')
        connection.executemany(f'INSERT INTO "{table}" VALUES (?, ?)',
                               ((to_sql(value, key_type), v) for value, v in rows))
        connection.execute(f'CREATE INDEX "{table}_{key}" ON "{table}" ("{key}")')


def to_sql(value: Any, key_type: str) -> Any:
    return value.isoformat() if key_type == "date" and value is not None else value


def from_sql(value: Any, key_type: str) -> Any:
    return dt.date.fromisoformat(value) if key_type == "date" and value is not None else value


@dataclass(frozen=True)
class KeyRange(InputPartition):
    """The rows whose key lies in [low, high]; ``keys``: only those keys (``IN``); ``between``: only those within
    it; ``payload``: the filter whose mask the fetched rows must pass."""

    low: Any
    high: Any
    keys: tuple[Any, ...] | None = None
    between: tuple[Any, Any] | None = None
    payload: bytes | None = None


@dataclass(frozen=True)
class NullKeys(InputPartition):
    """The rows whose key is null."""

    payload: bytes | None = None


class SqliteKeysSource(dynsource.SupportsDynamicFiltering, DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return f"`{self.options['key']}` {self.options['keyType']}, v BIGINT"

    def accepted_filter_fields(self) -> list[str]:
        return [self.options["key"]]

    def reader(self, schema: Any) -> SqliteKeysReader:
        return SqliteKeysReader(self.options, self.accepted_filter_fields())


class SqliteKeysReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], accepted: list[str]) -> None:
        self.options = options
        self.accepted = accepted
        self.database, self.table, self.key = options["database"], options["table"], options["key"]
        self.key_type = options["keyType"]

    def partitions(self) -> Sequence[InputPartition]:
        data = dynsource.dynamic_filter(self.options, self.accepted)
        keys = data.field_filter(self.key)
        payload = _payload(data, keys, self.key_type)
        ranges = [_pruned(low, high, keys, self.key_type, payload) for low, high in self._ranges()]
        kept: list[InputPartition] = [part for part in ranges if part is not None]
        if keys.matches_null:
            kept.append(NullKeys(payload))
        return kept

    def _ranges(self) -> list[tuple[Any, Any]]:
        """The distinct keys cut into ``partitions`` contiguous ranges."""
        key, table = f'"{self.key}"', f'"{self.table}"'
        # One seek per distinct key in the key's index (write_table makes it): a DISTINCT would walk every row's
        # entry (25 ms at 1M rows).
        distinct = (f"WITH RECURSIVE d(k) AS (SELECT min({key}) FROM {table} UNION ALL "
                    f"SELECT (SELECT min({key}) FROM {table} WHERE {key} > d.k) FROM d WHERE d.k IS NOT NULL) "
                    "SELECT k FROM d WHERE k IS NOT NULL")
        with _connect(self.database) as connection:
            found = [from_sql(row[0], self.key_type) for row in connection.execute(distinct)]
        count = int(self.options.get("partitions", "4"))
        size = max(1, -(-len(found) // count))
        return [(found[start], found[min(start + size, len(found)) - 1]) for start in range(0, len(found), size)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, int]]:
        if not isinstance(partition, (KeyRange, NullKeys)):  # Spark reads an empty plan as one empty partition
            return
        fetched, statements = [], 0
        with _connect(self.database) as connection:
            if self.options.get("maxVariables"):
                connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, int(self.options["maxVariables"]))
            for sql, parameters in self._statements(partition, connection):
                fetched += connection.execute(sql, parameters).fetchall()
                statements += 1
        self._count(len(fetched), statements)
        rows = [(from_sql(key, self.key_type), v) for key, v in fetched]
        if partition.payload is not None and rows:
            mask = DynamicFilteringData.from_bytes(partition.payload).field_filter(self.key).mask(
                pa.array([key for key, _ in rows], arrow_type(self.key_type)))
            rows = [row for row, keep in zip(rows, mask.to_pylist(), strict=True) if keep]
        yield from rows

    def _statements(self, partition: InputPartition,
                    connection: sqlite3.Connection) -> Iterator[tuple[str, Sequence[Any]]]:
        select = f'SELECT "{self.key}", v FROM "{self.table}" WHERE '
        column = f'"{self.key}"'
        if isinstance(partition, NullKeys):
            yield select + f"{column} IS NULL", ()
        elif partition.keys is not None:
            limit = connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            values = [to_sql(value, self.key_type) for value in partition.keys]
            for start in range(0, len(values), limit):
                chunk = values[start:start + limit]
                yield select + f"{column} IN ({', '.join('?' * len(chunk))})", chunk
        else:
            low, high = partition.between or (partition.low, partition.high)
            yield select + f"{column} BETWEEN ? AND ?", (to_sql(low, self.key_type), to_sql(high, self.key_type))

    def _count(self, rows: int, statements: int) -> None:
        directory = self.options.get("countsDir")
        if directory:
            figures = json.dumps({"rows": rows, "statements": statements})
            (Path(directory) / f"{uuid.uuid4().hex}.json").write_text(figures)


def _connect(database: str) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True))


def _pushable(keys: FieldFilter, key_type: str) -> bool:
    """Whether SQLite compares the filter's keys as Spark would: keys of the column's own type (or both integral)."""
    same = keys.type_name == key_type or (keys.type_name in _INTEGRAL and key_type in _INTEGRAL)
    return keys.kind in ("exact", "range") and same


def _payload(data: DynamicFilteringData, keys: FieldFilter, key_type: str) -> bytes | None:
    """The filter the read tasks apply to the rows they fetch, when it cannot be pushed into SQLite."""
    return data.to_bytes() if keys.is_filtering and not _pushable(keys, key_type) else None


def _pruned(low: Any, high: Any, keys: FieldFilter, key_type: str, payload: bytes | None) -> KeyRange | None:
    """The read of keys [low, high] under the filter, or None when no key of the filter lies there."""
    if not _pushable(keys, key_type):
        return KeyRange(low, high, payload=payload)
    if keys.kind == "exact":
        inside = tuple(value for value in keys.to_pylist() if low <= value <= high)
        return KeyRange(low, high, keys=inside) if inside else None
    if keys.min is None or keys.max < low or high < keys.min:
        return None
    return KeyRange(low, high, between=(max(low, keys.min), min(high, keys.max)))


def catalog_source(name: str, **defaults: str) -> type[SqliteKeysSource]:
    """The source under ``name`` reading one SQLite table, for a catalog table (``CREATE TABLE t USING name``):
    Spark gives a catalog table's Python source no option, so the class holds them (a query's still override)."""

    def __init__(self: SqliteKeysSource, options: Mapping[str, str]) -> None:
        SqliteKeysSource.__init__(self, CaseInsensitiveDict({**defaults, **options}))

    return type(f"SqliteKeysSource_{name}", (SqliteKeysSource,),
                {"name": classmethod(lambda cls: name), "__init__": __init__})
