"""Star-join detection on parsed Spark SQL (no Spark): what is paired, what is refused and why."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dynsource.dpp import snapshots
from dynsource.dpp.detection import TableInfo
from dynsource.dpp.starjoin import detect

TABLES = {
    "default.store_sales": TableInfo({"ss_sold_date_sk": "bigint", "ss_store_sk": "int", "ss_item_sk": "bigint",
                                      "ss_sales_price": "double"}, dynsource=True),
    "default.date_dim": TableInfo({"d_date_sk": "bigint", "d_year": "int", "d_moy": "int"}),
    "default.store": TableInfo({"s_store_sk": "int", "s_state": "string"}),
    "default.item": TableInfo({"i_item_sk": "bigint", "i_category": "string"}),
    "sales.returns": TableInfo({"r_date_sk": "bigint", "r_store_sk": "int"}, dynsource=True),
}


def pairs(query: str) -> list[str]:
    return sorted(str(pruning) for pruning in detect(query, TABLES).prunings)


def reasons(query: str) -> list[str]:
    return [refusal.reason for refusal in detect(query, TABLES).refusals]


@pytest.mark.parametrize("query", [
    "SELECT d_moy FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000",
    "SELECT d_moy FROM store_sales, date_dim WHERE ss_sold_date_sk = d_date_sk AND d_year = 2000",
    "SELECT d_moy FROM date_dim INNER JOIN store_sales ON d_date_sk = ss_sold_date_sk AND d_year = 2000",
    "SELECT d_moy FROM date_dim LEFT JOIN store_sales ON d_date_sk = ss_sold_date_sk WHERE d_year = 2000",
    "SELECT * FROM store_sales RIGHT JOIN date_dim ON d_date_sk = ss_sold_date_sk WHERE d_year = 2000",
    "SELECT * FROM store_sales LEFT SEMI JOIN date_dim ON d_date_sk = ss_sold_date_sk AND d_year = 2000",
])
def test_a_fact_joined_to_a_filtered_dimension_is_paired_where_pruning_is_sound(query):
    assert pairs(query) == [
        "default.store_sales (store_sales.ss_sold_date_sk) <- default.date_dim (date_dim.d_date_sk)"]


@pytest.mark.parametrize(("query", "reason"), [
    ("SELECT * FROM store_sales LEFT JOIN date_dim ON ss_sold_date_sk = d_date_sk AND d_year = 2000",
     "the fact side is preserved by the LEFT JOIN"),
    ("SELECT * FROM date_dim RIGHT JOIN store_sales ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000",
     "the fact side is preserved by the RIGHT JOIN"),
    ("SELECT * FROM store_sales FULL JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000",
     "a FULL join keeps fact rows without a match"),
    ("SELECT * FROM store_sales LEFT ANTI JOIN date_dim ON ss_sold_date_sk = d_date_sk AND d_year = 2000",
     "a LEFT ANTI join keeps fact rows without a match"),
    ("SELECT * FROM store_sales JOIN store ON CAST(ss_item_sk AS INT) = s_store_sk WHERE s_state = 'TN'",
     "the fact key CAST(store_sales.ss_item_sk AS INT) is not a column or a widening cast of one"),
    ("SELECT * FROM store_sales JOIN store ON ss_store_sk + 1 = s_store_sk WHERE s_state = 'TN'",
     "is not a column or a widening cast of one"),
    ("SELECT * FROM date_dim LEFT JOIN store_sales ON ss_sold_date_sk <=> d_date_sk WHERE d_year = 2000",
     "<=> with a side an outer join null-extends is not pruned"),
])
def test_unsound_joins_are_refused_with_a_reason(query, reason):
    assert pairs(query) == []
    assert any(reason in said for said in reasons(query)), reasons(query)


@pytest.mark.parametrize(("query", "selective"), [
    ("SELECT * FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000", True),
    ("SELECT * FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk AND d_moy IN (1, 2)", True),
    ("SELECT * FROM store_sales JOIN (SELECT * FROM date_dim WHERE d_year = 2000) d "
     "ON ss_sold_date_sk = d.d_date_sk", True),
    ("SELECT * FROM store_sales WHERE ss_store_sk IN (SELECT s_store_sk FROM store WHERE s_state = 'TN')", True),
    ("SELECT * FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_date_sk IS NOT NULL", False),
    ("SELECT * FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk", False),
    ("SELECT * FROM store_sales WHERE ss_store_sk IN (SELECT s_store_sk FROM store)", False),
])
def test_a_dimension_without_a_selective_predicate_is_paired_for_the_small_relation_check(query, selective):
    (pruning,) = detect(query, TABLES).prunings
    assert pruning.selective is selective


def test_a_star_prunes_one_fact_by_each_dimension_and_reports_their_queries():
    found = detect("""
        SELECT s_state, d_moy, sum(ss_sales_price) FROM store_sales ss
        JOIN date_dim d ON ss.ss_sold_date_sk = d.d_date_sk
        JOIN store s ON ss.ss_store_sk = s.s_store_sk
        WHERE d.d_year = 2000 AND s.s_state IN ('TN', 'CA') GROUP BY s_state, d_moy""", TABLES)
    assert sorted(str(p) for p in found.prunings) == [
        "default.store_sales (ss.ss_sold_date_sk) <- default.date_dim (d.d_date_sk)",
        "default.store_sales (ss.ss_store_sk) <- default.store (s.s_store_sk)",
    ]
    by_dimension = {p.dimension: p.dimension_sql for p in found.prunings}
    assert by_dimension["default.date_dim"] == (
        "SELECT d.d_date_sk AS k0 FROM date_dim AS d WHERE d.d_year = 2000")
    assert by_dimension["default.store"] == (
        "SELECT s.s_store_sk AS k0 FROM store AS s WHERE s.s_state IN ('TN', 'CA')")


def test_the_fact_reference_span_is_the_name_as_written():
    query = "SELECT * FROM  default.store_sales  AS f, date_dim WHERE f.ss_sold_date_sk = d_date_sk AND d_moy = 1"
    (pruning,) = detect(query, TABLES).prunings
    assert query[pruning.fact.start:pruning.fact.end] == "default.store_sales"
    assert (pruning.fact.table, pruning.fact.alias) == ("default.store_sales", "f")


def test_equalities_between_one_fact_and_one_dimension_make_one_multi_column_key():
    (pruning,) = detect("SELECT * FROM returns r JOIN store_sales ON r_date_sk = ss_sold_date_sk "
                        "AND r_store_sk = ss_store_sk WHERE r_store_sk = 3", {**TABLES, "default.returns":
                                                                              TableInfo(TABLES["sales.returns"].columns)}
                        ).prunings
    assert pruning.fact_columns == ("ss_sold_date_sk", "ss_store_sk")
    assert pruning.dimension_sql == ("SELECT r.r_date_sk AS k0, r.r_store_sk AS k1 FROM returns AS r "
                                     "WHERE r.r_store_sk = 3")


def test_in_subqueries_ctes_and_derived_tables_are_dimensions():
    found = pairs("""
        WITH d AS (SELECT d_date_sk FROM date_dim WHERE d_year = 2000)
        SELECT * FROM store_sales, d, (SELECT s_store_sk FROM store WHERE s_state = 'TN') s
        WHERE ss_sold_date_sk = d.d_date_sk AND ss_store_sk = s.s_store_sk
          AND ss_item_sk IN (SELECT i_item_sk FROM item WHERE i_category = 'Books')""")
    assert found == [
        "default.store_sales (store_sales.ss_item_sk) <- (subquery) (item.i_item_sk)",
        "default.store_sales (store_sales.ss_sold_date_sk) <- d (d.d_date_sk)",
        "default.store_sales (store_sales.ss_store_sk) <- s (s.s_store_sk)",
    ]
    in_list = detect("SELECT * FROM store_sales WHERE ss_item_sk IN (SELECT i_item_sk FROM item WHERE "
                     "i_category = 'x') AND ss_store_sk = 1", TABLES).prunings[0]
    assert in_list.dimension_sql == ("SELECT _d.i_item_sk AS k0 FROM (SELECT item.i_item_sk AS i_item_sk FROM "
                                     "item AS item WHERE item.i_category = 'x') AS _d")


def test_a_cte_dimension_query_carries_the_statement_ctes():
    (pruning,) = detect("WITH d AS (SELECT * FROM date_dim WHERE d_year = 2000) "
                        "SELECT * FROM store_sales JOIN d ON ss_sold_date_sk = d.d_date_sk", TABLES).prunings
    assert pruning.dimension_sql.startswith("WITH d AS (SELECT ")
    assert pruning.dimension_sql.endswith("SELECT d.d_date_sk AS k0 FROM d AS d")


def test_a_widening_cast_of_the_fact_key_and_null_safe_equality_of_inner_joins_are_kept():
    (widened,) = detect("SELECT * FROM store_sales JOIN store ON CAST(ss_store_sk AS BIGINT) = s_store_sk "
                        "WHERE s_state = 'TN'", TABLES).prunings
    assert widened.fact_columns == ("ss_store_sk",) and not widened.null_safe
    (null_safe,) = detect("SELECT * FROM store_sales JOIN store ON ss_store_sk <=> s_store_sk "
                          "WHERE s_state = 'TN'", TABLES).prunings
    assert null_safe.null_safe


def test_self_joins_and_two_facts_are_each_their_own_scan():
    found = detect("SELECT * FROM store_sales a JOIN store_sales b ON a.ss_item_sk = b.ss_item_sk "
                   "WHERE b.ss_store_sk = 3", TABLES).prunings
    # b has a selective predicate; a has none: it is not read whole to learn whether it is a small dimension.
    assert [str(pruning) for pruning in found] == [
        "default.store_sales (a.ss_item_sk) <- default.store_sales (b.ss_item_sk)"]
    assert reasons("SELECT * FROM store_sales a JOIN store_sales b ON a.ss_item_sk = b.ss_item_sk "
                   "WHERE b.ss_store_sk = 3") == [
        "default.store_sales: not collected: a dynsource table joined without a selective predicate on it is not "
        "read to learn whether it is small enough to prune by (it may be as large as a fact): give it a selective "
        "predicate, or collect its keys with dynsource.collect and read the fact WITH ('dynamicFilter' = ...)"]
    assert pairs("SELECT * FROM sales.returns, store_sales, date_dim WHERE r_date_sk = d_date_sk "
                 "AND ss_sold_date_sk = d_date_sk AND d_moy = 2") == [
        "default.store_sales (store_sales.ss_sold_date_sk) <- default.date_dim (date_dim.d_date_sk)",
        "sales.returns (returns.r_date_sk) <- default.date_dim (date_dim.d_date_sk)",
    ]


def test_correlated_subqueries_and_unparsable_text_are_refused_not_raised():
    assert pairs("SELECT * FROM store_sales WHERE ss_item_sk IN (SELECT i_item_sk FROM item "
                 "WHERE i_category = store_sales.ss_sales_price)") == []
    said = reasons("SELECT * FROM store_sales WHERE ss_item_sk IN (SELECT i_item_sk FROM item "
                   "WHERE i_category = store_sales.ss_sales_price)")
    assert any("correlated" in reason for reason in said)
    assert reasons("SELEC nothing FROM")[0] == ("the query could not be analysed: Invalid expression / Unexpected "
                                                "token at line 1, column 18 (near 'SELEC nothing FROM')")
    assert detect("SELECT * FROM date_dim JOIN store ON d_moy = s_store_sk WHERE d_year = 1", TABLES).prunings == ()


def test_the_fact_columns_a_query_uses_are_known_with_each_star_expanded():
    def columns(query: str) -> tuple[str, ...] | None:
        (pruning,) = detect(query, TABLES).prunings
        return pruning.fact.columns

    assert columns("SELECT d_moy, sum(ss_sales_price) FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk "
                   "WHERE d_year = 2000 GROUP BY d_moy") == ("ss_sold_date_sk", "ss_sales_price")
    assert columns("SELECT count(*) FROM store_sales, date_dim WHERE ss_sold_date_sk = d_date_sk "
                   "AND d_year = 2000") == ("ss_sold_date_sk",)
    # A * over the dimension only, or inside a dimension's subquery, names no fact column.
    assert columns("SELECT d.* FROM store_sales f JOIN date_dim d ON f.ss_sold_date_sk = d.d_date_sk "
                   "WHERE d.d_year = 2000") == ("ss_sold_date_sk",)
    assert columns("SELECT sum(f.ss_sales_price) FROM store_sales f JOIN (SELECT * FROM date_dim WHERE d_year = 2000)"
                   " d ON f.ss_sold_date_sk = d.d_date_sk") == ("ss_sold_date_sk", "ss_sales_price")
    # A * over the fact uses every column; one qualify() cannot expand (inside struct()) may use any.
    assert columns("SELECT * FROM store_sales, date_dim WHERE ss_sold_date_sk = d_date_sk AND d_year = 2000") is None
    assert columns("SELECT struct(*) FROM store_sales f JOIN date_dim d ON f.ss_sold_date_sk = d.d_date_sk "
                   "WHERE d.d_year = 2000") is None


def test_exists_correlated_by_equalities_is_a_semi_join():
    (pruning,) = detect("SELECT * FROM store_sales WHERE EXISTS (SELECT 1 FROM date_dim d WHERE "
                        "d.d_date_sk = store_sales.ss_sold_date_sk AND d.d_year = 2000)", TABLES).prunings
    assert str(pruning) == "default.store_sales (store_sales.ss_sold_date_sk) <- (exists) (d.d_date_sk)"
    assert pruning.dimension_sql == "SELECT d.d_date_sk AS k0 FROM date_dim AS d WHERE d.d_year = 2000"
    assert pairs("SELECT * FROM store_sales WHERE NOT EXISTS (SELECT 1 FROM date_dim d WHERE "
                 "d.d_date_sk = store_sales.ss_sold_date_sk AND d.d_year = 2000)") == []
    assert pairs("SELECT * FROM store_sales WHERE EXISTS (SELECT 1 FROM date_dim d WHERE "
                 "d.d_date_sk > store_sales.ss_sold_date_sk AND d.d_year = 2000)") == []
    (unfiltered,) = detect("SELECT * FROM store_sales WHERE EXISTS (SELECT 1 FROM date_dim d WHERE "
                           "d.d_date_sk = ss_sold_date_sk)", TABLES).prunings
    assert unfiltered.dimension_sql == "SELECT d.d_date_sk AS k0 FROM date_dim AS d" and not unfiltered.selective


def test_each_scan_carries_the_where_conjuncts_on_it_alone_unless_an_outer_join_null_extends_it():
    found = detect("SELECT * FROM store_sales s WHERE s.ss_sold_date_sk < 10 AND ss_store_sk IN (1, 2) "
                   "AND s.ss_item_sk = s.ss_store_sk + 1 AND ss_item_sk IN (SELECT i_item_sk FROM item)", TABLES)
    (scan,) = found.scans
    assert scan.predicates == ("ss_sold_date_sk < 10", "ss_store_sk IN (1, 2)", "ss_item_sk = ss_store_sk + 1")
    (outer,) = detect("SELECT * FROM date_dim LEFT JOIN store_sales ON ss_sold_date_sk = d_date_sk "
                      "WHERE ss_sold_date_sk < 10", TABLES).scans
    assert outer.predicates == ()


def test_a_dimensions_rows_carry_only_the_ctes_they_may_read():
    ctes = sqlglot.parse_one("WITH a AS (SELECT 1 x), b AS (SELECT * FROM a), heavy AS (SELECT 2 y) SELECT 1",
                             read="spark").args["with_"]
    assert snapshots.with_ctes_sql(exp.select("*").from_("item"), ctes) == "SELECT * FROM item"
    assert snapshots.with_ctes_sql(exp.select("*").from_("b"), ctes) == \
        "WITH a AS (SELECT 1 AS x), b AS (SELECT * FROM a) SELECT * FROM b"
    assert snapshots.with_ctes_sql(sqlglot.parse_one("SELECT * FROM t WHERE k IN (SELECT y FROM heavy)"), ctes) == \
        "WITH heavy AS (SELECT 2 AS y) SELECT * FROM t WHERE k IN (SELECT y FROM heavy)"


def test_a_dimensions_keys_are_read_from_its_snapshot_without_the_predicates_it_applied():
    (joined,) = detect("SELECT * FROM store_sales s JOIN date_dim d ON s.ss_sold_date_sk = d.d_date_sk "
                       "WHERE d.d_year = 2000 AND (d.d_moy = 1 OR d.d_moy = 2)", TABLES).prunings
    assert joined.pin.keys_sql == "SELECT d.d_date_sk AS k0 FROM __dynsource_pinned__ AS d"
    assert joined.pin.key_columns == ("d_date_sk",)
    (subquery,) = detect("SELECT * FROM store_sales WHERE ss_sold_date_sk IN "
                         "(SELECT d_date_sk FROM date_dim WHERE d_year = 2000)", TABLES).prunings
    assert subquery.pin.key_columns == ("d_date_sk",)
    # An ON predicate filters for its own join only: the snapshot does not apply it, the keys do.
    (on,) = detect("SELECT * FROM store_sales s JOIN date_dim d ON s.ss_sold_date_sk = d.d_date_sk AND d.d_moy = 1 "
                   "WHERE d.d_year = 2000", TABLES).prunings
    assert on.pin.keys_sql == "SELECT d.d_date_sk AS k0 FROM __dynsource_pinned__ AS d WHERE d.d_moy = 1"
    assert on.pin.key_columns is None
    (computed,) = detect("SELECT * FROM store_sales s JOIN date_dim d ON s.ss_sold_date_sk = d.d_date_sk + 1 "
                         "WHERE d.d_year = 2000", TABLES).prunings
    assert computed.pin.key_columns is None


@pytest.mark.parametrize(("condition", "by_subquery"), [
    ("d.d_moy = (SELECT max(d_moy) FROM date_dim WHERE d_year = 2001)", True),  # TPC-DS q6
    ("d.d_year IN (SELECT d_year FROM date_dim WHERE d_moy = 1)", True),  # q83's shape
    ("d.d_year IN (SELECT s_store_sk FROM store WHERE s_state = 'TN')", True),
    ("d.d_year = (SELECT max(s.s_store_sk) FROM store s WHERE s.s_store_sk = d.d_moy)", False),  # correlated
    ("ss_store_sk = (SELECT max(s_store_sk) FROM store)", False),  # filters the fact, not the dimension
    ("d.d_moy IS NOT NULL", False),
])
def test_a_dimension_filtered_by_a_subquery_is_told_apart_from_an_unfiltered_one(condition, by_subquery):
    query = f"SELECT * FROM store_sales JOIN date_dim d ON ss_sold_date_sk = d.d_date_sk WHERE {condition}"
    (pruning,) = detect(query, TABLES).prunings
    # The subquery stays out of the keys' query (its snapshot would read other tables): Spark's DPP counts it.
    assert not pruning.selective and pruning.filtered_by_subquery is by_subquery
    assert "SELECT" not in pruning.dimension_sql.split("FROM", 1)[1]


def test_a_detection_is_given_again_only_for_the_same_text_resolved_to_the_same_tables():
    from pyspark.sql.types import StructType

    from dynsource.dpp import queryplan
    from dynsource.dpp.relation import Relation

    query = "SELECT d_moy FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000"
    resolved = ("default.store_sales", "default.date_dim")

    def detected(tables=TABLES, text=query, database="default", references=resolved):
        relations = [None if key is None else Relation(*key.split("."), StructType()) for key in references]
        return queryplan._detect(text, tables, database, relations)

    first = detected()
    assert detected() is first and len(first.prunings) == 1
    # A dimension whose key is a string now (its view replaced): detected anew, and refused.
    retyped = {**TABLES, "default.date_dim": TableInfo({"d_date_sk": "string", "d_year": "int", "d_moy": "int"})}
    assert detected(retyped) is not first and detected(retyped) is detected(retyped)
    # The fact no longer a dynsource table (a temporary view shadows it): nothing to prune.
    shadowed = {**TABLES, "default.store_sales": TableInfo(dict(TABLES["default.store_sales"].columns))}
    assert detected(shadowed).prunings == ()
    assert detected(database="sales") is not first
    assert detected(text=query + " ") is not first
    assert detected(references=("default.store_sales", None)) is not first


@pytest.mark.parametrize("query", [
    # A view seen through: the fact's rows passed through a projection, renamed, filtered, nested.
    "SELECT * FROM (SELECT ss_sold_date_sk AS day, ss_sales_price FROM store_sales) AS v JOIN date_dim "
    "ON v.day = d_date_sk WHERE d_year = 2000",
    "SELECT * FROM (SELECT day FROM (SELECT ss_sold_date_sk AS day, ss_sales_price * 2 AS p FROM store_sales "
    "WHERE ss_store_sk = 1) AS inner_v WHERE p > 0) AS v JOIN date_dim ON v.day = d_date_sk WHERE d_year = 2000",
    "SELECT * FROM (SELECT ss_sold_date_sk AS day FROM store_sales) AS v WHERE EXISTS "
    "(SELECT 1 FROM date_dim WHERE d_date_sk = v.day AND d_year = 2000)",
])
def test_a_derived_table_passing_a_facts_rows_through_prunes_the_fact(query):
    detection = detect(query, TABLES)
    dimension = "(exists)" if "EXISTS" in query else "default.date_dim"
    assert [str(p) for p in detection.prunings] == [
        f"default.store_sales (store_sales.ss_sold_date_sk) <- {dimension} (date_dim.d_date_sk)"]
    assert len(detection.scans) == 1  # the scan is the table's, found once


def test_a_cte_read_once_passing_a_facts_rows_through_prunes_the_fact_and_one_read_twice_is_refused():
    cte = "WITH f AS (SELECT ss_sold_date_sk AS day, ss_sales_price FROM store_sales WHERE ss_store_sk > 5) "
    once = detect(f"{cte}SELECT d_moy, sum(ss_sales_price) FROM f JOIN date_dim ON f.day = d_date_sk "
                  "WHERE d_year = 2000 GROUP BY d_moy", TABLES)
    assert [str(p) for p in once.prunings] == [
        "default.store_sales (store_sales.ss_sold_date_sk) <- default.date_dim (date_dim.d_date_sk)"]
    (scan,) = once.scans
    assert scan.predicates == ("ss_store_sk > 5",)  # the CTE's own filter, on the scan inside it
    # Pruned for the join, the CTE's rows would be pruned for its other reader too.
    twice = detect(f"{cte}SELECT count(*) FROM f JOIN date_dim ON f.day = d_date_sk WHERE d_year = 2000 "
                   "UNION ALL SELECT count(*) FROM f", TABLES)
    assert [p for p in twice.prunings if p.dimension == "default.date_dim"] == []
    assert ("f.day = date_dim.d_date_sk: f reads default.store_sales through a common table expression (WITH) the "
            "query reads more than once; dynsource prunes") in " ".join(r.reason for r in twice.refusals)


@pytest.mark.parametrize("derived", [
    "SELECT ss_sold_date_sk AS day, count(*) AS n FROM store_sales GROUP BY ss_sold_date_sk",
    "SELECT DISTINCT ss_sold_date_sk AS day FROM store_sales",
    "SELECT ss_sold_date_sk AS day FROM store_sales LIMIT 10",
    "SELECT ss_sold_date_sk AS day, sum(ss_sales_price) OVER () AS total FROM store_sales",
    "SELECT max(ss_sold_date_sk) AS day FROM store_sales",
    "SELECT ss_sold_date_sk + 1 AS day FROM store_sales",
    "SELECT s.ss_sold_date_sk AS day FROM store_sales s JOIN store ON s.ss_store_sk = s_store_sk",
    "SELECT ss_sold_date_sk AS day FROM store_sales UNION ALL SELECT r_date_sk FROM sales.returns",
])
def test_a_derived_table_whose_rows_are_not_the_facts_own_prunes_nothing_through_it(derived):
    query = f"SELECT * FROM ({derived}) AS v JOIN date_dim ON v.day = d_date_sk WHERE d_year = 2000"
    assert [p for p in detect(query, TABLES).prunings if p.dimension == "default.date_dim"] == []


@pytest.mark.parametrize(("source", "stopped_by"), [
    ("(SELECT ss_sold_date_sk AS day, count(*) AS n FROM store_sales GROUP BY ss_sold_date_sk)", "an aggregate"),
    ("(SELECT max(ss_sold_date_sk) AS day FROM store_sales)", "an aggregate"),
    ("(SELECT DISTINCT ss_sold_date_sk AS day FROM store_sales)", "DISTINCT"),
    ("(SELECT ss_sold_date_sk AS day FROM store_sales LIMIT 10)", "a LIMIT"),
    ("(SELECT ss_sold_date_sk AS day, sum(ss_sales_price) OVER () AS total FROM store_sales)", "a window function"),
    ("(SELECT day FROM (SELECT ss_sold_date_sk AS day, row_number() OVER (ORDER BY ss_item_sk) AS n "
     "FROM store_sales) AS w WHERE n > 1)", "a window function"),
    ("(SELECT s.ss_sold_date_sk AS day FROM store_sales s JOIN store ON s.ss_store_sk = s_store_sk)", "a join"),
    ("(SELECT ss_sold_date_sk AS day FROM store_sales UNION ALL SELECT r_date_sk FROM sales.returns)",
     "a UNION ALL"),
    ("(SELECT ss_sold_date_sk AS day FROM store_sales UNION SELECT r_date_sk FROM sales.returns)", "a UNION"),
    ("ranked", "a window function"),  # a CTE
    ("above", "a window function"),  # a CTE over that CTE
])
def test_a_join_behind_what_does_not_pass_a_facts_rows_through_is_refused_saying_what_stopped_it(source, stopped_by):
    ctes = ("WITH ranked AS (SELECT ss_sold_date_sk AS day, rank() OVER (ORDER BY ss_sales_price) AS r "
            "FROM store_sales), above AS (SELECT day FROM ranked WHERE r > 1) ")
    query = f"{ctes}SELECT * FROM {source} AS v JOIN date_dim ON v.day = d_date_sk WHERE d_year = 2000"
    tables = "default.store_sales, sales.returns" if "returns" in source else "default.store_sales"
    assert (f"v.day = date_dim.d_date_sk: v reads {tables} through {stopped_by}; dynsource prunes a dynsource table "
            "only where the query reads it directly or through derived tables that filter and project its rows"
            ) in reasons(query)


@pytest.mark.parametrize(("hint", "found"), [
    ("MERGE(d)", "MERGE(d)"),
    ("SHUFFLE_HASH(D)", "SHUFFLE_HASH(d)"),  # Spark matches the alias ignoring case
    ("SHUFFLE_REPLICATE_NL(d)", "SHUFFLE_REPLICATE_NL(d)"),
    ("MERGEJOIN(ss)", "MERGEJOIN(ss)"),  # on the fact: no broadcast of the dimension either
    ("BROADCAST(ss)", "BROADCAST(ss)"),  # the fact broadcast, the dimension streamed
    ("MERGE(d), BROADCAST(d)", "MERGE(d)"),  # a relation takes the first hint naming it
    ("BROADCAST(d), MERGE(d)", None),
    ("BROADCAST(d), MERGE(ss)", None),  # a broadcast of the dimension wins over a hint on the fact
    ("BROADCASTJOIN(d)", None),
    ("MERGE(date_dim)", None),  # not the alias: Spark ignores it
    ("REPARTITION(3)", None),  # no join strategy
])
def test_a_join_strategy_hint_under_which_spark_broadcasts_no_dimension_is_told(hint, found):
    (pruning,) = detect(f"SELECT /*+ {hint} */ * FROM store_sales ss JOIN date_dim d ON ss.ss_sold_date_sk = "
                        "d.d_date_sk WHERE d.d_year = 2000", TABLES).prunings
    assert pruning.strategy_hint == found
    # A hint applies to the relations of its own SELECT only.
    (inner,) = detect(f"SELECT /*+ {hint} */ * FROM (SELECT d.d_moy FROM store_sales ss JOIN date_dim d "
                      "ON ss.ss_sold_date_sk = d.d_date_sk WHERE d.d_year = 2000) AS ss", TABLES).prunings
    assert inner.strategy_hint is None
