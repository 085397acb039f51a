"""dynsource.sql resolves every table name as Spark does, and its DataFrames pin the dimension rows they pruned by.

Each query is compared with ``spark.sql`` of the same text in the same session.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException, ParseException

import dynsource

ROWS = 600
DATES = [20240201 + day for day in range(6)]


def rows(df) -> list:
    return sorted(df.collect(), key=repr)


@pytest.fixture(scope="module")
def sales(spark, tmp_path_factory):
    """A dynsource table `sales` (date_key, region) and a parquet view of its east rows under the same name."""
    root = tmp_path_factory.mktemp("names")
    table = pa.table({"v": list(range(ROWS)), "region": ["east" if i // 6 % 3 else "west" for i in range(ROWS)],
                      "date_key": [DATES[i % len(DATES)] for i in range(ROWS)]})
    pq.write_to_dataset(table, str(root / "sales"), partition_cols=["date_key", "region"])
    definitions = str(root / "definitions")
    dynsource.register_table(spark, "sales", path=str(root / "sales"), definitions=definitions, replace=True)
    # Two of the six dates are chosen: 4 of the 12 leaf partitions.
    dates = spark.createDataFrame([(d, d % 2 == 1) for d in DATES[:3]], "d INT, chosen BOOLEAN")
    dates.createOrReplaceTempView("dates")
    yield {"root": root, "definitions": definitions}
    spark.catalog.dropTempView("dates")
    dynsource.drop_table(spark, "sales", definitions=definitions)


PRUNED = "partitions: {} leaf partition(s) kept; directories pruned without listing below them: {} at date_key"
PRUNED_TO_TWO_DATES = PRUNED.format(4, 4)
WEST = 204  # rows whose i // 6 % 3 == 0


def same_as_spark(spark, query: str) -> list | None:
    """The rows of ``query`` by spark.sql, which dynsource.sql must equal; None when Spark rejects the text, which
    dynsource.sql must then reject with Spark's error (pyspark 4.0 takes no quote doubled inside an option value)."""
    try:
        expected = rows(spark.sql(query))
    except ParseException as error:
        with pytest.raises(ParseException) as raised:
            dynsource.sql(spark, query)
        assert raised.value.getCondition() == error.getCondition() == "PARSE_SYNTAX_ERROR"
        return None
    assert rows(dynsource.sql(spark, query)) == expected, query
    return expected


JOINED = "SELECT count(*), sum(v) FROM sales JOIN dates ON date_key = d WHERE chosen"


def test_a_temporary_view_shadows_a_registered_table_of_the_same_name(spark, sales):
    east = spark.read.parquet(str(sales["root"] / "sales")).where("region = 'east'")
    east.createOrReplaceTempView("sales")
    try:
        (count,) = same_as_spark(spark, "SELECT count(*) FROM sales WHERE date_key = 20240201")
        assert count[0] == 66  # the east rows of the date only, as the view holds
        same_as_spark(spark, JOINED)
        same_as_spark(spark, "SELECT count(*) FROM sales WITH ('partitionFilter' = 'region = ''west''')")
        # Qualified, the name is the registered table again, and it is pruned.
        df = dynsource.sql(spark, JOINED.replace("FROM sales", "FROM default.sales"))
        assert rows(df) == rows(spark.sql(JOINED.replace("FROM sales", "FROM default.sales")))
        assert "default.sales" in str(dynsource.scan_report(df))
    finally:
        spark.catalog.dropTempView("sales")
    df = dynsource.sql(spark, JOINED)  # the view is gone: the bare name is the table again
    assert rows(df) == rows(spark.sql(JOINED))
    assert PRUNED_TO_TWO_DATES in str(dynsource.scan_report(df))


def test_a_temporary_view_replaced_under_its_name_is_resolved_with_its_new_columns(spark, sales):
    query = "SELECT count(*), sum(v) FROM sales JOIN days ON date_key = {key} WHERE chosen"
    try:
        for key in ("d", "day", "d"):  # the same view name, its key column renamed and back
            spark.table("dates").withColumnRenamed("d", key).createOrReplaceTempView("days")
            same_as_spark(spark, query.format(key=key))
            df = dynsource.sql(spark, query.format(key=key))
            assert PRUNED_TO_TWO_DATES in str(dynsource.scan_report(df))
    finally:
        spark.catalog.dropTempView("days")


def test_temporary_views_of_sql_text_are_read_as_spark_reads_them(spark, sales):
    # A view of SQL text holds no analysed plan (its schema comes from Spark's analysis); a view of a DataFrame
    # does. Both as the dimension, and as a view shadowing the registered table.
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW text_dates AS SELECT d AS day, NOT chosen AS skipped FROM dates")
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW sales AS SELECT v, region, date_key FROM default.sales "
              "WHERE region = 'west'")
    try:
        query = "SELECT count(*), sum(v) FROM {t} JOIN text_dates ON date_key = day WHERE NOT skipped"
        (shadowed,) = same_as_spark(spark, query.format(t="sales"))
        (table,) = same_as_spark(spark, query.format(t="default.sales"))
        assert 0 < shadowed[0] < table[0]
        df = dynsource.sql(spark, query.format(t="default.sales"))
        assert PRUNED_TO_TWO_DATES in str(dynsource.scan_report(df))
    finally:
        spark.catalog.dropTempView("sales")
        spark.catalog.dropTempView("text_dates")


def test_a_cte_named_like_a_table_is_the_cte(spark, sales):
    query = """WITH sales AS (SELECT d AS date_key, 7 AS v FROM dates)
               SELECT count(*), sum(v) FROM sales JOIN dates ON date_key = d WHERE chosen"""
    assert same_as_spark(spark, query) == [(2, 14)]
    inner = """SELECT (WITH sales AS (SELECT 1 AS v) SELECT max(v) FROM sales) AS one, count(*) FROM sales
               JOIN dates ON date_key = d WHERE chosen"""
    df = dynsource.sql(spark, inner)  # the CTE is in scope in the subquery only: the outer name is the table
    assert rows(df) == rows(spark.sql(inner))
    assert PRUNED_TO_TWO_DATES in str(dynsource.scan_report(df))
    with_options = """WITH sales AS (SELECT * FROM sales WITH ('partitionFilter' = 'region = ''west'''))
                      SELECT count(*) FROM sales"""
    same_as_spark(spark, with_options)


def test_databases_current_and_qualified_and_global_views(spark, sales):
    spark.sql("CREATE DATABASE IF NOT EXISTS names_other")
    try:
        dynsource.register_table(spark, "names_other.sales", path=str(sales["root"] / "sales"),
                                 definitions=sales["definitions"], partitionFilter="region = 'west'", replace=True)
        assert same_as_spark(spark, "SELECT count(*) FROM names_other.sales") == [(WEST,)]
        spark.catalog.setCurrentDatabase("names_other")
        try:
            assert same_as_spark(spark, "SELECT count(*) FROM sales") == [(WEST,)]
            same_as_spark(spark, "SELECT count(*) FROM default.sales JOIN dates ON date_key = d")
        finally:
            spark.catalog.setCurrentDatabase("default")
        spark.read.parquet(str(sales["root"] / "sales")).limit(5).createOrReplaceGlobalTempView("sales")
        try:
            assert same_as_spark(spark, "SELECT count(*) FROM global_temp.sales") == [(5,)]
        finally:
            spark.catalog.dropGlobalTempView("sales")
    finally:
        dynsource.drop_table(spark, "names_other.sales", definitions=sales["definitions"])
        spark.sql("DROP DATABASE IF EXISTS names_other CASCADE")


@pytest.mark.parametrize("replacement", ["parquet table", "view", "nothing"])
def test_a_table_replaced_by_another_source_keeps_no_dynsource_reading(spark, sales, tmp_path, replacement):
    pq.write_table(pa.table({"v": [1, 2], "date_key": [DATES[0], DATES[0]]}), str(tmp_path / "part-0.parquet"))
    spark.sql("CREATE DATABASE IF NOT EXISTS names_stale")
    try:
        dynsource.register_table(spark, "names_stale.sales", path=str(sales["root"] / "sales"),
                                 definitions=sales["definitions"])
        spark.sql("DROP TABLE names_stale.sales")  # by SQL: dynsource's definition stays behind
        if replacement == "nothing":
            with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
                dynsource.sql(spark, "SELECT count(*) FROM names_stale.sales")
            return
        if replacement == "view":  # a view records no provider
            spark.sql(f"CREATE VIEW names_stale.sales AS SELECT * FROM parquet.`{tmp_path}`")
        else:
            spark.sql(f"CREATE TABLE names_stale.sales USING parquet LOCATION '{tmp_path}'")
        assert same_as_spark(spark, "SELECT count(*), sum(v) FROM names_stale.sales") == [(2, 3)]
        same_as_spark(spark, "SELECT count(*) FROM names_stale.sales JOIN dates ON date_key = d")
    finally:
        spark.sql("DROP DATABASE IF EXISTS names_stale CASCADE")


def test_a_statement_with_a_quote_in_an_option_value_runs_once(spark, sales):
    spark.sql("CREATE TABLE names_counts (n BIGINT) USING parquet")
    insert = "INSERT INTO names_counts SELECT count(*) FROM sales WITH ('partitionFilter' = 'region = ''west''')"
    try:
        try:
            dynsource.sql(spark, insert)
        except ParseException as error:  # pyspark 4.0 takes no doubled quote there, and spark.sql says so too
            assert error.getCondition() == "PARSE_SYNTAX_ERROR"
            assert rows(spark.table("names_counts")) == []
            return
        assert [tuple(row) for row in rows(spark.table("names_counts"))] == [(WEST,)]
    finally:
        spark.sql("DROP TABLE IF EXISTS names_counts")


def test_queries_leave_no_temporary_views_behind(spark, sales):
    before = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    for query in (JOINED, "SELECT count(*) FROM sales WITH ('partitionFilter' = 'date_key > 20240202')",
                  "SELECT count(*) FROM sales WHERE date_key IN (SELECT d FROM dates WHERE chosen)"):
        df = dynsource.sql(spark, query)
        assert rows(df) == rows(spark.sql(query.replace(" WITH ('partitionFilter' = 'date_key > 20240202')",
                                                        " WHERE date_key > 20240202")))
        df.count()
    assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == before


PINNED_SHAPES = {
    "join": "SELECT count(*), sum(v) FROM sales JOIN promo ON date_key = p WHERE flag = 'Y'",
    "in": "SELECT count(*), sum(v) FROM sales WHERE date_key IN (SELECT p FROM promo WHERE flag = 'Y')",
    "cte": """WITH chosen AS (SELECT p FROM promo WHERE flag = 'Y')
              SELECT count(*), sum(v) FROM sales s JOIN chosen c ON s.date_key = c.p""",
    "derived": "SELECT count(*), sum(v) FROM sales, (SELECT p FROM promo WHERE flag = 'Y') c WHERE date_key = c.p",
    "exists": """SELECT count(*), sum(v) FROM sales s
                 WHERE EXISTS (SELECT 1 FROM promo WHERE promo.p = s.date_key AND flag = 'Y')""",
}


@pytest.mark.parametrize("shape", sorted(PINNED_SHAPES))
def test_a_dataframe_joins_the_dimension_rows_it_was_pruned_by_at_every_action(spark, sales, shape):
    query = PINNED_SHAPES[shape]
    spark.sql("DROP TABLE IF EXISTS promo")
    spark.sql("CREATE TABLE promo (p INT, flag STRING) USING parquet")
    try:
        spark.sql(f"INSERT INTO promo VALUES ({DATES[0]}, 'Y'), ({DATES[1]}, 'N')")
        df = dynsource.sql(spark, query)
        pinned = rows(df)
        assert pinned == rows(spark.sql(query))
        assert PRUNED.format(2, 5) in str(dynsource.scan_report(df))
        # Appended: a new date, and the pruned-by date again (a join that read the table again would count it twice).
        spark.sql(f"INSERT INTO promo VALUES ({DATES[2]}, 'Y'), ({DATES[0]}, 'Y')")
        assert rows(spark.sql(query)) != pinned
        assert rows(df) == pinned and df.count() == 1
        spark.sql(f"INSERT OVERWRITE promo VALUES ({DATES[3]}, 'Y')")
        assert rows(df) == pinned
        assert rows(dynsource.sql(spark, query)) == rows(spark.sql(query))  # a new call sees the new rows
    finally:
        spark.sql("DROP TABLE IF EXISTS promo")


def test_dynamic_join_joins_the_dimension_rows_it_was_pruned_by_at_every_action(spark, sales):
    spark.sql("DROP TABLE IF EXISTS promo")
    spark.sql("CREATE TABLE promo (p INT, flag STRING) USING parquet")
    try:
        spark.sql(f"INSERT INTO promo VALUES ({DATES[0]}, 'Y'), ({DATES[1]}, 'N')")
        joined = dynsource.dynamic_join("sales", spark.table("promo").where("flag = 'Y'"), {"date_key": "p"})
        pinned = joined.count()
        assert pinned == ROWS // len(DATES)
        spark.sql(f"INSERT INTO promo VALUES ({DATES[2]}, 'Y'), ({DATES[0]}, 'Y')")
        assert joined.count() == pinned
        spark.sql(f"INSERT OVERWRITE promo VALUES ({DATES[3]}, 'Y')")
        assert joined.count() == pinned
        assert PRUNED.format(2, 5) in str(dynsource.scan_report(joined))
    finally:
        spark.sql("DROP TABLE IF EXISTS promo")


def test_explain_of_a_query_spark_rejects_raises_sparks_error(spark, sales):
    from pyspark.errors import AnalysisException, ParseException

    with pytest.raises(ParseException):
        dynsource.explain_sql(spark, "SELEC 1")
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        dynsource.explain_sql(spark, "SELECT * FROM no_such_table JOIN dates ON d = 1")


def test_a_text_spark_cannot_parse_fails_with_sparks_error(spark):
    from pyspark.errors import ParseException

    for query in ("SELECT 'unclosed", "SELEC 1", "SELECT * FROM t WITH ('k' = )"):
        with pytest.raises((ParseException, ValueError)) as raised:
            dynsource.sql(spark, query)
        with pytest.raises(ParseException):
            spark.sql(query)
        assert isinstance(raised.value, ParseException) or "cannot read the table options" in str(raised.value)
