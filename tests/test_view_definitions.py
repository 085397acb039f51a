"""What Spark Connect's server tells of a view and of a registered table, read by the client (no Spark here: the
texts are Spark's own, as pyspark 4.3 and 4.0 servers sent them)."""

from __future__ import annotations

from dynsource.dpp.connectnames import v2_relation
from dynsource.spark.metastore import described_view

ANALYSED = """== Analyzed Logical Plan ==
v: bigint, date_key: int, region: string collate UTF8_BINARY
GlobalLimit 0
+- LocalLimit 0
   +- SubqueryAlias spark_catalog.default.cv_sales
      +- RelationV2[v#65L, date_key#66, region#67] spark_catalog.default.cv_sales{twice}
"""


def test_a_registered_tables_plan_gives_its_columns_a_bigint_one_without_sparks_suffix():
    for twice in ("", " spark_catalog.default.cv_sales"):  # Spark 4.1+ names the table once, 4.0 twice
        assert v2_relation(ANALYSED.format(twice=twice)) == ("spark_catalog.default.cv_sales",
                                                             ["v", "date_key", "region"])
    aliased = ANALYSED.format(twice="").replace("SubqueryAlias spark_catalog.default.cv_sales", "SubqueryAlias v")
    assert v2_relation(aliased) is None  # another name's plan (a view) reading the table


PERSISTENT = {
    "table_name": "pv", "catalog_name": "spark_catalog", "namespace": ["default"], "schema_name": "default",
    "columns": [{"name": "x", "type": {"name": "int"}, "nullable": True},
                {"name": "y", "type": {"name": "string", "collation": "UTF8_BINARY"}, "nullable": True}],
    "type": "VIEW", "view_text": "SELECT a, b FROM base_t WHERE a > 1",
    "view_original_text": "SELECT a, b FROM base_t WHERE a > 1", "view_schema_mode": "COMPENSATION",
    "view_catalog_and_namespace": "spark_catalog.default", "view_query_output_columns": ["a", "b"],
    "view_creation_spark_configuration": {"spark.sql.session.timeZone": "Etc/UTC", "spark.sql.ansi.enabled": "true"},
    "collation": "UTF8_BINARY",
}


def test_a_persistent_views_description_is_its_definition():
    view = described_view(PERSISTENT)
    assert view is not None and not view.unseen and not view.temporary
    assert view.text == "SELECT a, b FROM base_t WHERE a > 1"
    assert view.namespace == ("spark_catalog", "default")
    assert (view.query_columns, view.columns) == (("a", "b"), ("x", "y"))
    assert view.configs == (("spark.sql.ansi.enabled", "true"), ("spark.sql.session.timeZone", "Etc/UTC"))


def test_a_view_with_another_default_collation_is_described_as_not_seen_through():
    view = described_view({**PERSISTENT, "collation": "UTF8_LCASE"})
    assert view is not None and view.unseen == "it was made with the default collation UTF8_LCASE"


def test_anything_but_a_persistent_view_of_the_session_catalog_has_no_definition_here():
    temporary = {key: value for key, value in PERSISTENT.items() if key != "view_creation_spark_configuration"}
    assert described_view({**temporary, "catalog_name": "system", "namespace": ["session"]}) is None
    assert described_view({**PERSISTENT, "type": "MANAGED"}) is None
    assert described_view({**PERSISTENT, "catalog_name": "other"}) is None
    quoted = described_view({**PERSISTENT, "view_catalog_and_namespace": "spark_catalog.`my.db`"})
    assert quoted is not None and quoted.namespace == ("spark_catalog.`my.db`",)  # not seen through: one part
