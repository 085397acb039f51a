"""dynsource.sql sees through views over registered tables: their scans are read as the table's own, rows unchanged.

Every query is compared with ``spark.sql`` of the same text in the same session (which reads the table through the
view by its Python source), and with the same query on a view of ``spark.read.parquet``.
"""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import dynsource

ROWS = 600
DATES = [20240201 + day for day in range(6)]


def rows(df) -> list:
    return sorted(df.collect(), key=repr)


def plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


@pytest.fixture(scope="module")
def sales(spark, tmp_path_factory):
    """A dynsource table ``views_sales`` (v, region, date_key), its files as ``views_native``, and ``view_dates``."""
    root = tmp_path_factory.mktemp("views")
    table = pa.table({"v": list(range(ROWS)), "region": ["east" if i // 6 % 3 else "west" for i in range(ROWS)],
                      "date_key": [DATES[i % len(DATES)] for i in range(ROWS)]})
    pq.write_to_dataset(table, str(root / "sales"), partition_cols=["date_key", "region"])
    definitions = str(root / "definitions")
    dynsource.register_table(spark, "views_sales", path=str(root / "sales"), definitions=definitions, replace=True)
    spark.read.parquet(str(root / "sales")).createOrReplaceTempView("views_native")
    spark.createDataFrame([(d, d % 2 == 1) for d in DATES[:3]], "d INT, chosen BOOLEAN").createOrReplaceTempView(
        "view_dates")
    yield {"root": root, "definitions": definitions}
    for view in ("views_native", "view_dates"):
        spark.catalog.dropTempView(view)
    dynsource.drop_table(spark, "views_sales", definitions=definitions)


# Each view shape: the statements that make it, the name to query, its key and value columns, and the same rows
# written on the parquet files.
SHAPES = {
    "temporary, all columns": (["CREATE TEMP VIEW v_all AS SELECT * FROM views_sales"], "v_all", "date_key", "v",
                               "SELECT * FROM views_native"),
    "renamed and filtered": (["CREATE TEMP VIEW v_east (val, dk) AS SELECT v, date_key FROM views_sales "
                              "WHERE region = 'east'"], "v_east", "dk", "val",
                             "SELECT v AS val, date_key AS dk FROM views_native WHERE region = 'east'"),
    "a view over a view": (["CREATE TEMP VIEW v_base AS SELECT v, date_key, region FROM default.views_sales",
                            "CREATE TEMP VIEW v_top AS SELECT v * 2 AS v2, date_key FROM v_base WHERE v > 10"],
                           "v_top", "date_key", "v2",
                           "SELECT v * 2 AS v2, date_key FROM views_native WHERE v > 10"),
    "persistent": (["CREATE OR REPLACE VIEW v_kept AS SELECT s.v, s.date_key FROM views_sales s"], "v_kept",
                   "date_key", "v", "SELECT v, date_key FROM views_native"),
    "global temporary": (["CREATE OR REPLACE GLOBAL TEMP VIEW v_global AS SELECT v, date_key FROM views_sales"],
                         "global_temp.v_global", "date_key", "v", "SELECT v, date_key FROM views_native"),
    "a union": (["CREATE TEMP VIEW v_union AS SELECT v, date_key FROM views_sales WHERE region = 'east' "
                 "UNION ALL SELECT v + 1000, date_key FROM views_sales WHERE region = 'west'"], "v_union",
                "date_key", "v", "SELECT v, date_key FROM views_native WHERE region = 'east' "
                                 "UNION ALL SELECT v + 1000, date_key FROM views_native WHERE region = 'west'"),
    "a join": (["CREATE TEMP VIEW v_join AS SELECT s.v, s.date_key FROM Views_Sales s JOIN View_Dates "
                "ON s.date_key = View_Dates.d"], "v_join", "date_key", "v",
               "SELECT s.v, s.date_key FROM views_native s JOIN view_dates ON s.date_key = view_dates.d"),
}
QUERY = "SELECT count(*), sum({value}) FROM {view} JOIN view_dates ON {key} = d WHERE chosen"


def drop_views(spark) -> None:
    for name in ("v_all", "v_east", "v_base", "v_top", "v_union", "v_join", "v_sales", "v_settings", "v_options",
                 "v_collated"):
        spark.catalog.dropTempView(name)
    spark.catalog.dropGlobalTempView("v_global")
    spark.sql("DROP VIEW IF EXISTS default.v_kept")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_view_over_a_registered_table_is_read_by_sparks_reader_with_sparks_rows(spark, sales, shape):
    statements, view, key, value, native = SHAPES[shape]
    for statement in statements:
        spark.sql(statement)
    try:
        query = QUERY.format(value=value, view=view, key=key)
        expected = rows(spark.sql(query))
        assert expected == rows(spark.sql(QUERY.format(value=value, view=f"({native}) AS n", key=key)))
        df = dynsource.sql(spark, query)
        for _ in range(2):  # the same DataFrame, two actions
            assert rows(df) == expected
        assert "FileScan parquet" in plan(df) and "(Python)" not in plan(df)
        assert "read as Spark reads it" not in str(dynsource.scan_report(df))
    finally:
        drop_views(spark)


def test_a_name_in_a_view_means_what_it_meant_when_the_view_was_made(spark, sales):
    spark.sql("CREATE TEMP VIEW v_sales AS SELECT v, date_key FROM views_sales")
    # Made after the view, a temporary view of the table's name is not what the view reads; nor is a CTE.
    spark.read.parquet(str(sales["root"] / "sales")).limit(5).createOrReplaceTempView("views_sales")
    try:
        for query in ["SELECT count(*) FROM v_sales",
                      "WITH views_sales AS (SELECT 1 AS v, 1 AS date_key) SELECT count(*), sum(v) FROM v_sales",
                      QUERY.format(value="v", view="v_sales", key="date_key")]:
            expected = rows(spark.sql(query))
            df = dynsource.sql(spark, query)
            assert rows(df) == expected, query
            assert "(Python)" not in plan(df), query
        assert rows(spark.sql("SELECT count(*) FROM v_sales")) == [(ROWS,)]
    finally:
        spark.catalog.dropTempView("views_sales")
        drop_views(spark)


def test_a_view_made_in_another_database_reads_that_databases_tables(spark, sales):
    spark.sql("CREATE DATABASE IF NOT EXISTS views_other")
    try:
        dynsource.register_table(spark, "views_other.views_sales", path=str(sales["root"] / "sales"),
                                 definitions=sales["definitions"], partitionFilter="region = 'west'", replace=True)
        spark.catalog.setCurrentDatabase("views_other")
        try:
            spark.sql("CREATE VIEW v_west AS SELECT v, date_key FROM views_sales")
        finally:
            spark.catalog.setCurrentDatabase("default")
        query = QUERY.format(value="v", view="views_other.v_west", key="date_key")
        df = dynsource.sql(spark, query)
        assert rows(df) == rows(spark.sql(query))
        assert rows(df) == rows(spark.sql(QUERY.format(
            value="v", view="(SELECT * FROM views_native WHERE region = 'west') AS n", key="date_key")))
        assert "(Python)" not in plan(df)
    finally:
        dynsource.drop_table(spark, "views_other.views_sales", definitions=sales["definitions"])
        spark.sql("DROP DATABASE IF EXISTS views_other CASCADE")


def test_a_view_not_seen_through_is_read_as_spark_reads_it_and_the_report_says_why(spark, sales):
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        spark.sql("CREATE TEMP VIEW v_settings AS SELECT v, date_key FROM views_sales")
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    spark.sql("CREATE TEMP VIEW v_options AS SELECT v, date_key FROM views_sales "
              "WITH ('partitionFilter' = 'date_key > 20240202')")
    # Its literals compare without case ('ABC' = 'abc'); read in its place, they would not.
    spark.sql("CREATE TEMP VIEW v_collated DEFAULT COLLATION UTF8_LCASE AS SELECT v, date_key FROM views_sales "
              "WHERE 'ABC' = 'abc'")
    try:
        for view, why in [("v_settings", f"made with spark.sql.ansi.enabled=false and the session has "
                                         f"spark.sql.ansi.enabled={before}"),
                          ("v_options", "its text could not be parsed"),
                          ("v_collated", "it was made with the default collation UTF8_LCASE")]:
            query = QUERY.format(value="v", view=view, key="date_key")
            df = dynsource.sql(spark, query)
            assert rows(df) == rows(spark.sql(query))
            report = str(dynsource.scan_report(df))
            assert f"view {view} is read as Spark reads it: " in report and why in report, report
        # A common table expression of the query named like a temporary view the view reads would capture it.
        spark.sql("CREATE TEMP VIEW v_join AS SELECT s.v, s.date_key FROM views_sales s JOIN view_dates "
                  "ON s.date_key = view_dates.d")
        query = "WITH view_dates AS (SELECT 1 AS d) SELECT count(*) FROM v_join"
        df = dynsource.sql(spark, query)
        assert rows(df) == rows(spark.sql(query))
        assert "the query's common table expression view_dates" in str(dynsource.scan_report(df))
    finally:
        drop_views(spark)


def test_a_view_made_under_a_default_the_session_changed_since_is_read_as_spark_reads_it(spark, sales):
    """Spark analyses a view under the defaults of the settings it did not capture, not under the session's: with
    ``spark.sql.legacy.sizeOfNull`` set to false since, the view's ``size(NULL)`` is still -1, where the same text
    read in the view's place would give NULL."""
    ansi, size_of_null = "spark.sql.ansi.enabled", "spark.sql.legacy.sizeOfNull"
    before = spark.conf.get(ansi)
    spark.conf.set(ansi, "false")  # captured by every view; sizeOfNull applies only with ANSI off
    spark.conf.unset(size_of_null)  # the view is made under the default, so it captures nothing of it
    spark.sql("CREATE TEMP VIEW v_settings AS SELECT v, date_key, size(CAST(NULL AS ARRAY<INT>)) AS n "
              "FROM views_sales")
    spark.conf.set(size_of_null, "false")
    try:
        query = "SELECT count(*), min(n) FROM v_settings WHERE n IS NOT NULL"
        assert rows(spark.sql(query)) == [(ROWS, -1)]
        df = dynsource.sql(spark, query)
        for _ in range(2):
            assert rows(df) == [(ROWS, -1)]
        report = str(dynsource.scan_report(df))
        assert (f"view v_settings is read as Spark reads it: the session has {size_of_null}=false, and it was made "
                "with the default (true)") in report, report
        spark.conf.unset(size_of_null)  # the session back at the default: the view is seen through again
        df = dynsource.sql(spark, query)
        assert rows(df) == [(ROWS, -1)] and "(Python)" not in plan(df), str(dynsource.scan_report(df))
    finally:
        spark.conf.set(ansi, before)
        spark.conf.unset(size_of_null)
        drop_views(spark)


@pytest.mark.parametrize("shape", ["temporary, all columns", "renamed and filtered", "a view over a view",
                                   "persistent", "global temporary"])
def test_a_view_passing_the_tables_rows_through_is_pruned_by_a_collected_filter(spark, sales, shape):
    statements, view, key, value, _ = SHAPES[shape]
    for statement in statements:
        spark.sql(statement)
    try:  # the suite's session collects (spark.dynsource.partitionPruning = collect)
        query = QUERY.format(value=value, view=view, key=key)
        df = dynsource.sql(spark, query)
        assert rows(df) == rows(spark.sql(query))
        report = str(dynsource.scan_report(df))
        # Two of the six dates are chosen; the east view keeps their east partitions only.
        kept = "2 leaf partition(s) kept" if shape == "renamed and filtered" else "4 leaf partition(s) kept"
        assert "default.views_sales (" in report and ".date_key) <- view_dates (view_dates.d)" in report
        assert kept in report, report
    finally:
        drop_views(spark)


# DataFrames' temporary views: a function of the session making the DataFrame over the table, and the same over
# views_native; the name to query, its key and value columns.
FRAME_SHAPES = {
    "spark.table": (lambda spark, t: spark.table(t), "date_key", "v"),
    "filtered, renamed and aliased": (
        lambda spark, t: spark.table(t).alias("s").where((F.col("region") == "east") & (F.col("v") > 10))
        .select("v", F.col("date_key").alias("dk")), "dk", "v"),
    "computed": (lambda spark, t: spark.table(t).withColumn("v2", F.col("v") * 2 + 1).where(F.col("v") - 3 > 0),
                 "date_key", "v2"),
    "literals of each type": (
        lambda spark, t: spark.table(t).where(F.col("date_key").isin(*DATES[:4]) & F.col("region").isNotNull()
                                              & ~F.col("v").eqNullSafe(F.lit(None))
                                              & (F.col("v") >= F.lit(3).cast("short")))
        .select("v", "date_key", F.lit("it's \\ é").alias("s"), F.lit(decimal.Decimal("1.50")).alias("dec"),
                F.lit(1.5).alias("dbl"), F.lit(float("-inf")).alias("inf"), F.lit(True).alias("b"),
                F.lit(datetime.date(2024, 2, 1)).alias("day"), F.lit(None).cast("int").alias("n")),
        "date_key", "v"),
}


def frame_views(spark, make) -> None:
    make(spark, "views_sales").createOrReplaceTempView("v_frame")
    make(spark, "views_native").createOrReplaceTempView("v_frame_native")


@pytest.mark.parametrize("shape", FRAME_SHAPES)
def test_a_dataframes_view_projecting_and_filtering_the_table_is_read_by_sparks_reader(spark, sales, shape):
    make, key, value = FRAME_SHAPES[shape]
    frame_views(spark, make)
    try:
        for query in [QUERY.format(value=value, view="v_frame", key=key), "SELECT * FROM v_frame"]:
            expected = rows(spark.sql(query))
            assert expected == rows(spark.sql(query.replace("v_frame", "v_frame_native")))
            df = dynsource.sql(spark, query)
            for _ in range(2):
                assert rows(df) == expected, query
            assert "FileScan parquet" in plan(df) and "(Python)" not in plan(df)
            assert "read as Spark reads it" not in str(dynsource.scan_report(df))
    finally:
        for view in ("v_frame", "v_frame_native"):
            spark.catalog.dropTempView(view)


def test_a_dataframes_view_is_pruned_by_a_collected_filter_and_follows_its_replacements(spark, sales):
    east = FRAME_SHAPES["filtered, renamed and aliased"][0]
    query = QUERY.format(value="v", view="v_frame", key="dk")
    try:
        for make, kept in [(east, 2), (lambda spark, t: spark.table(t).select("v", F.col("date_key").alias("dk")), 4),
                           (east, 2)]:  # each a new DataFrame under the same name
            frame_views(spark, make)
            df = dynsource.sql(spark, query)
            assert rows(df) == rows(spark.sql(query.replace("v_frame", "v_frame_native")))
            report = str(dynsource.scan_report(df))
            assert f"{kept} leaf partition(s) kept" in report, report
        # A view of text over the DataFrame's view, and the same DataFrame as a global temporary view.
        spark.sql("CREATE TEMP VIEW v_over_frame AS SELECT v, dk FROM v_frame WHERE v < 500")
        spark.table("v_frame").createOrReplaceGlobalTempView("v_frame_global")
        for view, native in [("v_over_frame", "(SELECT v, dk FROM v_frame_native WHERE v < 500) AS n"),
                             ("global_temp.v_frame_global", "v_frame_native")]:
            df = dynsource.sql(spark, QUERY.format(value="v", view=view, key="dk"))
            assert rows(df) == rows(spark.sql(QUERY.format(value="v", view=native, key="dk")))
            assert "2 leaf partition(s) kept" in str(dynsource.scan_report(df)), view
    finally:
        for view in ("v_frame", "v_frame_native", "v_over_frame"):
            spark.catalog.dropTempView(view)
        spark.catalog.dropGlobalTempView("v_frame_global")


def test_a_dataframes_view_not_written_as_sql_is_read_as_spark_reads_it_and_the_report_says_why(spark, sales):
    dates = spark.table("view_dates").select(F.col("d").alias("jd"))
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    other = "false" if ansi == "true" else "true"

    def under_other_ansi(t):
        spark.conf.set("spark.sql.ansi.enabled", other)
        try:  # a DataFrame is analysed as it is made
            return spark.table(t).withColumn("v2", F.col("v") * 2)
        finally:
            spark.conf.set("spark.sql.ansi.enabled", ansi)

    shapes = [
        (lambda t: spark.table(t).withColumn("v2", F.col("v") / 2), "it computes Divide"),
        (under_other_ansi, f"its arithmetic was analysed with spark.sql.ansi.enabled={other} and the session has "
                           f"spark.sql.ansi.enabled={ansi}"),
        (lambda t: spark.table(t).join(dates, F.col("date_key") == dates.jd), "its plan reads 2 relations"),
        (lambda t: spark.table(t).where(F.col("date_key").cast("string") >= "20240203"),
         "it casts integer to string (written as SQL are casts that cannot fail"),
        (lambda t: spark.read.option("partitionFilter", "date_key > 20240202").table(t),
         "it reads its table with options [partitionFilter]"),
    ]
    try:
        for make, why in shapes:
            make("views_sales").createOrReplaceTempView("v_frame")
            query = QUERY.format(value="v", view="v_frame", key="date_key")
            df = dynsource.sql(spark, query)
            assert rows(df) == rows(spark.sql(query)), why
            report = str(dynsource.scan_report(df))
            assert f"view v_frame is read as Spark reads it: {why}" in report, report
    finally:
        spark.catalog.dropTempView("v_frame")
