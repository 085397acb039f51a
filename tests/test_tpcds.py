"""TPC-DS queries through dynsource.sql against spark.sql on the same Parquet (dsdgen's data at scale 0.01).

store_sales is Hive-partitioned by ss_sold_date_sk and registered; spark.sql reads it as a temporary view of
the same files, which shadows the registered name exactly as a user's view would. The whole query set is a
benchmark (benchmarks/tpcds.py); these are the shapes that must hold in every run: a date-pruned join (q42), a
star of four dimensions whose filters are the parts of one (q7), a query with no join to prune (q9), and the
queries dynsource.sql once ran many times slower than spark.sql: filters declined, or not collected, because they
would filter nothing (q14, q4, q23), filters applied and, past the collection budget, not waited for (q17), a filter
holding no key (q24).
The session collects every filter (partitionPruning = collect, no least scan size), as on an object store.
"""

from __future__ import annotations

import pytest

import dynsource
from benchmarks import tpcds
from dynsource.dpp import dimensions
from tests.helpers import generating


@pytest.fixture(scope="module")
def tpcds_session(spark, run_data, tmp_path_factory):
    with generating(run_data, "tpcds") as data:  # read only: generated once for the run's pyspark lines
        root, texts = tpcds.generate(0.01, data)
        tables = tpcds.partition_facts(spark, root, {"store_sales": "ss_sold_date_sk"})
    definitions = str(tmp_path_factory.mktemp("tpcds-definitions"))
    for name, path in tables.items():
        if name != "store_sales":
            spark.read.parquet(str(path)).createOrReplaceTempView(name)
    dynsource.register_table(spark, "store_sales", path=str(tables["store_sales"]), definitions=definitions,
                             replace=True)
    native = spark.read.parquet(str(tables["store_sales"]))
    yield texts, native
    for name in tables:
        spark.catalog.dropTempView(name)
    dynsource.drop_table(spark, "store_sales", definitions=definitions)


def run_both(spark, tpcds_session, number: int, actions: int = 2):
    """The query's rows by spark.sql (store_sales a temporary view) and by dynsource.sql (``actions`` times on the
    same DataFrame), and dynsource's report."""
    texts, native = tpcds_session
    text = texts[number].strip().rstrip(";")
    native.createOrReplaceTempView("store_sales")
    try:
        expected = tpcds.comparable(spark.sql(text).collect())
    finally:
        spark.catalog.dropTempView("store_sales")
    df = dynsource.sql(spark, text)
    for _ in range(actions):  # a second action on the same DataFrame
        assert tpcds.comparable(df.collect()) == expected
    return expected, dynsource.scan_report(df)


def applied(report) -> list:
    return [assignment for assignment in report.assignments if assignment.handle]


def test_q42_is_pruned_by_its_date_filter(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 42)
    assert rows
    (assignment,) = applied(report)
    assert "ss_sold_date_sk) <- date_dim" in assignment.filter, str(report)
    (scan,) = [s for s in report.scans() if s]
    assert scan.filtering and scan.partitions_kept < scan.partitions_total


def test_q7_star_prunes_by_every_dimension_as_parts_of_one_filter(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 7)
    assert rows
    (assignment,) = applied(report)
    # date_dim and customer_demographics: each a part, their keys adding up. The promotions of the predicate and the
    # unfiltered items are (nearly) all those sold: the first is declined, the second not collected, each with its
    # reason.
    for column in ("ss_sold_date_sk", "ss_cdemo_sk"):
        assert f"(store_sales.{column}) <- " in assignment.filter, str(report)
    assert assignment.payload_kind == "all of 2 parts", str(report)
    for column, reason in (("ss_promo_sk", "not worth applying"), ("ss_item_sk", NOTHING_FILTERS)):
        assert any(f"(store_sales.{column}) <- " in note and reason in note for note in report.notes), str(report)
    (scan,) = [s for s in report.scans() if s]
    assert len(scan.parts) == 2 and any(part.startswith("ss_sold_date_sk: ") for part in scan.parts)


def test_q9_without_a_join_to_prune_reads_every_reference_alike(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 9, actions=1)  # fifteen scans; q42 and q7 act twice
    assert rows and not applied(report)


NOTHING_FILTERS = "not collected: nothing filters the dimension"
DECLINED = "the filter keeps {kept} of {rows} rows sampled from the table's first data file(s) by data column(s) "


def test_q14_declines_the_item_filters_that_keep_every_item_and_prunes_by_dates(spark, tpcds_session):
    # cross_items (the items sold in all three channels) and the unfiltered item dimension hold every item sold: a
    # filter by either would skip nothing: the first is declined, the second not collected; the dates prune a scan.
    rows, report = run_both(spark, tpcds_session, 14, actions=1)
    text = str(report)
    assert rows and applied(report), text
    assert all("ss_item_sk" not in assignment.filter for assignment in applied(report)), text
    assert "(store_sales.ss_item_sk) <- (subquery) (cross_items.ss_item_sk): the filter keeps " in text, text
    assert f"(store_sales.ss_item_sk) <- item (iss.i_item_sk): {NOTHING_FILTERS}" in text, text
    assert "['ss_item_sk'] (more than 90%), so it is not worth applying" in text
    pruned = [scan for scan in report.scans() if scan]
    assert pruned and all(scan.partitions_kept < scan.partitions_total for scan in pruned)


def test_q4_declines_the_customer_filter_that_keeps_every_customer(spark, tpcds_session):
    _, report = run_both(spark, tpcds_session, 4, actions=1)
    text = str(report)
    assert not applied(report), text
    assert f"(store_sales.ss_customer_sk) <- customer (customer.c_customer_sk): {NOTHING_FILTERS}" in text, text


def test_q23_declines_every_filter_of_its_store_sales_scans(spark, tpcds_session):
    # Nothing filters its item (sq1) and customer dimensions; its date filters keep most partitions (four years of
    # five).
    _, report = run_both(spark, tpcds_session, 23, actions=1)
    text = str(report)
    assert not applied(report), text
    for reason in (f"(store_sales.ss_item_sk) <- sq1 (sq1.i_item_sk): {NOTHING_FILTERS}",
                   f"(store_sales.ss_customer_sk) <- customer (customer.c_customer_sk): {NOTHING_FILTERS}",
                   "so it is not worth applying (fallback_filter_ratio)"):
        assert reason in text, text


def test_q17_applies_its_date_filter_and_past_the_collection_budget_reads_without_it(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 17)
    (assignment,) = applied(report)
    assert "(store_sales.ss_sold_date_sk) <- date_dim (d1.d_date_sk)" in assignment.filter, str(report)
    (scan,) = [scan for scan in report.scans() if scan]
    assert scan.partitions_kept < scan.partitions_total
    spark.conf.set(dimensions.TIMEOUT_CONF, "0")
    try:
        late_rows, late = run_both(spark, tpcds_session, 17, actions=1)
    finally:
        spark.conf.unset(dimensions.TIMEOUT_CONF)
    assert late_rows == rows and not applied(late), str(late)
    assert "took longer than the budget of 0 ms (spark.dynsource.collectTimeoutMs)" in str(late)


def test_q24_applies_a_store_filter_holding_no_key(spark, tpcds_session):
    # No store of this scale has s_market_id = 8: that part of the filter holds no key, so no row of store_sales
    # passes it, and the query's rows are still spark.sql's (none).
    rows, report = run_both(spark, tpcds_session, 24)
    (assignment,) = applied(report)
    assert "(store_sales.ss_store_sk) <- store (store.s_store_sk)" in assignment.filter, str(report)
    (scan,) = [scan for scan in report.scans() if scan]
    # Its only filter (nothing filters its customer dimension: not collected), pushed to Spark's file reader whole.
    assert (scan.payload_kind, scan.keys, scan.read_by) == ("exact", 0, "spark"), str(report)
    assert f"(store_sales.ss_customer_sk) <- customer (customer.c_customer_sk): {NOTHING_FILTERS}" in str(report)
    assert rows == []
