"""Lasting views: a fact scan read again by ``dynsource.sql`` is named by one global temporary view, made once."""

from __future__ import annotations

import pytest

import dynsource
from dynsource.layout import directories
from dynsource.runtime.lru import LruMap
from dynsource.spark import globalviews
from tests.helpers import rows
from tests.test_sparkreader import write_sales

QUERY = "SELECT region, count(*) AS n, sum(amount) AS total FROM {t} WHERE item > 1 GROUP BY region"


def lasting_views(spark) -> set[str]:
    database = spark.conf.get("spark.sql.globalTempDatabase")
    return {t.name for t in spark.catalog.listTables(database) if t.name.startswith("__dynsource_view_")}


@pytest.fixture
def sales(spark, tmp_path, definitions, monkeypatch):
    # Listings kept at once (not only once the files are two seconds old): each query below is given the plan again.
    monkeypatch.setattr(directories, "LISTINGS", directories.DirectoryListings(settle_ns=0))
    root = write_sales(tmp_path / "sales")
    dynsource.register_table(spark, "lasting_sales", path=root, definitions=definitions)
    spark.read.parquet(root).createOrReplaceTempView("lasting_native")
    yield
    dynsource.drop_table(spark, "lasting_sales", definitions=definitions)
    spark.catalog.dropTempView("lasting_native")


@pytest.mark.smoke  # ./test --quick: views
def test_a_scan_read_again_is_named_by_one_view_the_users_databases_do_not_list(spark, sales):
    before, temporary = lasting_views(spark), {t.name for t in spark.catalog.listTables() if t.isTemporary}
    expected = rows(spark.sql(QUERY.format(t="lasting_native")))
    first = dynsource.sql(spark, QUERY.format(t="lasting_sales"))
    made = lasting_views(spark) - before
    assert len(made) == 1
    for _ in range(3):  # every later query names the same view: none is made
        assert rows(dynsource.sql(spark, QUERY.format(t="lasting_sales"))) == expected
        assert lasting_views(spark) - before == made
    assert rows(first) == expected
    assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == temporary


def test_a_view_dropped_by_someone_else_is_made_again(spark, sales):
    before = lasting_views(spark)
    expected = rows(spark.sql(QUERY.format(t="lasting_native")))
    assert rows(dynsource.sql(spark, QUERY.format(t="lasting_sales"))) == expected
    for name in lasting_views(spark) - before:
        spark.catalog.dropGlobalTempView(name)
    assert rows(dynsource.sql(spark, QUERY.format(t="lasting_sales"))) == expected
    assert len(lasting_views(spark) - before) == 1


def test_past_the_bound_the_least_recently_read_view_is_dropped(spark, sales, monkeypatch):
    before = lasting_views(spark)
    dynsource.sql(spark, QUERY.format(t="lasting_sales")).collect()
    monkeypatch.setattr(globalviews._SESSIONS[spark].views, "bound", 1)
    first = lasting_views(spark) - before
    other = "SELECT count(*) FROM lasting_sales WITH ('partitionFilter' = 'region IS NULL')"
    assert dynsource.sql(spark, other).collect()[0][0] == 1  # another scan: its view replaces the first
    assert len(lasting_views(spark) - before) == 1 and not first & lasting_views(spark)
    assert rows(dynsource.sql(spark, QUERY.format(t="lasting_sales"))) == rows(
        spark.sql(QUERY.format(t="lasting_native")))


def test_a_view_the_user_makes_through_dynsource_sql_outlives_the_lasting_views(spark, sales):
    before = lasting_views(spark)
    dynsource.sql(spark, QUERY.format(t="lasting_sales")).collect()  # the scan is read again below: a lasting view
    dynsource.sql(spark, "CREATE OR REPLACE TEMPORARY VIEW lasting_users AS " + QUERY.format(t="lasting_sales"))
    try:
        for name in lasting_views(spark) - before:
            spark.catalog.dropGlobalTempView(name)
        assert rows(spark.table("lasting_users")) == rows(spark.sql(QUERY.format(t="lasting_native")))
    finally:
        spark.catalog.dropTempView("lasting_users")


def test_a_texts_own_error_naming_a_lasting_view_is_raised_from_one_analysis(spark, sales):
    from pyspark.errors import AnalysisException

    dynsource.sql(spark, QUERY.format(t="lasting_sales")).collect()
    before = lasting_views(spark)
    with pytest.raises(AnalysisException) as raised:
        dynsource.sql(spark, "SELECT region, sum(amount) FROM lasting_sales WHERE item > 1 GROUP BY item")
    assert "__dynsource_view_" in str(raised.value)  # Spark's message shows the plan, the view's name in it
    # Each view was looked up and none made again: the error is the first analysis's, raised while handling no
    # other analysis error (a second analysis's would be).
    handled, context = [], raised.value.__context__
    while context is not None:
        handled.append(context)
        context = context.__context__
    assert not any(isinstance(error, AnalysisException) for error in handled) and lasting_views(spark) == before


def test_kept_returns_what_it_drops_to_stay_within_its_bound():
    kept = LruMap(2)
    assert kept.put("a", 1) == [] and kept.put("b", 2) == []
    assert kept.get("a") == 1  # now b is the least recently used
    assert kept.put("c", 3) == [2]
    assert list(kept) == ["a", "c"]
