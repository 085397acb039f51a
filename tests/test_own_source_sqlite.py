"""A database source of one's own takes a dynamic filter: the SQLite source of ``tests/sources`` against itself.

Each generated case reads a real SQLite file through ``spark.read.format("sqlite_keys").option("dynamicFilter",
handle)`` in the suite's SparkSession, and compares the rows with the same source's rows without a filter: an
exact or range filter must return exactly the rows whose key it holds (it was pushed into SQLite as ``IN`` or
``BETWEEN``, and the rows fetched drop to those), a Bloom filter a superset of them, a filter that cannot be
trusted (exceeded, unknown, late past its wait, disabled) every row.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle

import dynsource
from dynsource import DynamicFilteringData
from dynsource.filtering import handles
from dynsource.types import arrow_type
from tests.sources import sqlite_source

ROWS = 240
DISTINCT = 48


def _keys(key_type: str) -> list[Any]:
    """``DISTINCT`` keys of the type, in no particular order (strings that need quoting among them)."""
    if key_type == "bigint":
        return [index * 7 - 60 for index in range(DISTINCT)]
    if key_type == "double":
        return [index / 4 - 3 for index in range(DISTINCT)]
    if key_type == "date":
        return [dt.date(2020, 2, 27) + dt.timedelta(days=index * 3) for index in range(DISTINCT)]
    return [f"{prefix}{index}" for index, prefix in zip(range(DISTINCT), ["O'k ", "ü-", "", "%_"] * DISTINCT,
                                                        strict=False)]


def _absent(key_type: str) -> list[Any]:
    """Keys of the type that no row holds."""
    return {"bigint": [-61, 10_000], "double": [0.1, 99.5], "date": [dt.date(1999, 1, 1)],
            "string": ["absent", "O'k"]}[key_type]


KEY_TYPES = ("bigint", "string", "double", "date")


@dataclass(frozen=True)
class Table:
    database: str
    key_type: str
    rows: list[tuple[Any, int]]
    keys: list[Any]


@pytest.fixture(scope="module")
def source(spark):
    # Spark's workers get the test source by value: they need not import the tests.
    cloudpickle.register_pickle_by_value(sqlite_source)
    spark.dataSource.register(sqlite_source.SqliteKeysSource)
    yield spark
    cloudpickle.unregister_pickle_by_value(sqlite_source)


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Table]:
    made = {}
    for key_type in KEY_TYPES:
        generator = random.Random(key_type)
        keys = _keys(key_type)
        rows = [(None if generator.random() < 0.06 else generator.choice(keys), v) for v in range(ROWS)]
        database = tmp_path_factory.mktemp("sqlite") / f"{key_type}.db"
        sqlite_source.write_table(database, "facts", "k", key_type, rows)
        made[key_type] = Table(str(database), key_type, rows, sorted({key for key, _ in rows if key is not None}))
    return made


@dataclass(frozen=True)
class Read:
    rows: Counter
    fetched: int
    statements: int


def read(spark, table: Table, tmp_path: Path, **options: str) -> Read:
    counts = tmp_path / f"counts-{uuid.uuid4().hex}"
    counts.mkdir()
    reader = (spark.read.format(sqlite_source.NAME).option("database", table.database).option("table", "facts")
              .option("key", "k").option("keyType", table.key_type).option("partitions", "4")
              .option("countsDir", str(counts)))
    for name, value in options.items():
        reader = reader.option(name, value)
    rows = Counter((row.k, row.v) for row in reader.load().collect())
    figures = [json.loads(path.read_text()) for path in counts.glob("*.json")]
    return Read(rows, sum(f["rows"] for f in figures), sum(f["statements"] for f in figures))


@pytest.fixture(scope="module")
def unfiltered(source, tables, tmp_path_factory) -> dict[str, Read]:
    """Each table read without a filter: every row, each fetched once."""
    directory = tmp_path_factory.mktemp("unfiltered")
    reads = {key_type: read(source, table, directory) for key_type, table in tables.items()}
    for key_type, whole in reads.items():
        assert whole.rows == Counter(tables[key_type].rows) and whole.fetched == ROWS
    return reads


def of(key_type: str, rows, null_safe: bool = False, kind: str = "exact") -> DynamicFilteringData:
    table = pa.table({"k": pa.array(list(rows), arrow_type(key_type))})
    return DynamicFilteringData.from_table([("k", key_type)], table, kind=kind, null_safe=null_safe)


@dataclass(frozen=True)
class Case:
    """What a case publishes and how it reads, what rows it must return, and what the fetched rows must be."""

    options: dict[str, str]
    expected: Callable[[Any], bool]  # the keys whose rows a read returns (exactly, or at least for a Bloom filter)
    exact: bool = True  # the rows are exactly those; else a superset of them
    fetched: str = "expected"  # "expected": only the returned rows are fetched; "non-null", "all"


def _case(kind: str, table: Table, spark) -> Case:
    generator = random.Random(zlib.crc32(f"{kind}/{table.key_type}".encode()))
    key_type = table.key_type
    sample = generator.sample(table.keys, generator.randint(1, 8))
    wanted = set(sample)
    if kind == "exact":
        return Case({"dynamicFilter": dynsource.publish(of(key_type, sample + _absent(key_type)))}, wanted.__contains__)
    if kind == "exact_null_safe":
        data = of(key_type, [*sample, None], null_safe=True)
        return Case({"dynamicFilter": dynsource.publish(data)}, lambda key: key is None or key in wanted)
    if kind == "exact_no_key":
        return Case({"dynamicFilter": dynsource.publish(of(key_type, []))}, lambda key: False)
    if kind == "exact_chunked":  # more keys than SQLite's variables: several IN statements per range
        data = of(key_type, table.keys)
        return Case({"dynamicFilter": dynsource.publish(data), "maxVariables": "5"}, lambda key: key is not None)
    if kind == "collected":
        dim = spark.createDataFrame([(key,) for key in sample], f"d {key_type}")
        return Case({"dynamicFilter": dynsource.collect(dim, {"k": "d"})}, wanted.__contains__)
    if kind == "range":
        low, high = sorted(generator.sample(table.keys, 2))
        data = of(key_type, [low, high], kind="range")
        return Case({"dynamicFilter": dynsource.publish(data)}, lambda key: key is not None and low <= key <= high)
    if kind == "bloom":
        data = of(key_type, sample, kind="bloom")
        return Case({"dynamicFilter": dynsource.publish(data)}, wanted.__contains__, exact=False, fetched="non-null")
    if kind == "exceeded":
        data = DynamicFilteringData([("k", key_type)], exceed_threshold=True)
        return Case({"dynamicFilter": dynsource.publish(data)}, lambda key: True, fetched="all")
    if kind == "late":  # published while the read's planning waits for it
        handle = handles.reserve()
        threading.Timer(1.0, dynsource.publish, (of(key_type, sample),), {"handle": handle}).start()
        return Case({"dynamicFilter": handle}, wanted.__contains__)
    if kind == "late_past_its_wait":
        return Case({"dynamicFilter": handles.reserve(), "dynamicFilterWaitMs": "300"}, lambda key: True, fetched="all")
    if kind == "unknown_handle":
        return Case({"dynamicFilter": f"dynf-{uuid.uuid4().hex}"}, lambda key: True, fetched="all")
    if kind == "disabled":
        data = of(key_type, sample)
        return Case({"dynamicFilter": dynsource.publish(data), "dynamicFilteringEnabled": "false"}, lambda key: True,
                    fetched="all")
    if kind == "unaccepted_field":  # the source accepts only k: the filter's other field filters nothing
        rows = [(key, generator.randint(0, 3)) for key in sample]
        data = DynamicFilteringData([("k", key_type), ("region", "int")], rows)
        return Case({"dynamicFilter": dynsource.publish(data)}, wanted.__contains__)
    raise AssertionError(kind)


KINDS = ("exact", "exact_null_safe", "exact_no_key", "exact_chunked", "collected", "range", "bloom", "exceeded",
         "late", "late_past_its_wait", "unknown_handle", "disabled", "unaccepted_field")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_filtered_read_returns_what_the_unfiltered_read_keeps_and_fetches_less(source, tables, unfiltered, tmp_path,
                                                                                 key_type, kind):
    table = tables[key_type]
    case = _case(kind, table, source)
    got = read(source, table, tmp_path, **case.options)
    whole = unfiltered[key_type].rows
    expected = Counter({row: count for row, count in whole.items() if case.expected(row[0])})
    if case.exact:
        assert got.rows == expected
    else:
        assert got.rows & whole == got.rows and got.rows & expected == expected
        assert not any(key is None for key, _ in got.rows)
    non_null = sum(count for (key, _), count in whole.items() if key is not None)
    assert got.fetched == {"expected": sum(expected.values()), "non-null": non_null, "all": ROWS}[case.fetched]
    if case.fetched == "expected" and expected != whole:
        assert got.fetched < ROWS
    if kind == "exact_chunked":
        assert got.statements > 4 * 2  # each of the 4 ranges sent its keys in several IN statements


def test_a_key_of_another_type_is_applied_as_spark_compares_it(source, tables, unfiltered, tmp_path):
    """String keys on a bigint column: SQLite would compare them as text, so the read tasks mask the rows instead."""
    table = tables["bigint"]
    sample = table.keys[::5]
    data = DynamicFilteringData([("k", "string")], [(f"0{key}" if key >= 0 else str(key),) for key in sample])
    got = read(source, table, tmp_path, dynamicFilter=dynsource.publish(data))
    wanted = set(sample)
    assert got.rows == Counter({row: n for row, n in unfiltered["bigint"].rows.items() if row[0] in wanted})
    assert got.fetched == sum(n for (key, _), n in unfiltered["bigint"].rows.items() if key is not None)


def test_an_unknown_handle_fails_the_read_under_dynamic_filter_on_error_fail(source, tables, tmp_path):
    handle = f"dynf-{uuid.uuid4().hex}"
    with pytest.raises(Exception, match=rf"Dynamic filter handle '{handle}' is not in filter store"):
        read(source, tables["bigint"], tmp_path, dynamicFilter=handle, dynamicFilterOnError="fail")


def test_the_source_declares_its_key_as_its_accepted_field():
    source = sqlite_source.SqliteKeysSource({"key": "k", "keyType": "bigint"})
    assert isinstance(source, dynsource.SupportsDynamicFiltering)
    assert source.accepted_filter_fields() == ["k"]
