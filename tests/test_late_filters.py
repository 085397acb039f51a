"""Late filters through Spark: a reader waits for a reserved handle, within its timeout, never hangs."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.filtering import handles
from tests.helpers import read

KEPT = dynsource.DynamicFilteringData([("k", "int")], [(2,)])


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("late")
    pq.write_to_dataset(pa.table({"v": list(range(8)), "k": [i % 4 for i in range(8)]}), root, partition_cols=["k"])
    return str(root)


def load(spark, table, handle, **options):
    return read(spark, table, dynamicFilter=handle, **options)


def scan(spark, table, handle, **options):
    return sorted(row.v for row in load(spark, table, handle, **options).collect())


def test_slow_publisher_is_waited_for(spark, table):
    handle = handles.reserve()
    df = load(spark, table, handle, dynamicFilterWaitMs="60000")  # the schema does not need the filter
    # Published well after the action starts, so planning (a second or two away) has to wait for it.
    threading.Timer(5.0, lambda: handles.publish(KEPT, handle=handle)).start()
    assert sorted(row.v for row in df.collect()) == [2, 6]
    report = dynsource.scan_report(handle)
    assert report.filtering and report.wait_ms >= 500


def test_publisher_that_never_publishes_reads_everything_after_the_wait(spark, table):
    handle = handles.reserve()
    assert scan(spark, table, handle, dynamicFilterWaitMs="300") == list(range(8))
    report = dynsource.scan_report(handle)
    assert not report.filtering and "still being collected" in report.fallback_reason
    assert report.wait_ms >= 300


def test_failed_collector_is_reported_not_waited_for(spark, table):
    failing = spark.sql("SELECT CAST(raise_error('dimension exploded') AS INT) AS dk FROM range(1)")
    handle = dynsource.collect(failing, {"k": "dk"}, wait=False)
    assert scan(spark, table, handle, dynamicFilterWaitMs="120000") == list(range(8))
    report = dynsource.scan_report(handle)
    assert "dimension exploded" in report.fallback_reason and report.wait_ms < 120_000
    with pytest.raises(Exception, match="dimension exploded"):
        scan(spark, table, handle, dynamicFilterOnError="fail")


def test_collect_without_waiting_then_scan(spark, table):
    handle = dynsource.collect(spark.sql("SELECT 2 AS dk"), {"k": "dk"}, types={"k": "int"}, wait=False)
    assert scan(spark, table, handle, dynamicFilterWaitMs="120000") == [2, 6]
    assert dynsource.scan_report(handle).filtering
