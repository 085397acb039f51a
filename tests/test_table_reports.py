"""Every planned scan has a report, with a filter handle or without, found from the DataFrame that planned it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.filtering import DynamicFilteringData
from dynsource.scan import report
from dynsource.scan.origin import Reader
from tests.helpers import read


def write_table(root) -> str:
    """Six partitions k = 0..5 of two rows each."""
    pq.write_to_dataset(pa.table({"v": list(range(12)), "k": [i % 6 for i in range(12)]}), root, partition_cols=["k"])
    return str(root)


@pytest.fixture
def table(tmp_path) -> str:
    return write_table(tmp_path / "table")


@pytest.fixture
def registered(spark, table, tmp_path):
    """A registered table whose definition names its own filter store: reports are looked for there."""
    name, definitions = "reported_sales", str(tmp_path / "definitions")
    dynsource.register_table(spark, name, path=table, definitions=definitions, filterStore=str(tmp_path / "store"))
    yield name
    dynsource.drop_table(spark, name, definitions=definitions)


def test_a_table_read_whole_reports_every_partition_and_why_its_where_did_not_prune(spark, registered, tmp_path):
    df = spark.table(registered).where("k BETWEEN 1 AND 2")
    with pytest.raises(LookupError, match=r"^No scan of this DataFrame's reader of table default.reported_sales is "
                                          r"kept in filter store '.*store': run an action on it first"):
        dynsource.scan_report(df)
    assert df.count() == df.count() == 4
    scan = dynsource.scan_report(df)
    assert (scan.table, scan.path, scan.handle, scan.partitions_kept, scan.partitions_total, scan.pruned_by()) == (
        "default.reported_sales", str(tmp_path / "table"), None, 6, 6, "none")
    lines = str(scan).splitlines()
    assert lines[0].startswith(f"scan of table default.reported_sales ({tmp_path / 'table'}) (scan ")
    assert lines[1:3] == ["  pruned by: none", "  partitions: 6 of 6 kept"]
    assert lines[-1] == f"  note: {report.WHERE_DOES_NOT_PRUNE}"


def test_a_partition_filter_scan_reports_its_static_pruning(spark, table):
    df = read(spark, table, partitionFilter="k IN (1, 2)")
    assert df.count() == 4
    scan = dynsource.scan_report(df)
    assert (scan.handle, scan.partition_filter, scan.partitions_kept, scan.partitions_total) == (
        None, "k IN (1, 2)", 2, 6)
    assert str(scan).splitlines()[1:3] == ["  pruned by: partitionFilter 'k IN (1, 2)'", "  partitions: 2 of 6 kept"]
    assert "note:" not in str(scan)


def test_each_reader_of_a_table_finds_its_own_newest_scan(spark, table):
    narrow, wide = read(spark, table, partitionFilter="k = 1"), read(spark, table, partitionFilter="k >= 1")
    assert (narrow.count(), wide.count()) == (2, 10)
    assert dynsource.scan_report(narrow).partitions_kept == 1  # the other reader's later scan is not this one's
    assert dynsource.scan_report(wide.where("v > 3")).partitions_kept == 5
    loaded = spark.read.format("dynsource").load(table)  # path given to load(), not as an option
    assert loaded.count() == 12 and dynsource.scan_report(loaded).partitions_kept == 6


def test_a_handle_scan_is_found_from_its_dataframe_and_says_both_filters(spark, table):
    handle = dynsource.publish(DynamicFilteringData([("k", "int")], [(2,), (3,)]))
    df = read(spark, table, dynamicFilter=handle, partitionFilter="k >= 3")
    assert df.count() == 2
    scan = dynsource.scan_report(df)
    assert scan.scan_id == dynsource.scan_report(handle).scan_id
    assert scan.pruned_by() == f"partitionFilter 'k >= 3' and dynamic filter {handle}"
    assert str(scan).splitlines()[2:4] == [f"  pruned by: partitionFilter 'k >= 3' and dynamic filter {handle}",
                                           "  partitions: 1 of 6 kept"]


def test_a_registered_tables_dataframe_read_by_sparks_reader_and_those_derived_from_it_find_its_scan(spark, registered):
    whole, narrow = dynsource.table(spark, registered), dynsource.table(spark, registered, partitionFilter="k < 2")
    for df, kept in ((whole, 6), (narrow, 2)):  # planned when made: each finds its own reader's scan
        scan = dynsource.scan_report(df)
        assert (scan.table, scan.read_by, scan.partitions_kept, scan.partitions_total) == (
            "default.reported_sales", "spark", kept, 6)
        derived = df.where("v > 3").groupBy("k").count()
        assert derived.count() == kept and dynsource.scan_report(derived).scan_id == scan.scan_id
    # Spark's reader prunes the files it is handed by the query's WHERE: the Python reader's note would be untrue.
    assert str(dynsource.scan_report(whole)).splitlines()[-1] == f"  note: {report.SPARK_PRUNES_FURTHER}"


def test_a_dataframe_derived_from_a_dynamic_join_finds_the_joins_scan(spark, registered):
    keys = spark.createDataFrame([(1,), (4,)], "d INT")
    joined = dynsource.dynamic_join(dynsource.table(spark, registered), keys, {"k": "d"})
    derived = joined.groupBy("k").count()
    assert sorted(derived.collect()) == [(1, 2), (4, 2)]
    scan = dynsource.scan_report(derived)
    assert (scan.handle, scan.scan_id) == (dynsource.scan_report(joined).handle, dynsource.scan_report(joined).scan_id)
    assert (scan.read_by, scan.partitions_kept, scan.partitions_total) == ("spark", 2, 6)


def test_a_dataframe_of_no_or_of_two_dynsource_tables_is_refused(spark, table, tmp_path):
    with pytest.raises(ValueError, match=r"a DataFrame that reads one dynsource table .*; this one reads none\.$"):
        dynsource.scan_report(spark.range(3))
    other = write_table(tmp_path / "other")
    joined = read(spark, table).join(read(spark, other), "k")
    with pytest.raises(ValueError, match=f"this one reads {table}, {other}\\.$"):
        dynsource.scan_report(joined)


def test_the_plan_and_the_source_name_a_reader_alike():
    # The plan keeps option names lower-cased; the source may see them as typed.
    assert Reader.of("dynsource.default.sales", {"partitionfilter": "k = 1"}) == Reader.of(
        "dynsource.default.sales", {"partitionFilter": "k = 1"})
    assert Reader.of("dynsource.default.sales", {}).table == "default.sales"
    assert Reader.of("dynsource", {"path": "/t"}).table is None
    assert Reader.of("dynsource", {"path": "/t", "partitionFilter": "k = 1"}) != Reader.of("dynsource", {"path": "/t"})
