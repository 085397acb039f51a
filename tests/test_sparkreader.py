"""Spark's file reader for the scans dynsource plans: which reader ``auto`` picks, and equal rows from both."""

from __future__ import annotations

import datetime as dt
import os
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import dynsource
from dynsource.layout import directories
from dynsource.scan import planner
from dynsource.scan.options import ScanOptions
from dynsource.spark import filereader
from tests.helpers import read, read_by_spark, rows


def write_sales(root) -> str:
    """Two levels (a date and a string with an escape and a null), a data column ``item``."""
    table = pa.table({
        "amount": pa.array([1.5, 2.5, 3.5, 4.5, 5.5, 6.5], pa.float64()),
        "item": pa.array([1, 2, 3, 1, 2, 3], pa.int32()),
        "day": [dt.date(2024, 1, 1), dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 2),
                dt.date(2024, 1, 3), dt.date(2024, 1, 3)],
        "region": ["a/b", "east", "east", None, "a/b", "east"],
    })
    pq.write_to_dataset(table, str(root), partition_cols=["day", "region"])
    return str(root)


def test_auto_picks_spark_for_a_local_parquet_table_and_python_elsewhere(spark, tmp_path):
    root = write_sales(tmp_path / "sales")
    assert filereader.choose(spark, ScanOptions.parse({"path": root}))[0] == "spark"
    assert filereader.choose(spark, ScanOptions.parse({"path": "file://" + root}))[0] == "spark"
    assert filereader.choose(spark, ScanOptions.parse({"path": root, "reader": "python"})) == (
        "python", "option 'reader' is 'python'")
    memory = fsspec.filesystem("memory")
    with memory.open("/sparkreader/k=1/part-0.parquet", "wb") as out:
        pq.write_table(pa.table({"v": [1]}), out)
    reader, why = filereader.choose(spark, ScanOptions.parse({"path": "memory://sparkreader"}))
    assert (reader, why) == ("python", "Spark's Hadoop filesystem cannot open 'memory:///sparkreader'")
    csv = ScanOptions.parse({"path": root, "format": "csv"})
    assert filereader.choose(spark, csv)[0] == "python"


def test_a_forced_spark_reader_spark_cannot_use_is_an_error_naming_the_option(spark):
    with pytest.raises(ValueError, match=r"Option 'reader' = 'spark' cannot be used: Spark's Hadoop filesystem "
                                         r"cannot open 'memory:///nowhere'\. Use reader 'auto' or 'python'\."):
        filereader.choose(spark, ScanOptions.parse({"path": "memory://nowhere", "reader": "spark"}))
    with pytest.raises(ValueError, match=r"Option 'reader' = 'fast' is not valid; expected one of "
                                         r"\['auto', 'spark', 'python'\]"):
        ScanOptions.parse({"path": "/t", "reader": "fast"})


def test_both_readers_give_the_rows_of_spark_read_parquet(spark, tmp_path):
    root = write_sales(tmp_path / "sales")
    parquet = spark.read.parquet(root)
    declared = spark.read.schema("amount DOUBLE, item INT, day STRING, region STRING").parquet(root)
    for options, expected in (({}, parquet), ({"partitionFilter": "region = 'a/b' OR region IS NULL"}, parquet),
                              ({"partitionColumns": "day STRING"}, declared)):
        python, by_spark = read(spark, root, **options), read_by_spark(spark, root, **options)
        assert by_spark.schema == python.schema == expected.schema
        expected = expected.where(options.get("partitionFilter", "true"))
        assert rows(by_spark) == rows(python) == rows(expected)


def test_a_dynamic_filter_on_a_data_column_is_pushed_to_spark_and_reported(spark, tmp_path):
    root = write_sales(tmp_path / "sales")
    handle = dynsource.publish(dynsource.DynamicFilteringData([("item", "int")], [(1,), (3,)]))
    python = rows(read(spark, root, dynamicFilter=handle))  # the Python reader filters the rows too
    by_spark = read_by_spark(spark, root, dynamicFilter=handle)
    assert rows(by_spark) == python and sorted(row.item for row in python) == [1, 1, 3, 3]
    assert "PushedFilters: [In(item, [1,3])]" in _plan(by_spark)
    report = dynsource.scan_report(handle)
    assert report.read_by == "spark" and report.input_partitions is None
    assert "files: 6 (" in str(report) and "read by Spark's file reader" in str(report)
    assert "a predicate pushed to Spark's file reader" in str(report)


def test_a_data_column_filter_past_sparks_parquet_in_threshold_is_pushed_as_its_bounds(spark, tmp_path):
    # Past spark.sql.parquet.pushdown.inFilterThreshold Spark gives Parquet only an IN list's bounds anyway.
    root = write_sales(tmp_path / "sales")
    keys = [(1,), (3,), *((value,) for value in range(100, 120))]
    handle = dynsource.publish(dynsource.DynamicFilteringData([("item", "int")], keys))
    by_spark = read_by_spark(spark, root, dynamicFilter=handle)
    assert sorted(row.item for row in rows(by_spark)) == [1, 1, 2, 2, 3, 3]  # 2 lies within the bounds: kept
    assert "PushedFilters: [IsNotNull(item), GreaterThanOrEqual(item,1), LessThanOrEqual(item,119)]" in _plan(by_spark)
    spark.conf.set("spark.sql.parquet.pushdown.inFilterThreshold", "30")
    try:
        listed = read_by_spark(spark, root, dynamicFilter=handle)
        assert sorted(row.item for row in rows(listed)) == [1, 1, 3, 3] and "In(item, [1,100," in _plan(listed)
    finally:
        spark.conf.unset("spark.sql.parquet.pushdown.inFilterThreshold")


@pytest.mark.smoke  # ./test --quick: dynsource.sql, both readers
def test_dynsource_sql_reads_registered_tables_by_the_chosen_reader(spark, tmp_path, definitions):
    root = write_sales(tmp_path / "sales")
    dynsource.register_table(spark, "reader_auto", path=root, definitions=definitions)
    dynsource.register_table(spark, "reader_python", path=root, definitions=definitions, reader="python")
    spark.read.parquet(root).createOrReplaceTempView("reader_native")
    spark.createDataFrame([(dt.date(2024, 1, 2),), (dt.date(2024, 1, 3),)], "d DATE").createOrReplaceTempView(
        "reader_days")
    query = ("SELECT region, count(*) AS n, sum(amount) AS total FROM {t} JOIN reader_days ON day = d "
             "WHERE d > DATE'2024-01-02' OR region IS NULL GROUP BY region")
    try:
        by_spark = dynsource.sql(spark, query.format(t="reader_auto"))
        python = dynsource.sql(spark, query.format(t="reader_python"))
        assert rows(by_spark) == rows(python) == rows(spark.sql(query.format(t="reader_native")))
        assert "FileScan parquet" in _plan(by_spark) and "BatchEvalPython" not in _plan(by_spark)
        assert "PythonDataSource" not in _plan(by_spark) and "reader_python" not in _plan(by_spark)
        assert "BatchScan" in _plan(python)
        unpruned = dynsource.sql(spark, "SELECT count(*) FROM reader_auto")  # no join, no WHERE: still Spark's
        assert unpruned.collect()[0][0] == 6 and "FileScan parquet" in _plan(unpruned)
    finally:
        for table in ("reader_auto", "reader_python"):
            dynsource.drop_table(spark, table, definitions=definitions)


def test_a_path_spark_reads_as_a_pattern_falls_back_to_the_python_reader(spark, tmp_path, definitions):
    root = tmp_path / "odd"
    for value in ("a*b", "c[1]"):
        (root / f"k={value}").mkdir(parents=True)
        pq.write_table(pa.table({"v": [len(value)]}), root / f"k={value}" / "part-0.parquet")
    dynsource.register_table(spark, "reader_odd", path=str(root), definitions=definitions)
    try:
        df = dynsource.sql(spark, "SELECT k, v FROM reader_odd")
        assert sorted(tuple(row) for row in df.collect()) == [("a*b", 3), ("c[1]", 4)]
        assert "BatchScan" in _plan(df)
        refused = r"Option 'reader' = 'spark' cannot be used: Spark's reader takes data file '.*k=a\*b/"
        with pytest.raises(ValueError, match=refused):
            read_by_spark(spark, root)
    finally:
        dynsource.drop_table(spark, "reader_odd", definitions=definitions)


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_the_dataframe_of_the_same_kept_files_is_reused_and_a_changed_file_is_read_again(spark, tmp_path):
    root = write_sales(tmp_path / "sales")

    def listed() -> list[tuple]:  # this table's DataFrames kept for reuse (the suite's other tables fill the rest)
        return [key for key in filereader._LISTED[spark] if key[1] == "file://" + root]

    east = {"partitionFilter": "region = 'east'"}
    first, again = read_by_spark(spark, root, **east), read_by_spark(spark, root, **east)
    # One DataFrame of the kept files (Spark looked them up once); another set of files is another DataFrame.
    assert len(listed()) == 1 and all("region=east" in path for path, _ in listed()[0][-1])
    assert rows(first) == rows(again) and len(rows(first)) == 3
    assert len(rows(read_by_spark(spark, root))) == 6 and len(listed()) == 2
    # A file added to a kept partition changes the key: it is read.
    pq.write_table(pa.table({"amount": [9.5], "item": pa.array([7], pa.int32())}),
                   f"{root}/day=2024-01-02/region=east/extra.parquet")
    assert sorted(row.item for row in rows(first)) == [2, 3, 3]
    assert sorted(row.item for row in rows(read_by_spark(spark, root, **east))) == [2, 3, 3, 7]


def test_a_local_tables_files_are_looked_up_by_the_driver_and_the_sessions_threshold_is_kept(spark, tmp_path):
    root = write_sales(tmp_path / "sales")  # six data files: past a threshold of 2, Spark would list them in a job
    threshold, group = "spark.sql.sources.parallelPartitionDiscovery.threshold", f"lookup-{tmp_path.name}"
    before = spark.conf.get(threshold)
    spark.conf.set(threshold, "2")
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", group)
    try:
        df = read_by_spark(spark, root)
        assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
        assert spark.conf.get(threshold) == "2"
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.set(threshold, before)
    assert rows(df) == rows(spark.read.parquet(root).select(*df.columns))


def test_a_plan_given_again_is_read_as_the_same_dataframe_until_the_table_changes(spark, tmp_path, monkeypatch,
                                                                                  definitions):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))  # kept at once
    root = write_sales(tmp_path / "sales")
    time.sleep(0.05)  # past any filesystem clock's tick
    first = read_by_spark(spark, root)
    assert read_by_spark(spark, root) is first
    dynsource.register_table(spark, "reader_again", path=root, definitions=definitions)
    query = "SELECT day, region, sum(amount) AS total, count(*) AS n FROM {t} GROUP BY day, region"
    try:
        for change in (None, "add a partition", "rewrite a file in place"):
            if change == "add a partition":
                os.makedirs(f"{root}/day=2024-01-04/region=west")
                pq.write_table(pa.table({"amount": [7.5], "item": pa.array([4], pa.int32())}),
                               f"{root}/day=2024-01-04/region=west/part-0.parquet")
            elif change == "rewrite a file in place":
                leaf = f"{root}/day=2024-01-03/region=east"
                pq.write_table(pa.table({"amount": [8.5, 9.5], "item": pa.array([5, 6], pa.int32())}),
                               f"{leaf}/{os.listdir(leaf)[0]}")
            spark.read.parquet(root).createOrReplaceTempView("reader_again_native")
            for _ in range(2):  # the second query reads the plan given again
                assert rows(dynsource.sql(spark, query.format(t="reader_again"))) == rows(
                    spark.sql(query.format(t="reader_again_native"))), change
            time.sleep(0.05)
        assert rows(first) != rows(read_by_spark(spark, root))
    finally:
        dynsource.drop_table(spark, "reader_again", definitions=definitions)


def test_within_the_sessions_check_interval_a_table_is_read_as_found(spark, tmp_path, monkeypatch, definitions):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))  # kept at once
    root = write_sales(tmp_path / "sales")
    time.sleep(0.05)  # past any filesystem clock's tick
    dynsource.register_table(spark, "reader_interval", path=root, definitions=definitions)
    query = "SELECT count(*) AS n FROM reader_interval"
    try:
        spark.conf.set(planner.CHECK_INTERVAL_CONF, "60000")
        assert dynsource.sql(spark, query).first().n == 6
        os.makedirs(f"{root}/day=2024-01-04/region=west")
        pq.write_table(pa.table({"amount": [7.5], "item": pa.array([4], pa.int32())}),
                       f"{root}/day=2024-01-04/region=west/part-0.parquet")
        assert dynsource.sql(spark, query).first().n == 6  # found alike within the interval: read as found
        spark.conf.set(planner.CHECK_INTERVAL_CONF, "0")
        assert dynsource.sql(spark, query).first().n == 7  # checked at once: the new partition is read
        spark.conf.set(planner.CHECK_INTERVAL_CONF, "-1")
        with pytest.raises(ValueError, match=r"spark\.dynsource\.listingCheckIntervalMs must be a whole number"):
            dynsource.sql(spark, query)
    finally:
        spark.conf.unset(planner.CHECK_INTERVAL_CONF)
        dynsource.drop_table(spark, "reader_interval", definitions=definitions)


def test_a_statement_that_runs_at_once_runs_once_on_the_files_as_they_are(spark, tmp_path, monkeypatch, definitions):
    # dynsource.sql gives a kept plan before its check ends only where what it builds can be thrown away.
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))  # kept at once
    root = write_sales(tmp_path / "sales")
    time.sleep(0.05)  # past any filesystem clock's tick
    dynsource.register_table(spark, "reader_insert", path=root, definitions=definitions)
    spark.sql("CREATE TABLE reader_totals (total DOUBLE, n BIGINT) USING parquet")
    insert = ("INSERT INTO reader_totals SELECT sum(amount), count(*) "
              "FROM reader_insert WITH ('partitionFilter' = 'day IS NOT NULL')")  # a reference read by dynsource
    try:
        dynsource.sql(spark, insert)
        leaf = f"{root}/day=2024-01-03/region=east"
        pq.write_table(pa.table({"amount": [8.5, 9.5], "item": pa.array([5, 6], pa.int32())}),
                       f"{leaf}/{os.listdir(leaf)[0]}")
        dynsource.sql(spark, insert)  # the kept plan's check fails: planned again before the INSERT runs
        native = spark.read.parquet(root).agg(F.sum("amount"), F.count("*")).first()
        inserted = rows(spark.table("reader_totals"))
        assert len(inserted) == 2 and tuple(native) in inserted
    finally:
        spark.sql("DROP TABLE IF EXISTS reader_totals")
        dynsource.drop_table(spark, "reader_insert", definitions=definitions)
