"""Automatic dynamic partition pruning in dynsource.sql, on a TPC-DS-shaped star schema.

Every query's rows equal ``spark.sql`` on the same files read natively. Pruning
is proven by damage: in the pruned copy of the fact table, the files of every
partition outside the year 2000 are overwritten with bytes that are not Parquet,
so a query that read one of them would fail.
"""

from __future__ import annotations

import re
import shutil
import time
import weakref
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynsource
from dynsource import cli
from dynsource.dpp import benefit, dimensions, queryplan, starjoin, unfiltered
from dynsource.dpp.queryreport import QueryReport
from dynsource.spark import filereader
from tests.spark_oracle import session_set

DAYS = 60
YEAR_2000 = range(20)  # d_date_sk of the year 2000; 20..59 are 2001
ROWS = 3000


def write_star(root: Path) -> None:
    sales = pa.table({
        "ss_sold_date_sk": [i % DAYS for i in range(ROWS)],
        "ss_item_sk": [i % 13 for i in range(ROWS)],
        "ss_store_sk": [i % 7 for i in range(ROWS)],
        "ss_customer_sk": [None if i % 11 == 0 else i % 17 for i in range(ROWS)],
        "ss_sales_price": [float(i % 100) for i in range(ROWS)],
    })
    pq.write_to_dataset(sales, root / "store_sales", partition_cols=["ss_sold_date_sk"])
    pq.write_table(pa.table({
        "d_date_sk": list(range(DAYS)),
        "d_year": [2000 if day in YEAR_2000 else 2001 for day in range(DAYS)],
        "d_moy": [day % 12 + 1 for day in range(DAYS)],
    }), root / "date_dim.parquet")
    pq.write_table(pa.table({
        "i_item_sk": list(range(13)), "i_brand_id": [i % 4 for i in range(13)],
        "i_brand": [f"brand{i % 4}" for i in range(13)],
        "i_category": [["Books", "Music", "Home"][i % 3] for i in range(13)],
        "i_manager_id": [i % 5 for i in range(13)],
    }), root / "item.parquet")
    pq.write_table(pa.table({"h_date_sk": [3, 5, 17], "h_name": ["a", "b", "c"]}), root / "holidays.parquet")
    pq.write_table(pa.table({"s_store_sk": list(range(7)), "s_state": ["TN", "CA", "TN", "NY", "CA", "TN", "WA"]}),
                   root / "store.parquet")


@pytest.fixture(scope="module")
def star_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("star")


@pytest.fixture(scope="module")
def star(spark, star_root):
    root = star_root
    write_star(root)
    for dimension in ("date_dim", "item", "store", "holidays"):
        spark.read.parquet(str(root / f"{dimension}.parquet")).createOrReplaceTempView(dimension)
    # A view whose DataFrame filters: the query's text holds no predicate on it.
    spark.table("date_dim").where("d_year = 2001").createOrReplaceTempView("date_dim_2001")
    spark.read.parquet(str(root / "store_sales")).createOrReplaceTempView("store_sales_native")
    shutil.copytree(root / "store_sales", root / "store_sales_pruned")
    for day in range(DAYS):
        if day not in YEAR_2000:
            for file in (root / "store_sales_pruned" / f"ss_sold_date_sk={day}").iterdir():
                file.write_bytes(b"not parquet: a pruned partition must never be opened")
    definitions = str(root / "definitions")
    for table, path in (("store_sales", "store_sales_pruned"), ("store_sales_all", "store_sales")):
        for suffix, reader in (("", "auto"), ("_python", "python")):  # Spark's file reader, and dynsource's
            dynsource.register_table(spark, table + suffix, path=str(root / path), definitions=definitions,
                                     replace=True, reader=reader)
    yield spark
    for table in ("store_sales", "store_sales_all", "store_sales_python", "store_sales_all_python"):
        dynsource.drop_table(spark, table, definitions=definitions)


def run(spark, query: str, fact: str = "store_sales") -> tuple[list, QueryReport]:
    """The rows and report of ``query`` on ``fact`` read by Spark's file reader, checked against spark.sql and
    against the same query with the fact read by dynsource's Python reader."""
    expected = sorted(spark.sql(query.format(fact="store_sales_native")).collect(), key=repr)
    by_python = dynsource.sql(spark, query.format(fact=fact + "_python"))
    assert sorted(by_python.collect(), key=repr) == expected
    df = dynsource.sql(spark, query.format(fact=fact))
    rows = sorted(df.collect(), key=repr)
    assert rows == expected
    assert sorted(df.collect(), key=repr) == expected  # the same DataFrame, a second action
    return rows, dynsource.scan_report(df)


PRUNED = {
    "q3": """SELECT dt.d_year, item.i_brand_id brand_id, item.i_brand brand, SUM(ss_sales_price) sum_agg
             FROM date_dim dt, {fact}, item
             WHERE dt.d_date_sk = {fact}.ss_sold_date_sk AND {fact}.ss_item_sk = item.i_item_sk
               AND item.i_manager_id = 1 AND dt.d_year = 2000
             GROUP BY dt.d_year, item.i_brand, item.i_brand_id""",
    "q42": """SELECT dt.d_year, item.i_category, sum(ss_sales_price) FROM date_dim dt, {fact}, item
              WHERE dt.d_date_sk = {fact}.ss_sold_date_sk AND {fact}.ss_item_sk = item.i_item_sk
                AND item.i_manager_id = 2 AND dt.d_moy = 3 AND dt.d_year = 2000
              GROUP BY dt.d_year, item.i_category""",
    "q52": """SELECT dt.d_year, item.i_brand_id, sum(ss_sales_price) ext_price FROM date_dim dt, {fact}, item
              WHERE dt.d_date_sk = ss_sold_date_sk AND ss_item_sk = i_item_sk AND i_manager_id = 3
                AND d_moy IN (1, 2, 3) AND d_year = 2000 GROUP BY dt.d_year, item.i_brand_id""",
    "q55": """SELECT i_brand_id brand_id, i_brand brand, sum(ss_sales_price) ext_price
              FROM date_dim JOIN {fact} ON d_date_sk = ss_sold_date_sk JOIN item ON ss_item_sk = i_item_sk
              WHERE i_manager_id = 4 AND d_moy BETWEEN 2 AND 5 AND d_year = 2000 GROUP BY i_brand, i_brand_id""",
    "q7_store_star": """SELECT s_state, d_moy, count(*) n, avg(ss_sales_price) FROM {fact} ss
              JOIN date_dim d ON ss.ss_sold_date_sk = d.d_date_sk JOIN store s ON ss.ss_store_sk = s.s_store_sk
              WHERE d.d_year = 2000 AND s.s_state IN ('TN', 'CA') GROUP BY s_state, d_moy""",
    "q19_three_dims": """SELECT i_brand, s_state, sum(ss_sales_price) FROM date_dim, {fact}, item, store
              WHERE d_date_sk = ss_sold_date_sk AND ss_item_sk = i_item_sk AND ss_store_sk = s_store_sk
                AND i_category = 'Books' AND d_year = 2000 AND d_moy = 4 AND s_state <> 'WA'
              GROUP BY i_brand, s_state""",
    "in_subquery": """SELECT ss_item_sk, count(*) FROM {fact}
              WHERE ss_sold_date_sk IN (SELECT d_date_sk FROM date_dim WHERE d_year = 2000 AND d_moy > 6)
              GROUP BY ss_item_sk""",
    "exists": """SELECT ss_store_sk, sum(ss_sales_price) FROM {fact} WHERE EXISTS (SELECT 1 FROM date_dim d
              WHERE d.d_date_sk = {fact}.ss_sold_date_sk AND d.d_year = 2000 AND d.d_moy = 2) GROUP BY ss_store_sk""",
    "left_semi": """SELECT * FROM {fact} LEFT SEMI JOIN date_dim ON ss_sold_date_sk = d_date_sk
              AND d_year = 2000 AND d_moy = 1""",
    "cte": """WITH days AS (SELECT d_date_sk, d_moy FROM date_dim WHERE d_year = 2000)
              SELECT d_moy, sum(ss_sales_price) FROM {fact} JOIN days ON ss_sold_date_sk = days.d_date_sk
              GROUP BY d_moy""",
    # The fact's rows passed through a CTE that projects and filters them (read once), as through a view.
    "fact_cte": """WITH f AS (SELECT ss_sold_date_sk AS day, ss_sales_price FROM {fact} WHERE ss_store_sk > 1)
              SELECT d_moy, sum(ss_sales_price) FROM f JOIN date_dim ON f.day = d_date_sk
              WHERE d_year = 2000 AND d_moy = 11 GROUP BY d_moy""",
    "derived_table": """SELECT count(*), sum(ss_sales_price) FROM {fact} f,
              (SELECT d_date_sk FROM date_dim WHERE d_year = 2000 AND d_moy < 4) d
              WHERE f.ss_sold_date_sk = d.d_date_sk""",
    "fact_null_supplied": """SELECT d_date_sk, count(ss_item_sk) FROM date_dim LEFT JOIN {fact}
              ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000 GROUP BY d_date_sk""",
    "null_safe_inner": """SELECT count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk <=> d_date_sk
              WHERE d_year = 2000""",
}
# A dimension nothing filters, of three rows: pruned only where the session collects such dimensions.
SMALL_RELATION = """SELECT h_name, count(*), sum(ss_sales_price) FROM {fact} JOIN holidays
              ON ss_sold_date_sk = h_date_sk GROUP BY h_name"""
# A dimension filtered by a subquery alone: dynsource's keys query leaves the subquery out (it would collect every
# key), Spark's dynamic partition pruning counts it as selective.
LEFT_TO_SPARK_ONLY = {
    "subquery_filtered": """SELECT d.d_moy, count(*) FROM {fact} JOIN date_dim d ON ss_sold_date_sk = d.d_date_sk
              WHERE d.d_year = (SELECT min(d_year) FROM date_dim) GROUP BY d.d_moy""",
}


@pytest.mark.parametrize("name", sorted(PRUNED))
def test_star_queries_prune_the_fact_and_equal_spark(star, name):
    rows, report = run(star, PRUNED[name])
    assert rows
    (assignment,) = report.assignments
    assert assignment.handle is not None and "ss_sold_date_sk" in assignment.filter, str(report)
    (scan,) = report.scans()
    assert scan.partitions_total == DAYS and scan.partitions_kept <= len(YEAR_2000), str(report)


NOT_PRUNED = {
    "fact_preserved_left": ("SELECT count(*), count(d_year) FROM {fact} LEFT JOIN date_dim "
                            "ON ss_sold_date_sk = d_date_sk AND d_year = 2000", "preserved by the LEFT JOIN"),
    "full_outer": ("SELECT count(*) FROM {fact} FULL JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                   "WHERE d_year = 2000 OR d_year IS NULL", "FULL join keeps fact rows"),
    "anti": ("SELECT count(*) FROM {fact} LEFT ANTI JOIN date_dim ON ss_sold_date_sk = d_date_sk "
             "AND d_year = 2000", "ANTI join keeps fact rows"),
    "small_unfiltered_dimension": ("SELECT count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                                   "WHERE d_date_sk IS NOT NULL", "not collected: nothing filters the dimension"),
    "small_dimension_filtered_by_a_view": ("SELECT count(*) FROM {fact} JOIN date_dim_2001 "
                                           "ON ss_sold_date_sk = d_date_sk", "not worth applying"),
    "no_benefit": ("SELECT count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2001",
                   "not worth applying"),
    "no_join": ("SELECT count(*) FROM {fact} WHERE ss_store_sk = 3", "no join of a dynsource table"),
}


@pytest.mark.parametrize("name", sorted(NOT_PRUNED))
def test_joins_that_must_not_or_need_not_prune_run_as_written_and_say_why(star, name):
    query, reason = NOT_PRUNED[name]
    _, report = run(star, query, fact="store_sales_all")
    assert all(assignment.handle is None for assignment in report.assignments), str(report)
    assert reason in str(report)


def test_a_dimension_without_a_selective_predicate_prunes_only_if_it_is_a_small_relation(star, monkeypatch,
                                                                                          unfiltered_dimensions):
    monkeypatch.setattr(dimensions, "SMALL_RELATION_ROWS", 10)
    unfiltered_dimensions("collect")  # the dimension drops null keys only: else not collected at all
    # Not the text of NOT_PRUNED's small_unfiltered_dimension, whose decline on this fact is remembered.
    _, report = run(star, "SELECT count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                          "WHERE d_date_sk IS NOT NULL AND d_moy IS NOT NULL", fact="store_sales_all")
    assert report.assignments[0].handle is None
    assert "no selective predicate and more than 10 rows (not a small relation)" in str(report)
    _, small = run(star, SMALL_RELATION)
    assert small.assignments[0].keys == 3 and small.scans()[0].partitions_kept == 3


def test_a_dimension_nothing_filters_is_not_collected_unless_the_session_collects_such_dimensions(
        star, unfiltered_dimensions, monkeypatch):
    """A join of holidays only to group by its name: Spark's dynamic partition pruning does not prune by it, nor does
    dynsource.sql by default, which submits no collection; ``collect`` collects its three keys, which prune."""
    submitted = []
    submit = dimensions.Dimensions.submit
    monkeypatch.setattr(dimensions.Dimensions, "submit",
                        lambda self, pruning, types: submitted.append(pruning) or submit(self, pruning, types))
    _, skipped = run(star, SMALL_RELATION, fact="store_sales_all")
    assert skipped.assignments[0].handle is None and unfiltered.REASON in str(skipped), str(skipped)
    assert not submitted
    unfiltered_dimensions("collect")
    _, collected = run(star, SMALL_RELATION)  # the damaged partitions of 2001 are never opened
    assert collected.assignments[0].keys == 3 and collected.scans()[0].partitions_kept == 3, str(collected)


def test_an_unfiltered_dimension_declined_on_a_fact_is_not_collected_again_until_a_table_changes(
        spark, star, unfiltered_dimensions):
    """A join of date_dim only to group by its year keeps every partition: not collected by default; where the
    session collects such dimensions, collected once and declined, the verdict is remembered for the same fact and
    dimension. The view replaced by a DataFrame that filters is collected again, by default too, and prunes."""
    query = ("SELECT d_year, count(*) FROM {fact} JOIN {dates} ON ss_sold_date_sk = d_date_sk GROUP BY d_year")
    spark.table("date_dim").createOrReplaceTempView("dates_unfiltered")
    _, skipped = run(star, query.format(fact="{fact}", dates="dates_unfiltered"), fact="store_sales_all")
    assert unfiltered.REASON in str(skipped) and "not worth applying" not in str(skipped), str(skipped)
    unfiltered_dimensions("collect")
    first, remembered = [run(star, query.format(fact="{fact}", dates="dates_unfiltered"), fact="store_sales_all")[1]
                         for _ in range(2)]
    assert "not worth applying" in str(first) and "not collected again" not in str(first), str(first)
    assert "not worth applying" in str(remembered) and "not collected again" in str(remembered), str(remembered)
    assert all(assignment.handle is None for assignment in remembered.assignments)
    unfiltered_dimensions("skip")
    try:  # the same name, a dimension of three days: collected, and it prunes
        spark.table("date_dim").where("d_date_sk IN (3, 5, 17)").createOrReplaceTempView("dates_unfiltered")
        _, replaced = run(star, query.format(fact="{fact}", dates="dates_unfiltered"), fact="store_sales_all")
        assert replaced.assignments[0].handle is not None and replaced.scans()[0].partitions_kept == 3, str(replaced)
    finally:
        spark.catalog.dropTempView("dates_unfiltered")


def test_a_dimension_text_repeated_in_a_query_is_read_and_collected_once(star):
    # TPC-DS q88's shape: subqueries that repeat a dimension with the same predicates.
    subquery = ("(SELECT count(*) {name} FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                "WHERE d_year = 2000 AND d_moy = 3 AND ss_store_sk = {store}) {name}")
    query = "SELECT * FROM " + ", ".join(subquery.format(name=f"s{store}", store=store) for store in range(3))
    plan = queryplan.plan(star, query)
    assert len(plan.assignments) == 3 and all(a.handle is not None for a in plan.assignments), str(plan.report)
    assert len({pin.reference for pin in plan.pinned}) == 1  # three scans, one snapshot of the dimension
    assert [name for name in plan.frames.frames if "pinned" in name] == ["__dynsource_pinned_0"]
    assert plan.run(star).collect() == star.sql(query.replace("store_sales", "store_sales_native")).collect()


def test_a_dimension_that_reads_a_dynsource_table_reads_it_as_the_query_does(star):
    # TPC-DS q14's cross_items and q95's ws_wh: dimension queries over facts. Their rows are read by read_table
    # (Spark's reader here), not through the table's Python source under its name.
    query = ("SELECT ss_store_sk, count(*) FROM {fact} WHERE ss_item_sk IN (SELECT ss_item_sk FROM store_sales_all "
             "WHERE ss_store_sk = 3 AND ss_sold_date_sk < 5) GROUP BY ss_store_sk")
    run(star, query, fact="store_sales_all")  # it prunes no directory: the damaged copy would be read
    plan = queryplan.plan(star, query.format(fact="store_sales_all"))
    assert [name for name in plan.frames.frames if name.startswith("__dynsource_fact_")], str(plan.report)
    expected = star.sql(query.format(fact="store_sales_native")).collect()
    assert sorted(plan.run(star).collect()) == sorted(expected)


def _jobs_run_by(spark, action) -> int:
    """How many Spark jobs ``action()`` started."""
    tracker = spark.sparkContext.statusTracker()
    before = max(tracker.getJobIdsForGroup(None), default=-1)
    action()
    return sum(job > before for job in tracker.getJobIdsForGroup(None))


def test_a_small_dimension_is_collected_by_one_spark_job_and_a_larger_one_by_a_checkpoint(star, monkeypatch):
    # At most SMALL_RELATION_ROWS rows are held in the driver and their keys (of the fact column's type) taken there:
    # one job. More rows go to a local checkpoint and a key job, after the job that found them too many. Both give the
    # same filter and rows.
    query = ("WITH days AS (SELECT CAST(d_date_sk AS INT) d_date_sk, d_moy FROM date_dim WHERE d_year = 2000) "
             "SELECT d_moy, count(*) FROM {fact} JOIN days ON ss_sold_date_sk = days.d_date_sk GROUP BY d_moy")
    expected = sorted(star.sql(query.format(fact="store_sales_native")).collect())
    plans = []
    assert _jobs_run_by(star, lambda: plans.append(queryplan.plan(star, query.format(fact="store_sales")))) == 1
    monkeypatch.setattr(dimensions, "SMALL_RELATION_ROWS", 1)
    assert _jobs_run_by(star, lambda: plans.append(queryplan.plan(star, query.format(fact="store_sales")))) == 3
    for plan in plans:
        (assignment,) = plan.assignments
        assert assignment.keys == len(YEAR_2000) and assignment.payload_kind == "exact", str(plan.report)
        assert sorted(plan.run(star).collect()) == expected


def test_a_scan_no_dimension_prunes_is_read_while_the_dimensions_are_collected(star):
    query = ("SELECT 'pruned' side, count(*) n FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
             "WHERE d_year = 2000 AND d_moy = 2 UNION ALL SELECT 'whole', count(*) FROM {whole} WHERE ss_store_sk = 3")
    plan = queryplan.plan(star, query.format(fact="store_sales", whole="store_sales_all"), prepare=True)
    assert [scan.table for scan in plan.prepared] == ["default.store_sales_all"], str(plan.report)
    df = plan.run(star)
    assert len([name for name in plan.frames.frames if name.startswith("__dynsource_fact_")]) == 2  # none read twice
    assert sorted(df.collect()) == sorted(star.sql(query.format(fact="store_sales_native",
                                                                whole="store_sales_native")).collect())


def test_scans_of_one_table_with_the_same_columns_and_partition_filter_share_one_read(star):
    # TPC-DS q9's shape: scalar subqueries over the same table, no join to prune by.
    query = ("SELECT (SELECT count(*) FROM {t} WHERE ss_store_sk BETWEEN 1 AND 5) a, "
             "(SELECT count(*) FROM {t} WHERE ss_store_sk BETWEEN 6 AND 10) b, "
             "(SELECT sum(ss_store_sk) FROM {t} WHERE ss_sold_date_sk < 5) c, "
             "(SELECT sum(ss_store_sk) FROM {t} WHERE ss_sold_date_sk < 9) d")
    plan = queryplan.plan(star, query.format(t="store_sales_all"), prepare=True)
    reads = [plan.prepared[scan] for scan in sorted(plan.prepared, key=lambda scan: scan.start)]
    assert len(reads) == 4 and reads[0] == reads[1] and len({*reads[1:]}) == 3, str(plan.report)
    df = plan.run(star)
    for _ in range(2):
        assert df.collect() == star.sql(query.format(t="store_sales_native")).collect()


@pytest.mark.parametrize("keys", [
    "CAST(d_date_sk AS INT) AS d_date_sk",  # held in the driver, its keys taken there
    "d_date_sk",  # a bigint key for an int partition column: its keys in the int range taken there
    "CAST(d_date_sk AS DECIMAL(12, 0)) AS d_date_sk",  # a decimal key for an int column: Spark casts it
    "CAST(d_date_sk AS INT) AS d_date_sk, INTERVAL '1' DAY AS step",  # no Arrow for an interval: a local checkpoint
])
def test_a_dimensions_rows_read_from_the_snapshot_equal_sparks_whatever_their_types(star, keys):
    # Every type Spark hands over as Arrow comes back unchanged (the session's time zone is not UTC here).
    columns = ("CAST(d_moy AS DECIMAL(10, 2)) dec, DATE '2000-01-01' + CAST(d_moy AS INT) day, "
               "CAST(d_moy AS TINYINT) tiny, TIMESTAMP '2000-03-26 02:30:00' + make_interval(0, 0, 0, d_moy) ts, "
               "CAST(NULL AS STRING) nothing, "
               "array(d_moy, NULL) list, map('m', d_moy) dict, named_struct('y', d_year) record, X'CAFE' bytes, "
               "-0.0D zero, CAST(DATE '2000-01-01' + CAST(d_moy AS INT) AS TIMESTAMP_NTZ) ntz")
    query = (f"WITH days AS (SELECT {keys}, d_moy, {columns} FROM date_dim WHERE d_year = 2000 AND d_moy < 3) "
             "SELECT days.*, count(*) n FROM {fact} JOIN days ON ss_sold_date_sk = days.d_date_sk "
             "GROUP BY ALL")
    zone = star.conf.get("spark.sql.session.timeZone")
    star.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        rows, report = run(star, query)
    finally:
        star.conf.set("spark.sql.session.timeZone", zone)
    assert len(rows) == 4 and report.scans()[0].partitions_kept == 4, str(report)


def test_a_declined_dimension_is_read_from_its_snapshot_only_if_it_reads_a_dynsource_table(star):
    # TPC-DS q14: cross_items (an intersect over three facts) keeps every item, so its filter is declined; the query
    # reads it from the snapshot its collection made rather than scanning the facts again. A declined filter from a
    # plain dimension leaves that dimension as written (Spark evaluates it cheaply, and may prune by it itself).
    over_fact = ("SELECT ss_store_sk, count(*) FROM {fact} WHERE ss_item_sk IN "
                 "(SELECT ss_item_sk FROM store_sales_all WHERE ss_sales_price >= 0) GROUP BY ss_store_sk")
    over_dimension = ("SELECT ss_store_sk, count(*) FROM {fact} JOIN item ON ss_item_sk = i_item_sk "
                      "WHERE i_brand_id >= 0 GROUP BY ss_store_sk")
    for query, pinned in ((over_fact, 1), (over_dimension, 0)):
        plan = queryplan.plan(star, query.format(fact="store_sales_all"))
        report = str(plan.report)
        assert not any(a.handle for a in plan.assignments) and "not worth applying" in report, report
        assert len(plan.pinned) == pinned, report
        expected = star.sql(query.format(fact="store_sales_native")).collect()
        assert sorted(plan.run(star).collect()) == sorted(expected)


def test_a_collection_past_the_budget_leaves_the_scan_unfiltered_and_says_so(star):
    def slow_moy(moy: int) -> int:
        time.sleep(0.02)
        return moy

    star.udf.register("slow_moy", slow_moy, "int")
    query = ("SELECT d_moy, count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
             "WHERE slow_moy(d_moy) = 3 GROUP BY d_moy")
    star.conf.set(dimensions.TIMEOUT_CONF, "100")
    try:
        rows, report = run(star, query, fact="store_sales_all")
    finally:
        star.conf.unset(dimensions.TIMEOUT_CONF)
    assert rows and report.assignments[0].handle is None
    assert "took longer than the budget of 100 ms (spark.dynsource.collectTimeoutMs)" in str(report)
    _, collected = run(star, query, fact="store_sales_all")  # the default budget: collected and applied
    assert collected.scans()[0].partitions_kept == 5


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_collection_budget_is_an_error_naming_the_setting(star, value):
    star.conf.set(dimensions.TIMEOUT_CONF, value)
    try:
        with pytest.raises(ValueError, match=r"spark.dynsource.collectTimeoutMs must be a whole number .* got"):
            dynsource.sql(star, "SELECT count(*) FROM store_sales")
    finally:
        star.conf.unset(dimensions.TIMEOUT_CONF)


@pytest.fixture
def min_scan_bytes(star):
    """Sets ``spark.dynsource.dataFilterMinScanBytes`` (None: unset, Spark's runtime filter threshold applies)."""
    before = star.conf.get(benefit.MIN_SCAN_CONF)

    def set_to(value: str | None) -> None:
        if value is None:
            star.conf.unset(benefit.MIN_SCAN_CONF)
        else:
            star.conf.set(benefit.MIN_SCAN_CONF, value)

    yield set_to
    star.conf.set(benefit.MIN_SCAN_CONF, before)


def test_a_data_column_filter_is_collected_for_sparks_reader_only_for_a_fact_past_the_size_setting(
        star, star_root, min_scan_bytes):
    query = ("SELECT s_state, count(*), sum(ss_sales_price) FROM {fact} JOIN store ON ss_store_sk = s_store_sk "
             "WHERE s_state = 'TN' GROUP BY s_state")
    # Estimated as every partition the size of the first one down the walk.
    first = star_root / "store_sales" / "ss_sold_date_sk=0"
    estimate = DAYS * sum(file.stat().st_size for file in first.iterdir())
    for setting, collected in ((None, False), (str(estimate + 1), False), (str(estimate), True)):
        min_scan_bytes(setting)
        _, report = run(star, query, fact="store_sales_all")
        assert (report.assignments[0].handle is not None) is collected, (setting, str(report))
        if not collected:
            least = 10 * 2**30 if setting is None else estimate + 1
            assert ("not collected: its columns are data columns of a fact Spark's file reader reads, where the join "
                    "filters the rows and the keys could only skip row groups, not worth a collection on "
                    f"{estimate:,} bytes (estimated), under spark.dynsource.dataFilterMinScanBytes ({least:,})"
                    ) in str(report)
        # dynsource's own reader filters the rows before they reach Spark: there the filter is always collected.
        python = dynsource.scan_report(dynsource.sql(star, query.format(fact="store_sales_all_python")))
        assert python.assignments[0].handle is not None


@pytest.mark.parametrize("value", ["lots", "-1"])
def test_a_bad_data_filter_size_setting_is_an_error_naming_it(star, min_scan_bytes, value):
    min_scan_bytes(value)
    with pytest.raises(ValueError, match=r"spark.dynsource.dataFilterMinScanBytes must be a size in bytes, 0 or "
                                         r"more, such as 0, 512m or 10g; got '" + value):
        dynsource.sql(star, "SELECT count(*) FROM store_sales")


@pytest.fixture
def unfiltered_dimensions(star):
    """Sets ``spark.dynsource.unfilteredDimensions`` (default ``skip``), restored afterwards."""
    with session_set(star, {unfiltered.UNFILTERED_CONF: "skip"}):
        yield lambda value: star.conf.set(unfiltered.UNFILTERED_CONF, value)


@pytest.fixture
def partition_pruning(star):
    """Sets ``spark.dynsource.partitionPruning`` (the suite's session collects), restored afterwards."""
    before = star.conf.get(benefit.PRUNING_CONF)
    yield lambda value: star.conf.set(benefit.PRUNING_CONF, value)
    star.conf.set(benefit.PRUNING_CONF, before)


@pytest.mark.parametrize(("name", "jobs"), [
    ("q7_store_star", 1),  # the store dimension's keys, on a data column, are collected: one job
    ("in_subquery", 0), ("exists", 0), ("left_semi", 0), ("cte", 0), ("derived_table", 0), ("subquery_filtered", 0)])
def test_a_local_tables_partitions_are_left_to_sparks_dpp_by_default(star, partition_pruning, name, jobs):
    # `store_sales` holds a damaged file in every partition of another year: the rows come back only because Spark's
    # own dynamic partition pruning drops those partitions at run time, from the listing of all of them.
    partition_pruning("auto")
    dynsource.table(star, "store_sales")  # the session has read the table: its listing is kept
    query, made = {**PRUNED, **LEFT_TO_SPARK_ONLY}[name], []
    assert _jobs_run_by(star, lambda: made.append(dynsource.sql(star, query.format(fact="store_sales")))) == jobs
    (df,) = made
    expected = sorted(star.sql(query.format(fact="store_sales_native")).collect(), key=repr)
    for _ in range(2):  # the same DataFrame, two actions
        assert sorted(df.collect(), key=repr) == expected
    assert re.search(r"dynamicpruningexpression\((cast\()?ss_sold_date_sk",
                     df._jdf.queryExecution().executedPlan().toString())
    report = dynsource.scan_report(df)
    assert LEFT_TO_SPARK.search(str(report)), str(report)
    assert not any("ss_sold_date_sk" in (a.filter or "") for a in report.assignments), str(report)
    if name in LEFT_TO_SPARK_ONLY:
        return
    # dynsource's own reader, which Spark's pruning does not reach, is pruned by dynsource's collection.
    python = dynsource.sql(star, PRUNED[name].format(fact="store_sales_python"))
    assert sorted(python.collect(), key=repr) == expected
    assert any(a.handle is not None for a in dynsource.scan_report(python).assignments)


def test_a_sessions_first_query_of_a_local_table_collects_and_its_later_ones_leave_it_to_spark(
        star, partition_pruning, monkeypatch):
    # A batch job's first query: Spark would list every partition of a table the session never read, which costs
    # more than a collection; once read, its listing is kept and costs less.
    monkeypatch.setattr(filereader, "_PLANNED", weakref.WeakKeyDictionary())  # a session that read no table yet
    partition_pruning("auto")
    query = PRUNED["cte"]
    expected = sorted(star.sql(query.format(fact="store_sales_native")).collect(), key=repr)
    first = dynsource.sql(star, query.format(fact="store_sales"))
    assert sorted(first.collect(), key=repr) == expected
    (assignment,) = dynsource.scan_report(first).assignments
    assert assignment.handle is not None and "ss_sold_date_sk" in assignment.filter, str(dynsource.scan_report(first))
    later = dynsource.sql(star, query.format(fact="store_sales"))
    assert sorted(later.collect(), key=repr) == expected
    assert LEFT_TO_SPARK.search(str(dynsource.scan_report(later))), str(dynsource.scan_report(later))


@pytest.mark.parametrize("mode", ["auto", "collect"])
def test_a_damaged_file_in_a_partition_the_query_does_not_read_is_never_opened(star, star_root, partition_pruning,
                                                                               mode, definitions):
    """The table's first data file (ss_sold_date_sk=0) is damaged; queries of other days read as in Spark, whoever
    prunes (Spark's DPP in auto, dynsource's collection) and whichever reader reads."""
    damaged = star_root / f"store_sales_first_damaged_{mode}"
    shutil.copytree(star_root / "store_sales", damaged)
    for reader in ("auto", "python"):  # registered (its schema read) while the file was whole
        dynsource.register_table(star, f"damaged_{reader}", path=str(damaged), definitions=definitions, reader=reader)
    for file in (damaged / "ss_sold_date_sk=0").iterdir():
        file.write_bytes(b"not parquet: this partition is never read")
    partition_pruning(mode)
    query = """SELECT d_moy, count(*), sum(ss_sales_price) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk
               WHERE d_year = 2001 AND d_moy IN (3, 4) GROUP BY d_moy"""
    expected = sorted(star.sql(query.format(fact="store_sales_native")).collect(), key=repr)
    try:
        for reader in ("auto", "python"):
            df = dynsource.sql(star, query.format(fact=f"damaged_{reader}"))
            assert sorted(df.collect(), key=repr) == expected == sorted(df.collect(), key=repr), reader
            static = dynsource.sql(star, f"SELECT count(*) FROM damaged_{reader} WHERE ss_sold_date_sk > 30")
            assert static.collect() == star.sql("SELECT count(*) FROM store_sales_native WHERE ss_sold_date_sk > 30"
                                                ).collect()
    finally:
        for reader in ("auto", "python"):
            dynsource.drop_table(star, f"damaged_{reader}", definitions=definitions)


def test_the_dataframe_door_to_a_registered_table_gets_sparks_own_pruning_and_is_a_dynamic_joins_fact(star):
    """``dynsource.table``: DataFrame code joining a registered table at Spark's speed. ``store_sales`` holds a
    damaged file in every partition of 2001: the rows come back only because the join is pruned."""
    dates = star.table("date_dim").where("d_year = 2000 AND d_moy = 3")
    expected = sorted(star.sql("SELECT ss_item_sk, ss_sales_price FROM store_sales_native JOIN date_dim ON "
                               "ss_sold_date_sk = d_date_sk WHERE d_year = 2000 AND d_moy = 3").collect(), key=repr)
    sales = dynsource.table(star, "store_sales", columns=["ss_item_sk", "ss_sales_price", "ss_sold_date_sk"])
    joined = sales.join(dates, sales.ss_sold_date_sk == dates.d_date_sk).select("ss_item_sk", "ss_sales_price")
    for _ in range(2):  # the same DataFrame, two actions
        assert sorted(joined.collect(), key=repr) == expected
    assert "dynamicpruningexpression" in joined._jdf.queryExecution().executedPlan().toString()
    for fact in (dynsource.table(star, "store_sales_python"), dynsource.table(star, "store_sales")):
        pruned = dynsource.dynamic_join(fact, dates, {"ss_sold_date_sk": "d_date_sk"})
        assert sorted(pruned.select("ss_item_sk", "ss_sales_price").collect(), key=repr) == expected
        assert dynsource.scan_report(pruned).partitions_kept <= len(YEAR_2000)
    with pytest.raises(ValueError, match=r"a DataFrame of dynsource.table\(spark, name\); this DataFrame is none"):
        dynsource.dynamic_join(dates, dates, {"d_date_sk": "d_date_sk"})


LEFT_TO_SPARK = re.compile(
    re.escape("ss_sold_date_sk) <- ") + r"[^:]+" + re.escape(
        ": left to Spark's dynamic partition pruning at run time: the table is on a local disk, where listing all of "
        "its partitions costs less than a collection (spark.dynsource.partitionPruning = auto)"))


@pytest.mark.parametrize("name", ["small_relation", "null_safe_inner"])
def test_a_join_sparks_dpp_does_not_prune_is_collected_by_dynsource_in_auto(star, partition_pruning,
                                                                             unfiltered_dimensions, name):
    # Spark prunes by an equality with a dimension holding a selective predicate: not by <=>, not by a small table
    # (which dynsource collects where the session collects unfiltered dimensions).
    partition_pruning("auto")
    unfiltered_dimensions("collect")
    _, report = run(star, SMALL_RELATION if name == "small_relation" else PRUNED[name])
    assert report.assignments[0].handle is not None, str(report)


def _final_plan(df) -> str:
    """The executed plan of ``df`` once an action ran: adaptive execution's final one, without its initial plan."""
    return df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]


def _pruned_where_spark_drops_its_filter(star, query: str) -> list:
    """Spark's rows of ``query`` on the native table, whose final plan drops its pruning filter; dynsource.sql's
    equal them and read the 2000 partitions only (the damaged 2001 ones never opened)."""
    plain = star.sql(query.format(fact="store_sales_native"))
    expected = sorted(plain.collect())
    assert "dynamicpruningexpression(true)" in _final_plan(plain)
    df = dynsource.sql(star, query.format(fact="store_sales"))
    assert sorted(df.collect()) == expected
    report = dynsource.scan_report(df)
    (assignment,) = report.assignments
    assert assignment.handle is not None and "ss_sold_date_sk" in assignment.filter, str(report)
    assert report.scans()[0].partitions_kept == len(YEAR_2000)
    return expected


@pytest.mark.parametrize("hint", ["MERGE(d)", "SHUFFLE_HASH(d)", "BROADCAST(ss)"])
def test_a_join_hinted_so_that_spark_broadcasts_no_dimension_is_collected_by_dynsource_in_auto(
        star, partition_pruning, hint):
    # Spark's dynamic partition pruning reuses the dimension's broadcast: under these hints there is none, and its
    # final plan drops the pruning filter (dynamicpruningexpression(true)) and reads every partition. The damaged
    # partitions of 2001 prove that dynsource prunes them instead.
    partition_pruning("auto")
    dynsource.table(star, "store_sales")  # the session has read the table: without the hint it is left to Spark
    query = (f"SELECT /*+ {hint} */ d.d_moy, count(*) FROM {{fact}} ss JOIN date_dim d "
             "ON ss.ss_sold_date_sk = d.d_date_sk WHERE d.d_year = 2000 GROUP BY d.d_moy")
    expected = _pruned_where_spark_drops_its_filter(star, query)
    unhinted = dynsource.sql(star, query.replace(f"/*+ {hint} */ ", "").format(fact="store_sales"))
    assert sorted(unhinted.collect()) == expected and LEFT_TO_SPARK.search(str(dynsource.scan_report(unhinted)))
    assert "dynamicpruningexpression(cast(ss_sold_date_sk" in _final_plan(unhinted)


def test_a_dimension_spark_does_not_broadcast_for_its_size_is_collected_by_dynsource_in_auto(
        star, partition_pruning):
    # Over spark.sql.autoBroadcastJoinThreshold (here: no broadcast by size at all) Spark plans a sort-merge join,
    # and its dynamic partition pruning, which reuses a broadcast, drops its filter and reads every partition.
    partition_pruning("auto")
    dynsource.table(star, "store_sales")  # the session has read the table: with a broadcast it is left to Spark
    query = ("SELECT d.d_moy, count(*) FROM {fact} ss JOIN date_dim d ON ss.ss_sold_date_sk = d.d_date_sk "
             "WHERE d.d_year = 2000 GROUP BY d.d_moy")
    star.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        expected = _pruned_where_spark_drops_its_filter(star, query)
    finally:
        star.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    broadcast = dynsource.sql(star, query.format(fact="store_sales"))
    assert sorted(broadcast.collect()) == expected and LEFT_TO_SPARK.search(str(dynsource.scan_report(broadcast)))


def test_with_sparks_dpp_off_dynsource_collects_in_auto(star, partition_pruning):
    partition_pruning("auto")
    star.conf.set(benefit.SPARK_DPP_CONF, "false")
    try:
        _, report = run(star, PRUNED["q3"])
    finally:
        star.conf.unset(benefit.SPARK_DPP_CONF)
    assert report.assignments[0].handle is not None, str(report)


def test_a_bad_partition_pruning_setting_is_an_error_naming_it_and_its_values(star, partition_pruning):
    partition_pruning("spark")
    with pytest.raises(ValueError, match=r"spark.dynsource.partitionPruning must be one of auto, collect; "
                                         r"got 'spark'"):
        dynsource.sql(star, "SELECT count(*) FROM store_sales")


def test_the_query_predicates_on_partition_columns_prune_through_partition_filter(star):
    rows, report = run(star, "SELECT count(*), sum(ss_sales_price) FROM {fact} s WHERE s.ss_sold_date_sk < 12 "
                             "AND ss_store_sk > 2 AND ss_sold_date_sk % 2 = 0")
    assert rows[0][0] > 0
    (assignment,) = report.assignments
    assert assignment.handle is None and assignment.partition_filter == "(ss_sold_date_sk < 12)"
    assert report.scans() == [None]  # no dynamic filter, so no dynamic scan report
    # The same terms in parentheses, as generated SQL writes them.
    parenthesised, again = run(star, "SELECT count(*), sum(ss_sales_price) FROM {fact} s WHERE (s.ss_sold_date_sk < 12 "
                                     "AND ((ss_store_sk > 2) AND ss_sold_date_sk % 2 = 0))")
    assert parenthesised == rows and again.assignments[0].partition_filter == "(ss_sold_date_sk < 12)"
    _, joined = run(star, "SELECT d_moy, count(*) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                          "WHERE d_moy = 3 AND ss_sold_date_sk BETWEEN 0 AND 10 GROUP BY d_moy")
    (both,) = joined.assignments
    assert both.handle is not None and both.partition_filter == "(ss_sold_date_sk BETWEEN 0 AND 10)"
    _, parenthesised = run(star, "SELECT d_moy, count(*) FROM {fact} JOIN date_dim ON (ss_sold_date_sk = d_date_sk) "
                                 "WHERE (d_moy = 3 AND (ss_sold_date_sk BETWEEN 0 AND 10)) GROUP BY d_moy")
    assert [(a.handle is not None, a.partition_filter) for a in parenthesised.assignments] == [
        (True, "(ss_sold_date_sk BETWEEN 0 AND 10)")]
    assert joined.scans()[0].partitions_kept == 1  # of the March days 2, 14, 26, 38 and 50, only 2 is at most 10


def test_a_reference_that_carries_its_own_dynamic_filter_is_left_alone(star):
    handle = dynsource.collect(star.sql("SELECT d_date_sk FROM date_dim WHERE d_year = 2000 AND d_moy = 5"),
                               {"ss_sold_date_sk": "d_date_sk"})
    query = ("SELECT count(*), sum(ss_sales_price) FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk "
             "WHERE d_year = 2000 AND d_moy = 5")
    expected = star.sql(query.format(fact="store_sales_native")).collect()
    df = dynsource.sql(star, query.format(fact=f"store_sales WITH ('dynamicFilter' = '{handle}')"))
    assert df.collect() == expected
    report = dynsource.scan_report(df)
    (given,) = report.assignments
    assert (given.handle, given.given, report.notes) == (handle, ("dynamicFilter",), ())
    lines = str(report).splitlines()
    assert lines[0] == (f"default.store_sales: read with its own WITH options (dynamicFilter), pruned by dynamic "
                        f"filter {handle}; dynsource.sql adds no filter to a reference that carries options")
    assert f"  partitions: 2 of {DAYS} kept" in lines
    assert dynsource.scan_report(handle).partitions_kept == 2
    static = dynsource.sql(star, "SELECT count(*) FROM store_sales WITH ('partitionFilter' = 'ss_sold_date_sk < 3')")
    assert static.collect() == star.sql("SELECT count(*) FROM store_sales_native WHERE ss_sold_date_sk < 3").collect()
    assert str(dynsource.scan_report(static)) == (
        "default.store_sales: read with its own WITH options (partitionFilter), pruned by partitionFilter "
        "'ss_sold_date_sk < 3'; dynsource.sql adds no filter to a reference that carries options")


@pytest.mark.parametrize(("query", "stopped_by"), [
    ("SELECT d_moy, count(*) FROM (SELECT ss_sold_date_sk, rank() OVER (ORDER BY ss_sales_price) AS r FROM {fact}) f "
     "JOIN date_dim ON f.ss_sold_date_sk = d_date_sk WHERE d_year = 2000 AND r > 1 GROUP BY d_moy",
     "f reads default.{fact} through a window function"),
    ("WITH f AS (SELECT ss_sold_date_sk, count(*) AS n FROM {fact} GROUP BY ss_sold_date_sk) SELECT d_moy, sum(n) "
     "FROM f JOIN date_dim ON f.ss_sold_date_sk = d_date_sk WHERE d_year = 2000 GROUP BY d_moy",
     "f reads default.{fact} through an aggregate"),
    ("SELECT d_moy, count(*) FROM (SELECT ss_sold_date_sk FROM {fact} UNION ALL SELECT ss_sold_date_sk FROM {fact}) "
     "f JOIN date_dim ON f.ss_sold_date_sk = d_date_sk WHERE d_year = 2000 GROUP BY d_moy",
     "f reads default.{fact} through a UNION ALL"),
])
def test_a_join_behind_a_window_an_aggregate_or_a_union_is_reported_with_what_stopped_it(star, query, stopped_by):
    _, report = run(star, query, fact="store_sales_all")
    assert stopped_by.format(fact="store_sales_all") in str(report), str(report)
    assert "no join of a dynsource table" not in str(report)


def test_a_scan_pruned_by_the_querys_own_partition_predicates_is_not_reported_as_unpruned(star):
    _, report = run(star, "SELECT count(*) FROM {fact} WHERE ss_sold_date_sk < 3")
    assert str(report) == "default.store_sales AS store_sales: partitionFilter '(ss_sold_date_sk < 3)'"


def test_an_analysis_that_fails_runs_the_query_as_written(star, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("an analysis defect")

    monkeypatch.setattr(starjoin, "detect", broken)
    _, report = run(star, PRUNED["q3"], fact="store_sales_all")
    assert report.assignments == () and report.notes == ("the query could not be analysed: an analysis defect",)


def test_a_query_sqlglot_cannot_read_runs_as_spark_sql(star):
    query = "SELECT count(*) FROM {fact} WHERE exists(array(1, 2), x -> x > ss_store_sk)"
    _, report = run(star, query, fact="store_sales_all")
    assert report.assignments == ()


def test_the_report_before_and_after_an_action(star):
    df = dynsource.sql(star, PRUNED["cte"].format(fact="store_sales_python"))  # planned at each action
    assert "run an action on the DataFrame first" in str(dynsource.scan_report(df))
    df.collect()
    assert f"partitions: 20 of {DAYS} kept" in str(dynsource.scan_report(df))
    df = dynsource.sql(star, PRUNED["cte"].format(fact="store_sales"))  # Spark's reader: planned by sql()
    text = str(dynsource.scan_report(df))
    assert "read by Spark's file reader" in text
    assert "default.store_sales (store_sales.ss_sold_date_sk) <- days (days.d_date_sk): exact, 20 keys" in text
    assert f"partitions: 20 of {DAYS} kept" in text
    assert "reads columns ['ss_sales_price', 'ss_sold_date_sk']" in text


def test_a_pruned_scan_reads_only_the_columns_the_query_uses(star):
    _, counted = run(star, PRUNED["derived_table"])
    assert counted.assignments[0].columns == ("ss_sales_price", "ss_sold_date_sk")
    _, starred = run(star, PRUNED["left_semi"])
    assert starred.assignments[0].columns is None and "reads all columns" in str(starred)
    # A * elsewhere in the statement (the dimension's) is no * over the fact.
    _, dimension_star = run(star, "SELECT d.*, count(*) AS n FROM {fact} f JOIN (SELECT * FROM date_dim) d "
                                  "ON f.ss_sold_date_sk = d.d_date_sk WHERE d.d_year = 2000 GROUP BY ALL")
    assert dimension_star.assignments[0].columns == ("ss_sold_date_sk",), str(dimension_star)


def test_explain_sql_collects_and_plans_without_running_the_query(star):
    report = dynsource.explain_sql(star, PRUNED["q7_store_star"].format(fact="store_sales"))
    text = str(report)
    assert f"partitions: 20 of {DAYS} kept" in text
    # The date keys (20) and the store keys of TN and CA (5 stores): one filter of two parts, 25 keys. The
    # dimensions are temporary views: named as written, without a database.
    assert ("default.store_sales (ss.ss_sold_date_sk) <- date_dim (d.d_date_sk) AND default.store_sales "
            "(ss.ss_store_sk) <- store (s.s_store_sk): all of 2 parts, 25 keys") in text
    lines = text.splitlines()
    assert any(line.startswith("    part ss_sold_date_sk: exact, 20 key(s), ") and
               line.endswith("applied to directories") for line in lines), text
    assert any(line.startswith("    part ss_store_sk: exact, 5 key(s), ") and
               line.endswith("applied to row groups and rows") for line in lines), text
    assert "not pruned" not in text
    # The store keys are a data column's: the read tasks would count row groups, but explain reads nothing.
    assert ("  row groups and rows (by data column(s) ['ss_store_sk']): not counted: the query was not run (explain "
            "plans scans without reading them)") in text.splitlines()


def test_the_sql_command_prints_rows_and_report_and_explains(star, star_root, capsys):
    query = PRUNED["cte"].format(fact="store_sales")
    cli.main(["sql", query, "--definitions", str(star_root / "definitions")])
    printed = capsys.readouterr().out
    assert "|d_moy|" in printed.replace(" ", "") and f"partitions: 20 of {DAYS} kept" in printed
    cli.main(["sql", "--explain", query, "--definitions", str(star_root / "definitions")])
    explained = capsys.readouterr().out
    assert "<- days (days.d_date_sk): exact, 20 keys" in explained and "|d_moy|" not in explained.replace(" ", "")


# Scans that need no column of the fact: each still gives one row per stored row, whichever reader reads it.
NO_COLUMN_SELECTS = ["count(*) AS n", "count(1) AS n", "1 AS one", "count(DISTINCT 1) AS n", "max(2) AS two"]
NO_COLUMN_SHAPES = {
    "alone": "SELECT {select} FROM {fact} f",
    "limited": "SELECT {select} FROM {fact} f LIMIT 7",
    "derived": "SELECT {select} FROM (SELECT 1 AS x FROM {fact}) f",
    "union": "SELECT {select} FROM (SELECT 1 AS x FROM {fact} UNION ALL SELECT 2 FROM {fact}) f",
    "exists": "SELECT {select} FROM date_dim f WHERE EXISTS (SELECT 1 FROM {fact} WHERE d_year = 2000)",
    "other_side": "SELECT {select}, d.d_moy FROM date_dim d, {fact} f WHERE d.d_date_sk < 2 GROUP BY d.d_moy",
    "scalar": "SELECT {select}, (SELECT count(*) FROM {fact}) AS total FROM date_dim f WHERE d_date_sk = 1",
}


@st.composite
def no_column_queries(draw) -> tuple[str, str]:
    """A shape and its query, whose scan of {fact} reads no column: aggregates of none, constants, EXISTS, the
    other side of a join."""
    shape = draw(st.sampled_from(sorted(NO_COLUMN_SHAPES)))
    selects = [s for s in NO_COLUMN_SELECTS if shape != "other_side" or s != "1 AS one"]  # grouped: aggregates
    return shape, NO_COLUMN_SHAPES[shape].format(select=draw(st.sampled_from(selects)), fact="{fact}")


def test_generated_reads_of_no_column_give_a_row_per_stored_row_by_both_readers(star):
    shapes: Counter = Counter()

    @settings(max_examples=NO_COLUMN_CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=no_column_queries())
    def check(case):
        shape, query = case
        rows, _ = run(star, query, fact="store_sales_all")
        assert rows, query
        shapes[shape] += 1

    check()
    print(f"generated reads of no column: {dict(shapes)}")
    assert sum(shapes.values()) == NO_COLUMN_CASES and len(shapes) >= 4


def test_a_count_of_the_python_readers_source_and_of_its_sql_equal_the_stored_rows(star, star_root):
    """``format("dynsource")`` and ``dynsource.sql`` with the Python reader, counting rows without reading a column."""
    df = star.read.format("dynsource").option("path", str(star_root / "store_sales")).load()
    assert df.count() == ROWS and df.select().count() == ROWS and df.count() == ROWS  # reused: acted on again
    assert df.selectExpr("1 AS one").limit(4).collect() == [(1,)] * 4
    df.createOrReplaceTempView("no_column_view")
    assert dynsource.sql(star, "SELECT count(*) FROM no_column_view").first()[0] == ROWS
    counted = dynsource.sql(star, "SELECT count(*) FROM store_sales_all_python")
    assert counted.first()[0] == ROWS and counted.first()[0] == ROWS


GENERATED_CASES = 16
NO_COLUMN_CASES = 10
DATE_PREDICATES = ["d_year = 2000", "d_moy = 3", "d_moy IN (2, 7)", "d_moy BETWEEN 4 AND 6", "d_date_sk < 9",
                   "d_year = 2001 AND d_moy > 10", "d_date_sk IS NOT NULL", "d_date_sk % 7 = 1"]
ITEM_PREDICATES = [None, "i_category = 'Books'", "i_brand LIKE 'brand1%'", "upper(i_category) = 'MUSIC'",
                   "i_manager_id IN (1, 2)"]
STORE_PREDICATES = [None, "s_state = 'TN'", "s_state <> 'WA'"]
DATE_JOINS = ["on", "comma", "semi", "in", "exists", "fact_preserved", "fact_null_supplied", "full"]


@st.composite
def star_queries(draw) -> tuple[str, str]:
    """A star query over {fact} and the dimensions: random predicates, join forms, aliases and CTEs."""
    date = draw(st.sampled_from(DATE_PREDICATES))
    join = draw(st.sampled_from(DATE_JOINS))
    op = draw(st.sampled_from(["=", "<=>"]))
    fact = draw(st.sampled_from(["{fact} f", "{fact} AS f"]))
    dates = draw(st.sampled_from(["date_dim d", "(SELECT * FROM date_dim) d", "dates d"]))
    cte = "WITH dates AS (SELECT d_date_sk, d_year, d_moy FROM date_dim) " if dates == "dates d" else ""
    joins, where = [], []
    if join == "on":
        joins.append(f"JOIN {dates} ON f.ss_sold_date_sk {op} d.d_date_sk AND {date.replace('d_', 'd.d_', 1)}")
    elif join == "comma":
        joins.append(f", {dates}")
        where += [f"f.ss_sold_date_sk {op} d.d_date_sk", date]
    elif join == "semi":
        joins.append(f"LEFT SEMI JOIN {dates} ON f.ss_sold_date_sk = d.d_date_sk AND {date}")
    elif join == "in":
        where.append(f"f.ss_sold_date_sk IN (SELECT d_date_sk FROM date_dim WHERE {date})")
    elif join == "exists":
        where.append(f"EXISTS (SELECT 1 FROM date_dim d WHERE d.d_date_sk = f.ss_sold_date_sk AND {date})")
    elif join == "fact_preserved":
        joins.append(f"LEFT JOIN {dates} ON f.ss_sold_date_sk = d.d_date_sk AND {date}")
    elif join == "fact_null_supplied":
        return (f"{cte}SELECT d.d_moy, count(f.ss_item_sk) AS n, sum(f.ss_sales_price) AS total FROM {dates} "
                f"LEFT JOIN {fact} ON f.ss_sold_date_sk = d.d_date_sk WHERE {date} GROUP BY d.d_moy", join, [])
    else:
        joins.append(f"FULL JOIN {dates} ON f.ss_sold_date_sk = d.d_date_sk")
        where.append(f"({date} OR d.d_date_sk IS NULL)")
    item, store = draw(st.sampled_from(ITEM_PREDICATES)), draw(st.sampled_from(STORE_PREDICATES))
    inner = join not in ("fact_preserved", "full")
    if item and inner:
        joins.append("JOIN item i ON f.ss_item_sk = i.i_item_sk")
        where.append(item)
    if store and inner:
        joins.append(", store s")
        where += ["f.ss_store_sk = s.s_store_sk", store]
    dimensions = [column for column, used in (("ss_item_sk", item), ("ss_store_sk", store)) if used and inner]
    joins = sorted(joins, key=lambda part: part.startswith(","))  # comma joins last: ON may not name them
    grouped = draw(st.booleans())
    select = "f.ss_store_sk, count(*) AS n, sum(f.ss_sales_price) AS total" if grouped else (
        "count(*) AS n, sum(f.ss_sales_price) AS total")
    text = f"{cte}SELECT {select} FROM {fact} {' '.join(joins)}"
    text += f" WHERE {' AND '.join(where)}" if where else ""
    return text + (" GROUP BY f.ss_store_sk" if grouped else ""), join, dimensions


def test_generated_star_queries_equal_spark(star):
    stats: Counter = Counter()

    @settings(max_examples=GENERATED_CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=star_queries())
    def check(case):
        query, join, dimensions = case
        _, report = run(star, query, fact="store_sales_all")
        pruned = [a for a in report.assignments if a.handle is not None]
        if join in ("fact_preserved", "full"):
            assert not pruned, (query, str(report))
        # Each filtered dimension on a data column is a part of the scan's filter (its keys add up, never multiply),
        # unless it keeps nearly every row: then the report says it does not pay.
        for column in dimensions:
            declined = any(f"(f.{column}) <- " in note and "not worth applying" in note for note in report.notes)
            assert declined or (pruned and f"(f.{column}) <- " in pruned[0].filter), (query, str(report))
            stats["declined"] += declined
        stats["cases"] += 1
        stats["pruned"] += bool(pruned)
        stats["parts"] += len(pruned[0].filter.split(" AND ")) if pruned else 0

    check()
    print(f"generated star queries: {dict(stats)}")
    assert stats["cases"] == GENERATED_CASES and stats["pruned"] > 0


def test_a_one_year_table_joined_on_year_month_and_day_is_pruned_to_the_days_kept(spark, tmp_path):
    # One year: the top level alone kept 1 of 1 and the filter was declined, so the Python reader read 60 of 60.
    root = tmp_path / "one_year"
    for month in range(1, 13):
        for day in range(1, 6):
            directory = root / "year=2000" / f"month={month}" / f"day={day}"
            pq.write_to_dataset(pa.table({"v": [month * 10 + day]}), directory)
    definitions = str(tmp_path / "definitions")
    dynsource.register_table(spark, "one_year_py", path=str(root), definitions=definitions, reader="python")
    try:
        spark.read.parquet(str(root)).createOrReplaceTempView("one_year_native")
        spark.createDataFrame([(2000, 2, 1, "a"), (2000, 2, 2, "a"), (2000, 3, 1, "a"), (2000, 3, 5, "b")],
                              "y INT, m INT, d INT, tag STRING").createOrReplaceTempView("ymd_days")
        query = ("SELECT v, year, month, day FROM {t} JOIN ymd_days ON year = y AND month = m AND day = d "
                 "WHERE tag = 'a'")
        df = dynsource.sql(spark, query.format(t="one_year_py"))
        assert sorted(df.collect()) == sorted(spark.sql(query.format(t="one_year_native")).collect())
        assert dynsource.scan_report(df).scans()[0].partitions_kept == 3, str(dynsource.scan_report(df))
    finally:
        dynsource.drop_table(spark, "one_year_py", definitions=definitions)
