"""A plan is given again while its walk would read alike, and planned anew after any change (no Spark)."""

from __future__ import annotations

import os
import shutil
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.layout import commits, directories
from dynsource.layout.watches import Watches
from dynsource.runtime.lru import LruMap
from dynsource.scan import latechecks, planner, report, taskfigures
from dynsource.scan.options import ScanOptions
from dynsource.scan.tableschema import infer_schema


def write(path, values: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"v": pa.array(values, pa.int64())}), path)


@pytest.fixture(params=["watched", "stamped"])
def settled(request, monkeypatch, tmp_path):
    """A table of three day partitions, listings kept at once (checked by inotify watches, or by stat) and plans
    kept afresh; the test's changes come at least 50 ms after the table was written, past any filesystem clock's
    tick."""
    watches = Watches() if request.param == "watched" else None
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0, watches=watches))
    monkeypatch.setattr(planner, "_kept_plans", LruMap(planner.KEPT_PLANS))
    for day in (1, 2, 3):
        write(tmp_path / f"day={day}" / "part-0.parquet", [day])
    time.sleep(0.05)
    return tmp_path


def plan(root, **options) -> planner.PlannedScan:
    scan_options = ScanOptions.parse({"path": str(root), **options})
    return planner.ScanPlanner(scan_options, infer_schema(scan_options)).plan()


def files(planned: planner.PlannedScan) -> dict[str, int]:
    return {os.path.relpath(f.path, planned.options.path): f.size for p in planned.listing.partitions for f in p.files}


def test_a_settled_tables_plan_is_given_again_under_a_new_scan_id(settled):
    first = plan(settled)
    again = plan(settled)
    assert again.listing is first.listing and again.values == first.values == ((1,), (2,), (3,))
    assert again.scan_id != first.scan_id and again.started > first.started
    other = plan(settled, partitionFilter="day > 1")  # another scan of the table is planned apart
    assert other.listing is not first.listing and other.values == ((2,), (3,))
    assert plan(settled, partitionFilter="day > 1").listing is other.listing


def test_files_added_removed_or_rewritten_in_place_are_planned_anew(settled):
    first = files(plan(settled))
    write(settled / "day=1" / "part-1.parquet", [10, 11])
    assert files(plan(settled)) == {**first, "day=1/part-1.parquet": os.path.getsize(settled / "day=1/part-1.parquet")}
    (settled / "day=1" / "part-1.parquet").unlink()
    assert files(plan(settled)) == first
    before = plan(settled)
    rewritten = settled / "day=2" / "part-0.parquet"
    size = rewritten.stat().st_size
    write(rewritten, [1, 2, 3, 4, 5, 6, 7, 8])  # the same name, other bytes
    after = plan(settled)
    assert after.listing is not before.listing and files(after)["day=2/part-0.parquet"] == rewritten.stat().st_size
    assert rewritten.stat().st_size != size


def test_a_plan_given_before_its_check_ends_reports_whether_the_check_held(settled):
    first = plan(settled)
    with latechecks.checked_later() as checks:
        again = plan(settled)
    assert again.listing is first.listing and checks.held()
    rewritten = settled / "day=2" / "part-0.parquet"
    write(rewritten, [1, 2, 3, 4, 5, 6, 7, 8])  # the same name, other bytes
    with latechecks.checked_later() as checks:
        trusted = plan(settled)
    assert trusted.listing is first.listing and not checks.held()  # given at once, its check failed
    planned = plan(settled)  # what dynsource.sql does then: plan again, checking first
    assert planned.listing is not first.listing
    assert files(planned)["day=2/part-0.parquet"] == rewritten.stat().st_size
    with latechecks.checked_later() as checks:
        assert plan(settled).listing is planned.listing
    assert checks.held()


def test_a_report_recorded_inside_checked_later_is_saved_beside_the_caller_and_by_held(settled, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    with latechecks.checked_later() as checks:
        planned = plan(settled, filterStore=str(store))
        planner.record(planned, input_partitions=None, task_figures=taskfigures.PLANNED_ONLY, reader=None,
                           read_by="spark")
    assert checks.held()
    saved = report.table_scans(None, str(settled), planned.options.filter_store)
    assert [scan.scan_id for scan in saved] == [planned.scan_id]
    with latechecks.checked_later() as checks:
        checks.defer(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a deferred failure is the caller's, as it would have been at once
        checks.held()


def test_within_its_check_interval_a_plan_found_alike_is_given_without_a_check(settled):
    first = plan(settled)
    write(settled / "day=4" / "part-0.parquet", [4])  # a partition added
    with latechecks.checked_later(check_interval_ms=60_000) as checks:
        trusted = plan(settled)
    assert trusted.listing is first.listing and checks.held()  # no check made, so none failed
    with latechecks.checked_later() as checks:  # no interval: checked
        assert plan(settled).listing is first.listing
    assert not checks.held()
    assert plan(settled).values == ((1,), (2,), (3,), (4,))


def test_the_check_interval_counts_from_when_the_plan_was_last_found_alike(settled):
    first = plan(settled)
    time.sleep(1.1)
    with latechecks.checked_later(check_interval_ms=1000) as checks:
        assert plan(settled).listing is first.listing  # found alike more than a second ago: checked again
    assert checks.held()
    write(settled / "day=4" / "part-0.parquet", [4])
    with latechecks.checked_later(check_interval_ms=1000) as checks:
        assert plan(settled).listing is first.listing  # found alike just now: given as found
    assert checks.held()
    time.sleep(1.1)
    with latechecks.checked_later(check_interval_ms=1000) as checks:
        plan(settled)
    assert not checks.held()  # the interval over, the check sees the new partition


def test_partitions_added_or_removed_are_planned_anew(settled):
    plan(settled)
    write(settled / "day=4" / "part-0.parquet", [4])
    assert plan(settled).values == ((1,), (2,), (3,), (4,))
    shutil.rmtree(settled / "day=1")
    assert plan(settled).values == ((2,), (3,), (4,))


def test_what_the_check_cannot_see_is_never_given_again(settled):
    # Files in a plain sub-directory of a partition are found by a search the check does not repeat.
    write(settled / "day=3" / "nested" / "part-0.parquet", [30])
    time.sleep(0.05)
    assert plan(settled).listing is not plan(settled).listing
    shutil.rmtree(settled / "day=3" / "nested")
    time.sleep(0.05)
    assert plan(settled).listing is plan(settled).listing
    # A table with commit records: a record written later changes the records' directory alone.
    commits.write(fsspec.filesystem("file"), str(settled), "job-1", "committed")
    time.sleep(0.05)
    assert plan(settled).listing is not plan(settled).listing
    # A scan with a dynamic filter resolves it at each plan.
    shutil.rmtree(settled / commits.DIRECTORY)
    time.sleep(0.05)
    handle = dynsource.publish(dynsource.DynamicFilteringData([("day", "int")], [(2,)]))
    first, again = plan(settled, dynamicFilter=handle), plan(settled, dynamicFilter=handle)
    assert first.listing is not again.listing and first.values == again.values == ((2,),)


def test_a_table_written_within_the_settle_time_is_planned_anew_each_time(monkeypatch, tmp_path):
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings())
    write(tmp_path / "day=1" / "part-0.parquet", [1])
    assert plan(tmp_path).listing is not plan(tmp_path).listing
