"""TPC-DS queries through dynsource.sql against spark.sql on the same Parquet (dsdgen's data at scale 0.01).

store_sales is Hive-partitioned by ss_sold_date_sk and registered; spark.sql reads it as a temporary view of
the same files, which shadows the registered name exactly as a user's view would. The whole query set is a
benchmark (benchmarks/tpcds.py); these are the shapes that must hold in every run: a date-pruned join (q42), a
star of four dimensions whose filters are the parts of one (q7), and a query with no join to prune (q9).
"""

from __future__ import annotations

import pytest

import dynsource
from benchmarks import tpcds


@pytest.fixture(scope="module")
def tpcds_session(spark, tmp_path_factory):
    root, texts = tpcds.generate(0.01, tmp_path_factory.mktemp("tpcds"))
    definitions = str(tmp_path_factory.mktemp("tpcds-definitions"))
    tables = tpcds.partition_facts(spark, root, {"store_sales": "ss_sold_date_sk"})
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


def run_both(spark, tpcds_session, number: int):
    """The query's rows by spark.sql (store_sales a temporary view) and by dynsource.sql, and dynsource's report."""
    texts, native = tpcds_session
    text = texts[number].strip().rstrip(";")
    native.createOrReplaceTempView("store_sales")
    try:
        expected = tpcds.comparable(spark.sql(text).collect())
    finally:
        spark.catalog.dropTempView("store_sales")
    df = dynsource.sql(spark, text)
    assert tpcds.comparable(df.collect()) == expected
    assert tpcds.comparable(df.collect()) == expected  # a second action on the same DataFrame
    return expected, dynsource.scan_report(df)


def test_q42_is_pruned_by_its_date_filter(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 42)
    assert rows
    (assignment,) = [a for a in report.assignments if a.handle]
    assert "ss_sold_date_sk) <- date_dim" in assignment.filter, str(report)
    (scan,) = [s for s in report.scans() if s]
    assert scan.filtering and scan.partitions_kept < scan.partitions_total


def test_q7_star_prunes_by_every_dimension_as_parts_of_one_filter(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 7)
    assert rows
    (assignment,) = [a for a in report.assignments if a.handle]
    # date_dim, customer_demographics and promotion: each a part, their keys adding up.
    for column in ("ss_sold_date_sk", "ss_cdemo_sk", "ss_promo_sk"):
        assert f"(store_sales.{column}) <- " in assignment.filter, str(report)
    assert assignment.payload_kind.startswith("all of ") and not report.notes, str(report)
    (scan,) = [s for s in report.scans() if s]
    assert len(scan.parts) >= 3 and any(part.startswith("ss_sold_date_sk: ") for part in scan.parts)


def test_q9_without_a_join_to_prune_reads_every_reference_alike(spark, tpcds_session):
    rows, report = run_both(spark, tpcds_session, 9)
    assert rows and not [a for a in report.assignments if a.handle]
