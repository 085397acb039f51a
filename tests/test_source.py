"""The dynsource data source end to end in a real local SparkSession, on real files."""

from __future__ import annotations

import datetime
import decimal
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.demo import QUERY, write_star_schema
from tests.helpers import read, rows


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    return write_star_schema(tmp_path_factory.mktemp("star"), sales_rows=20_000)


def star_join(spark, store_sales, date_dim_path):
    spark.read.parquet(date_dim_path).createOrReplaceTempView("date_dim")
    store_sales.createOrReplaceTempView("store_sales")
    try:
        return spark.sql(QUERY).collect()
    finally:  # a view left behind would shadow the tables other modules register under these names
        spark.catalog.dropTempView("date_dim")
        spark.catalog.dropTempView("store_sales")


def december_2000(spark, date_dim_path):
    return spark.read.parquet(date_dim_path).where("d_year = 2000 AND d_moy = 12").select("d_date_sk")


def test_schema_equals_spark_read_parquet(spark, star):
    _, store_sales = star
    assert read(spark, store_sales).schema == spark.read.parquet(store_sales).schema


def test_schema_with_many_types_equals_spark(spark, tmp_path):
    table = pa.table({
        "i": pa.array([1, 2], pa.int32()), "l": pa.array([1, 2], pa.int64()), "s": ["a", "b"],
        "d": [datetime.date(2024, 1, 1), None], "f": [1.5, 2.5], "b": [True, False],
        "dec": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(9, 2)),
        "ts": pa.array([datetime.datetime(2024, 1, 1, 12)] * 2, pa.timestamp("us", tz="UTC")),
        "p_int": [1, 2], "p_str": ["x y", "a/b"], "p_date": ["2024-01-01", "2024-2-3"],
    })
    pq.write_to_dataset(table, tmp_path, partition_cols=["p_int", "p_str", "p_date"])
    ours, native = read(spark, tmp_path), spark.read.parquet(str(tmp_path))
    assert ours.schema == native.schema
    assert rows(ours) == rows(native)


def test_spark_written_table_with_int96_timestamps(spark, tmp_path):
    df = spark.sql("SELECT id, timestamp'2024-03-01 10:00:00' + make_interval(0,0,0,0,id) AS ts, id % 3 AS k "
                   "FROM range(30)")
    df.write.partitionBy("k").parquet(str(tmp_path / "t"))
    ours, native = read(spark, tmp_path / "t"), spark.read.parquet(str(tmp_path / "t"))
    assert ours.schema == native.schema
    assert rows(ours) == rows(native)


def test_demo_join_equal_with_and_without_filter_and_native(spark, star):
    date_dim, store_sales = star
    handle = dynsource.collect(december_2000(spark, date_dim), {"ss_sold_date_sk": "d_date_sk"})
    pruned = star_join(spark, read(spark, store_sales, dynamicFilter=handle), date_dim)
    unpruned = star_join(spark, read(spark, store_sales), date_dim)
    native = star_join(spark, spark.read.parquet(store_sales), date_dim)
    assert pruned == unpruned == native
    assert pruned[0][0] > 0
    report = dynsource.scan_report(handle)
    assert (report.partitions_kept, report.partitions_total) == (31, 1827)
    assert report.filtering and report.fallback_reason is None


def test_rows_equal_native_for_the_fact_scan(spark, star):
    _, store_sales = star
    assert rows(read(spark, store_sales)) == rows(spark.read.parquet(store_sales))


def copy_table(source: str, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


@pytest.mark.smoke  # ./test --quick: format("dynsource") with a handle
def test_pruning_proven_by_deleting_non_matching_partitions(spark, star, tmp_path):
    date_dim, store_sales = star
    table = copy_table(store_sales, tmp_path / "store_sales")
    expected = star_join(spark, spark.read.parquet(str(table)), date_dim)
    keys = {r.d_date_sk for r in december_2000(spark, date_dim).collect()}
    for directory in table.iterdir():
        value = directory.name.split("=", 1)[1]
        if not value.isdigit() or int(value) not in keys:
            for data_file in directory.iterdir():
                data_file.write_bytes(b"not parquet")  # a scan of a pruned partition now fails loudly
    handle = dynsource.collect(december_2000(spark, date_dim), {"ss_sold_date_sk": "d_date_sk"})
    # The schema is given, so that inferring it does not open a (now corrupt) footer; the scan itself
    # enumerates, plans and reads with the corrupt files in place.
    pruned = (spark.read.format("dynsource").schema(spark.read.parquet(store_sales).schema)
              .option("path", str(table)).option("dynamicFilter", handle).load())
    assert star_join(spark, pruned, date_dim) == expected
    with pytest.raises(Exception, match=r"not parquet|Parquet|magic"):
        read(spark, table).count()


def test_collector_exceed_path_reads_everything(spark, star):
    date_dim, store_sales = star
    handle = dynsource.collect(december_2000(spark, date_dim), {"ss_sold_date_sk": "d_date_sk"}, max_rows=5,
                               kinds=("exact",))
    data = dynsource.resolve(handle)
    assert data.exceed_threshold and not data.is_filtering and len(data) == 0
    assert read(spark, store_sales, dynamicFilter=handle).count() == spark.read.parquet(store_sales).count()
    report = dynsource.scan_report(handle)
    assert report.partitions_kept == report.partitions_total == 1827
    assert "exceeded" in report.fallback_reason


def test_collector_casts_keys_and_drops_nulls(spark):
    dim = spark.sql("SELECT CAST(id AS BIGINT) AS k FROM range(3) UNION ALL SELECT NULL")
    data = dynsource.collect_data(dim, {"p": "k"}, types={"p": "int"})
    assert data.fields == (("p", "int"),)
    assert sorted(data.table.column("p").to_pylist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="'nope'"):
        dynsource.collect(dim, {"p": "nope"})


def test_handle_published_here_resolves_in_the_planning_worker(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": list(range(6)), "k": [0, 0, 1, 1, 2, 2]}), tmp_path, partition_cols=["k"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(2,)]))
    assert sorted(r.v for r in read(spark, tmp_path, dynamicFilter=handle).collect()) == [4, 5]


def test_multi_column_partitions_and_multi_field_filter(spark, tmp_path):
    table = pa.table({"v": list(range(12)), "a": [i % 3 for i in range(12)], "b": [f"s{i % 2}" for i in range(12)]})
    pq.write_to_dataset(table, tmp_path, partition_cols=["a", "b"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("a", "int"), ("b", "string")], [(1, "s1"), (2, "s0")]))
    got = read(spark, tmp_path, dynamicFilter=handle)
    expected = spark.read.parquet(str(tmp_path)).where("(a = 1 AND b = 's1') OR (a = 2 AND b = 's0')")
    assert rows(got) == rows(expected)
    assert dynsource.scan_report(handle).partitions_kept == 2


def test_zero_kept_partitions_is_an_empty_result(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path, partition_cols=["k"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(99,)]))
    df = read(spark, tmp_path, dynamicFilter=handle)
    assert df.count() == 0 and df.columns == ["v", "k"]


def test_user_schema_reads_only_those_columns(spark, star):
    _, store_sales = star
    df = (spark.read.format("dynsource").schema("ss_sales_price decimal(7,2), ss_sold_date_sk int")
          .option("path", store_sales).load())
    native = spark.read.parquet(store_sales).select("ss_sales_price", "ss_sold_date_sk")
    assert rows(df) == rows(native)


def test_partition_columns_option_overrides_inference(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path, partition_cols=["k"])
    df = read(spark, tmp_path, partitionColumns="k BIGINT")
    assert df.schema["k"].dataType.simpleString() == "bigint"
    assert sorted(r.k for r in df.collect()) == [1, 2]


@pytest.mark.parametrize("fmt", ["parquet", "orc", "csv", "json"])
def test_each_format(spark, tmp_path, fmt):
    import pyarrow.dataset as ds
    from pyarrow import orc

    table = pa.table({"name": ["a", "b", "c", "d"], "qty": [1, 2, 3, 4], "k": [1, 1, 2, 3]})
    for key in (1, 2, 3):
        part = table.filter(pa.compute.equal(table["k"], key)).drop_columns(["k"])
        directory = tmp_path / f"k={key}"
        directory.mkdir()
        if fmt == "json":
            (directory / "part-0.json").write_text("\n".join(
                f'{{"name": "{r["name"]}", "qty": {r["qty"]}}}' for r in part.to_pylist()))
        elif fmt == "orc":
            orc.write_table(part, directory / "part-0.orc")
        else:
            ds.write_dataset(part, directory, format=fmt, basename_template="part-{i}." + fmt)
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(1,), (3,)]))
    got = read(spark, tmp_path, format=fmt, dynamicFilter=handle)
    assert sorted((r.name, r.qty, r.k) for r in got.collect()) == [("a", 1, 1), ("b", 2, 1), ("d", 4, 3)]


def test_unpublished_handle_falls_back_or_fails(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path, partition_cols=["k"])
    missing = "dynf-" + "0" * 32
    assert read(spark, tmp_path, dynamicFilter=missing).count() == 2
    assert "never published" in dynsource.scan_report(missing).fallback_reason
    with pytest.raises(Exception, match="never published"):
        read(spark, tmp_path, dynamicFilter=missing, dynamicFilterOnError="fail").count()


def test_disabled_flag_ignores_the_filter(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path, partition_cols=["k"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(1,)]))
    assert read(spark, tmp_path, dynamicFilter=handle, dynamicFilteringEnabled="false").count() == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": "1"}, r"Unknown option.*bogus.*valid options are"),
        ({"path": ""}, "Option 'path' is required"),
        ({"path": "/no/such/table"}, "'/no/such/table' does not exist"),
        ({"format": "avro"}, "Option 'format'"),
        ({"maxPartitionBytes": "lots"}, "Option 'maxPartitionBytes'"),
        ({"dynamicFilter": "../../etc/passwd"}, "not a dynsource filter handle"),
        ({"partitionColumns": "nope int"}, "Option 'partitionColumns'"),
    ],
)
def test_bad_options_are_clear_errors(spark, star, options, message):
    _, store_sales = star
    options = {"path": store_sales, **options}
    if "dynamicFilter" in options:
        options["dynamicFilterOnError"] = "fail"
    reader = spark.read.format("dynsource")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load().count()


@pytest.mark.parametrize("on_error", ["fallback", "fail"])
@pytest.mark.parametrize("handle", ["dynf-0123abcd", "DataFrame[v: int, k: int]", "dynf-" + "A" * 32])
def test_a_malformed_handle_fails_whatever_dynamic_filter_on_error_says(spark, star, handle, on_error):
    # fallback covers well-formed handles whose filter is unusable; a string that is no handle is a caller's bug.
    _, store_sales = star
    reader = spark.read.format("dynsource").option("path", store_sales).option("dynamicFilterOnError", on_error)
    with pytest.raises(Exception, match=r"is not a dynsource filter handle; expected 'dynf-' followed by 32"):
        reader.option("dynamicFilter", handle).load().count()


def test_missing_path_option(spark):
    with pytest.raises(Exception, match="Option 'path' is required"):
        spark.read.format("dynsource").load().count()


def test_empty_table_is_a_clear_error(spark, tmp_path):
    (tmp_path / "k=1").mkdir()
    with pytest.raises(Exception, match="has no data files"):
        read(spark, tmp_path).count()


def test_schema_naming_a_missing_column_is_a_clear_error(spark, star):
    _, store_sales = star
    df = spark.read.format("dynsource").schema("nope int").option("path", store_sales).load()
    with pytest.raises(Exception, match=r"\['nope'\].*neither partition columns"):
        df.count()


def test_base_path_keeps_the_partition_columns_above_path_as_spark_does(spark, tmp_path):
    table = pa.table({"v": list(range(12)), "a": [i % 2 for i in range(12)], "b": [i % 3 for i in range(12)]})
    pq.write_to_dataset(table, tmp_path, partition_cols=["a", "b"])
    leaf = tmp_path / "a=1" / "b=2"
    file = next(leaf.glob("*.parquet"))
    for path in (tmp_path / "a=1", leaf, file):
        native = spark.read.option("basePath", str(tmp_path)).parquet(str(path))
        ours = read(spark, path, basePath=str(tmp_path))
        assert ours.columns == native.columns == ["v", "a", "b"]
        assert rows(ours) == rows(native) and len(rows(ours)) > 0
    assert read(spark, leaf).columns == spark.read.parquet(str(leaf)).columns == ["v"]  # without it, as Spark
    kept = dynsource.publish(dynsource.DynamicFilteringData([("b", "int")], [(2,)]))
    pruned = dynsource.publish(dynsource.DynamicFilteringData([("a", "int")], [(0,)]))
    assert rows(read(spark, tmp_path / "a=1", basePath=str(tmp_path), dynamicFilter=kept)) == rows(
        spark.read.parquet(str(tmp_path)).where("a = 1 AND b = 2"))
    assert read(spark, leaf, basePath=str(tmp_path), dynamicFilter=pruned).count() == 0
    assert dynsource.scan_report(pruned).pruned_by_column == {"a": 1}


@pytest.mark.parametrize(("base", "message"), [
    ("elsewhere", r"Option 'basePath' = '.*elsewhere' is not a parent directory of option 'path' = '.*b=2'"),
    ("", r"Option 'basePath': directory 'plain' between basePath '.*' and path '.*' is not a partition directory"),
])
def test_a_base_path_that_does_not_lead_to_path_is_a_clear_error(spark, tmp_path, base, message):
    pq.write_to_dataset(pa.table({"v": [1], "b": [2]}), tmp_path / "plain", partition_cols=["b"])
    with pytest.raises(Exception, match=message):
        read(spark, tmp_path / "plain" / "b=2", basePath=str(tmp_path / base)).count()
