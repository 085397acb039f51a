"""Partition directory values (escapes, type inference, typed values): unit tests, then Spark itself."""

from __future__ import annotations

import datetime as dt
import math
import time
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark.sql.types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynsource import partitions
from dynsource.ddl import parse_ddl
from dynsource.directorynames import (
    DEFAULT_PARTITION_NAME,
    escape_path_name,
    is_hidden,
    parse_directory_name,
    unescape_path_name,
)
from dynsource.partitions import infer_type, to_arrow

NULL = DEFAULT_PARTITION_NAME
UTC = dt.UTC
_SPARK_HAS_TIME = hasattr(pyspark.sql.types, "TimeType")  # the TIME type arrived in Spark 4.1

# ---------------------------------------------------------------------------------------------
# Names and escapes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("a/b", "a%2Fb"),
        ("k=v", "k%3Dv"),
        ("100%", "100%25"),
        ("a b", "a b"),
        ("#1", "%231"),
        ("10:00:00", "10%3A00%3A00"),
        ("é/日本", "é%2F日本"),
        ("tab\there", "tab%09here"),
        ("\"'*?\\[]{}^\x7f", "%22%27%2A%3F%5C%5B%5D%7B}%5E%7F"),
        ("plain-text_1.0", "plain-text_1.0"),
    ],
)
def test_escape_matches_spark_and_round_trips(text, escaped):
    assert escape_path_name(text) == escaped
    assert unescape_path_name(escaped) == text


@settings(deadline=None)
@given(st.text())
def test_unescape_inverts_escape(text):
    assert unescape_path_name(escape_path_name(text)) == text


@pytest.mark.parametrize(
    ("raw", "text"),
    [("%", "%"), ("%4", "%4"), ("a%", "a%"), ("%zz", "%zz"), ("%%41", "%A"), ("%+1", "%+1"), ("%2f", "/")],
)
def test_unescape_keeps_what_is_no_escape(raw, text):
    assert unescape_path_name(raw) == text


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("k=v", ("k", "v")),
        ("k=a%2Fb", ("k", "a%2Fb")),
        ("k=a=b", ("k", "a=b")),
        ("a%3Db=1", ("a=b", "1")),
        ("k=", ("k", "")),
        ("part-0.parquet", None),
        ("=1", None),
    ],
)
def test_parse_directory_name(name, parsed):
    assert parse_directory_name(name) == parsed


@pytest.mark.parametrize(
    ("name", "hidden"),
    [
        ("_SUCCESS", True),
        ("_temporary", True),
        ("_metadata", True),
        ("_common_metadata", True),
        (".part-0.parquet.crc", True),
        ("part-0.parquet._COPYING_", True),
        ("_k=1", False),
        ("k=1", False),
        ("part-0.parquet", False),
    ],
)
def test_is_hidden(name, hidden):
    assert is_hidden(name) is hidden


# ---------------------------------------------------------------------------------------------
# Type inference
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raws", "expected"),
    [
        (["1", "+1", "-0", "007"], "int"),
        (["2147483648"], "bigint"),
        (["9223372036854775808"], "decimal(19,0)"),
        (["12345678901234567890123456789"], "decimal(29,0)"),
        (["1" * 39], "double"),  # too wide for a decimal
        (["1e3"], "decimal(4,0)"),  # BigDecimal 1E+3 has scale -3, and Spark only refuses positive scales
        (["1."], "decimal(1,0)"),
        (["1.5", "1.0", "-.5", "1e-3", "1d", "1F", " 1", "NaN", "-Infinity", "0x1p3", "1e400"], "double"),
        (["2022-02-22", "2024-02-29", "0001-01-01"], "date"),
        (["2022-02-22 10%3A00%3A00", "2022-02-22 10:00:00", "2022-02-22 23%3a59%3A59.5"], "timestamp"),
        (["2022-2-22"], "string"),  # Spark 4.3 parses dates with the strict 'yyyy-MM-dd' pattern
        (["2022-02"], "string"),
        (["2022-02-30"], "string"),
        (["2022-02-22T10%3A00%3A00"], "string"),
        (["2022-02-22 10%3A00%3A00.55"], "string"),  # the pattern has one fraction digit
        (["true", "abc", "0x10", "1e", ""], "string"),
    ],
)
def test_infer_type_of_values(raws, expected):
    for raw in raws:
        assert infer_type([raw]) == expected, raw


@pytest.mark.parametrize(
    ("raws", "expected"),
    [
        (["1", "2147483648"], "bigint"),
        (["1", "1.5"], "double"),
        (["2147483648", "1.5"], "string"),  # Spark refuses to widen bigint and double (precision loss)
        (["1e3", "5"], "decimal(10,0)"),
        (["9223372036854775808", "1"], "decimal(19,0)"),
        (["9223372036854775808", "2147483648"], "decimal(20,0)"),
        (["1e3", "1.5"], "string"),
        (["1", "2022-01-01"], "string"),
        (["2022-01-01", "2022-01-01 10%3A00%3A00"], "timestamp"),
        (["1", "a"], "string"),
        ([NULL, "1"], "int"),
        ([NULL], "string"),  # Spark says void, which dynsource.types cannot declare
        ([], "string"),
        (["10%3A00%3A00"], "string"),  # Spark 4.3 says time(6), which dynsource.types cannot declare
    ],
)
def test_infer_type_resolves_conflicts(raws, expected):
    assert infer_type(raws) == expected
    assert infer_type(reversed(raws)) == expected
    assert infer_type(iter(raws * 3)) == expected


# ---------------------------------------------------------------------------------------------
# Typed values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raws", "type_name", "expected"),
    [
        (["01", "+1", "-0", NULL], "int", [1, 1, 0, None]),
        (["2147483648"], "bigint", [2147483648]),
        (["200", "-129", "5"], "tinyint", [-56, 127, 5]),  # Integer.parseInt(v).toByte wraps around
        (["70000"], "smallint", [4464]),
        (["1.5", "1d", " 2 ", "NaN"], "double", [1.5, 1.0, 2.0, math.nan]),
        (["1.1"], "float", [pa.scalar(1.1, pa.float32()).as_py()]),
        (["TRUE", "false", "tRuE"], "boolean", [True, False, True]),
        (["1.235", "-1.235", "1e1", "7"], "decimal(4,2)", [Decimal("1.24"), Decimal("-1.24"), 10, 7]),
        (["a%2Fb", "01", "%zz", NULL], "string", ["a/b", "01", "%zz", None]),
        (["a%2Fb"], "binary", [b"a%2Fb"]),
        (["2022-02-22", "2022-2-2", "2022-02 ", "2022-02-22T10%3A00"], "date",
         [dt.date(2022, 2, 22), dt.date(2022, 2, 2), dt.date(2022, 2, 1), dt.date(2022, 2, 22)]),
        (["2022-02-22 10%3A00%3A00", "2022-02-22 10%3A00%3A00 garbage"], "timestamp_ntz",
         [dt.datetime(2022, 2, 22, 10), dt.datetime(2022, 2, 22)]),  # CAST to DATE accepts the second
    ],
)
def test_to_arrow_converts_like_spark(raws, type_name, expected):
    array = to_arrow(raws, type_name)
    assert array.type == partitions.arrow_type(type_name)
    assert _same(array.to_pylist(), expected)


@pytest.mark.parametrize(
    ("raw", "utc_hour"),
    [
        ("2022-02-22 10%3A00%3A00", 15),  # wall-clock time in the zone passed
        ("2022-02-22 10%3A00%3A00Z", 10),
        ("2022-02-22 10%3A00%3A00+01%3A00", 9),
        ("2022-02-22 10%3A00%3A00 PST", 18),
        ("2022-02-22 10%3A00%3A00 Europe%2FParis", 9),
        ("2022-02-22 10", 15),
    ],
)
def test_to_arrow_timestamps_are_utc_instants(raw, utc_hour):
    array = to_arrow([raw], "timestamp", time_zone="America/New_York")
    assert array.type == pa.timestamp("us", tz="UTC")
    assert array.to_pylist() == [dt.datetime(2022, 2, 22, utc_hour, tzinfo=UTC)]


def test_to_arrow_resolves_dst_like_java():
    gap, overlap = "2022-03-13 02%3A30%3A00", "2022-11-06 01%3A30%3A00"
    values = to_arrow([gap, overlap], "timestamp", time_zone="America/New_York").to_pylist()
    # A time in the gap moves forward by the gap; a repeated time takes the earlier instant.
    assert values == [
        dt.datetime(2022, 3, 13, 7, 30, tzinfo=UTC),
        dt.datetime(2022, 11, 6, 5, 30, tzinfo=UTC),
    ]


def test_to_arrow_without_zone_refuses_timestamps_rather_than_guess_one():
    # Spark types them in the session's zone, which a Python data source is not told: no zone is no value.
    with pytest.raises(partitions.ZoneUnknownError):
        to_arrow(["2022-02-22 09%3A00%3A00"], "timestamp")
    assert to_arrow(["2022-02-22 09%3A00%3A00"], "timestamp_ntz").to_pylist() == [dt.datetime(2022, 2, 22, 9)]


@pytest.mark.parametrize(
    ("raw", "type_name"),
    [
        ("x", "int"), ("2147483648", "int"), ("1", "boolean"), ("2022-02-30", "date"),
        ("123.45", "decimal(3,1)"), ("2022-02-22 garbage", "timestamp"),
        ("2022-02-22 10%3A00 PST", "timestamp"), ("10%3A00", "timestamp_ntz"),
    ],
)
def test_to_arrow_strict_names_the_value_and_type(raw, type_name):
    with pytest.raises(ValueError) as error:
        to_arrow([NULL, raw], type_name, time_zone="UTC")
    assert f"'{raw}'" in str(error.value) and type_name in str(error.value)
    assert to_arrow([NULL, raw], type_name, time_zone="UTC", strict=False).to_pylist() == [None, None]


def test_to_arrow_rejects_unknown_zone_and_type():
    with pytest.raises(ValueError, match="Mars/Olympus"):
        to_arrow(["2022-02-22"], "timestamp", time_zone="Mars/Olympus")
    with pytest.raises(ValueError, match="interval"):
        to_arrow(["1"], "interval")


@settings(deadline=None)
@given(st.lists(st.text(alphabet="0123456789-+.: eETZ%3A", max_size=12), max_size=20))
@pytest.mark.parametrize("type_name", ["int", "double", "date", "timestamp", "decimal(6,2)"])
def test_to_arrow_of_a_batch_equals_value_by_value(type_name, raws):
    together = _plain(to_arrow(raws, type_name, time_zone="Europe/Paris", strict=False))
    alone = [_plain(to_arrow([raw], type_name, time_zone="Europe/Paris", strict=False))[0] for raw in raws]
    assert _same(together, alone)


@pytest.mark.parametrize(
    ("type_name", "make"),
    [
        ("int", str),
        ("double", lambda i: f"{i / 7:.6f}"),
        ("date", lambda i: f"{2000 + i % 50}-{1 + i % 12:02d}-{1 + i % 28:02d}"),
        ("timestamp", lambda i: f"2022-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}%3A{i % 60:02d}%3A00"),
        ("string", lambda i: f"a%2Fb{i}" if i % 10 == 0 else f"v{i}"),
    ],
)
def test_to_arrow_and_infer_type_are_fast(type_name, make):
    raws = [make(i) for i in range(100_000)]
    started = time.perf_counter()
    assert infer_type(raws) == type_name
    assert len(to_arrow(raws, type_name, time_zone="America/New_York")) == len(raws)
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------------------------------------
# Declared partition columns
# ---------------------------------------------------------------------------------------------


def test_parse_ddl():
    assert parse_ddl("a BIGINT, `b c` string, d decimal(10, 2), `e``f` VARCHAR(3)") == [
        ("a", "bigint"), ("b c", "string"), ("d", "decimal(10,2)"), ("e`f", "string")
    ]
    assert parse_ddl("  day date ") == [("day", "date")]
    assert parse_ddl("a, `b c` INT", untyped=True) == [("a", ""), ("b c", "int")]  # partitionColumns names one


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a int,", "Empty column definition"),
        ("a", "'a' has no type"),
        ("a int, A bigint", "'A' is declared twice"),
        ("a integr", "'a'.*integr"),
        ("a int not null", "'a'.*int not null"),
        ("`a int", "Unclosed backtick"),
        ("a-b int", "Bad column name"),
        ("`` int", "No column name"),
    ],
)
def test_parse_ddl_rejects_bad_text(ddl, message):
    with pytest.raises(ValueError, match=message):
        parse_ddl(ddl)


# ---------------------------------------------------------------------------------------------
# Against Spark: spark.read.parquet on real Hive-partitioned tables
# ---------------------------------------------------------------------------------------------

INFERENCE_CASES = [
    ["1", "2", "007"],
    ["+1", "-0"],
    ["2147483647", "-2147483648"],
    ["2147483648"],
    ["1", "9223372036854775807"],
    ["9223372036854775808"],
    ["1", "12345678901234567890123456789"],
    ["1e3"],
    ["1e3", "5"],
    ["1.", "2"],
    ["1.5", "2"],
    ["1.0"],
    ["NaN", "Infinity", "-Infinity"],
    ["1d", "1f"],
    [" 1"],
    ["0x1p3", "-.5e-3"],
    ["1e400"],
    ["2147483648", "1.5"],
    ["1e3", "1.5"],
    ["2022-02-22", "2022-12-31"],
    ["2022-02"],
    ["2022-2-2"],
    ["2022-02-30"],
    ["2022-02-22 10%3A00%3A00", "2022-02-22 23%3A59%3A59.5"],
    ["2022-02-22T10%3A00%3A00"],
    ["2022-02-22 10%3A00%3A00.55"],
    ["2022-02-22", "2022-02-22 10%3A00%3A00"],
    ["2022-02-22", "1"],
    ["true", "false"],
    ["a%2Fb", "c%3Dd", "e%25f", "x y", "%zz", "日本"],
    [NULL, "1"],
    [NULL, "a"],
    ["0x10"],
]
# Spark 4.1+ infers these as time(6) and void (4.0, without a TIME type: string and void); dynsource.types
# has neither, so we say string.
DIVERGENT_CASES = {("10%3A00%3A00",): "time(6)" if _SPARK_HAS_TIME else "string", (NULL,): "void"}
DECLARED_CASES = [
    ("tinyint", ["200", "-129", "5"]),
    ("smallint", ["70000", "+12"]),
    ("bigint", ["007", "-9223372036854775808"]),
    ("float", ["1.1", "1e40", "NaN"]),
    ("boolean", ["TRUE", "false", "tRuE"]),
    ("date", ["2022-2-2", "2022", "2022-02 ", "2022-02-22T10%3A00", "2022-02-22 x"]),
    ("timestamp", ["2022-2-2", "2022-02-22T10%3A00", "2022-02-22 10%3A00%3A00Z", "2022-02-22 1%3A00%3A00 PST",
                   "2022-02-22 10%3A00%3A00+1%3A00", "2022-02-22 10%3A00%3A00.123456789"]),
    ("timestamp_ntz", ["2022-2-2", "2022-02-22 10%3A00%3A00Z", "2022-02-22 garbage"]),
    ("decimal(6,2)", ["1.235", "-1.225", "7", "1e2"]),
    ("string", ["01", "a%2Fb", "%zz"]),
]


def test_inference_and_values_match_spark(spark, tmp_path):
    cases = INFERENCE_CASES + [list(raws) for raws in DIVERGENT_CASES]
    # A data-only schema spares Spark a footer-reading job; the k columns are still inferred.
    frame = spark.read.schema("x bigint").parquet(_write_table(tmp_path, cases))
    spark_types = {raws: frame.schema[f"k{i}"].dataType.simpleString() for i, raws in enumerate(_keys(cases))}

    assert {raws: spark_types[raws] for raws in DIVERGENT_CASES} == DIVERGENT_CASES
    assert all(infer_type(raws) == "string" for raws in DIVERGENT_CASES)
    inferred = {raws: spark_types[raws] for raws in _keys(INFERENCE_CASES)}
    assert {raws: infer_type(raws) for raws in inferred} == inferred
    _assert_same_values(frame, INFERENCE_CASES, list(inferred.values()))


def test_declared_types_match_spark(spark, tmp_path):
    cases = [raws for _, raws in DECLARED_CASES]
    types = [type_name for type_name, _ in DECLARED_CASES]
    schema = ", ".join(["x bigint"] + [f"k{i} {type_name}" for i, type_name in enumerate(types)])
    frame = spark.read.schema(schema).parquet(_write_table(tmp_path, cases))
    # Spark's vectorized reader reinterprets a declared decimal's unscaled digits ('7' -> 0.07);
    # its row-based reader, like CAST and dynsource, rounds the value to the declared scale.
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", "false")
    try:
        _assert_same_values(frame, cases, types)
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")


def _write_table(root, cases: list[list[str]]) -> str:
    """One partition column per case: leaf j is k0=<value>/k1=<value>/..., case i cycling through its values.

    Each column's type is inferred from its own values, so one table (one read) checks every case.
    """
    for j in range(max(len(raws) for raws in cases)):
        leaf = root.joinpath(*(f"k{i}={raws[j % len(raws)]}" for i, raws in enumerate(cases)))
        leaf.mkdir(parents=True)
        pq.write_table(pa.table({"x": [j]}), leaf / "part-0.parquet")
    return str(root)


def _assert_same_values(frame, cases: list[list[str]], types: list[str]) -> None:
    """Spark's value of each k column in row x equals ours for the raw value written there."""
    table = frame.orderBy("x").toArrow()
    rows = table.num_rows
    for i, (raws, type_name) in enumerate(zip(cases, types, strict=True)):
        written = [raws[j % len(raws)] for j in range(rows)]
        ours = _plain(to_arrow(written, type_name, time_zone="UTC"))
        assert _same(ours, _plain(table[f"k{i}"].combine_chunks())), (type_name, raws)


def _keys(cases: list[list[str]]) -> list[tuple[str, ...]]:
    return [tuple(raws) for raws in cases]


def _plain(array: pa.Array) -> list:
    """Python values; dates and timestamps as plain numbers, since some years do not fit Python's."""
    if pa.types.is_date32(array.type):
        array = array.cast(pa.int32())
    elif pa.types.is_timestamp(array.type):
        array = array.cast(pa.int64())
    return array.to_pylist()


def _same(left: list, right: list) -> bool:
    """Equal lists, where NaN equals NaN."""
    return len(left) == len(right) and all(
        a == b or (_is_nan(a) and _is_nan(b)) for a, b in zip(left, right, strict=True)
    )


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)
