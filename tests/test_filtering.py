"""DynamicFilteringData: construction, contains, matching_mask and the wire format (no Spark)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import pickle
import re
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynsource.filtering import MAGIC, MAX_HEADER_BYTES, DynamicFilteringData

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
        "DynamicFilteringData(fields=[d: int], kind=exact, rows=10000, "
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


# --- wire format -----------------------------------------------------------------------------------

ROUND_TRIPS = {
    "int": DynamicFilteringData([("d", "int")], [1, -5, 2**31 - 1]),
    "every type": DynamicFilteringData(
        [
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
        ],
        [
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
            (None,) * 12,
        ],
    ),
    "non-ASCII names": DynamicFilteringData([("año", "string"), ("月", "int")], [("ñ", 1)]),
    "empty": DynamicFilteringData([("d", "int"), ("s", "string")]),
    "exceeded": DynamicFilteringData([("d", "int")], [1], exceed_threshold=True),
    "null-safe": DynamicFilteringData([("d", "int")], [1, None], null_safe=True),
}


@pytest.mark.parametrize("data", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_round_trip(data):
    blob = data.to_bytes()
    assert blob.startswith(MAGIC)
    loaded = DynamicFilteringData.from_bytes(blob)
    assert loaded == data
    assert loaded.fields == data.fields and len(loaded) == len(data)
    assert loaded.table.schema == data.table.schema
    assert loaded.to_bytes() == blob
    assert DynamicFilteringData.from_bytes(bytearray(blob)) == data


def test_round_trip_keeps_matching_behaviour():
    data = ROUND_TRIPS["null-safe"]
    loaded = DynamicFilteringData.from_bytes(data.to_bytes())
    assert loaded.contains((None,)) and loaded.null_safe
    assert mask(loaded, d=pa.array([1, 2, None], pa.int32())) == [True, False, True]


@pytest.fixture
def blob() -> bytes:
    return DynamicFilteringData([("day", "int"), ("region", "string")], [(1, "eu"), (2, "us")]).to_bytes()


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
        (lambda blob, body: 8, "version 257 is not supported"),
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
    with pytest.raises(ValueError, match=r"version 2 is not supported; supported versions: \[1\]"):
        DynamicFilteringData.from_bytes(forge(header, body, version=2))


def test_oversize_header_length_is_refused_before_reading_it():
    lying = struct.pack(">8sHI", MAGIC, 1, MAX_HEADER_BYTES + 1) + bytes(40)
    with pytest.raises(ValueError, match="header length 1048577 exceeds the limit"):
        DynamicFilteringData.from_bytes(lying)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.pop("kind"), "exactly the keys"),
        (lambda h: h.update(extra=1), "exactly the keys"),
        (lambda h: h.update(kind="bloom"), "kind 'bloom' is not supported"),
        (lambda h: h.update(row_count="2"), "'row_count' must be a non-negative integer, got '2'"),
        (lambda h: h.update(row_count=True), "'row_count' must be a non-negative integer"),
        (lambda h: h.update(row_count=-1), "'row_count' must be a non-negative integer"),
        (lambda h: h.update(null_safe=0), "'null_safe' must be a boolean"),
        (lambda h: h.update(fields="day"), "'fields' must be a list"),
        (lambda h: h.update(fields=[["day", "int"], ["region", "nope"]]), "header declares invalid fields"),
        (lambda h: h.update(fields=[["day", "int"], ["DAY", "int"]]), "header declares invalid fields"),
        (lambda h: h.update(fields=[{"day": 1, "int": 2}]), "header declares invalid fields"),
        (lambda h: h.update(fields=[]), "header declares invalid fields"),
        (lambda h: h.update(fields=[["day", "int"]]), "does not match the declared fields"),
        (lambda h: h.update(fields=[["day", "bigint"], ["region", "string"]]), "does not match the declared"),
        (lambda h: h.update(row_count=3), "declares 3 rows but the body holds 2"),
        (lambda h: h.update(exceed_threshold=True), "marked exceeded but carries 2 rows"),
        (lambda h: h.update(body_length=h["body_length"] + 1), "truncated"),
        (lambda h: h.update(body_length=h["body_length"] - 1), "1 unexpected trailing bytes"),
    ],
)
def test_ill_formed_headers_with_a_valid_checksum(blob, change, message):
    header, body = split(blob)
    change(header)
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


def test_unreadable_arrow_body(blob):
    header, body = split(blob)
    garbage = b"\xff\xff\xff\xff" + bytes(len(body) - 4)
    with pytest.raises(ValueError, match="not a readable Arrow IPC stream"):
        DynamicFilteringData.from_bytes(forge(header, garbage))


def test_body_of_other_types_is_rejected(blob):
    header, _ = split(blob)
    body = ipc(pa.table({"day": pa.array([1, 2], pa.int64()), "region": ["eu", "us"]}))
    header["body_length"] = len(body)
    with pytest.raises(ValueError, match=r"body schema .*day: int64.* does not match .*day: int32"):
        DynamicFilteringData.from_bytes(forge(header, body))


def test_extension_types_in_the_body_are_refused(blob):
    header, _ = split(blob)
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
    position = {"k": 0, "s": 1}

    def column(name):
        values = [row[position[name]] for row in candidates]
        if name == "s":
            return pa.array(values, pa.string())
        if pa.types.is_string(key_type):
            return pa.array([None if v is None else f"{v:+05d}" for v in values], pa.string())
        return pa.array(
            [None if v is None else (Decimal(v) if pa.types.is_decimal(key_type) else v) for v in values],
            key_type,
        )

    result = filter_data.matching_mask(pa.table({name: column(name) for name in columns})).to_pylist()
    usable = rows if null_safe else [row for row in rows if None not in row]
    for candidate, kept in zip(candidates, result, strict=True):
        expected = any(
            all(spark_equal(candidate[position[c]], row[position[c]], null_safe) for c in columns)
            for row in usable
        )
        if expected:
            assert kept, (candidate, columns)
        elif not pa.types.is_string(key_type):
            assert not kept, (candidate, columns)
