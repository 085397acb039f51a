"""The benefit check's survey of a fact table, kept between queries of a warm session while its walk holds."""

import datetime
import os
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dynsource.dpp import benefit
from dynsource.filtering import DynamicFilteringData
from dynsource.layout import directories
from dynsource.runtime.lru import LruMap
from dynsource.scan.options import ScanOptions

TYPES = {"day": "int", "item": "int"}


def write(path, items) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"item": pa.array(items, pa.int32())}), path)


@pytest.fixture
def settled(monkeypatch, tmp_path):
    """Two day partitions, listings kept at once and surveys kept afresh; changes come 50 ms after the writes."""
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))
    monkeypatch.setattr(benefit, "_kept_surveys", LruMap(benefit.KEPT_SURVEYS))
    for day in (1, 2):
        write(tmp_path / f"day={day}" / "part-0.parquet", list(range(40)))
    time.sleep(0.05)
    return tmp_path


def survey(root, deep=True) -> benefit.Survey:
    return benefit.survey(ScanOptions.parse({"path": str(root)}), TYPES, deep=deep)


def test_a_settled_tables_survey_is_given_again_until_its_top_level_changes(settled):
    first = survey(settled)
    assert survey(settled) is first and first.fanout == 2
    assert survey(settled, deep=False) is not first  # a shallow survey is another walk
    write(settled / "day=3" / "part-0.parquet", [1])
    again = survey(settled)
    assert again is not first and again.fanout == 3
    assert again.top.raw_rows == [("1",), ("2",), ("3",)]


def test_a_file_of_the_first_branch_rewritten_in_place_is_sampled_anew(settled):
    first = survey(settled)
    assert first.sample(["item"]).num_rows == 40
    time.sleep(0.01)
    write(settled / "day=1" / "part-0.parquet", list(range(100)))  # same path, more rows
    again = survey(settled)
    assert again is not first
    assert again.sample(["item"]).num_rows == 100
    assert again.estimated_bytes() == 2 * os.path.getsize(settled / "day=1" / "part-0.parquet")


def test_a_shallow_survey_is_walked_at_every_call_so_its_first_branch_is_current(settled):
    first = survey(settled, deep=False)
    assert first.sample(["item"]).num_rows == 40
    time.sleep(0.01)
    write(settled / "day=1" / "part-0.parquet", list(range(100)))  # below the top level: the root is as it was
    again = survey(settled, deep=False)
    assert again is not first and again.sample(["item"]).num_rows == 100


def test_a_survey_off_the_local_disk_is_walked_at_every_call():
    memory = fsspec.filesystem("memory")
    for day in (1, 2):
        with memory.open(f"/survey/day={day}/part-0.parquet", "wb") as file:
            pq.write_table(pa.table({"item": pa.array([day], pa.int32())}), file)
    try:
        first = survey("memory://survey")
        assert survey("memory://survey") is not first and first.fanout == 2
        with memory.open("/survey/day=3/part-0.parquet", "wb") as file:
            pq.write_table(pa.table({"item": pa.array([3], pa.int32())}), file)
        assert survey("memory://survey").fanout == 3
    finally:
        memory.rm("/survey", recursive=True)


@pytest.mark.parametrize("rows_per_file, files_read", [(10, 3), (2, benefit.SAMPLE_FILES)])
def test_a_table_of_small_files_is_sampled_down_the_next_directories(tmp_path, rows_per_file, files_read):
    # The first file alone holds too few rows to judge a filter by: the next ones are read, up to SAMPLE_FILES.
    for day in range(12):
        write(tmp_path / f"day={day}" / "part-0.parquet", [day * 100 + row for row in range(rows_per_file)])
    table = survey(tmp_path)
    sample = table.sample(["item"])
    assert sample.num_rows == rows_per_file * files_read
    assert len({item // 100 for item in sample.column("item").to_pylist()}) == files_read  # each from another day
    every_item = DynamicFilteringData([("item", "int")], [(value,) for value in range(1200)])
    reason = benefit.no_benefit(every_item, table, 0.5)
    if sample.num_rows >= benefit.MIN_SAMPLE_ROWS:
        assert reason.startswith("the filter keeps 30 of 30 rows sampled from the table's first data file(s)")
        assert benefit.no_benefit(DynamicFilteringData([("item", "int")], [(1,)]), table, 0.5) is None
    else:  # 16 rows judge nothing: the filter is applied
        assert reason is None


def test_a_first_file_of_enough_rows_is_sampled_without_the_wider_walk(settled):
    table = survey(settled)
    assert table.sample(["item"]).num_rows == 40
    assert "more_files" not in vars(table)  # the walk down the next directories is made only for small files


@pytest.fixture
def one_year(tmp_path):
    """year=2000/month=1..12/day=1..5: one year, judged by its months and days."""
    for month in range(1, 13):
        for day in range(1, 6):
            write(tmp_path / "year=2000" / f"month={month}" / f"day={day}" / "part-0.parquet", [month * 10 + day])
    return tmp_path


YMD = {"year": "int", "month": "int", "day": "int", "item": "int"}


def ymd_filter(rows) -> DynamicFilteringData:
    return DynamicFilteringData([("year", "int"), ("month", "int"), ("day", "int")], rows)


def test_a_filter_on_every_level_is_judged_where_it_keeps_least(one_year):
    table = benefit.survey(ScanOptions.parse({"path": str(one_year)}), YMD)
    assert [level.columns[-1] for level in table.levels] == ["year", "month", "day"]
    # Before: "keeps 1 of 1 partitions of 'year'", and the four days of a year were read whole.
    assert benefit.no_benefit(ymd_filter([(2000, 1, 1), (2000, 1, 2), (2000, 3, 1), (2000, 3, 2)]), table, 0.5) is None
    first_month = int(table.levels[1].raw_rows[0][1])
    every_month_but_the_first = [(2000, month, 1) for month in range(1, 13) if month != first_month]
    # Below the first month, which it drops, the days' sample tells nothing: judged by its months, 11 of 12.
    reason = benefit.no_benefit(ymd_filter(every_month_but_the_first), table, 0.5)
    assert reason == ("the filter keeps 11 of 12 partitions of 'month' under the first directory above it (more than "
                      "50%), so it is not worth applying (fallback_filter_ratio)")
    every_day = ymd_filter([(2000, month, day) for month in range(1, 13) for day in range(1, 6)])
    assert "keeps 1 of 1 partitions of 'year' (more than 50%)" in benefit.no_benefit(every_day, table, 0.5)
    # Joined on month and day only, as before: the year level prunes nothing and is not judged.
    month_day = DynamicFilteringData([("month", "int"), ("day", "int")], [(2, 1), (2, 2)])
    assert benefit.no_benefit(month_day, table, 0.5) is None


def test_a_level_the_filter_cannot_be_compared_with_ends_the_judgement_at_the_levels_above(tmp_path):
    # The enumerator sets such a filter aside below that level (it reads all of it): only the levels above count.
    for month in range(1, 13):
        write(tmp_path / "year=2000" / f"month={month}" / "flag=true" / "part-0.parquet", [month])
    table = benefit.survey(ScanOptions.parse({"path": str(tmp_path)}),
                           {"year": "int", "month": "int", "flag": "boolean", "item": "int"})
    day = datetime.date(2000, 1, 1)
    data = DynamicFilteringData([("year", "int"), ("month", "int"), ("flag", "date")], [(2000, 1, day)])
    assert benefit.no_benefit(data, table, 0.5) is None  # judged by its months, 1 of 12
    every_month = DynamicFilteringData([("year", "int"), ("month", "int"), ("flag", "date")],
                                       [(2000, month, day) for month in range(1, 13)])
    assert "keeps 1 of 1 partitions of 'year'" in benefit.no_benefit(every_month, table, 0.5)
