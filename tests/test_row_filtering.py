"""Row-group skipping and row filtering by filter fields that are data columns (issue 3 item 2)."""

from __future__ import annotations

import shutil
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.filtering import DynamicFilteringData
from dynsource.scan import report, rowfilter, taskfigures
from dynsource.scan.options import ScanOptions
from tests.helpers import read, rows

# --- data -------------------------------------------------------------------------------------------


def write_fact(directory: Path, keys: list, files: int = 2, row_group_size: int = 10) -> Path:
    """``files`` Parquet files sharing ``keys`` in order, ``row_group_size`` rows per row group."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = len(keys) // files
    for number in range(files):
        chunk = keys[number * per_file:(number + 1) * per_file]
        values = list(range(number * per_file, (number + 1) * per_file))
        table = pa.table({"v": pa.array(values, pa.int64()), "k": pa.array(chunk, pa.int64())})
        pq.write_table(table, directory / f"part-{number}.parquet", row_group_size=row_group_size)
    return directory


@pytest.fixture(scope="module")
def fact(tmp_path_factory) -> Path:
    # 2 files x 5 row groups of 10 rows; row group g holds the keys 5g..5g+4, each twice.
    return write_fact(tmp_path_factory.mktemp("fact"), [i // 2 for i in range(100)])


def keys_frame(spark, keys, ddl="k bigint"):
    return spark.createDataFrame([(key,) for key in keys], ddl)


# --- Spark: rows equal the join, figures counted ----------------------------------------------------


@pytest.mark.parametrize("split", [{}, {"maxPartitionBytes": "600", "openCostInBytes": "1"}], ids=["files", "splits"])
def test_rows_equal_the_inner_join_and_row_groups_are_skipped(spark, fact, split):
    dim = keys_frame(spark, [2, 37])  # in row group 0 of part-0 and row group 2 of part-1
    handle = dynsource.collect(dim, {"k": "k"})
    fact_df = read(spark, fact, dynamicFilter=handle, **split)
    assert rows(fact_df.join(dim, "k")) == rows(spark.read.parquet(str(fact)).join(dim, "k"))
    assert sorted(r.k for r in fact_df.collect()) == [2, 2, 37, 37]
    scan = dynsource.scan_report(handle)
    assert scan.data_columns == ("k",) and scan.row_filtering
    assert (scan.row_groups_total, scan.row_groups_skipped) == (10, 8)
    assert (scan.rows_read, scan.rows_filtered) == (20, 16)
    assert scan.tasks_reported == scan.input_partitions
    if split:
        assert scan.input_partitions > 2  # files were cut into splits, each row group counted once


def test_multi_field_filter_on_a_partition_column_and_a_data_column(spark, tmp_path):
    for p in range(3):
        write_fact(tmp_path / f"p={p}", list(range(40)), files=1)  # 4 row groups: keys 0-9, ..., 30-39
    dim = spark.createDataFrame([(0, 3), (1, 30)], "p int, k bigint")
    handle = dynsource.collect(dim, {"p": "p", "k": "k"})
    fact_df = read(spark, tmp_path, dynamicFilter=handle)
    assert rows(fact_df.join(dim, ["p", "k"])) == rows(spark.read.parquet(str(tmp_path)).join(dim, ["p", "k"]))
    assert sorted((r.p, r.k) for r in fact_df.collect()) == [(0, 3), (1, 30)]
    scan = dynsource.scan_report(handle)
    assert (scan.partitions_kept, scan.partitions_total) == (2, 3)
    # Row groups are checked column by column: keys 3 and 30 keep the first and last row group of each partition.
    assert (scan.row_groups_total, scan.row_groups_skipped) == (8, 4)
    assert (scan.rows_read, scan.rows_filtered) == (40, 38)  # rows are checked on (p, k) together


@pytest.fixture(scope="module")
def fact_with_nulls(tmp_path_factory) -> Path:
    # One file: an all-null row group, then keys 0-9 with every third one null.
    keys = [None] * 10 + [None if i % 3 == 0 else i for i in range(10)]
    return write_fact(tmp_path_factory.mktemp("nulls"), keys, files=1)


def test_null_keys_never_match_an_exact_filter(spark, fact_with_nulls):
    handle = dynsource.publish(DynamicFilteringData([("k", "bigint")], [(1,), (None,)]))
    fact_df = read(spark, fact_with_nulls, dynamicFilter=handle)
    dim = keys_frame(spark, [1, None])
    native = spark.read.parquet(str(fact_with_nulls))
    assert rows(fact_df.join(dim, "k")) == rows(native.join(dim, "k"))
    assert [r.k for r in fact_df.collect()] == [1]
    scan = dynsource.scan_report(handle)
    assert (scan.row_groups_total, scan.row_groups_skipped) == (2, 1)  # the all-null row group
    assert (scan.rows_read, scan.rows_filtered) == (10, 9)


def test_null_safe_filter_keeps_null_keys(spark, fact_with_nulls):
    handle = dynsource.publish(DynamicFilteringData([("k", "bigint")], [(1,), (None,)], null_safe=True))
    fact_df = read(spark, fact_with_nulls, dynamicFilter=handle)
    dim = keys_frame(spark, [1, None]).withColumnRenamed("k", "dk")
    native = spark.read.parquet(str(fact_with_nulls))
    assert rows(fact_df.join(dim, fact_df.k.eqNullSafe(dim.dk))) == rows(native.join(dim, native.k.eqNullSafe(dim.dk)))
    assert sorted(r.k for r in fact_df.collect() if r.k is not None) == [1]
    scan = dynsource.scan_report(handle)
    assert (scan.row_groups_skipped, scan.rows_read, scan.rows_filtered) == (0, 20, 5)  # 14 nulls and a 1 kept


def test_above_row_filter_max_keys_only_row_groups_are_skipped(spark, fact):
    dim = keys_frame(spark, [2, 37])
    handle = dynsource.collect(dim, {"k": "k"})
    fact_df = read(spark, fact, dynamicFilter=handle, rowFilterMaxKeys="1")
    assert fact_df.count() == 20  # every row of the two row groups that may match
    assert rows(fact_df.join(dim, "k")) == rows(spark.read.parquet(str(fact)).join(dim, "k"))
    scan = dynsource.scan_report(handle)
    assert not scan.row_filtering
    assert (scan.row_groups_skipped, scan.rows_read, scan.rows_filtered) == (8, 20, 0)


def test_read_tasks_never_open_the_filter_store(spark, fact, tmp_path):
    # A second action on the same DataFrame reuses the planned partitions without planning again: its read
    # tasks filter rows although the store is gone, because the filter travels inside each InputPartition.
    store = tmp_path / "store"
    dim = keys_frame(spark, [2, 37])
    handle = dynsource.collect(dim, {"k": "k"}, store=str(store))
    fact_df = read(spark, fact, dynamicFilter=handle, filterStore=str(store))
    assert sorted(r.k for r in fact_df.collect()) == [2, 2, 37, 37]
    saved_reports = tmp_path / "saved_reports"
    shutil.copytree(store / "reports" / handle, saved_reports)
    shutil.rmtree(store)
    assert sorted(r.k for r in fact_df.collect()) == [2, 2, 37, 37]
    assert not store.exists()  # no task wrote figures, leases or anything else there
    shutil.copytree(saved_reports, store / "reports" / handle)
    scan = dynsource.scan_report(handle, str(store))
    assert scan.tasks_reported == scan.input_partitions and scan.row_filtering_tasks == scan.input_partitions
    assert (scan.rows_read, scan.rows_filtered) == (20, 16)  # replaced by the second action, not added


def test_filter_over_the_task_cap_skips_row_groups_by_its_bounds(spark, fact):
    dim = keys_frame(spark, [2, 3, 4])  # all in row group 0 of part-0 and of nothing else
    handle = dynsource.collect(dim, {"k": "k"})
    fact_df = read(spark, fact, dynamicFilter=handle, taskFilterMaxBytes="100")
    assert rows(fact_df.join(dim, "k")) == rows(spark.read.parquet(str(fact)).join(dim, "k"))
    assert fact_df.count() == 10  # the whole row group: bounds do not filter rows
    scan = dynsource.scan_report(handle)
    assert not scan.row_filtering and "over option 'taskFilterMaxBytes' (100)" in scan.fallback_reason
    assert scan.filtering and (scan.row_groups_skipped, scan.rows_read, scan.rows_filtered) == (9, 10, 0)


@pytest.mark.parametrize(
    ("schema", "fields", "message"),
    [
        (None, [("k", "bigint"), ("nope", "int")], r"\['nope'\] are neither partition columns nor data columns"
         r".*its partition columns are \[\] and its data columns are \['v', 'k'\]"),
        ("v bigint", [("k", "bigint")], r"\['k'\] are neither partition columns nor data columns"
         r".*its partition columns are \[\] and its data columns are \['v'\]"),
    ],
    ids=["table-schema", "schema-without-the-column"],
)
def test_field_that_is_neither_kind_of_column_is_a_clear_error(spark, fact, schema, fields, message):
    handle = dynsource.publish(DynamicFilteringData(fields, [(1,) * len(fields)]))
    reader = spark.read.format("dynsource") if schema is None else spark.read.format("dynsource").schema(schema)
    df = reader.option("path", str(fact)).option("dynamicFilter", handle).option("dynamicFilterOnError", "fail").load()
    with pytest.raises(Exception, match=message):
        df.count()


# --- planning (no Spark) ----------------------------------------------------------------------------


def plan(data, partition_columns=(), column_types=None, max_keys=2000, on_error="fallback", max_bytes=1 << 18):
    column_types = column_types or {"v": "bigint", "k": "bigint", "p": "int"}
    return rowfilter.plan_row_filter(
        data, partition_columns, column_types, handle="dynf-" + "0" * 32, scan_id="s",
        max_keys=max_keys, max_bytes=max_bytes, on_error=on_error,
    )


def test_plan_only_for_data_column_fields():
    assert plan(DynamicFilteringData([("p", "int")], [(1,)]), partition_columns=["p"]) == (None, None)
    spec, reason = plan(DynamicFilteringData([("P", "int"), ("K", "bigint")], [(1, 2)]), partition_columns=["p"])
    assert reason is None
    assert spec.data_columns == (("k", "bigint"),) and spec.mask_columns == ("p", "k") and spec.filter_rows


def test_plan_threshold_and_exceeded_data():
    data = DynamicFilteringData([("k", "bigint")], [(1,), (2,)])
    assert plan(data, max_keys=2)[0].filter_rows
    assert not plan(data, max_keys=1)[0].filter_rows
    assert plan(DynamicFilteringData([("k", "bigint")], exceed_threshold=True)) == (None, None)


def test_plan_with_an_incomparable_data_column_falls_back_or_fails():
    data = DynamicFilteringData([("k", "boolean")], [(True,)])
    spec, reason = plan(data, column_types={"k": "date"})
    assert spec is None and "data column 'k'" in reason
    with pytest.raises(TypeError):
        plan(data, column_types={"k": "date"}, on_error="fail")


def test_row_filter_max_keys_option():
    assert ScanOptions.parse({"path": "t"}).row_filter_max_keys == 2000
    assert ScanOptions.parse({"path": "t", "rowfiltermaxkeys": "0"}).row_filter_max_keys == 0
    with pytest.raises(ValueError, match="Option 'rowFilterMaxKeys'"):
        ScanOptions.parse({"path": "t", "rowFilterMaxKeys": "-1"})


# --- the row filter of one task (no Spark) ----------------------------------------------------------


def row_filter(data, columns=(("k", "bigint"),), mask_columns=("k",), filter_rows=True) -> rowfilter.RowFilter:
    spec = rowfilter.RowFilterSpec("dynf-" + "0" * 32, "s", b"", tuple(columns), tuple(mask_columns),
                                   (0,) if filter_rows else ())
    return rowfilter.RowFilter(data, spec)


def metadata(tmp_path: Path, table: pa.Table, row_group_size: int = 10) -> pq.FileMetaData:
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=row_group_size)
    return pq.ParquetFile(tmp_path / "f.parquet").metadata


def key_table(values, arrow: pa.DataType | None = None) -> pa.Table:
    return pa.table({"k": pa.array(values, arrow or pa.int64())})


def test_row_groups_skipped_by_statistics(tmp_path):
    meta = metadata(tmp_path, key_table(range(50)))
    filtered = row_filter(DynamicFilteringData([("k", "bigint")], [(3,), (41,), (None,)]))
    assert filtered.keep_row_groups(meta, range(5)) == [0, 4]
    assert filtered.keep_row_groups(meta, [1, 2]) == []
    assert (filtered.counts.row_groups_total, filtered.counts.row_groups_skipped) == (7, 5)


def test_int_column_against_decimal_keys(tmp_path):
    meta = metadata(tmp_path, key_table(range(30), pa.int32()))
    data = DynamicFilteringData([("k", "decimal(10,2)")], [(Decimal("12.00"),), (Decimal("25.50"),)])
    assert row_filter(data, columns=[("k", "int")]).keep_row_groups(meta, range(3)) == [1, 2]


def test_float_column_with_nan_keys_is_not_skipped(tmp_path):
    # Parquet statistics leave NaN out, and NaN joins NaN in Spark.
    meta = metadata(tmp_path, key_table([1.0, float("nan")] * 5, pa.float64()))
    data = DynamicFilteringData([("k", "double")], [(float("nan"),)])
    assert row_filter(data, columns=[("k", "double")]).keep_row_groups(meta, [0]) == [0]


def test_range_payload_skips_and_filters(tmp_path):
    if not hasattr(DynamicFilteringData, "from_bounds"):
        pytest.skip("range payloads are not in this filtering module")
    meta = metadata(tmp_path, key_table(range(50)))
    filtered = row_filter(DynamicFilteringData.from_bounds([("k", "bigint")], [12], [18], key_count=3))
    assert filtered.keep_row_groups(meta, range(5)) == [1]
    batch = pa.RecordBatch.from_pydict({"k": pa.array(range(10, 20), pa.int64())})
    assert filtered.apply(batch).column("k").to_pylist() == list(range(12, 19))


def test_null_row_groups(tmp_path):
    meta = metadata(tmp_path, key_table([None] * 10 + [5] * 10))
    exact = DynamicFilteringData([("k", "bigint")], [(5,), (None,)])
    assert row_filter(exact).keep_row_groups(meta, range(2)) == [1]
    null_safe = DynamicFilteringData([("k", "bigint")], [(5,), (None,)], null_safe=True)
    assert row_filter(null_safe).keep_row_groups(meta, range(2)) == [0, 1]


def test_statistics_of_another_type_than_the_read_schema_do_not_skip(tmp_path):
    # The file stores strings that the read schema casts to bigint: string order is not numeric order.
    meta = metadata(tmp_path, pa.table({"k": ["10", "9"]}))
    assert row_filter(DynamicFilteringData([("k", "bigint")], [(5,)])).keep_row_groups(meta, [0]) == [0]


def test_top_level_column_found_past_nested_columns(tmp_path):
    table = pa.table({
        "s": pa.array([{"a": 1, "b": [1]}] * 20), "m": pa.array([[("x", 1)]] * 20, pa.map_(pa.string(), pa.int64())),
        "k": pa.array(range(20), pa.int64()),
    })
    meta = metadata(tmp_path, table)
    assert row_filter(DynamicFilteringData([("k", "bigint")], [(15,)])).keep_row_groups(meta, range(2)) == [1]


def test_rows_filtered_and_counted_vectorized():
    data = DynamicFilteringData([("p", "int"), ("k", "bigint")], [(1, 2), (2, 3)])
    batch = pa.RecordBatch.from_pydict({
        "v": pa.array(range(6), pa.int64()), "k": pa.array([2, 3, 2, 3, None, 2], pa.int64()),
        "p": pa.array([1, 1, 2, 2, 1, 1], pa.int32()),
    })
    filtered = row_filter(data, mask_columns=("p", "k"))
    assert filtered.apply(batch).column("v").to_pylist() == [0, 3, 5]
    assert (filtered.counts.rows_read, filtered.counts.rows_filtered) == (6, 3)
    unfiltered = row_filter(data, mask_columns=("p", "k"), filter_rows=False)
    assert unfiltered.apply(batch).num_rows == 6 and unfiltered.counts.rows_filtered == 0


def test_damaged_task_payload_filters_nothing():
    payload = bytearray(DynamicFilteringData([("k", "bigint")], [(1,)]).to_bytes())
    payload[-1] ^= 1
    spec = rowfilter.RowFilterSpec("dynf-" + "1" * 32, "s", bytes(payload), (("k", "bigint"),), ("k",), (0,))
    assert rowfilter.open_row_filter(spec) is None


def test_task_payload_is_the_planned_filter_projected_on_the_compared_columns():
    data = DynamicFilteringData([("k", "bigint"), ("x", "int")], [(1, 10), (1, 11), (2, 12)])
    spec, reason = plan(data, column_types={"k": "bigint", "v": "bigint"})
    shipped = DynamicFilteringData.from_bytes(spec.payload)
    assert reason is None and spec.mask_columns == ("k",)
    assert shipped.fields == (("k", "bigint"),) and sorted(shipped.table.column("k").to_pylist()) == [1, 2]
    assert rowfilter.open_row_filter(spec).data == shipped


def test_payload_over_the_cap_travels_as_bounds_without_row_filtering():
    data = DynamicFilteringData([("k", "bigint")], [(value,) for value in range(0, 3000, 3)])
    spec, reason = plan(data, max_bytes=1024)
    shipped = DynamicFilteringData.from_bytes(spec.payload)
    assert shipped.kind == "range" and shipped.bounds == ((0,), (2997,)) and not spec.filter_rows
    assert "over option 'taskFilterMaxBytes' (1024)" in reason and "filter no rows" in reason
    assert len(data.to_bytes()) > 1024 >= len(spec.payload)


def test_each_part_is_capped_on_its_own_and_the_others_still_filter_rows(tmp_path):
    # Three dimensions: dates on the partition column p, items on k (too many keys for the cap), stores on v.
    dates = DynamicFilteringData([("p", "int")], [(1,)])
    items = DynamicFilteringData([("k", "bigint")], [(value,) for value in range(20, 3020, 3)])
    stores = DynamicFilteringData([("v", "bigint")], [(0,), (7,), (40,)])
    spec, reason = plan(DynamicFilteringData.all_of([dates, items, stores]), partition_columns=["p"], max_bytes=1024)
    assert spec.uses == ("", rowfilter.BOUNDS, rowfilter.ROWS) and spec.row_parts == (1,)
    assert "task filter of k is" in reason and "filter no rows by it" in reason and spec.filter_rows
    shipped = DynamicFilteringData.from_bytes(spec.payload)
    assert [(part.kind, part.field_names) for part in shipped.parts] == [("range", ("k",)), ("exact", ("v",))]
    task = rowfilter.open_row_filter(spec)
    batch = pa.RecordBatch.from_pydict({"v": pa.array([0, 7, 8, 40, 40], pa.int64()),
                                        "k": pa.array([20, 25, 26, 3019, 5000], pa.int64()),
                                        "p": pa.array([1] * 5, pa.int32())})
    # k's bounds do not filter rows: only v's keys do. Row groups are skipped by either.
    assert task.apply(batch).column("v").to_pylist() == [0, 7, 40, 40]
    meta = metadata(tmp_path, pa.table({"v": pa.array([0] * 10 + [1] * 10, pa.int64()),
                                        "k": pa.array(list(range(10)) + list(range(100, 110)), pa.int64())}))
    assert task.keep_row_groups(meta, [0, 1]) == []  # group 0: k below the bounds; group 1: no store v=1


def test_bloom_payload_over_the_cap_does_not_travel():
    keys = pa.table({"k": pa.array(range(5000), pa.int64())})
    bloom = DynamicFilteringData.from_table([("k", "bigint")], keys, kind="bloom")
    spec, reason = plan(bloom, max_bytes=1024)
    assert spec is None and "neither skip row groups nor filter rows" in reason
    assert plan(bloom)[0] is not None


def test_figures_channel_replaces_a_task_figures_and_keeps_the_newest(monkeypatch):
    param = taskfigures._FiguresParam()
    total = param.zero({})
    param.addInPlace(total, {("old", 0): (100, 100, 100, 100, 1)})
    param.addInPlace(total, {("new", 0): (5, 4, 10, 8, 1), ("new", 1): (5, 4, 10, 8, 1)})
    param.addInPlace(total, {("new", 1): (5, 4, 10, 8, 0)})  # a retried task replaces its figures
    assert total[("new", 1)] == (5, 4, 10, 8, 0) and len(total) == 3
    monkeypatch.setattr(taskfigures, "MAX_TASKS_KEPT", 2)
    param.addInPlace(total, {("newest", 0): (1, 1, 1, 1, 1)})
    assert list(total) == [("new", 1), ("newest", 0)]


def test_report_sums_the_tasks_of_the_latest_scan(spark, tmp_path):
    handle, store = "dynf-" + "2" * 32, str(tmp_path)
    channel = taskfigures.channel(spark)
    plan_fields = dict(path="t", payload_kind="exact", keys=2, payload_bytes=100, filtering=True,
                       partitions_total=1, partitions_kept=1,
                       files_kept=2, bytes_kept=10, listings=1, input_partitions=2, planning_ms=1.0)
    channel.record("old", 0, taskfigures.ReadCounts(100, 100, 100, 100, 1))
    scan_id = uuid.uuid4().hex
    report.save(report.ScanReport(handle=handle, scan_id=scan_id, data_columns=("k",), figures_owner=channel.owner,
                                  **plan_fields), store)
    assert dynsource.scan_report(handle, store).tasks_reported == 0
    channel.record(scan_id, 0, taskfigures.ReadCounts(5, 4, 10, 8, 1))
    channel.record(scan_id, 1, taskfigures.ReadCounts(5, 4, 10, 8, 0))
    channel.record(scan_id, 1, taskfigures.ReadCounts(5, 4, 10, 8, 1))  # a retried task replaces its figures
    scan = dynsource.scan_report(handle, store)
    assert scan.data_columns == ("k",) and scan.tasks_reported == 2 and scan.task_figures_unavailable is None
    assert (scan.row_groups_total, scan.row_groups_skipped, scan.rows_read, scan.rows_filtered) == (10, 8, 20, 16)
    assert scan.row_filtering_tasks == 2


@pytest.mark.parametrize("owner, unavailable, says", [
    ("elsewhere:1:7", None, "they are counted only in the driver that ran the query (process elsewhere:1:7), not "
                            "in this process: ask dynsource.scan_report() in that driver"),
    (None, "Spark Connect has no channel", "Spark Connect has no channel"),
])
def test_report_without_task_figures_says_why(tmp_path, owner, unavailable, says):
    handle, store = "dynf-" + "3" * 32, str(tmp_path)
    report.save(report.ScanReport(
        handle=handle, path="t", payload_kind="exact", keys=2, payload_bytes=100, filtering=True, partitions_total=1,
        partitions_kept=1, files_kept=2, bytes_kept=10, listings=1, input_partitions=2, planning_ms=1.0,
        scan_id="s", data_columns=("k",), row_filtering=True, figures_owner=owner,
        task_figures_unavailable=unavailable), store)
    scan = dynsource.scan_report(handle, store)
    assert says in scan.task_figures_unavailable
    assert f"row groups and rows (by data column(s) ['k']): not counted: {says}" in str(scan)
    assert (scan.tasks_reported, scan.rows_read, scan.rows_filtered, scan.row_filtering_tasks) == (None,) * 4
