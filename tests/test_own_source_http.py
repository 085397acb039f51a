"""An HTTP API source of one's own takes a dynamic filter: the source of ``tests/sources/http_source.py`` against
itself, and against the requests its API served.

A loopback API (``http.server`` in a thread of the test process) serves generated tables, one path prefix each
(``/t/<table>/keys``, ``/t/<table>/items/<key>``), and counts the requests of each path. Each generated case reads
its own table through ``spark.read.format("http_keys").option("dynamicFilter", handle)``, and is compared with the
same source's rows without a filter: an exact or range filter must return exactly the rows whose key it holds, a
Bloom filter a superset of them, a filter that cannot be trusted (exceeded, unknown, late past its wait, disabled)
every row. What the API served tells what the filter saved: the index once, and the page of each key returned,
once, and no other. The cases of a key type are read in one Spark job (a union of their reads); a late filter,
which must be published while its read plans, has a job of its own.
"""

from __future__ import annotations

import functools
import json
import random
import re
import threading
import urllib.parse
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import dynsource
from dynsource import DynamicFilteringData
from dynsource.filtering import handles
from dynsource.types import arrow_type
from tests.sources import http_source
from tests.sources.http_source import KEY, KEY_TYPES

ABSENT = {"bigint": [-61, 10_000], "string": ["absent", "a  b", "A/B", "100"]}  # keys the API does not hold


def _keys(key_type: str) -> list[Any]:
    """The API's keys of the type; the strings need URL quoting (and ``"7"``, ``"07"`` read as numbers)."""
    if key_type == "bigint":
        return [index * 7 - 60 for index in range(20)] + [-2**63, 2**63 - 1, 2**53 + 1]
    return ["a b", "a/b", "100%", "%2F", "ü-ñ", "日本 株", "?q=1&r=2", "#frag", "+plus", "O'k", "semi;colon",
            "back\\slash", "tab\tkey", "🙂", "7", "07", "12", *(f"SYM {index}/{index % 3}" for index in range(6))]


@dataclass(frozen=True)
class Table:
    key_type: str
    index: list[Any]  # the keys as GET /keys lists them, in no particular order
    rows: list[tuple[Any, int]]  # one to three rows of each key

    def page(self, key: Any) -> list[tuple[Any, int]]:
        return [row for row in self.rows if row[0] == key]


def _table(key_type: str) -> Table:
    generator = random.Random(key_type)
    index = _keys(key_type)
    generator.shuffle(index)
    rows = [(key, generator.randrange(10**6)) for key in index for _ in range(generator.randint(1, 3))]
    return Table(key_type, index, rows)


class Api:
    """The loopback API: tables by path prefix, each request counted by its path."""

    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}
        self._requests: Counter = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.root = f"http://127.0.0.1:{self._server.server_address[1]}"

    def serve(self, name: str, table: Table) -> str:
        """Serve ``table`` under ``name`` and return its URL (the source's option ``url``)."""
        self.tables[name] = table
        return f"{self.root}/t/{name}"

    def requests(self, name: str) -> Counter:
        """How many times each path of table ``name`` was requested."""
        with self._lock:
            return Counter({path: count for path, count in self._requests.items() if path.startswith(f"/t/{name}/")})

    def answer(self, path: str) -> tuple[int, Any]:
        with self._lock:
            self._requests[path] += 1
        parts = path.split("/")  # "", "t", name, "keys" | "items", quoted key
        table = self.tables.get(parts[2]) if len(parts) > 3 and parts[1] == "t" else None
        if table is not None and parts[3:] == ["keys"]:
            return 200, table.index
        if table is not None and len(parts) == 5 and parts[3] == "items":
            key = urllib.parse.unquote(parts[4], errors="strict")
            by_text = {str(key): key for key in table.index}
            if key in by_text:
                return 200, {"rows": [{"key": k, "v": v} for k, v in table.page(by_text[key])]}
        return 404, {"error": f"no such path {path}"}

    def __enter__(self) -> Api:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(api: Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = api.answer(self.path)
            encoded = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)

        def log_message(self, format: str, *args: Any) -> None:  # the counts say what was requested
            pass

    return Handler


def page_path(name: str, key: Any) -> str:
    return f"/t/{name}/items/{urllib.parse.quote(str(key), safe='')}"


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    with Api() as serving:
        yield serving


@pytest.fixture(scope="module")
def source(spark):
    # Spark's workers get the test source by value: they need not import the tests.
    cloudpickle.register_pickle_by_value(http_source)
    spark.dataSource.register(http_source.HttpKeysSource)
    yield spark
    cloudpickle.unregister_pickle_by_value(http_source)


@pytest.fixture(scope="module")
def tables() -> dict[str, Table]:
    return {key_type: _table(key_type) for key_type in KEY_TYPES}


def load(spark, url: str, key_type: str, **options: str) -> DataFrame:
    # The default groups of 8 keys: several partitions for a table's 23 keys, few tasks (each costs the job time).
    reader = spark.read.format(http_source.NAME).option("url", url).option("keyType", key_type)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def of(key_type: str, keys, null_safe: bool = False, kind: str = "exact") -> DynamicFilteringData:
    table = pa.table({KEY: pa.array(list(keys), arrow_type(key_type))})
    return DynamicFilteringData.from_table([(KEY, key_type)], table, kind=kind, null_safe=null_safe)


@dataclass(frozen=True)
class Case:
    """What a case publishes and how it reads, and the keys whose rows it must return."""

    options: dict[str, str]
    expected: Callable[[Any], bool]  # exactly those keys' rows, or at least them when not exact (a Bloom filter)
    exact: bool = True


def _everything(key: Any) -> bool:
    return True


def _numeric_strings_equal(numbers: set[int]) -> Callable[[str], bool]:
    """As Spark compares a string column with bigint keys: a number by its value; other strings kept (unknown)."""
    return lambda key: not re.fullmatch(r"[0-9]+", key) or int(key) in numbers


def _case(kind: str, table: Table) -> Case:
    generator = random.Random(zlib.crc32(f"{kind}/{table.key_type}".encode()))
    key_type = table.key_type
    sample = generator.sample(table.index, generator.randint(1, 8))
    wanted = set(sample)

    def published(data: DynamicFilteringData, **options: str) -> dict[str, str]:
        return {"dynamicFilter": dynsource.publish(data), **options}

    if kind == "whole":
        return Case({}, _everything)
    if kind == "exact":  # keys the API does not hold among them
        return Case(published(of(key_type, sample + ABSENT[key_type])), wanted.__contains__)
    if kind == "exact_null":  # with `=`, a null key matches nothing
        return Case(published(of(key_type, [*sample, None])), wanted.__contains__)
    if kind == "exact_null_safe":  # with `<=>` it matches a null key, which the API has not
        return Case(published(of(key_type, [*sample, None], null_safe=True)), wanted.__contains__)
    if kind == "exact_no_key":
        return Case(published(of(key_type, [])), lambda key: False)
    if kind == "range":
        low, high = sorted(generator.sample(table.index, 2))
        return Case(published(of(key_type, [low, high], kind="range")), lambda key: low <= key <= high)
    if kind == "range_of_absent_keys":
        low, high = sorted(ABSENT[key_type][:2])
        return Case(published(of(key_type, [low, high], kind="range")), lambda key: low <= key <= high)
    if kind == "bloom":
        return Case(published(of(key_type, sample, kind="bloom")), wanted.__contains__, exact=False)
    if kind == "other_type":  # keys of the other type: compared as Spark compares them, never as Python does
        if key_type == "bigint":
            data = DynamicFilteringData([(KEY, "string")], [(f"0{key}" if key >= 0 else str(key),) for key in sample])
            return Case(published(data), wanted.__contains__)
        return Case(published(DynamicFilteringData([(KEY, "bigint")], [(7,), (99,)])), _numeric_strings_equal({7, 99}))
    if kind == "exceeded":
        return Case(published(DynamicFilteringData([(KEY, key_type)], exceed_threshold=True)), _everything)
    if kind == "late_past_its_wait":
        return Case({"dynamicFilter": handles.reserve(), "dynamicFilterWaitMs": "300"}, _everything)
    if kind == "unknown_handle":
        return Case({"dynamicFilter": f"dynf-{uuid.uuid4().hex}"}, _everything)
    if kind == "disabled":
        return Case(published(of(key_type, sample), dynamicFilteringEnabled="false"), _everything)
    raise AssertionError(kind)


KINDS = ("whole", "exact", "exact_null", "exact_null_safe", "exact_no_key", "range", "range_of_absent_keys", "bloom",
         "other_type", "exceeded", "late_past_its_wait", "unknown_handle", "disabled")


@dataclass(frozen=True)
class Got:
    case: Case
    name: str  # the case's table on the API
    rows: Counter
    requests: Counter


@pytest.fixture(scope="module")
def reads(source, api, tables) -> dict[tuple[str, str], Got]:
    """Every case of a key type read in one Spark job: the union of the reads, each tagged with its case."""
    got = {}
    for key_type, table in tables.items():
        cases = {kind: _case(kind, table) for kind in KINDS}
        names = {kind: f"{key_type}-{kind}" for kind in KINDS}
        frames = [load(source, api.serve(names[kind], table), key_type, **case.options).withColumn("case", F.lit(kind))
                  for kind, case in cases.items()]
        rows = functools.reduce(DataFrame.unionByName, frames).collect()
        for kind, case in cases.items():
            returned = Counter((row[KEY], row.v) for row in rows if row.case == kind)
            got[key_type, kind] = Got(case, names[kind], returned, api.requests(names[kind]))
    return got


def served(name: str, keys) -> Counter:
    """The requests of a read of table ``name`` that kept ``keys``: the index, and each key's page, once."""
    return Counter({f"/t/{name}/keys": 1, **{page_path(name, key): 1 for key in keys}})


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_the_read_without_a_filter_returns_every_row_of_the_api(reads, tables, key_type):
    whole = reads[key_type, "whole"]
    assert whole.rows == Counter(tables[key_type].rows)
    assert whole.requests == served(whole.name, tables[key_type].index)


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "whole"])
@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_filtered_read_returns_what_the_unfiltered_read_keeps_and_requests_only_its_pages(reads, tables, key_type,
                                                                                         kind):
    got, table = reads[key_type, kind], tables[key_type]
    whole = reads[key_type, "whole"].rows
    returned = {key for key, _ in got.rows}
    assert got.rows == Counter({row: count for row, count in whole.items() if row[0] in returned})  # whole pages
    expected = {key for key in table.index if got.case.expected(key)}
    if got.case.exact:
        assert returned == expected
    else:
        assert returned >= expected
        assert len(returned) < len(table.index)  # the filter saved requests all the same
    assert got.requests == served(got.name, returned)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_a_filter_published_while_the_read_plans_filters_it(source, api, tables, key_type):
    table = tables[key_type]
    sample = table.index[::4]
    handle = handles.reserve()
    name = f"{key_type}-late-{uuid.uuid4().hex[:8]}"
    publishing = threading.Timer(1.0, dynsource.publish, (of(key_type, sample),), {"handle": handle})
    publishing.start()
    rows = load(source, api.serve(name, table), key_type, dynamicFilter=handle).collect()
    publishing.join()
    assert Counter((row[KEY], row.v) for row in rows) == Counter(row for row in table.rows if row[0] in set(sample))
    assert api.requests(name) == served(name, sample)


def test_an_unknown_handle_fails_the_read_under_dynamic_filter_on_error_fail(source, api, tables):
    handle = f"dynf-{uuid.uuid4().hex}"
    name = f"fail-{uuid.uuid4().hex[:8]}"
    frame = load(source, api.serve(name, tables["bigint"]), "bigint", dynamicFilter=handle, dynamicFilterOnError="fail")
    with pytest.raises(Exception, match=rf"Dynamic filter handle '{handle}' is not in filter store"):
        frame.collect()
    assert api.requests(name) == Counter()  # it failed before it requested anything


def test_the_reader_plans_groups_of_the_kept_keys_and_no_empty_one(api, tables):
    """``partitions()`` called as Spark's planning worker calls it: the kept keys, in groups of at most four."""
    table = tables["string"]
    url = api.serve(f"plan-{uuid.uuid4().hex[:8]}", table)
    sample = table.index[1::2]

    def planned(data: DynamicFilteringData) -> list[tuple[Any, ...]]:
        options = {"url": url, "keyType": "string", "keysPerPartition": "4",
                   "dynamicFilter": dynsource.publish(data)}
        source = http_source.HttpKeysSource(options)
        return [partition.keys for partition in source.reader(source.schema()).partitions()]

    groups = planned(of("string", sample))
    assert [key for group in groups for key in group] == sample  # in the index's order
    assert [len(group) for group in groups] == [4, 4, 3]
    assert planned(of("string", ABSENT["string"])) == []


def test_the_source_declares_its_key_as_its_accepted_field():
    source = http_source.HttpKeysSource({"url": "http://127.0.0.1:1", "keyType": "bigint"})
    assert isinstance(source, dynsource.SupportsDynamicFiltering)
    assert source.accepted_filter_fields() == [KEY]
