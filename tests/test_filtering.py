"""DynamicFilteringData of each kind: construction, contains, matching_mask, may_overlap, wire format (no Spark)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import pickle
import re
import struct
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pybloom_live import BloomFilter, ScalableBloomFilter

from dynsource.filtering import (
    MAGIC,
    MAX_HEADER_BYTES,
    DynamicFilteringData,
    add_to_bloom,
    bloom_from_bits,
    bloom_key,
    bloom_size_bytes,
)

UTC = dt.UTC


def mask(data: DynamicFilteringData, **columns: pa.Array | list) -> list[bool]:
    return data.matching_mask(pa.table(columns)).to_pylist()


def forge(header: dict, body: bytes, *, version: int = 1) -> bytes:
    """A payload with a correct checksum around whatever header and body it is given."""
    raw = json.dumps(header).encode()
    payload = struct.pack(">8sHI", MAGIC, version, len(raw)) + raw + body
    return payload + hashlib.sha256(payload).digest()


def split(blob: bytes) -> tuple[dict, bytes]:
    header_length = struct.unpack_from(">I", blob, 10)[0]
    header = json.loads(blob[14 : 14 + header_length])
    return header, blob[14 + header_length : -32]


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# --- construction ----------------------------------------------------------------------------------


def test_fields_are_canonical_and_rows_distinct_and_typed():
    rows = [(1, "eu"), [1, "eu"], (2, "us")]
    data = DynamicFilteringData([("Day", "INTEGER"), ("region", "varchar(10)")], rows)
    assert data.fields == (("Day", "int"), ("region", "string"))
    assert data.field_names == ("Day", "region")
    assert len(data) == 2
    assert data.table.schema == pa.schema([("Day", pa.int32()), ("region", pa.string())])
    assert data.kind == "exact" and data.is_filtering and not data.null_safe


def test_single_field_rows_may_be_bare_values_or_one_tuples():
    fields = [("d", "int")]
    assert DynamicFilteringData(fields, [1, (1,), [2]]) == DynamicFilteringData(fields, [(1,), (2,)])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([], "at least one field"),
        ([("", "int")], "non-empty"),
        ([("  ", "int")], "non-empty"),
        ([("a", "int"), ("A", "bigint")], "declared twice"),
        ([("a", "struct<x:int>")], "not a supported Spark SQL atomic type"),
        (["ab"], r"\(name, type\) pair"),
        ([("a", 1)], "Spark SQL type name"),
    ],
)
def test_bad_fields_are_rejected(fields, message):
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData(fields)


@pytest.mark.parametrize(
    ("type_name", "value"),
    [
        ("int", 2**31),
        ("tinyint", 128),
        ("bigint", 2**64),
        ("int", 1.5),
        ("int", "1"),
        ("string", 1),
        ("decimal(4,2)", Decimal("1.234")),
        ("decimal(4,2)", Decimal("123.4")),
        ("date", "2020-01-01"),
    ],
)
def test_values_the_field_type_cannot_hold_are_rejected_with_field_and_value(type_name, value):
    with pytest.raises(ValueError, match=rf"'key' of type .* {re.escape(repr(value))}"):
        DynamicFilteringData([("key", type_name)], [(value,)])


def test_exceeded_data_drops_rows_and_contains_everything():
    data = DynamicFilteringData([("d", "int")], [(1,), (2,)], exceed_threshold=True)
    assert len(data) == 0 and data.table.num_rows == 0
    assert not data.is_filtering
    assert data.contains((99,)) and data.contains((None,))
    assert mask(data, d=pa.array([5, None])) == [True, True]


def test_exceeded_data_never_reads_its_rows():
    def rows():
        raise AssertionError("rows of exceeded data must not be iterated")
        yield

    assert not DynamicFilteringData([("d", "int")], rows(), exceed_threshold=True).is_filtering


def test_from_table_casts_columns_by_name_and_deduplicates():
    table = pa.Table.from_batches(
        [pa.record_batch({"EXTRA": [0, 0], "REGION": ["eu", "eu"], "day": pa.array([1, 1], pa.int64())})] * 2
    )
    data = DynamicFilteringData.from_table([("day", "int"), ("region", "string")], table)
    assert data == DynamicFilteringData([("day", "int"), ("region", "string")], [(1, "eu")])
    assert data.table.column_names == ["day", "region"]


def test_from_table_rejects_missing_columns_and_unsafe_casts():
    with pytest.raises(ValueError, match="'day' is missing"):
        DynamicFilteringData.from_table([("day", "int")], pa.table({"other": [1]}))
    with pytest.raises(ValueError, match="cannot be cast to filter field 'day'"):
        DynamicFilteringData.from_table([("day", "int")], pa.table({"day": pa.array([2**40])}))


def test_negative_zero_and_nan_are_one_value_each_like_in_spark_joins():
    data = DynamicFilteringData([("x", "double")], [(0.0,), (-0.0,), (float("nan"),), (float("nan"),)])
    assert len(data) == 2
    assert data.contains((-0.0,)) and data.contains((float("nan"),))
    assert mask(data, x=pa.array([-0.0, float("nan"), 1.0])) == [True, True, False]


def test_repr_is_short():
    text = repr(DynamicFilteringData([("d", "int")], range(10_000)))
    assert text == (
        "DynamicFilteringData(fields=[d: int], kind=exact, rows=10000, size_bytes=40000, "
        "exceed_threshold=False, null_safe=False)"
    )


def test_equality_needs_same_fields_flags_and_rows():
    fields = [("d", "int")]
    assert DynamicFilteringData(fields, [1, 2]) == DynamicFilteringData(fields, [2, 1])
    assert DynamicFilteringData(fields, [1]) != DynamicFilteringData(fields, [2])
    assert DynamicFilteringData(fields, [1]) != DynamicFilteringData([("d", "bigint")], [1])
    assert DynamicFilteringData(fields, [1]) != DynamicFilteringData(fields, [1], null_safe=True)
    assert DynamicFilteringData(fields, exceed_threshold=True) != DynamicFilteringData(fields)
    assert DynamicFilteringData(fields) != "not a filter"


# --- contains ---------------------------------------------------------------------------------------


def test_rows_with_colliding_hashes_stay_apart():
    data = DynamicFilteringData([("a", "int"), ("b", "int"), ("c", "string")], [(0, 31, "d")])
    assert data.contains((0, 31, "d"))
    assert not data.contains((1, 0, "d"))
    assert mask(data, a=pa.array([1, 0]), b=pa.array([0, 31]), c=["d", "d"]) == [False, True]


def test_contains_converts_the_row_to_the_field_types():
    data = DynamicFilteringData(
        [("amount", "decimal(10,2)"), ("at", "timestamp"), ("ratio", "float")],
        [(Decimal("1.50"), dt.datetime(2020, 1, 1, tzinfo=UTC), 0.1)],
    )
    assert data.contains((Decimal("1.5"), dt.datetime(2020, 1, 1), 0.1))
    assert not data.contains((Decimal("1.51"), dt.datetime(2020, 1, 1), 0.1))


def test_contains_rejects_a_row_of_the_wrong_arity():
    data = DynamicFilteringData([("a", "int")], [1])
    with pytest.raises(ValueError, match=r"row has 2 values but the filter has 1 field\(s\): \['a'\]"):
        data.contains((1, 2))
    with pytest.raises(ValueError, match="row has 2 values"):
        DynamicFilteringData([("a", "int")], exceed_threshold=True).contains((1, 2))
    with pytest.raises(ValueError, match="row has 1 values but the filter has 2"):
        DynamicFilteringData([("a", "int"), ("b", "int")], [(1, 2), (3,)])


def test_null_matches_nothing_by_default():
    data = DynamicFilteringData([("a", "int"), ("b", "string")], [(1, None), (None, None), (2, "x")])
    assert len(data) == 3  # nulls are kept: they matter to a null-safe reader and to equality
    assert not data.contains((1, None))
    assert not data.contains((None, None))
    assert data.contains((2, "x"))


def test_null_safe_matches_null_with_null():
    data = DynamicFilteringData([("a", "int"), ("b", "string")], [(1, None), (None, None)], null_safe=True)
    assert data.contains((1, None)) and data.contains((None, None))
    assert not data.contains((None, "x")) and not data.contains((2, None))


# --- matching_mask ---------------------------------------------------------------------------------


def test_mask_projects_rows_onto_the_candidate_columns_level_by_level():
    data = DynamicFilteringData([("year", "int"), ("month", "int")], [(2020, 1), (2021, 2)])
    assert mask(data, year=pa.array([2020, 2021, 2022], pa.int32())) == [True, True, False]
    assert mask(data, month=pa.array([1, 2, 3], pa.int32())) == [True, True, False]
    both = mask(data, year=pa.array([2020, 2020, 2021], pa.int32()), month=pa.array([1, 2, 2], pa.int32()))
    assert both == [True, False, True]


def test_mask_of_no_columns_is_whether_any_row_can_match():
    fields = [("d", "int")]
    candidates = pa.table({"d": [1, 2]}).drop_columns(["d"])
    assert DynamicFilteringData(fields, [1]).matching_mask(candidates).to_pylist() == [True, True]
    assert DynamicFilteringData(fields, [None]).matching_mask(candidates).to_pylist() == [False, False]


def test_mask_of_no_candidates_is_empty():
    data = DynamicFilteringData([("d", "int")], [1])
    assert data.matching_mask(pa.table({"d": pa.array([], pa.int32())})).to_pylist() == []


def test_mask_matches_column_names_ignoring_case():
    data = DynamicFilteringData([("Day", "int")], [1])
    assert mask(data, dAY=pa.array([1, 2], pa.int32())) == [True, False]


def test_mask_rejects_unknown_columns_listing_the_fields():
    data = DynamicFilteringData([("day", "int"), ("region", "string")], [(1, "eu")])
    with pytest.raises(ValueError, match=r"'hour' is not a filter field; the fields are \['day', 'region'\]"):
        mask(data, hour=[1])


def test_mask_rejects_incomparable_types():
    data = DynamicFilteringData([("day", "int")], [1])
    with pytest.raises(TypeError, match=r"'day' of type boolean cannot be compared .* 'day' of type int"):
        mask(data, day=[True])
    with pytest.raises(TypeError, match="binary"):
        mask(DynamicFilteringData([("d", "date")], [dt.date(2020, 1, 1)]), d=pa.array([b"x"]))


def test_bigint_key_against_int_column_and_int_key_against_bigint_column():
    big = DynamicFilteringData([("d", "bigint")], [1, 2**40])
    assert mask(big, d=pa.array([1, 2, None], pa.int32())) == [True, False, False]
    small = DynamicFilteringData([("d", "int")], [1, -(2**31)])
    assert mask(small, d=pa.array([1, -(2**31), 2**40], pa.int64())) == [True, True, False]
    assert mask(small, d=pa.array([1, 3], pa.int8())) == [True, False]


def test_numeric_keys_against_decimal_and_double_columns():
    data = DynamicFilteringData([("d", "bigint")], [1, 2**53 + 1])
    assert mask(data, d=pa.array([Decimal("1.00"), Decimal("1.50")], pa.decimal128(5, 2))) == [True, False]
    # Spark compares a bigint with a double as doubles: 2**53 + 1 rounds to 2**53.
    assert mask(data, d=pa.array([1.0, 2.0**53, 1.5])) == [True, True, False]


def test_decimal_keys_out_of_the_comparison_range_match_nothing_and_candidates_are_kept():
    data = DynamicFilteringData([("d", "decimal(38,20)")], [Decimal("1.5")])
    # decimal(38,20) meets bigint as decimal(38,20): bigint values of 19 digits do not fit and are kept.
    assert mask(data, d=pa.array([1, 5 * 10**18, -(5 * 10**18)], pa.int64())) == [False, True, True]
    wide = DynamicFilteringData([("d", "bigint")], [1, 5 * 10**18])
    assert mask(wide, d=pa.array([Decimal("1"), Decimal("2")], pa.decimal128(38, 20))) == [True, False]


def test_string_partition_column_against_int_key_uses_spark_cast():
    data = DynamicFilteringData([("day", "int")], [1, 20])
    assert mask(data, day=["01", "1", "20", "2", None]) == [True, True, True, False, False]


def test_unparseable_candidate_is_kept():
    data = DynamicFilteringData([("day", "int")], [1])
    assert mask(data, day=["not-a-number", "99999999999999999999", "2"]) == [True, True, False]


def test_string_keys_against_typed_columns_are_parsed():
    data = DynamicFilteringData([("day", "string")], ["01", "2", None])
    assert mask(data, day=pa.array([1, 2, 3, None], pa.int32())) == [True, True, False, False]


def test_a_column_whose_string_keys_do_not_all_parse_cannot_prune():
    # Spark's CAST reads ' 1' as 1 where partition-value parsing refuses it: dropping it would lose rows.
    data = DynamicFilteringData([("day", "string"), ("region", "string")], [(" 1", "eu"), ("2", "us")])
    assert mask(data, day=pa.array([1, 3], pa.int32())) == [True, True]
    both = mask(data, day=pa.array([1, 3, 1], pa.int32()), region=["eu", "us", "xx"])
    assert both == [True, True, False]


def test_null_candidates_match_only_null_safe_null_rows():
    rows = [(1, "a"), (None, "b")]
    plain = DynamicFilteringData([("n", "int"), ("s", "string")], rows)
    safe = DynamicFilteringData([("n", "int"), ("s", "string")], rows, null_safe=True)
    assert mask(plain, n=pa.array([None, 1], pa.int32())) == [False, True]
    assert mask(safe, n=pa.array([None, 1], pa.int32())) == [True, True]
    # The null row's other column: with `=` it can never match, so "b" is pruned.
    assert mask(plain, s=["a", "b", None]) == [True, False, False]
    assert mask(safe, s=["a", "b", None]) == [True, True, False]


def test_null_safe_multi_column_matching():
    data = DynamicFilteringData([("a", "int"), ("b", "string")], [(None, "x"), (1, None)], null_safe=True)
    result = mask(
        data,
        a=pa.array([None, None, 1, 1, None], pa.int32()),
        b=["x", "y", None, "x", None],
    )
    assert result == [True, False, True, False, False]


def test_dictionary_and_chunked_candidate_columns():
    data = DynamicFilteringData([("region", "string")], ["eu"])
    column = pa.chunked_array([pa.array(values).dictionary_encode() for values in (["eu", "us"], ["eu"])])
    assert data.matching_mask(pa.table({"region": column})).to_pylist() == [True, False, True]


def test_candidate_columns_of_other_arrow_layouts():
    data = DynamicFilteringData(
        [("t", "timestamp"), ("s", "string")], [(dt.datetime(2020, 1, 2, tzinfo=UTC), "eu")]
    )
    utc = pa.array([dt.datetime(2020, 1, 2), dt.datetime(2020, 1, 2, 1)], pa.timestamp("ns", tz="UTC"))
    zoned = utc.cast(pa.timestamp("ns", tz="America/New_York"))
    assert mask(data, t=zoned, s=pa.array(["eu", "eu"], pa.large_string())) == [True, False]


def test_date_key_against_timestamp_column_allows_for_any_session_time_zone():
    data = DynamicFilteringData([("d", "date")], [dt.date(2020, 1, 2)])
    instants = pa.array(
        [dt.datetime(2020, 1, 1, 16), dt.datetime(2020, 1, 2, 8), dt.datetime(2020, 1, 5)],
        pa.timestamp("us", tz="UTC"),
    )
    assert mask(data, d=instants) == [True, True, False]


def test_timestamp_key_against_date_and_local_timestamp_columns():
    data = DynamicFilteringData([("t", "timestamp")], [dt.datetime(2020, 1, 2, 23, tzinfo=UTC)])
    assert mask(data, t=pa.array([dt.date(2020, 1, 3), dt.date(2020, 1, 9)])) == [True, False]
    local = pa.array([dt.datetime(2020, 1, 3, 7), dt.datetime(2020, 1, 9)], pa.timestamp("us"))
    assert mask(data, t=local) == [True, False]


def test_date_key_against_local_timestamp_column_is_exact():
    data = DynamicFilteringData([("d", "date")], [dt.date(2020, 1, 2)])
    local = pa.array([dt.datetime(2020, 1, 2), dt.datetime(2020, 1, 2, 1)], pa.timestamp("us"))
    assert mask(data, d=local) == [True, False]


def test_string_column_against_date_key():
    data = DynamicFilteringData([("d", "date")], [dt.date(2020, 1, 2)])
    assert mask(data, d=["2020-01-02", "2020-01-03", "someday"]) == [True, False, True]


# --- bloom and range payloads ----------------------------------------------------------------------

DAY_REGION = [("day", "int"), ("region", "string")]


def bloom_of(fields, rows, *, null_safe=False, fpp=0.01) -> DynamicFilteringData:
    return DynamicFilteringData.from_table(
        fields, DynamicFilteringData(fields, rows).table, kind="bloom", fpp=fpp, null_safe=null_safe
    )


def range_of(fields, rows, *, null_safe=False) -> DynamicFilteringData:
    return DynamicFilteringData.from_table(
        fields, DynamicFilteringData(fields, rows).table, kind="range", null_safe=null_safe
    )


def test_from_table_kinds_show_kind_keys_and_size():
    table = pa.table({"day": pa.array(range(1000), pa.int32())})
    exact = DynamicFilteringData.from_table([("day", "int")], table)
    bloom = DynamicFilteringData.from_table([("day", "int")], table, kind="bloom", fpp=0.05)
    span = DynamicFilteringData.from_table([("day", "int")], table, kind="range")
    assert (exact.kind, bloom.kind, span.kind) == ("exact", "bloom", "range")
    assert len(exact) == len(bloom) == len(span) == 1000
    assert exact.size_bytes == 4000
    assert bloom.size_bytes == bloom_size_bytes(1000, 0.05) == (len(bloom.bloom_filter.bitarray) + 7) // 8
    assert span.size_bytes == 8 and span.bounds == ((0,), (999,))
    assert bloom.fpp == 0.05 and exact.fpp is None and span.fpp is None
    assert bloom.bounds is None and span.bloom_filter is None
    assert repr(bloom) == (
        f"DynamicFilteringData(fields=[day: int], kind=bloom, keys=1000, size_bytes={bloom.size_bytes}, "
        "fpp=0.05, exceed_threshold=False, null_safe=False)"
    )
    assert repr(span) == (
        "DynamicFilteringData(fields=[day: int], kind=range, keys=1000, size_bytes=8, "
        "exceed_threshold=False, null_safe=False)"
    )


def test_bloom_and_range_without_null_safety_summarise_only_rows_without_nulls():
    rows = [(1, "eu"), (2, None), (None, None)]
    assert len(bloom_of(DAY_REGION, rows)) == len(range_of(DAY_REGION, rows)) == 1
    assert range_of(DAY_REGION, rows).bounds == ((1, "eu"), (1, "eu"))
    assert len(bloom_of(DAY_REGION, rows, null_safe=True)) == 3
    assert range_of(DAY_REGION, rows, null_safe=True).bounds == ((1, "eu"), (2, "eu"))
    assert range_of(DAY_REGION, [(None, None)], null_safe=True).bounds == ((None, None), (None, None))


def test_range_bounds_follow_spark_ordering_of_nan_and_negative_zero():
    span = range_of([("x", "double")], [(float("nan"),), (-0.0,), (3.0,)])
    lower, upper = span.bounds
    assert lower == (0.0,) and math.copysign(1, lower[0]) == 1 and math.isnan(upper[0])
    all_nan = range_of([("x", "double")], [(float("nan"),)]).bounds
    assert math.isnan(all_nan[0][0]) and math.isnan(all_nan[1][0])


def test_only_exact_data_has_a_table():
    for data in (bloom_of(DAY_REGION, [(1, "eu")]), range_of(DAY_REGION, [(1, "eu")])):
        with pytest.raises(TypeError, match="holds no rows; use matching_mask"):
            data.table  # noqa: B018


def test_exceeded_data_is_exact_whatever_kind_was_asked():
    data = DynamicFilteringData.from_table([("d", "int")], pa.table({"d": [1]}), kind="bloom", exceed_threshold=True)
    assert data.kind == "exact" and not data.is_filtering and data.size_bytes == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "cuckoo"}, r"kind 'cuckoo' is not supported; supported kinds: \['exact', 'bloom', 'range'\]"),
        ({"kind": "bloom", "fpp": 0}, r"fpp\) is a number in \(0, 1\), not 0"),
        ({"kind": "bloom", "fpp": 1.0}, "not 1.0"),
        ({"kind": "bloom", "fpp": True}, "not True"),
    ],
)
def test_from_table_rejects_bad_kinds_and_fpp(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_table([("d", "int")], pa.table({"d": [1]}), **kwargs)


@pytest.mark.parametrize("capacity", [1, 7, 1000, 123_457])
@pytest.mark.parametrize("fpp", [0.5, 0.01, 0.001, 1e-6])
def test_bloom_size_is_known_before_allocating(capacity, fpp):
    bloom = BloomFilter(capacity, fpp)
    assert bloom_size_bytes(capacity, fpp) == len(bloom.bitarray.tobytes())


def test_bloom_from_bits_checks_length_and_padding():
    size = bloom_size_bytes(10, 0.01)
    assert bloom_from_bits(10, 0.01, bytes(size)).num_bits == BloomFilter(10, 0.01).num_bits
    with pytest.raises(ValueError, match=f"has {size} bytes of bits, got {size + 1}"):
        bloom_from_bits(10, 0.01, bytes(size + 1))
    with pytest.raises(ValueError, match="padding bits set"):
        bloom_from_bits(10, 0.01, bytes(size - 1) + b"\x80")
    with pytest.raises(ValueError, match="capacity is an integer"):
        bloom_from_bits(0, 0.01, b"")


def test_from_bloom_validates_its_arguments():
    full = BloomFilter(10, 0.01)
    full.add("x")
    with pytest.raises(ValueError, match="no keys must have no bit set"):
        DynamicFilteringData.from_bloom([("d", "int")], full, key_count=0)
    with pytest.raises(ValueError, match="key_count is a non-negative integer"):
        DynamicFilteringData.from_bloom([("d", "int")], full, key_count=-1)
    with pytest.raises(TypeError, match=r"needs a pybloom_live\.BloomFilter, not ScalableBloomFilter"):
        DynamicFilteringData.from_bloom([("d", "int")], ScalableBloomFilter(), key_count=1)


@pytest.mark.parametrize(
    ("lower", "upper", "count", "message"),
    [
        ((3,), (1,), 2, r"reversed: 3 > 1"),
        ((1,), (None,), 2, "both be set or both be null"),
        ((1,), (2,), 0, "no keys has no bounds"),
        ((None,), (None,), 2, "are null, but 2 keys"),
        ((float("nan"),), (1.0,), 2, "reversed"),
        (("x",), (1,), 2, "cannot hold the value 'x'"),
    ],
)
def test_from_bounds_validates_bounds(lower, upper, count, message):
    fields = [("d", "double")] if isinstance(lower[0], float) else [("d", "int")]
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bounds(fields, lower, upper, key_count=count)


def test_bloom_key_is_the_same_for_spark_batches_and_field_typed_values():
    fields = [("t", "timestamp"), ("s", "string"), ("x", "double"), ("n", "decimal(5,2)")]
    instant = dt.datetime(2020, 1, 2, 3, tzinfo=UTC)
    typed = pa.table({
        "t": pa.array([instant], pa.timestamp("us", tz="UTC")), "s": ["eu"], "x": [0.0],
        "n": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
    })
    spark_like = pa.table({
        "N": pa.array([Decimal("1.5")], pa.decimal128(5, 2)),
        "T": pa.array([instant], pa.timestamp("ns", tz="Etc/UTC")).cast(pa.timestamp("ns", tz="Asia/Tokyo")),
        "S": pa.array(["eu"], pa.large_string()).dictionary_encode(), "X": [-0.0],
    })
    assert bloom_key(fields, typed) == bloom_key(fields, spark_like)
    assert bloom_key([("a", "string"), ("b", "string")], pa.table({"a": ["1:x", None], "b": ["y", "-"]})) == [
        "3:1:x1:y", "-1:-"
    ]


def test_partial_blooms_united_equal_one_bloom_of_all_keys():
    keys = pa.table({"d": pa.array(range(100), pa.int64()), "s": [f"s{i}" for i in range(100)]})
    fields = [("d", "bigint"), ("s", "string")]
    halves = [BloomFilter(100, 0.01), BloomFilter(100, 0.01)]
    add_to_bloom(halves[0], fields, keys.slice(0, 50))
    add_to_bloom(halves[1], fields, keys.slice(50))
    united = DynamicFilteringData.from_bloom(fields, halves[0].union(halves[1]), key_count=100)
    assert united == DynamicFilteringData.from_table(fields, keys, kind="bloom")


# --- bloom matching ---------------------------------------------------------------------------------


@pytest.mark.parametrize("null_safe", [False, True])
def test_bloom_contains_its_keys(null_safe):
    data = bloom_of(DAY_REGION, [(1, "eu"), (2, "us")], null_safe=null_safe)
    assert data.contains((1, "eu")) and data.contains((2, "us"))
    assert not data.contains((1, "us")) and not data.contains((3, "eu"))
    assert not data.contains((None, "eu"))
    with pytest.raises(ValueError, match="row has 1 values"):
        data.contains((1,))


def test_null_safe_bloom_matches_null_keys_only():
    plain = bloom_of(DAY_REGION, [(None, "eu"), (1, None)])
    safe = bloom_of(DAY_REGION, [(None, "eu"), (1, None)], null_safe=True)
    candidates = {"day": pa.array([None, 1, None, 1], pa.int32()), "region": ["eu", None, None, "eu"]}
    assert mask(plain, **candidates) == [False, False, False, False]
    assert mask(safe, **candidates) == [True, True, False, False]
    assert safe.contains((None, "eu")) and not plain.contains((None, "eu"))


def test_bloom_prunes_only_with_every_field():
    data = bloom_of(DAY_REGION, [(1, "eu"), (2, "us")])
    assert mask(data, day=pa.array([1, 5], pa.int32())) == [True, True]
    assert mask(data, REGION=["xx"], DAY=pa.array([1], pa.int32())) == [False]
    assert mask(data, region=["eu", "us", "eu"], day=pa.array([1, 2, 2], pa.int32())) == [True, True, False]
    no_columns = pa.table({"day": [1]}).drop_columns(["day"])
    assert data.matching_mask(no_columns).to_pylist() == [True]


def test_bloom_of_no_keys_matches_nothing():
    data = bloom_of([("d", "int")], [])
    assert len(data) == 0
    assert mask(data, d=pa.array([1, None], pa.int32())) == [False, False]
    assert not data.contains((1,))


@pytest.mark.parametrize(
    ("field_type", "keys", "candidates", "expected"),
    [
        ("bigint", [1, 2**40], pa.array([1, 2, None], pa.int32()), [True, False, False]),
        ("int", [1, -(2**31)], pa.array([1, -(2**31), 2**40, 3], pa.int64()), [True, True, True, False]),
        ("int", [1, 20], pa.array(["01", "20", "2", "x", None]), [True, True, False, True, False]),
        ("int", [1], pa.array([1.0, 1.5, 2.0]), [True, True, False]),
        ("int", [1], pa.array([Decimal("1.00"), Decimal("2.00")], pa.decimal128(5, 2)), [True, False]),
        ("decimal(5,2)", [Decimal("1.5")], pa.array([1, 2], pa.int64()), [False, False]),
        ("decimal(5,2)", [Decimal("2")], pa.array([1, 2], pa.int8()), [False, True]),
        ("double", [0.0, float("nan")], pa.array([-0.0, float("nan"), 1.0], pa.float32()), [True, True, False]),
        ("date", [dt.date(2020, 1, 2)], pa.array([dt.datetime(2020, 1, 2), dt.datetime(2020, 1, 2, 1),
                                                   dt.datetime(2020, 1, 3)], pa.timestamp("us")),
         [True, True, False]),
        ("timestamp_ntz", [dt.datetime(2020, 1, 2)], pa.array([dt.date(2020, 1, 2), dt.date(2020, 1, 3)]),
         [True, False]),
    ],
    ids=["bigint keys, int column", "int keys, bigint column", "strings", "doubles", "decimals",
         "decimal keys, integers", "decimal keys, tinyints", "floats", "date keys, local timestamps",
         "local timestamp keys, dates"],
)
def test_bloom_converts_candidates_to_the_field_type(field_type, keys, candidates, expected):
    assert mask(bloom_of([("k", field_type)], keys), k=candidates) == expected


@pytest.mark.parametrize(
    ("field_type", "key", "candidates"),
    [
        ("bigint", 2**53 + 1, pa.array([2.0**53, 7.5])),  # Spark compares as doubles: 2**53 equals the key
        ("string", " 1", pa.array([1, 2], pa.int32())),  # Spark casts ' 1' to 1
        ("timestamp", dt.datetime(2020, 1, 2, tzinfo=UTC), pa.array([dt.date(2020, 1, 2), dt.date(2021, 1, 1)])),
        ("date", dt.date(2020, 1, 2), pa.array([dt.datetime(2020, 1, 1, 23)], pa.timestamp("us", tz="UTC"))),
    ],
    ids=["lossy double", "string keys", "timestamp keys, dates", "date keys, instants"],
)
def test_bloom_cannot_prune_comparisons_it_cannot_reproduce(field_type, key, candidates):
    assert mask(bloom_of([("k", field_type)], [key]), k=candidates) == [True] * len(candidates)


def test_bloom_rejects_incomparable_and_unknown_columns():
    data = bloom_of(DAY_REGION, [(1, "eu")])
    with pytest.raises(TypeError, match="boolean cannot be compared"):
        mask(data, day=[True])
    with pytest.raises(ValueError, match="'hour' is not a filter field"):
        mask(data, hour=[1])


def test_bloom_probes_each_distinct_candidate_once(monkeypatch):
    data = bloom_of([("d", "int"), ("s", "string")], [(i, f"s{i}") for i in range(100)])
    calls = []
    original = BloomFilter.__contains__
    monkeypatch.setattr(BloomFilter, "__contains__", lambda self, key: calls.append(key) or original(self, key))
    days = pa.array([i % 10 for i in range(100_000)], pa.int32())
    result = mask(data, d=days, s=pc.binary_join_element_wise("s", pc.cast(days, pa.string()), ""))
    assert len(calls) == 10 and all(result)


@pytest.mark.parametrize("fpp", [0.01, 0.05])
def test_bloom_false_positive_rate_is_close_to_fpp(fpp):
    keys = pa.table({"d": pa.array(range(0, 20_000, 2), pa.int64())})
    data = DynamicFilteringData.from_table([("d", "bigint")], keys, kind="bloom", fpp=fpp)
    assert all(data.matching_mask(keys).to_pylist())
    others = pa.table({"d": pa.array(range(1, 200_000, 2), pa.int64())})
    rate = sum(data.matching_mask(others).to_pylist()) / others.num_rows
    assert fpp / 2 < rate < fpp * 1.5


# --- range matching ---------------------------------------------------------------------------------


def test_range_prunes_with_any_prefix_of_columns():
    data = range_of([("year", "int"), ("month", "int")], [(2020, 3), (2021, 5)])
    assert mask(data, year=pa.array([2019, 2020, 2021, 2022], pa.int32())) == [False, True, True, False]
    assert mask(data, month=pa.array([2, 3, 4, 5, 6], pa.int32())) == [False, True, True, True, False]
    both = mask(data, year=pa.array([2020, 2020, 2022], pa.int64()), month=pa.array([4, 6, 4], pa.int64()))
    assert both == [True, False, False]


def test_range_contains_whatever_lies_within_its_bounds():
    data = range_of(DAY_REGION, [(1, "eu"), (3, "us")])
    assert data.contains((1, "eu")) and data.contains((2, "fr")) and data.contains((3, "us"))
    assert not data.contains((4, "eu")) and not data.contains((2, "zz")) and not data.contains((2, None))


@pytest.mark.parametrize(
    ("field_type", "keys", "candidates", "expected"),
    [
        ("int", [10, 20], pa.array([9.5, 10.0, 20.0, 20.5, float("nan")]), [False, True, True, False, False]),
        ("int", [10, 20], pa.array(["9", "010", "x", "21", None]), [False, True, True, False, False]),
        ("bigint", [10, 20], pa.array([Decimal("9.99"), Decimal("10.01")], pa.decimal128(4, 2)), [False, True]),
        ("decimal(4,2)", [Decimal("1.5"), Decimal("2.5")], pa.array([1, 2, 3], pa.int8()), [False, True, False]),
        ("string", ["b", "d"], pa.array(["a", "b", "c", "e"]), [False, True, True, False]),
        ("string", ["10", "20"], pa.array([5, 100], pa.int32()), [True, True]),  # '9' sorts after '10'
        ("date", [dt.date(2020, 1, 2), dt.date(2020, 1, 3)],
         pa.array([dt.datetime(2019, 12, 31), dt.datetime(2020, 1, 1, 12), dt.datetime(2020, 1, 5)],
                  pa.timestamp("us", tz="UTC")), [False, True, False]),
        ("double", [1.0, float("nan")], pa.array([0.5, float("nan")]), [True, True]),  # NaN bounds do not prune
        ("double", [1.0, 2.0], pa.array([0.5, float("nan"), -0.0]), [False, False, False]),
    ],
    ids=["doubles", "strings", "decimals", "decimal keys, integers", "string keys", "string keys, integers",
         "date keys, instants", "NaN key", "NaN candidate"],
)
def test_range_compares_in_the_comparison_type(field_type, keys, candidates, expected):
    assert mask(range_of([("k", field_type)], keys), k=candidates) == expected


def test_range_nulls_follow_sql_unless_null_safe():
    rows = [(1, None), (3, "x")]
    plain = range_of(DAY_REGION, rows)
    safe = range_of(DAY_REGION, rows, null_safe=True)
    candidates = {"day": pa.array([None, 2, 2], pa.int32()), "region": ["x", None, "y"]}
    assert mask(plain, **candidates) == [False, False, False]
    assert mask(safe, **candidates) == [True, True, False]
    only_nulls = range_of([("d", "int")], [None], null_safe=True)
    assert mask(only_nulls, d=pa.array([None, 1], pa.int32())) == [True, False]


def test_range_of_no_keys_matches_nothing():
    data = range_of([("d", "int")], [])
    assert data.bounds == ((None,), (None,))
    assert mask(data, d=pa.array([1, None], pa.int32())) == [False, False]


# --- may_overlap ------------------------------------------------------------------------------------


def overlaps(data, *intervals, column="d", value_type=None):
    return [data.may_overlap(column, low, high, value_type) for low, high in intervals]


def test_exact_overlap_checks_the_keys():
    data = DynamicFilteringData([("d", "int"), ("s", "string")], [(1, "a"), (5, "b"), (9, None)])
    intervals = [(2, 4), (4, 6), (5, 5), (10, 20), (None, 3), (9, 9)]
    assert overlaps(data, *intervals) == [False, True, True, False, True, False]
    assert overlaps(data, ("a", "a"), ("c", "z"), column="S") == [True, False]
    assert overlaps(data, (2**40, 2**41), (0, 2), value_type=pa.int64()) == [False, True]
    assert overlaps(data, (pa.scalar(1.5), pa.scalar(4.5)), (pa.scalar(0.5), pa.scalar(1.5))) == [False, True]


def test_overlap_of_exceeded_and_empty_data():
    assert DynamicFilteringData([("d", "int")], exceed_threshold=True).may_overlap("nope", 1, 2)
    for data in (DynamicFilteringData([("d", "int")]), bloom_of([("d", "int")], []), range_of([("d", "int")], [])):
        assert overlaps(data, (1, 2), (None, None)) == [False, True]


def test_overlap_with_nan_keys_or_bounds_is_always_true():
    data = DynamicFilteringData([("d", "double")], [float("nan"), 1.0])
    assert overlaps(data, (5.0, 6.0), (float("nan"), float("nan"))) == [True, True]
    assert overlaps(range_of([("d", "double")], [float("nan"), 1.0]), (5.0, 6.0)) == [True]
    assert overlaps(DynamicFilteringData([("d", "double")], [1.0]), (5.0, 6.0)) == [False]


def test_overlap_by_day_allows_for_any_session_time_zone():
    stamp = pa.timestamp("us", tz="UTC")
    day = dt.date(2020, 1, 5)
    for data in (DynamicFilteringData([("d", "date")], [day]), range_of([("d", "date")], [day])):
        near = (dt.datetime(2020, 1, 6, 12, tzinfo=UTC), dt.datetime(2020, 1, 7, tzinfo=UTC))
        far = (dt.datetime(2020, 1, 7, tzinfo=UTC), dt.datetime(2020, 1, 9, tzinfo=UTC))
        assert overlaps(data, near, far, value_type=stamp) == [True, False]


def test_null_safe_overlap_with_null_keys_is_true():
    data = DynamicFilteringData([("d", "int")], [1, None], null_safe=True)
    assert overlaps(data, (5, 6)) == [True]
    assert overlaps(DynamicFilteringData([("d", "int")], [1, None]), (5, 6)) == [False]
    assert overlaps(range_of([("d", "int")], [1], null_safe=True), (5, 6)) == [True]


def test_overlap_of_string_keys_against_typed_statistics():
    assert overlaps(DynamicFilteringData([("d", "string")], ["01", "7"]), (2, 6), (0, 1), value_type=pa.int32()) == [
        False, True
    ]
    assert overlaps(DynamicFilteringData([("d", "string")], [" 1"]), (5, 6), value_type=pa.int32()) == [True]
    assert overlaps(range_of([("d", "string")], ["10", "20"]), (50, 60), value_type=pa.int32()) == [True]


def test_string_statistics_of_typed_keys_always_overlap():
    # A string column's statistics ('1', '9') bound '10' too, which is 10 as an int.
    for data in (DynamicFilteringData([("d", "int")], [10]), range_of([("d", "int")], [10, 11])):
        assert overlaps(data, ("1", "9"), value_type=pa.string()) == [True]
    assert overlaps(DynamicFilteringData([("d", "string")], ["10"]), ("2", "9"), ("1", "9")) == [False, True]


def test_range_overlap_is_interval_overlap():
    data = range_of([("d", "int")], [10, 20])
    assert overlaps(data, (0, 9), (0, 10), (15, 16), (20, 30), (21, 30), (0, 100)) == [
        False, True, True, True, False, True
    ]
    assert overlaps(data, (9.5, 9.9), value_type=pa.float64()) == [False]


def test_bloom_overlap_probes_small_integral_intervals():
    data = bloom_of([("d", "int")], [100, 5000], fpp=1e-9)  # so that 1024 probes all miss
    assert overlaps(data, (101, 200), (90, 110), (4000, 5000)) == [False, True, True]
    assert overlaps(data, (0, 1_000_000), (1000, 2023), (1000, 2024)) == [True, False, True]
    assert overlaps(data, (2**40, 2**40 + 5), value_type=pa.int64()) == [False]  # no int key is that big
    tiny = bloom_of([("d", "tinyint")], [100])
    assert overlaps(tiny, (101, 2**31 - 1), (90, 2**31 - 1), value_type=pa.int32()) == [False, True]
    assert overlaps(data, (101.0, 102.0), value_type=pa.float64()) == [True]
    assert overlaps(bloom_of(DAY_REGION, [(1, "eu")]), (5, 6), column="day") == [True]
    assert overlaps(bloom_of([("d", "int")], [1], null_safe=True), (5, 6)) == [True]


def test_overlap_rejects_unknown_columns_and_incomparable_bounds():
    data = range_of([("d", "int")], [1])
    with pytest.raises(ValueError, match="'x' is not a filter field"):
        data.may_overlap("x", 1, 2)
    with pytest.raises(TypeError, match="boolean cannot be compared"):
        data.may_overlap("d", False, True, pa.bool_())


# --- wire format -----------------------------------------------------------------------------------

EVERY_TYPE = [
    ("b", "boolean"),
    ("t8", "tinyint"),
    ("t16", "smallint"),
    ("t64", "bigint"),
    ("f", "float"),
    ("x", "double"),
    ("m", "decimal(38,10)"),
    ("s", "string"),
    ("raw", "binary"),
    ("day", "date"),
    ("at", "timestamp"),
    ("local", "timestamp_ntz"),
]
EVERY_TYPE_ROWS = [
    (
        True,
        -128,
        32767,
        2**63 - 1,
        1.5,
        float("nan"),
        Decimal("-1234567890123456789012345678.0123456789"),
        "žluťoučký kůň 🐎",
        b"\x00\xff",
        dt.date(1, 1, 1),
        dt.datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    ),
    (
        False,
        0,
        -1,
        -(2**63),
        -0.0,
        -1e300,
        Decimal("0.0000000001"),
        "",
        b"",
        dt.date(9999, 12, 31),
        dt.datetime(2020, 1, 1, tzinfo=UTC),
        dt.datetime(1, 1, 1),
    ),
    (None,) * 12,
]

ROUND_TRIPS = {
    "int": DynamicFilteringData([("d", "int")], [1, -5, 2**31 - 1]),
    "every type": DynamicFilteringData(EVERY_TYPE, EVERY_TYPE_ROWS),
    "non-ASCII names": DynamicFilteringData([("año", "string"), ("月", "int")], [("ñ", 1)]),
    "empty": DynamicFilteringData([("d", "int"), ("s", "string")]),
    "exceeded": DynamicFilteringData([("d", "int")], [1], exceed_threshold=True),
    "null-safe": DynamicFilteringData([("d", "int")], [1, None], null_safe=True),
    "bloom": bloom_of([("d", "int")], range(1000)),
    "bloom of every type": bloom_of(EVERY_TYPE, EVERY_TYPE_ROWS, null_safe=True, fpp=0.001),
    "bloom of non-ASCII names": bloom_of([("año", "string"), ("月", "int")], [("ñ", 1)], fpp=0.3),
    "empty bloom": bloom_of([("d", "int")], []),
    "range": range_of([("d", "int")], [1, -5, 2**31 - 1]),
    "range of every type": range_of(EVERY_TYPE, EVERY_TYPE_ROWS),
    "null-safe range of every type": range_of(EVERY_TYPE, EVERY_TYPE_ROWS[2:], null_safe=True),
    "empty range": range_of([("d", "int"), ("s", "string")], []),
}


@pytest.mark.parametrize("data", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_round_trip(data):
    blob = data.to_bytes()
    assert blob.startswith(MAGIC)
    loaded = DynamicFilteringData.from_bytes(blob)
    assert loaded == data
    assert loaded.fields == data.fields and len(loaded) == len(data)
    shown = (data.kind, data.size_bytes, data.fpp, repr(data))
    assert (loaded.kind, loaded.size_bytes, loaded.fpp, repr(loaded)) == shown
    if data.kind == "exact":
        assert loaded.table.schema == data.table.schema
    assert loaded.to_bytes() == blob
    assert DynamicFilteringData.from_bytes(bytearray(blob)) == data


def test_round_trip_keeps_matching_behaviour():
    data = ROUND_TRIPS["null-safe"]
    loaded = DynamicFilteringData.from_bytes(data.to_bytes())
    assert loaded.contains((None,)) and loaded.null_safe
    assert mask(loaded, d=pa.array([1, 2, None], pa.int32())) == [True, False, True]
    bloom = DynamicFilteringData.from_bytes(ROUND_TRIPS["bloom"].to_bytes())
    assert all(mask(bloom, d=pa.array(range(1000), pa.int32()))) and bloom.fpp == 0.01
    assert mask(DynamicFilteringData.from_bytes(ROUND_TRIPS["range"].to_bytes()), d=[-6, -5, 2**31 - 1]) == [
        False, True, True
    ]


def test_bloom_payload_is_its_bit_array():
    data = ROUND_TRIPS["bloom"]
    header, body = split(data.to_bytes())
    assert header["bloom"] == {"capacity": 1000, "fpp": 0.01} and header["row_count"] == 1000
    assert body == data.bloom_filter.bitarray.tobytes() and len(body) == data.size_bytes


def test_changed_data_gives_other_bytes():
    assert bloom_of([("d", "int")], [1]).to_bytes() != bloom_of([("d", "int")], [2]).to_bytes()
    assert bloom_of([("d", "int")], [1]) != bloom_of([("d", "int")], [2])
    assert range_of([("d", "int")], [1]) != range_of([("d", "int")], [1, 2])
    assert bloom_of([("d", "int")], [1]) != DynamicFilteringData([("d", "int")], [1])


KIND_DATA = {
    "exact": lambda rows: DynamicFilteringData(DAY_REGION, rows),
    "bloom": lambda rows: bloom_of(DAY_REGION, rows),
    "range": lambda rows: range_of(DAY_REGION, rows),
}


@pytest.fixture(params=list(KIND_DATA))
def blob(request) -> bytes:
    """A payload of each kind, over the same two rows."""
    return KIND_DATA[request.param]([(1, "eu"), (2, "us")]).to_bytes()


@pytest.fixture(params=["exact", "range"])
def arrow_blob(request) -> bytes:
    """A payload of each kind whose body is Arrow IPC."""
    return KIND_DATA[request.param]([(1, "eu"), (2, "us")]).to_bytes()


def flipped(blob: bytes, index: int) -> bytes:
    return blob[:index] + bytes([blob[index] ^ 0x01]) + blob[index + 1 :]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (lambda blob, body: blob.index(b"region", 14), "checksum mismatch"),
        (lambda blob, body: 14, "not valid UTF-8 JSON"),
        (lambda blob, body: len(blob) - 32 - len(body) // 2, "checksum mismatch"),
        (lambda blob, body: len(blob) - 1, "checksum mismatch"),
        (lambda blob, body: 0, "not a dynsource filter payload"),
        (lambda blob, body: 8, "version 258 is not supported"),
    ],
    ids=["header value", "header syntax", "body", "checksum", "magic", "version"],
)
def test_flipped_bytes_are_detected(blob, where, message):
    _, body = split(blob)
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bytes(flipped(blob, where(blob, body)))


@pytest.mark.parametrize("keep", [0, 5, 8, 13, 45, 50, -100, -33, -1])
def test_truncated_payloads_say_how_many_bytes_they_miss(blob, keep):
    with pytest.raises(ValueError, match=r"truncated: .*expected .*\d+ bytes.*, got \d+"):
        DynamicFilteringData.from_bytes(blob[:keep])


def test_trailing_bytes_are_rejected(blob):
    with pytest.raises(ValueError, match="3 unexpected trailing bytes"):
        DynamicFilteringData.from_bytes(blob + b"abc")


@pytest.mark.parametrize(
    "foreign",
    [b"PK\x03\x04" + bytes(60), b"\x80\x04\x95" + bytes(60), b"ARROW1\x00\x00" + bytes(60), bytes(64)],
    ids=["zip", "pickle", "arrow file", "zeros"],
)
def test_foreign_data_is_not_a_payload(foreign):
    with pytest.raises(ValueError, match="not a dynsource filter payload"):
        DynamicFilteringData.from_bytes(foreign)


def test_unsupported_version(blob):
    header, body = split(blob)
    with pytest.raises(ValueError, match=r"version 3 is not supported; supported versions: \[1, 2\]"):
        DynamicFilteringData.from_bytes(forge(header, body, version=3))


def test_oversize_header_length_is_refused_before_reading_it():
    lying = struct.pack(">8sHI", MAGIC, 1, MAX_HEADER_BYTES + 1) + bytes(40)
    with pytest.raises(ValueError, match="header length 1048577 exceeds the limit"):
        DynamicFilteringData.from_bytes(lying)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.pop("kind"), "exactly the keys"),
        (lambda h: h.update(extra=1), "exactly the keys"),
        (lambda h: h.update(kind="cuckoo"), r"kind 'cuckoo' is not supported; supported kinds: \['exact', 'bloom'"),
        (lambda h: h.update(kind=["exact"]), "exactly the keys|'kind' must be a string"),
        (lambda h: h.update(row_count="2"), "'row_count' must be a non-negative integer, got '2'"),
        (lambda h: h.update(row_count=True), "'row_count' must be a non-negative integer"),
        (lambda h: h.update(row_count=-1), "'row_count' must be a non-negative integer"),
        (lambda h: h.update(null_safe=0), "'null_safe' must be a boolean"),
        (lambda h: h.update(fields="day"), "'fields' must be a list"),
        (lambda h: h.update(fields=[["day", "int"], ["region", "nope"]]), "header declares invalid fields"),
        (lambda h: h.update(fields=[["day", "int"], ["DAY", "int"]]), "header declares invalid fields"),
        (lambda h: h.update(fields=[{"day": 1, "int": 2}]), "header declares invalid fields"),
        (lambda h: h.update(fields=[]), "header declares invalid fields"),
    ],
)
def test_ill_formed_headers_with_a_valid_checksum(blob, change, message):
    header, body = split(blob)
    change(header)
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bytes(forge(header, body))


def grown_body(h):
    h.update(body_length=h["body_length"] + 1)


def shrunk_body(h):
    h.update(body_length=h["body_length"] - 1)


def bloom_sized(**sizing):
    return lambda h: h["bloom"].update(sizing)


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        ("exact", lambda h: h.update(fields=[["day", "int"]]), "does not match the declared fields"),
        ("exact", lambda h: h.update(fields=[["day", "bigint"], ["region", "string"]]), "does not match the declared"),
        ("exact", lambda h: h.update(row_count=3), "declares 3 rows but the body holds 2"),
        ("exact", lambda h: h.update(exceed_threshold=True), "marked exceeded but carries 2 rows"),
        ("exact", grown_body, "truncated"),
        ("exact", shrunk_body, "1 unexpected trailing bytes"),
        ("range", lambda h: h.update(fields=[["day", "int"]]), "does not match the declared fields"),
        ("range", lambda h: h.update(fields=[["day", "bigint"], ["region", "string"]]), "does not match the declared"),
        ("range", lambda h: h.update(row_count=0), "no keys has no bounds"),
        ("range", lambda h: h.update(exceed_threshold=True), "of kind 'range' cannot be marked exceeded"),
        ("range", grown_body, "truncated"),
        ("range", shrunk_body, "1 unexpected trailing bytes"),
        ("bloom", lambda h: h.pop("bloom"), "exactly the keys"),
        ("bloom", lambda h: h.update(bloom=[1000, 0.01]), "'bloom' must be an object"),
        ("bloom", bloom_sized(hashes=3), "exactly the keys capacity and fpp"),
        ("bloom", bloom_sized(capacity=3), "capacity 3 and fpp 0.01, which has 5 bytes of bits, but a 3-byte body"),
        ("bloom", bloom_sized(fpp=0.1), "fpp 0.1, which has 2 bytes of bits"),
        ("bloom", bloom_sized(capacity="2"), "capacity is an integer"),
        ("bloom", bloom_sized(capacity=True), "capacity is an integer"),
        ("bloom", bloom_sized(capacity=0), "capacity is an integer"),
        ("bloom", bloom_sized(capacity=2**62), r"capacity is an integer in \[1, 1099511627776\]"),
        ("bloom", bloom_sized(capacity=2**40), "bytes of bits, but a 3-byte body"),  # refused before allocating
        ("bloom", bloom_sized(fpp=0), "fpp must be a number"),
        ("bloom", bloom_sized(fpp=1.0), r"fpp\) is a number in \(0, 1\)"),
        ("bloom", bloom_sized(fpp=-0.5), r"fpp\) is a number in \(0, 1\)"),
        ("bloom", bloom_sized(fpp="0.01"), "fpp must be a number"),
        ("bloom", lambda h: h.update(row_count=0), "no keys must have no bit set"),
        ("bloom", lambda h: h.update(exceed_threshold=True), "of kind 'bloom' cannot be marked exceeded"),
        ("bloom", grown_body, "which has 3 bytes of bits, but a 4-byte body"),
        ("bloom", shrunk_body, "which has 3 bytes of bits, but a 2-byte body"),
    ],
)
def test_ill_formed_headers_of_each_kind(kind, change, message):
    header, body = split(KIND_DATA[kind]([(1, "eu"), (2, "us")]).to_bytes())
    change(header)
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bytes(forge(header, body))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x00\x00\x80", "padding bits set"),
        (b"\x00\x00", "which has 3 bytes of bits, but a 2-byte body"),
    ],
)
def test_ill_formed_bloom_bodies(body, message):
    header, _ = split(bloom_of(DAY_REGION, [(1, "eu"), (2, "us")]).to_bytes())
    header["body_length"] = len(body)
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bytes(forge(header, body))


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({"day": pa.array([2, 1], pa.int32()), "region": ["eu", "us"]}, "reversed: 2 > 1"),
        ({"day": pa.array([1, None], pa.int32()), "region": ["eu", "us"]}, "both be set or both be null"),
        ({"day": pa.array([1, 2, 3], pa.int32()), "region": ["eu", "us", "x"]}, "holds 3 rows, but range bounds are 2"),
    ],
)
def test_ill_formed_range_bodies(bounds, message):
    header, _ = split(range_of(DAY_REGION, [(1, "eu"), (2, "us")]).to_bytes())
    body = ipc(pa.table(bounds))
    header["body_length"] = len(body)
    with pytest.raises(ValueError, match=message):
        DynamicFilteringData.from_bytes(forge(header, body))


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b"[1, 2]", b"null"],
    ids=["text", "not utf-8", "deeply nested", "list", "null"],
)
def test_header_that_is_not_a_json_object(raw):
    payload = struct.pack(">8sHI", MAGIC, 1, len(raw)) + raw
    with pytest.raises(ValueError, match=r"not valid UTF-8 JSON|exactly the keys"):
        DynamicFilteringData.from_bytes(payload + hashlib.sha256(payload).digest())


def test_unreadable_arrow_body(arrow_blob):
    header, body = split(arrow_blob)
    garbage = b"\xff\xff\xff\xff" + bytes(len(body) - 4)
    with pytest.raises(ValueError, match="not a readable Arrow IPC stream"):
        DynamicFilteringData.from_bytes(forge(header, garbage))


def test_body_of_other_types_is_rejected(arrow_blob):
    header, _ = split(arrow_blob)
    body = ipc(pa.table({"day": pa.array([1, 2], pa.int64()), "region": ["eu", "us"]}))
    header["body_length"] = len(body)
    with pytest.raises(ValueError, match=r"body schema .*day: int64.* does not match .*day: int32"):
        DynamicFilteringData.from_bytes(forge(header, body))


def test_extension_types_in_the_body_are_refused(arrow_blob):
    header, _ = split(arrow_blob)
    pickled = {
        b"ARROW:extension:name": b"arrow.py_extension_type",
        b"ARROW:extension:metadata": b"\x80\x04N.",
    }
    schema = pa.schema([pa.field("day", pa.int32(), metadata=pickled), pa.field("region", pa.string())])
    body = ipc(pa.table({"day": pa.array([1, 2], pa.int32()), "region": ["eu", "us"]}, schema=schema))
    header["body_length"] = len(body)
    with pytest.raises(ValueError, match=r"not a readable Arrow IPC stream|carries metadata"):
        DynamicFilteringData.from_bytes(forge(header, body))


def test_loading_never_unpickles(blob, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("from_bytes must not unpickle")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    assert len(DynamicFilteringData.from_bytes(blob)) == 2


def test_only_bytes_are_accepted():
    with pytest.raises(TypeError, match="bytes, not str"):
        DynamicFilteringData.from_bytes("DYNFLT")


# --- properties ------------------------------------------------------------------------------------

KEYS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
NAMES = st.text(alphabet="abcé日 ", max_size=4)
ROWS = st.lists(st.tuples(st.one_of(st.none(), KEYS), st.one_of(st.none(), NAMES)), max_size=30)


@given(rows=ROWS, null_safe=st.booleans(), exceeded=st.booleans())
def test_property_round_trip(rows, null_safe, exceeded):
    data = DynamicFilteringData([("k", "int"), ("s", "string")], rows, exceeded, null_safe=null_safe)
    assert DynamicFilteringData.from_bytes(data.to_bytes()) == data
    assert len(data) == (0 if exceeded else len(set(rows)))


def spark_equal(left, right, null_safe: bool) -> bool:
    return left == right if null_safe else left is not None and left == right


_POSITION = {"k": 0, "s": 1}


def candidate_table(candidates, columns, key_type) -> pa.Table:
    """The (k, s) candidates as a table of ``columns``, k typed as ``key_type`` (strings zero-padded: '+0001')."""

    def column(name):
        values = [row[_POSITION[name]] for row in candidates]
        if name == "s":
            return pa.array(values, pa.string())
        if pa.types.is_string(key_type):
            return pa.array([None if v is None else f"{v:+05d}" for v in values], pa.string())
        return pa.array(
            [None if v is None else (Decimal(v) if pa.types.is_decimal(key_type) else v) for v in values],
            key_type,
        )

    return pa.table({name: column(name) for name in columns})


def equals_some_row(candidate, rows, columns, null_safe) -> bool:
    """Whether Spark's join would match ``candidate`` with one of ``rows`` on ``columns``."""
    usable = rows if null_safe else [row for row in rows if None not in row]
    return any(
        all(spark_equal(candidate[_POSITION[c]], row[_POSITION[c]], null_safe) for c in columns) for row in usable
    )


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    rows=ROWS,
    others=st.lists(st.tuples(st.one_of(st.none(), KEYS), st.one_of(st.none(), NAMES)), max_size=10),
    null_safe=st.booleans(),
    columns=st.sampled_from([("k",), ("s",), ("k", "s"), ("s", "k")]),
    key_type=st.sampled_from([pa.int32(), pa.int64(), pa.decimal128(12, 2), pa.float64(), pa.string()]),
    data=st.data(),
)
def test_property_mask_never_prunes_a_matching_candidate(rows, others, null_safe, columns, key_type, data):
    """A candidate equal (Spark's way) to a row on its columns is kept; exact types add no false hits."""
    filter_data = DynamicFilteringData([("k", "int"), ("s", "string")], rows, null_safe=null_safe)
    chosen = data.draw(st.lists(st.sampled_from(rows), max_size=10)) if rows else []
    candidates = chosen + others

    result = filter_data.matching_mask(candidate_table(candidates, columns, key_type)).to_pylist()
    for candidate, kept in zip(candidates, result, strict=True):
        if equals_some_row(candidate, rows, columns, null_safe):
            assert kept, (candidate, columns)
        elif not pa.types.is_string(key_type):
            assert not kept, (candidate, columns)


@settings(deadline=None)
@given(rows=ROWS, null_safe=st.booleans(), kind=st.sampled_from(["bloom", "range"]))
def test_property_round_trip_of_bloom_and_range(rows, null_safe, kind):
    data = (bloom_of if kind == "bloom" else range_of)([("k", "int"), ("s", "string")], rows, null_safe=null_safe)
    assert DynamicFilteringData.from_bytes(data.to_bytes()) == data
    assert len(data) == len({row for row in rows if null_safe or None not in row})


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    rows=ROWS,
    others=st.lists(st.tuples(st.one_of(st.none(), KEYS), st.one_of(st.none(), NAMES)), max_size=10),
    null_safe=st.booleans(),
    kind=st.sampled_from(["bloom", "range"]),
    columns=st.sampled_from([("k",), ("s",), ("k", "s"), ("s", "k")]),
    key_type=st.sampled_from([pa.int32(), pa.int64(), pa.decimal128(12, 2), pa.float64(), pa.string()]),
    data=st.data(),
)
def test_property_bloom_and_range_never_lose_a_key(rows, others, null_safe, kind, columns, key_type, data):
    """A candidate equal (Spark's way) to a row on its columns is kept: a summary may add, never lose."""
    summary = (bloom_of if kind == "bloom" else range_of)([("k", "int"), ("s", "string")], rows, null_safe=null_safe)
    chosen = data.draw(st.lists(st.sampled_from(rows), max_size=10)) if rows else []
    candidates = chosen + others

    result = summary.matching_mask(candidate_table(candidates, columns, key_type)).to_pylist()
    for candidate, kept in zip(candidates, result, strict=True):
        if equals_some_row(candidate, rows, columns, null_safe):
            assert kept, (candidate, columns)
