"""Static partition pruning from WHERE: the filters Spark pushes to the reader (pyspark >= 4.1)."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import dynsource
from dynsource import pushdown
from dynsource.source import DynsourceDataSource, DynsourceReader
from tests.helpers import read, rows

needs_pushdown = pytest.mark.skipif(not pushdown.is_supported(), reason="pyspark < 4.1 pushes no filters")

WHERE_CLAUSES = [
    "a = 1",
    "a IN (1, 3)",
    "a < 2",
    "a <= 2",
    "a > 1",
    "a >= 2",
    "a IS NULL",
    "a IS NOT NULL",
    "NOT (a = 1)",
    "a <=> NULL",
    "a = 1 AND b = 'y'",
    "a >= 2 AND b IN ('x')",
    "b < 'y' AND a IS NULL",
    "d = DATE'2024-01-02'",
    "a <> 2",
    "a IN (1, NULL)",
    "NOT (a IN (1, NULL))",
]
# Spark pushes no disjunction to a Python source: these are evaluated by Spark alone.
UNPUSHED_CLAUSES = ["a = 3 OR b = 'x'", "a + 1 = 2"]


@pytest.fixture(scope="module")
def pushdown_on(spark):
    previous = spark.conf.get(pushdown.PUSHDOWN_CONF, None)
    pushdown.enable(spark)
    yield spark
    if previous is not None:
        spark.conf.set(pushdown.PUSHDOWN_CONF, previous)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """Two partition columns (a int with the default partition, b string), a date partition and two row groups."""
    root = tmp_path_factory.mktemp("pushdown") / "t"
    count = 48
    data = pa.table({
        "v": list(range(count)),
        "s": [f"s{i % 5}" for i in range(count)],
        "a": [[1, 2, 3, None][i % 4] for i in range(count)],
        "b": [["x", "y"][i // 4 % 2] for i in range(count)],
        "d": [datetime.date(2024, 1, 1 + i // 8 % 2) for i in range(count)],
    })
    pq.write_to_dataset(data, root, partition_cols=["a", "b", "d"], row_group_size=3)
    return root


def corrupt_all_but(spark, source: Path, target: Path, where: str) -> Path:
    """A copy of ``source`` whose files no row satisfying ``where`` comes from hold junk: reading one fails."""
    shutil.copytree(source, target)
    matching = spark.read.parquet(str(target)).where(where).select(F.input_file_name().alias("f")).distinct()
    keep = {Path(unquote(urlparse(r.f).path)).parent for r in matching.collect()}
    for data_file in target.rglob("*.parquet"):
        if data_file.parent not in keep:
            data_file.write_bytes(b"not parquet")
    return target


@pytest.mark.parametrize("where", WHERE_CLAUSES + UNPUSHED_CLAUSES)
def test_sql_rows_equal_spark(pushdown_on, table, where):
    spark = pushdown_on
    read(spark, table).createOrReplaceTempView("pushed")
    spark.read.parquet(str(table)).createOrReplaceTempView("native")
    got, expected = (spark.sql(f"SELECT * FROM {view} WHERE {where}") for view in ("pushed", "native"))
    assert rows(got) == rows(expected)


@needs_pushdown
@pytest.mark.parametrize("where", WHERE_CLAUSES)
def test_sql_prunes_non_matching_partitions(pushdown_on, table, tmp_path, where):
    spark = pushdown_on
    schema = spark.read.parquet(str(table)).schema  # given, so that no corrupt footer is read for the schema
    expected = rows(spark.read.parquet(str(table)).where(where))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", where)
    read(spark, corrupt, schema).createOrReplaceTempView("corrupt")
    assert rows(spark.sql(f"SELECT * FROM corrupt WHERE {where}")) == expected
    with pytest.raises(Exception, match=r"not parquet|Parquet|magic"):
        read(spark, corrupt, schema).count()


@needs_pushdown
def test_dataframe_api_prunes(pushdown_on, table, tmp_path):
    spark = pushdown_on
    schema = spark.read.parquet(str(table)).schema
    condition = (F.col("a") == 2) & F.col("b").isin("x")
    expected = rows(spark.read.parquet(str(table)).where(condition))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", "a = 2 AND b = 'x'")
    assert rows(read(spark, corrupt, schema).where(condition)) == expected
    assert expected


def test_data_column_filters_stay_correct(pushdown_on, table):
    spark = pushdown_on
    for where in ("v > 40", "s = 's3' AND a = 1", "v < 10 OR a = 3", "s LIKE 's1%' AND b = 'y'"):
        assert rows(read(spark, table).where(where)) == rows(spark.read.parquet(str(table)).where(where)), where


@needs_pushdown
def test_combined_with_a_dynamic_filter(pushdown_on, table, tmp_path):
    spark = pushdown_on
    schema = spark.read.parquet(str(table)).schema
    where = "a IN (1, 2) AND b = 'x'"
    expected = rows(spark.read.parquet(str(table)).where(where))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", where)
    handle = dynsource.publish(dynsource.DynamicFilteringData([("a", "int")], [(1,), (2,)]))
    pruned = read(spark, corrupt, schema, dynamicFilter=handle).where("b = 'x'")
    assert rows(pruned) == expected
    assert dynsource.scan_report(handle).partitions_kept == 4  # a in {1, 2}, b = x, both dates


def test_conf_turned_off_again_still_reads(pushdown_on, table):
    spark = pushdown_on
    spark.conf.set(pushdown.PUSHDOWN_CONF, "false")
    try:
        for where in ("a = 1", "a IS NULL AND b = 'y'", "v > 40"):
            assert rows(read(spark, table).where(where)) == rows(spark.read.parquet(str(table)).where(where)), where
    finally:
        pushdown.enable(spark)


def test_reader_outside_the_pushdown_worker_has_no_push_filters(table, spark):
    source = DynsourceDataSource({"path": str(table)})
    reader = source.reader(source.schema())
    assert type(reader) is DynsourceReader
    assert "pushFilters" not in vars(DynsourceReader)


@needs_pushdown
def test_enable_sets_the_conf(pushdown_on):
    assert pushdown_on.conf.get(pushdown.PUSHDOWN_CONF) == "true"


@needs_pushdown
def test_claims_exactly_applied_partition_filters():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, IsNull, Not, StringStartsWith

    filters = [IsNotNull(("a",)), EqualTo(("a",), 1), GreaterThan(("v",), 3), StringStartsWith(("b",), "x"),
               EqualTo(("f",), 1.5), In(("b",), ("x", None)), Not(IsNull(("b",)))]
    partition_filter = pushdown.PartitionFilter(filters, {"v": "bigint", "a": "int", "b": "string", "f": "double"})
    assert partition_filter.keep(("a",), [("1",), ("2",), ("__HIVE_DEFAULT_PARTITION__",)]) == [True, False, False]
    assert partition_filter.keep(("a", "b"), [("1", "x"), ("1", "y")]) == [True, False]
    assert partition_filter.keep(("a", "b", "f"), [("1", "x", "1.5")]) is None  # floats stay with Spark
    # Data columns, string matching and floats go back to Spark.
    assert partition_filter.unapplied() == [filters[2], filters[3], filters[4]]


@needs_pushdown
def test_literals_of_another_kind_are_not_applied():
    from pyspark.sql.datasource import EqualTo, LessThan

    filters = [EqualTo(("a",), "1"), LessThan(("d",), datetime.datetime(2024, 1, 2, 12)), EqualTo(("a",), True)]
    partition_filter = pushdown.PartitionFilter(filters, {"a": "int", "d": "date"})
    assert partition_filter.keep(("a",), [("1",), ("2",)]) == [True, True]
    assert partition_filter.keep(("a", "d"), [("1", "2024-01-02")]) == [True]
    assert partition_filter.unapplied() == filters


@needs_pushdown
def test_a_column_differing_in_case_is_not_pruned():
    from pyspark.sql.datasource import EqualTo

    # The planner fills only an exactly named read-schema column from the directories: 'A' reads as null here.
    partition_filter = pushdown.PartitionFilter([EqualTo(("A",), 1)], {"A": "int"})
    assert partition_filter.keep(("a",), [("1",), ("2",)]) is None
    assert len(partition_filter.unapplied()) == 1


@needs_pushdown
def test_sql_only_temporary_view_prunes(pushdown_on, table, tmp_path):
    spark = pushdown_on
    where = "a = 2 AND d >= DATE'2024-01-02'"
    expected = rows(spark.read.parquet(str(table)).where(where))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", where)
    schema = spark.read.parquet(str(table)).schema.toDDL()
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sql_pushed ({schema}) USING dynsource OPTIONS (path '{corrupt}')")
    assert rows(spark.sql(f"SELECT * FROM sql_pushed WHERE {where}")) == expected
