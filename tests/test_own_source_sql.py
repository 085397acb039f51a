"""Automatic dynamic filtering reaches a Python data source of one's own: dynsource.sql and dynamic_join prune a
catalog table of the SQLite source of ``tests/sources`` (``CREATE TABLE sales USING <its name>``), found through
Spark's own registration, and read a source without the interface as Spark does.

Each query is compared with ``spark.sql`` of the same text; the rows the source fetched from SQLite tell what
pushing the collected keys saved.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle
from pyspark.sql import Row

import dynsource
from tests.sources import plain_source, sqlite_source

KEYS = 200
ROWS_PER_KEY = 5
NORTH = [key for key in range(KEYS) if key % 40 == 0]  # 5 of the 200 keys


class Counted:
    """The rows the source fetched from SQLite, read from its ``countsDir`` since the last call."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def fetched(self) -> int:
        figures = [json.loads(path.read_text()) for path in self.directory.glob("*.json")]
        for path in self.directory.glob("*.json"):
            path.unlink()
        return sum(figure["rows"] for figure in figures)


@pytest.fixture(scope="module")
def sales(spark, tmp_path_factory):
    """Catalog table ``own_sales`` of a SQLite source (k, v), ``own_regions`` (k, region) a Spark table."""
    for module in (sqlite_source, plain_source):  # Spark's workers get them by value: they need not import tests
        cloudpickle.register_pickle_by_value(module)
    directory = tmp_path_factory.mktemp("own-source-sql")
    database, counts = directory / "sales.db", directory / "counts"
    counts.mkdir()
    rows = [(key, key * 100 + index) for key in range(KEYS) for index in range(ROWS_PER_KEY)]
    sqlite_source.write_table(database, "facts", "k", "bigint", rows)
    name = f"sqlite_sales_{uuid.uuid4().hex[:8]}"
    spark.dataSource.register(sqlite_source.catalog_source(
        name, database=str(database), table="facts", key="k", keyType="bigint", partitions="8",
        countsDir=str(counts)))
    spark.dataSource.register(plain_source.PlainRows)
    spark.sql(f"CREATE TABLE own_sales USING {name}")
    spark.sql(f"CREATE TABLE own_plain USING {plain_source.NAME}")
    regions = [(key, "north" if key in NORTH else f"r{key % 7}") for key in range(KEYS)]
    spark.createDataFrame(regions, "k BIGINT, region STRING").write.saveAsTable("own_regions")
    yield Counted(counts)
    for table in ("own_sales", "own_plain", "own_regions"):
        spark.sql(f"DROP TABLE IF EXISTS {table}")
    for module in (sqlite_source, plain_source):
        cloudpickle.unregister_pickle_by_value(module)


def rows(df) -> Counter:
    return Counter(tuple(row) for row in df.collect())


STAR = "SELECT r.region, s.k, s.v FROM own_sales s JOIN own_regions r ON s.k = r.k WHERE r.region = 'north'"


@pytest.mark.parametrize("query", [
    STAR,
    "SELECT r.region, sum(s.v) AS total FROM own_sales s, own_regions r WHERE s.k = r.k AND r.region = 'north' "
    "GROUP BY r.region",
    "SELECT s.k, s.v FROM own_sales s WHERE s.k IN (SELECT k FROM own_regions WHERE region = 'north')",
    "SELECT s.k, s.v FROM own_sales s LEFT SEMI JOIN own_regions r ON s.k = r.k AND r.region = 'north'",
], ids=["join", "implicit-join", "in-subquery", "semi-join"])
def test_a_star_join_with_a_source_of_ones_own_fetches_only_the_dimensions_keys(spark, sales, query):
    df = dynsource.sql(spark, query)
    expected = rows(spark.sql(query))
    assert sales.fetched() == KEYS * ROWS_PER_KEY  # spark.sql reads every row
    assert rows(df) == expected and expected
    assert sales.fetched() == len(NORTH) * ROWS_PER_KEY
    assert rows(df) == expected  # a second action on the same DataFrame (an aggregate's reads its shuffle again)
    assert sales.fetched() in (0, len(NORTH) * ROWS_PER_KEY)
    (assignment,) = dynsource.scan_report(df).assignments
    assert assignment.handle is not None and assignment.keys == len(NORTH)
    assert assignment.scan == "default.own_sales AS s"


def test_a_join_that_keeps_fact_rows_without_a_match_on_a_field_not_accepted_or_unfiltered_reads_the_source_whole(
        spark, sales):
    outer = "SELECT s.k, r.region FROM own_sales s LEFT JOIN own_regions r ON s.k = r.k AND r.region = 'north'"
    other_field = "SELECT s.k, s.v FROM own_sales s JOIN own_regions r ON s.v = r.k WHERE r.region = 'north'"
    unfiltered = "SELECT r.region, count(*) FROM own_sales s JOIN own_regions r ON s.k = r.k GROUP BY r.region"
    for query, note in [(outer, "preserved by the LEFT JOIN"),
                        (other_field, "data source '.*' accepts a dynamic filter on \\['k'\\] only, not on \\['v'\\]"),
                        (unfiltered, "not collected: nothing filters the dimension")]:
        df = dynsource.sql(spark, query)
        assert rows(df) == rows(spark.sql(query))
        assert sales.fetched() == 2 * KEYS * ROWS_PER_KEY  # both read every row
        report = dynsource.scan_report(df)
        assert all(a.handle is None for a in report.assignments)
        assert re.search(note, str(report)), str(report)


def test_a_source_without_the_interface_is_read_as_spark_reads_it_and_the_report_says_why(spark, sales):
    query = "SELECT p.k, p.v FROM own_plain p JOIN own_regions r ON p.k = r.k WHERE r.region = 'north'"
    df = dynsource.sql(spark, query)
    assert rows(df) == rows(spark.sql(query)) == Counter((key, key * 10) for key in NORTH)
    assert ("default.own_plain: data source 'plain_rows_test' does not implement dynsource.SupportsDynamicFiltering: "
            "Spark reads it as the query says") in dynsource.scan_report(df).notes


def test_dynamic_join_takes_a_source_of_ones_own_by_table_name_or_by_format_and_options(spark, sales):
    dims = spark.table("own_regions").where("region = 'north'")
    expected = Counter(Row(k=key, v=key * 100 + index, region="north") for key in NORTH for index in range(5))
    joined = dynsource.dynamic_join("own_sales", dims, on="k")
    assert rows(joined) == Counter(tuple(row) for row in expected)
    assert sales.fetched() == len(NORTH) * ROWS_PER_KEY
