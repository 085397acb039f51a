"""The collector's grades (exact, bloom, range, exceeded) in a real local SparkSession."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dynsource
from dynsource.filtering import DynamicFilteringData, bloom_size_bytes, collector

KEY = {"ss_sold_date_sk": "d_date_sk"}


def dimension(spark, count: int, partitions: int = 2):
    """``count`` keys 0, 3, 6, ... as ints, spread over ``partitions``."""
    return spark.range(0, count, 1, partitions).selectExpr("CAST(id * 3 AS INT) AS d_date_sk", "id AS other")


def kept(data: DynamicFilteringData, values) -> list[bool]:
    return data.matching_mask(pa.table({"ss_sold_date_sk": values})).to_pylist()


def assert_keeps_every_key(data: DynamicFilteringData, count: int) -> None:
    """Every partition value that is a key is kept, whatever its column type."""
    keys = [3 * i for i in range(count)]
    assert all(kept(data, pa.array(keys, pa.int32())))
    assert all(kept(data, pa.array(keys, pa.int64())))
    assert all(kept(data, pa.array([f"{key:03d}" for key in keys])))


def test_exact_when_the_keys_fit_max_rows(spark):
    data = dynsource.collect_data(dimension(spark, 20), KEY, max_rows=20)
    assert data.kind == "exact" and len(data) == 20 and data.fields == (("ss_sold_date_sk", "int"),)
    assert kept(data, pa.array(range(60), pa.int32())) == [value % 3 == 0 for value in range(60)]


@pytest.mark.parametrize("rows", [40, 400])  # deduplicated by Arrow in the driver, and by Spark's distinct()
def test_duplicate_keys_count_once_towards_max_rows(spark, rows):
    repeated = spark.range(0, rows, 1, 2).selectExpr("CAST(id % 20 * 3 AS INT) AS d_date_sk")
    data = dynsource.collect_data(repeated, KEY, max_rows=100)
    assert data.kind == "exact" and sorted(data.table.column(0).to_pylist()) == [3 * i for i in range(20)]


def test_bloom_past_max_rows_equals_one_built_from_all_keys(spark, monkeypatch):
    monkeypatch.setattr(collector, "_CHUNK_BYTES", 16)  # partial filters merged from several chunks
    data = dynsource.collect_data(dimension(spark, 500, partitions=4), KEY, max_rows=100)
    assert data.kind == "bloom" and len(data) == 500 and data.fpp == 0.01
    assert data.size_bytes == bloom_size_bytes(500, 0.01) > 16
    keys = pa.table({"ss_sold_date_sk": pa.array(range(0, 1500, 3), pa.int32())})
    assert data == DynamicFilteringData.from_table(data.fields, keys, kind="bloom")
    assert_keeps_every_key(data, 500)
    others = [value for value in range(1500) if value % 3]
    assert sum(kept(data, pa.array(others, pa.int32()))) < 0.05 * len(others)


def test_bloom_built_by_spark_encodes_keys_as_probes_do(spark):
    """Keys of every type hash the same from Spark's Arrow batches as from field-typed values."""
    dim = spark.sql("""
        SELECT CAST(id AS STRING) AS s, CAST(CAST(id AS STRING) AS BINARY) AS b, id % 2 = 0 AS flag,
               DATE_ADD(DATE'2020-01-01', CAST(id AS INT)) AS d,
               TIMESTAMP'2020-01-01 10:00:00' + MAKE_INTERVAL(0, 0, 0, CAST(id AS INT)) AS t,
               TIMESTAMP_NTZ'2020-01-01 10:00:00' + MAKE_INTERVAL(0, 0, 0, CAST(id AS INT)) AS local,
               CAST(id / 4 AS DECIMAL(10, 2)) AS m,
               CASE id WHEN 0 THEN -0.0D WHEN 1 THEN CAST('NaN' AS DOUBLE) ELSE id / 8 END AS x
        FROM range(30)
    """)
    keys = {column: column for column in dim.columns}
    data = dynsource.collect_data(dim, keys, kinds=("bloom",))
    assert data.fields == (
        ("s", "string"), ("b", "binary"), ("flag", "boolean"), ("d", "date"), ("t", "timestamp"),
        ("local", "timestamp_ntz"), ("m", "decimal(10,2)"), ("x", "double"),
    )
    assert data == DynamicFilteringData.from_table(data.fields, dim.toArrow(), kind="bloom")
    assert all(data.matching_mask(dim.toArrow()).to_pylist())


def test_bloom_false_positive_rate_is_an_argument(spark):
    data = dynsource.collect_data(dimension(spark, 50), KEY, max_rows=10, fpp=0.25)
    assert data.kind == "bloom" and data.fpp == 0.25 and data.size_bytes == bloom_size_bytes(50, 0.25)


def test_range_when_the_bloom_exceeds_max_bytes(spark):
    max_bytes = bloom_size_bytes(200, 0.01) - 1
    data = dynsource.collect_data(dimension(spark, 200), KEY, max_rows=50, max_bytes=max_bytes)
    assert data.kind == "range" and len(data) == 200 and data.bounds == ((0,), (597,))
    assert_keeps_every_key(data, 200)
    assert kept(data, pa.array([-1, 598], pa.int32())) == [False, False]


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({"kinds": ("exact",), "max_rows": 5}, "exact"),
        ({"max_bytes": 0}, "exact"),  # not even the bounds fit
        ({"kinds": ()}, "exact"),
        ({"kinds": ["bloom"]}, "bloom"),
        ({"kinds": {"range"}}, "range"),
        ({"kinds": ("exact", "range"), "max_rows": 5}, "range"),
    ],
)
def test_kinds_choose_the_grades(spark, options, kind):
    data = dynsource.collect_data(dimension(spark, 20), KEY, **options)
    assert data.kind == kind
    if kind == "exact":
        assert data.exceed_threshold and not data.is_filtering and len(data) == 0
    else:
        assert data.is_filtering and len(data) == 20
        assert_keeps_every_key(data, 20)


@pytest.mark.parametrize("kinds", [("exact",), ("bloom",), ("range",)])
def test_an_empty_dimension_matches_nothing(spark, kinds):
    data = dynsource.collect_data(dimension(spark, 0), KEY, kinds=kinds)
    assert data.kind == kinds[0] and data.is_filtering and len(data) == 0
    assert kept(data, pa.array([0, 3, None], pa.int32())) == [False, False, False]


@pytest.mark.parametrize("kinds", [("exact",), ("bloom",), ("range",)])
def test_all_null_keys_match_only_null_safe(spark, kinds):
    nulls = spark.sql("SELECT CAST(NULL AS INT) AS d_date_sk FROM range(3)")
    plain = dynsource.collect_data(nulls, KEY, kinds=kinds)
    safe = dynsource.collect_data(nulls, KEY, kinds=kinds, null_safe=True)
    assert (len(plain), len(safe)) == (0, 1) and plain.kind == safe.kind == kinds[0]
    assert kept(plain, pa.array([None, 0], pa.int32())) == [False, False]
    assert kept(safe, pa.array([None, 0], pa.int32())) == [True, False]


def test_several_fields_cast_to_the_fact_types(spark):
    dim = spark.sql("SELECT CAST(id % 4 AS BIGINT) AS y, CAST(id AS STRING) AS m FROM range(40)")
    keys = {"year": "y", "month": "m"}
    bloom = dynsource.collect_data(dim, keys, types={"year": "int", "month": "int"}, max_rows=10)
    span = dynsource.collect_data(dim, keys, types={"year": "int", "month": "int"}, kinds=("range",))
    assert bloom.fields == span.fields == (("year", "int"), ("month", "int"))
    assert span.bounds == ((0, 0), (3, 39))
    # As the enumerator asks: the year level alone, then year and month (partition values as strings).
    years = pa.table({"year": ["0", "3", "4"]})
    both = pa.table({"year": ["1", "1", "2", "5"], "month": ["05", "6", "6", "6"]})
    assert bloom.matching_mask(years).to_pylist() == [True, True, True]  # a Bloom filter needs every field
    assert span.matching_mask(years).to_pylist() == [True, True, False]
    assert bloom.matching_mask(both).to_pylist()[:3] == [True, False, True]
    assert span.matching_mask(both).to_pylist() == [True, True, True, False]


def test_collect_publishes_the_graded_payload(spark):
    handle = dynsource.collect(dimension(spark, 30), KEY, max_rows=10)
    data = dynsource.resolve(handle)
    assert data.kind == "bloom" and len(data) == 30
    assert_keeps_every_key(data, 30)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kinds": ("exact", "cuckoo")}, r"kinds must be a collection of \['exact', 'bloom', 'range'\]"),
        ({"kinds": "exact"}, "kinds must be a collection"),
        ({"fpp": 1.5}, r"fpp\) is a number in \(0, 1\)"),
        ({"max_rows": -1}, "must not be negative"),
    ],
)
def test_bad_arguments_are_rejected(spark, options, message):
    with pytest.raises(ValueError, match=message):
        dynsource.collect_data(dimension(spark, 3), KEY, **options)


def test_keys_of_rows_in_the_driver_equal_sparks_where_spark_cannot_differ(spark):
    # A composite key; a bigint column for an int field, its keys past the int range dropped as try_cast does.
    rows = pa.table({"d_date_sk": pa.array([3, 3, None, 9, 9, 2**40], pa.int64()),
                     "d_moy": ["1", "1", "2", None, "5", "5"], "d_year": [2000, 2000, 2000, 2001, 2001, 2001]})
    column_types = {"d_date_sk": "bigint", "d_moy": "string", "d_year": "bigint"}
    keys, types = {"ss_sold_date_sk": "d_date_sk", "ss_moy": "d_moy"}, {"ss_sold_date_sk": "int", "ss_moy": "string"}
    probe = pa.table({"ss_sold_date_sk": pa.array([3, 9, 9, None, 4, 0], pa.int32()),
                      "ss_moy": ["1", "5", None, "2", "1", "5"]})
    for null_safe in (False, True):
        held = collector.exact_in_driver(rows, column_types, keys, types, null_safe=null_safe)
        by_spark = dynsource.collect_data(spark.createDataFrame(rows), keys, types=types, null_safe=null_safe)
        assert held.fields == by_spark.fields and held.kind == by_spark.kind == "exact"
        assert held.matching_mask(probe).to_pylist() == by_spark.matching_mask(probe).to_pylist()
        assert len(held) == len(by_spark) == (4 if null_safe else 2)


@pytest.mark.parametrize(("column_type", "fact_type", "limit"), [
    ("string", "int", 10),  # a cast: Spark's try_cast decides which keys fit
    ("double", "double", 10),  # Spark groups -0.0 with 0.0
    ("int", "int", 1),  # more keys than max_rows: a Bloom filter or bounds, built by Spark
])
def test_keys_of_rows_in_the_driver_are_left_to_spark_where_it_could_differ(column_type, fact_type, limit):
    rows = pa.table({"d_date_sk": [1, 2, 3]})
    assert collector.exact_in_driver(rows, {"d_date_sk": column_type}, KEY, {"ss_sold_date_sk": fact_type},
                                     max_rows=limit) is None
