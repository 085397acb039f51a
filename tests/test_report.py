"""Scan reports: the summary a user reads, leaf partition counts, one report per scan, and their storage."""

from __future__ import annotations

import dataclasses
import os
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.dpp import queryreport
from dynsource.filtering import DynamicFilteringData, handles
from dynsource.filtering.filterstore import FilterStore
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.scan import report
from tests.helpers import read

PLANNED = dict(path="/data/sales", payload_kind="exact", keys=31, payload_bytes=412, filtering=True,
               partitions_total=1827, partitions_kept=31, files_kept=31, bytes_kept=1_234_567, listings=2,
               input_partitions=4, planning_ms=120.5, scan_id="3f2a9c1e" + "0" * 24, planned_at=0.0,
               pruned_by_column={"ss_sold_date_sk": 1796})
HANDLE = "dynf-" + "1" * 32


def test_summary_of_a_scan_pruning_partitions():
    assert str(report.ScanReport(handle=HANDLE, **PLANNED)) == "\n".join([
        f"dynamic filter {HANDLE} on /data/sales (scan 3f2a9c1e, planned 1970-01-01 00:00:00 UTC)",
        "  payload: exact, 31 key(s), 412 bytes",
        "  partitions: 31 of 1,827 kept",
        "  files: 31 (1,234,567 bytes) in 4 input partition(s)",
        "  listings: 2; planning: 120.5 ms",
    ])


def test_summary_shows_row_figures_only_where_they_apply_and_the_reason_when_not_filtering():
    with_rows = report.ScanReport(handle=HANDLE, **PLANNED, data_columns=("amount",), row_filtering=True,
                                  tasks_reported=4, row_groups_total=40, row_groups_skipped=30, rows_read=1000,
                                  rows_filtered=800, wait_ms=3.5, scans_with_handle=3)
    lines = str(with_rows).splitlines()
    assert lines[0].endswith("; the newest of 3 scans with this handle, dynsource.scan_reports() lists them)")
    assert "  listings: 2; planning: 120.5 ms, of which waiting for the filter: 3.5 ms" in lines
    assert lines[-1] == ("  row groups (by data column(s) ['amount']): 30 of 40 skipped in 4 read task(s); rows: "
                         "1,000 read, 800 filtered out")
    before_an_action = dataclasses.replace(with_rows, tasks_reported=0)
    assert str(before_an_action).splitlines()[-1].endswith("no read task has reported yet (run an action)")
    unusable = report.ScanReport(**{**PLANNED, "payload_kind": None, "keys": None, "payload_bytes": None,
                                    "partitions_kept": 1827, "pruned_by_column": {}, "filtering": False},
                                 handle=HANDLE, fallback_reason="the collector failed: boom")
    assert str(unusable).splitlines()[1:3] == ["  payload: none (the filter could not be loaded)",
                                               "  partitions: 1,827 of 1,827 kept"]
    assert str(unusable).splitlines()[-1] == "  not filtering: the collector failed: boom"
    assert "row groups" not in str(unusable)


def test_summary_of_an_exceeded_filter_says_so_not_zero_keys():
    exceeded = report.ScanReport(handle=HANDLE, **{**PLANNED, "keys": 0, "payload_bytes": 0, "filtering": False,
                                                   "partitions_kept": 1827, "pruned_by_column": {}},
                                 payload_exceeded=True, fallback_reason="the filter exceeded the collector's threshold")
    assert str(exceeded).splitlines()[1] == ("  payload: exceeded the collector's threshold, so it holds no key and "
                                             "prunes nothing: every partition is read")
    statically = dataclasses.replace(exceeded, partition_filter="ss_sold_date_sk < 10")
    assert statically.lines()[0].endswith("prunes nothing: every partition its partitionFilter keeps is read")


def test_a_query_report_leaves_out_a_collection_time_it_does_not_know(tmp_path):
    assignment = queryreport.Assignment("default.sales AS s", "default.sales (s.day) <- dates (d.day)", HANDLE,
                                        "exact", 3)
    assert str(queryreport.QueryReport((assignment,), (), FilterStore.of(str(tmp_path)))).splitlines()[0] == (
        "default.sales (s.day) <- dates (d.day): exact, 3 keys; reads all columns")


def test_summary_of_a_scan_pruned_above_the_leaf_level_does_not_guess_the_leaf_total():
    multi = report.ScanReport(handle=HANDLE, **{**PLANNED, "partitions_total": None, "partitions_kept": 24,
                                                "pruned_by_column": {"year": 4, "month": 10}})
    assert str(multi).splitlines()[2] == ("  partitions: 24 leaf partition(s) kept; directories pruned without "
                                          "listing below them: 4 at year, 10 at month")
    leaves_only = report.ScanReport(handle=HANDLE, **{**PLANNED, "partitions_total": 36, "partitions_kept": 2,
                                                      "pruned_by_column": {"year": 0, "month": 34}})
    assert str(leaves_only).splitlines()[2] == "  partitions: 2 of 36 kept (pruned: 34 at month)"


def two_level_table(fs) -> str:
    root = "/two-levels"
    for year in (2000, 2001, 2002):
        for month in range(1, 13):
            fs.pipe(f"{root}/year={year}/month={month}/part-0.parquet", b"x")
    return root


@pytest.mark.parametrize(("fields", "keys", "kept", "total", "pruned"), [
    ([("month", "int")], [(1,), (2,)], 6, 36, {"month": 30}),  # every year listed: leaves known
    ([("year", "int")], [(2000,)], 12, None, {"year": 2}),  # two years never listed below
    ([("year", "int"), ("month", "int")], [(2000, 1)], 1, None, {"year": 2, "month": 11}),
    ([("year", "int")], [(1999,)], 0, None, {"year": 3}),  # the leaf level was never reached
])
def test_partition_counts_are_leaf_partitions(fields, keys, kept, total, pruned):
    fs = fsspec.filesystem("memory")
    enumerator = DynamicPartitionEnumerator(PartitionEnumerator(fs, two_level_table(fs)), {})
    enumerator.set_dynamic_filtering_data(DynamicFilteringData(fields, keys))
    listing = enumerator.enumerate()
    assert (len(listing.partitions), listing.leaf_total, {k: v for k, v in listing.pruned.items()}) == (
        kept, total, pruned)


def test_a_store_keeps_each_scan_of_a_handle_up_to_a_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "MAX_SCANS_KEPT", 2)
    for number in range(3):
        report.save(report.ScanReport(handle=HANDLE, **{**PLANNED, "scan_id": f"{number:032x}",
                                                        "planned_at": 1000.0 + number}), str(tmp_path))
    scans = dynsource.scan_reports(HANDLE, str(tmp_path))
    assert [scan.scan_id[-1] for scan in scans] == ["1", "2"] and {scan.scans_with_handle for scan in scans} == {2}
    assert dynsource.scan_report(HANDLE, str(tmp_path)).scan_id == scans[-1].scan_id


def test_expire_keeps_a_handle_whose_newest_scan_report_is_recent(tmp_path):
    root = str(tmp_path)
    handle = handles.publish(DynamicFilteringData([("k", "int")], [(1,)]), root)
    report.save(report.ScanReport(handle=handle, **PLANNED), root)
    old = time.time() - 8 * 86400
    for path in tmp_path.rglob("*"):
        if path.suffix != ".json":
            os.utime(path, (old, old))
    assert dynsource.expire(7 * 86400, root) == []
    for path in tmp_path.rglob("*"):
        os.utime(path, (old, old))
    assert dynsource.expire(7 * 86400, root) == [handle]
    assert not [path for path in tmp_path.rglob("*") if handle in str(path)]


def test_a_reused_handle_reports_each_scan(spark, tmp_path):
    for name, keys in (("first", [1, 2, 3]), ("second", [2, 3, 4, 5])):
        pq.write_to_dataset(pa.table({"v": keys, "k": keys}), tmp_path / name, partition_cols=["k"])
    handle = dynsource.publish(DynamicFilteringData([("k", "int")], [(2,), (3,)]))
    first = read(spark, tmp_path / "first", dynamicFilter=handle)
    assert first.count() == 2
    assert read(spark, tmp_path / "second", dynamicFilter=handle).count() == 2
    scans = dynsource.scan_reports(handle)
    assert [(scan.path, scan.partitions_kept, scan.partitions_total) for scan in scans] == [
        (str(tmp_path / "first"), 2, 3), (str(tmp_path / "second"), 2, 4)]
    assert len({scan.scan_id for scan in scans}) == 2
    newest = dynsource.scan_report(handle)
    assert newest == scans[-1] and f"(scan {newest.scan_id[:8]}, planned " in str(newest)
    assert "the newest of 2 scans with this handle" in str(newest)


def test_a_joined_dataframe_reports_after_its_first_action_and_joins_its_pinned_dimension(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": list(range(10)), "k": [i % 5 for i in range(10)]}), tmp_path,
                        partition_cols=["k"])
    dim = spark.sql("SELECT CAST(id AS INT) AS dk FROM range(1, 3)")
    joined = dynsource.dynamic_join(str(tmp_path), dim, {"k": "dk"}, fallback_filter_ratio=1.0,
                                    options={"reader": "python"})  # dynsource's reader plans at each action
    with pytest.raises(LookupError, match=r"^No scan of this DataFrame yet: run an action on it first"):
        dynsource.scan_report(joined)
    assert joined.count() == 4 and not dim.is_cached  # pinned by a local checkpoint, not cached
    assert str(dynsource.scan_report(joined)).splitlines()[2] == "  partitions: 2 of 5 kept"
    joined = dynsource.dynamic_join(str(tmp_path), dim, {"k": "dk"}, fallback_filter_ratio=1.0)
    planned = str(dynsource.scan_report(joined)).splitlines()  # Spark's reader: planned by dynamic_join itself
    assert planned[2] == "  partitions: 2 of 5 kept" and planned[3].endswith("read by Spark's file reader")
    assert joined.count() == 4
