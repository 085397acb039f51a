"""Which dimension sides read their tables whole (:mod:`dynsource.dpp.unfiltered`): Spark's analysed plans of real
relations, views and DataFrames, and the setting that chooses whether such a side is collected."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.dpp import unfiltered
from tests.spark_oracle import session_set

WHOLE = """Project [d#8L, y#9L]
+- ResolvedHint (strategy=broadcast)
   +- SubqueryAlias spark_catalog.default.t
      +- Relation spark_catalog.default.t[d#8L,y#9L] parquet"""
FILTERED_VIEW = """Project [d#13L, y#14L]
+- SubqueryAlias spark_catalog.default.pv
   +- View (`spark_catalog`.`default`.`pv`, [d#13L, y#14L])
      +- Project [cast(d#8L as bigint) AS d#13L, cast(y#9L as bigint) AS y#14L]
         +- Filter (y#9L = cast(2 as bigint))
            +- SubqueryAlias spark_catalog.default.t
               +- Relation spark_catalog.default.t[d#8L,y#9L] parquet"""
CTE = """WithCTE
:- CTERelationDef 0, false
:  +- SubqueryAlias c
:     +- Project [d#8L]
:        +- SubqueryAlias spark_catalog.default.t
:           +- Relation spark_catalog.default.t[d#8L,y#9L] parquet
+- Project [d#8L]
   +- SubqueryAlias c
      +- CTERelationRef 0, true, [d#8L], false, false"""


@pytest.mark.parametrize(("plan", "whole"), [
    (WHOLE, True), (FILTERED_VIEW, False), (CTE, True),
    (CTE.replace(":     +- Project [d#8L]", ":     +- Filter (d#8L > 3)"), False),
    ("Project [y#9L]\n+- Distinct\n   +- Relation t[y#9L] parquet", False),
    ("GlobalLimit 5\n+- LocalLimit 5\n   +- Relation t[y#9L] parquet", False),
    ("Project [d#1L]\n+- Filter isnotnull(d#1L)\n   +- Relation t[d#1L] parquet", True),
    ("Filter ((isnotnull(d#1L) AND isnotnull(y#2L)) AND isnotnull(d#1L))\n+- Relation t[d#1L,y#2L] parquet", True),
    ("Filter (isnotnull(d#1L) AND (y#2L = 1))\n+- Relation t[d#1L,y#2L] parquet", False),
    ("Filter NOT isnotnull(d#1L)\n+- Relation t[d#1L] parquet", False),
    ("Filter (NOT isnull(d#1L) AND isnotnull(y#2L))\n+- Relation t[d#1L,y#2L] parquet", True),
    ("Filter isnull(d#1L)\n+- Relation t[d#1L] parquet", False),
    ("", False),
])
def test_a_plan_reads_whole_only_where_every_node_passes_every_row_on(plan, whole):
    assert unfiltered.reads_whole(plan) is whole


@pytest.fixture(scope="module")
def relations(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("unfiltered")
    pq.write_table(pa.table({"d": list(range(10)), "y": [i % 3 for i in range(10)]}), root / "dim.parquet")
    path = str(root / "dim.parquet")
    spark.read.parquet(path).createOrReplaceTempView("unf_dim")
    spark.read.parquet(path).where("y = 1").createOrReplaceTempView("unf_dim_filtered")
    spark.createDataFrame([(1, 2)], "d INT, y INT").createOrReplaceTempView("unf_local")
    spark.sql(f"CREATE TABLE unf_t USING parquet LOCATION '{root}'")
    spark.sql("CREATE VIEW unf_filtered AS SELECT * FROM unf_t WHERE y = 2")
    spark.sql("CREATE VIEW unf_projected AS SELECT d, y FROM unf_t")
    yield spark
    spark.sql("DROP VIEW unf_filtered")
    spark.sql("DROP VIEW unf_projected")
    spark.sql("DROP TABLE unf_t")
    for view in ("unf_dim", "unf_dim_filtered", "unf_local"):
        spark.catalog.dropTempView(view)


@pytest.mark.parametrize(("query", "whole"), [
    ("SELECT * FROM unf_t AS x", True),
    ("SELECT * FROM unf_dim", True),  # a DataFrame's temporary view
    ("SELECT * FROM unf_dim_filtered", False),  # its DataFrame filters
    ("SELECT * FROM unf_local", True),
    ("SELECT * FROM unf_projected p", True),
    ("SELECT * FROM unf_filtered", False),  # the view's text filters
    ("WITH c AS (SELECT d FROM unf_t) SELECT * FROM c", True),
    ("SELECT * FROM (SELECT DISTINCT y FROM unf_t) s", False),
    ("SELECT /*+ BROADCAST(unf_t) */ * FROM unf_t", True),
    ("SELECT * FROM unf_t WHERE d IS NOT NULL AND y IS NOT NULL", True),  # null keys only: not selective
    ("SELECT * FROM unf_t WHERE d IS NOT NULL AND y > 0", False),
])
def test_sparks_analysed_plan_tells_whether_a_dimension_reads_its_tables_whole(relations, query, whole):
    plan = unfiltered.analysed_plan(relations.sql(query))
    assert unfiltered.reads_whole(plan) is whole, plan


def test_a_bad_unfiltered_dimensions_setting_is_an_error_naming_it_and_its_values(relations):
    with session_set(relations, {unfiltered.UNFILTERED_CONF: "sometimes"}):
        for call in (dynsource.sql, dynsource.explain_sql):
            with pytest.raises(ValueError, match=r"spark\.dynsource\.unfilteredDimensions must be one of skip, "
                                                 r"collect; got 'sometimes'"):
                call(relations, "SELECT * FROM unf_t")
    with session_set(relations, {unfiltered.UNFILTERED_CONF: " Collect "}):
        assert unfiltered.collects_unfiltered(relations)
    assert not unfiltered.collects_unfiltered(relations)
