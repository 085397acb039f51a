"""Static pruning: the ``partitionFilter`` option, and WHERE clauses that Spark evaluates whatever its pushdown says."""

from __future__ import annotations

import datetime
import functools
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import dynsource
from dynsource.layout.levels import Level, PartitionTyping, PartitionValues
from dynsource.layout.partitionfilter import PartitionFilter
from dynsource.spark.source import DynsourceDataSource, DynsourceReader
from tests.helpers import PUSHDOWN_CONF, read, rows

# Every shape docs/sql.md lists for partitionFilter; each is also a WHERE clause Spark evaluates.
PREDICATES = [
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
    "a <=> 2",
    "NOT (a <=> 2)",
    "a = 1 AND b = 'y'",
    "a >= 2 AND b IN ('x')",
    "b < 'y' AND a IS NULL",
    "d = DATE'2024-01-02'",
    "d > '2024-01-01'",
    "a <> 2",
    "a != 2",
    "a IN (1, NULL)",
    "NOT (a IN (1, NULL))",
    "a NOT IN (1, 2)",
    "a BETWEEN 2 AND 3",
    "a NOT BETWEEN 2 AND 3",
    "a = 1 OR b = 'x'",
    "(a = 1 OR a IS NULL) AND NOT (b = 'x' AND d = DATE'2024-01-01')",
    "a = '3'",
    "a = NULL",
    "A = 1",
]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """Two partition columns (a int with the default partition, b string), a date partition and two row groups."""
    root = tmp_path_factory.mktemp("partition-filter") / "t"
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


def tagged_union(frames):
    """One DataFrame of every case's rows, tagged with the case's number: one Spark job compares them all."""
    tagged = [df.withColumn("case", F.lit(i)) for i, df in enumerate(frames)]
    return functools.reduce(lambda x, y: x.unionByName(y, allowMissingColumns=True), tagged)


def test_partition_filter_equals_spark_where_for_every_shape(spark, table):
    native = spark.read.parquet(str(table))
    ours = tagged_union([read(spark, table, native.schema, partitionFilter=p) for p in PREDICATES])
    expected = tagged_union([native.where(p) for p in PREDICATES])
    assert rows(ours) == rows(expected)
    assert ours.count() == expected.count()  # a second action on the same DataFrame reads the same partitions


@pytest.mark.parametrize("predicate", ["a = 1", "a IN (1, NULL)", "NOT (a <=> 2)", "a = 1 OR b = 'x'",
                                       "d > '2024-01-01' AND a IS NULL"])
def test_partition_filter_prunes(spark, table, tmp_path, predicate):
    schema = spark.read.parquet(str(table)).schema  # given, so that no corrupt footer is read for the schema
    expected = rows(spark.read.parquet(str(table)).where(predicate))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", predicate)
    pruned = read(spark, corrupt, schema, partitionFilter=predicate)
    assert rows(pruned) == expected
    assert pruned.count() == len(expected)
    with pytest.raises(Exception, match=r"not parquet|Parquet|magic"):
        read(spark, corrupt, schema).count()


@pytest.mark.smoke  # ./test --quick: partitionFilter
def test_partition_filter_with_a_dynamic_filter_both_must_keep(spark, table, tmp_path):
    schema = spark.read.parquet(str(table)).schema
    where = "a IN (1, 2) AND b = 'x'"
    expected = rows(spark.read.parquet(str(table)).where(where))
    corrupt = corrupt_all_but(spark, table, tmp_path / "t", where)
    handle = dynsource.publish(dynsource.DynamicFilteringData([("a", "int")], [(1,), (2,)]))
    pruned = read(spark, corrupt, schema, dynamicFilter=handle, partitionFilter="b = 'x'")
    assert rows(pruned) == expected
    assert dynsource.scan_report(handle).partitions_kept == 4  # a in {1, 2}, b = x, both dates


def test_partition_filter_in_sql_with_options_and_a_temporary_view(spark, table):
    where = "a = 2 AND d >= DATE'2024-01-02'"
    expected = rows(spark.read.parquet(str(table)).where(where))
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW filtered_view USING dynsource "
              f"OPTIONS (path '{table}', partitionFilter \"{where}\")")
    assert rows(spark.sql("SELECT * FROM filtered_view")) == expected
    assert rows(spark.sql("SELECT * FROM filtered_view WHERE v > 20")) == [r for r in expected if r.v > 20]


@pytest.mark.parametrize(("predicate", "message"), [
    ("a = ", "is not a SQL predicate"),
    ("a LIKE 'x%'", "is not supported"),
    ("a + 1 = 2", "is not a column name"),
    ("a = b", "is not a literal"),
    ("a IN (SELECT 1)", "is not supported"),
    ("t.a = 1", "is not a column name"),
    ("a = 1; DROP TABLE x", "is not a SQL predicate"),
])
def test_unsupported_predicates_are_errors_at_load(spark, table, predicate, message):
    with pytest.raises(Exception, match=rf"Option 'partitionFilter' = .*{message}"):
        read(spark, table, partitionFilter=predicate)


@pytest.mark.parametrize(("predicate", "message"), [
    ("nope = 1", r"column 'nope' is not a column of the table"),
    ("v = 1", r"column\(s\) \['v'\] are not partition columns; the partition columns are \['a', 'b', 'd'\]"),
    ("a = 1.5", r"column 'a': literal Decimal\('1.5'\) is not a int value"),
    ("a = 'x'", r"column 'a': literal 'x' cannot be converted to int"),
    ("b = 1", r"column 'b': literal Decimal\('1'\) is not a string value"),
    ("d = 'not a date'", r"column 'd': literal 'not a date' cannot be converted to date"),
])
def test_predicates_that_do_not_fit_the_table_are_errors(spark, table, predicate, message):
    with pytest.raises(Exception, match=rf"Option 'partitionFilter' = .*{message}"):
        read(spark, table, partitionFilter=predicate).collect()


def test_float_partition_columns_are_refused(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2], "f": [1.5, 2.5]}), tmp_path, partition_cols=["f"])
    with pytest.raises(Exception, match=r"column 'f' is of type double; expected a partition column of integral"):
        read(spark, tmp_path, partitionFilter="f = 1.5").collect()


def test_parsed_predicate_is_plain_data():
    parsed = PartitionFilter.parse("a BETWEEN 1 AND 2 AND (b = 'x' OR b IS NULL) AND NOT c IN (1, -2)")
    assert len(parsed.conjuncts) == 3
    assert parsed.columns() == {"a", "b", "c"}
    filter_level = parsed.level_filter()
    typing = PartitionTyping({"a": "int", "b": "string", "c": "bigint"})

    def keep(columns, raw_rows):
        values = PartitionValues()
        for index, column in enumerate(columns):
            values = values.extend(typing.type_level(column, [row[index] for row in raw_rows]))
        return filter_level(Level(columns, raw_rows, values))

    assert keep(("a",), [("1",), ("3",), ("__HIVE_DEFAULT_PARTITION__",)]) == [True, False, False]
    assert keep(("a", "b"), [("1", "x"), ("1", "y"), ("1", "__HIVE_DEFAULT_PARTITION__")]) == [True, False, True]
    assert keep(("a", "b", "c"), [("1", "x", "-2"), ("1", "x", "5"), ("1", "x", "__HIVE_DEFAULT_PARTITION__")]) == [
        False, True, False]
    assert keep(("a",), [("1",), ("x",)]) is None  # a value with no image in its type: the level is not pruned


# WHERE clauses: Spark evaluates them, with its pushdown to Python sources off or on.
WHERE = [*PREDICATES, "v > 40", "s = 's3' AND a = 1", "v < 10 OR a = 3", "s LIKE 's1%' AND b = 'y'", "a + 1 = 2"]


def test_reader_defines_no_push_filters(table):
    source = DynsourceDataSource({"path": str(table)})
    assert type(source.reader(source.schema())) is DynsourceReader
    assert "pushFilters" not in vars(DynsourceReader)


def test_register_changes_no_spark_setting(spark):
    before = spark.conf.get(PUSHDOWN_CONF, None)
    dynsource.register(spark)
    assert spark.conf.get(PUSHDOWN_CONF, None) == before


def test_where_in_sql_equals_spark(pushdown, table):
    spark = pushdown
    read(spark, table).createOrReplaceTempView("ours")
    spark.read.parquet(str(table)).createOrReplaceTempView("native")
    got, expected = (tagged_union([spark.sql(f"SELECT * FROM {view} WHERE {where}") for where in WHERE])
                     for view in ("ours", "native"))
    assert rows(got) == rows(expected)


TWO_REFERENCES = [
    "SELECT * FROM {t} WHERE {w1} UNION ALL SELECT * FROM {t} WHERE {w2}",
    "SELECT x.v, x.a, y.b FROM {t} x JOIN {t} y ON x.v = y.v WHERE x.{w1} AND y.{w2}",
    "WITH c AS (SELECT * FROM {t}) SELECT * FROM c WHERE {w1} UNION ALL SELECT * FROM c WHERE {w2}",
    "SELECT * FROM {t} WHERE {w1} AND v IN (SELECT v FROM {t} WHERE {w2})",
]
WHERE_PAIRS = [("a = 1", "a = 2"), ("a IS NULL", "b = 'y'")]


def test_one_table_or_view_named_twice_with_different_wheres(pushdown, table, tmp_path):
    spark = pushdown
    read(spark, table).createOrReplaceTempView("ours")
    spark.read.parquet(str(table)).createOrReplaceTempView("native")
    dynsource.register_table(spark, "twice", path=str(table), definitions=str(tmp_path), replace=True)
    try:
        for view in ("ours", "twice"):
            queries = [q.format(t="{t}", w1=w1, w2=w2) for q in TWO_REFERENCES for w1, w2 in WHERE_PAIRS]
            got, expected = (tagged_union([spark.sql(q.format(t=name)) for q in queries]) for name in (view, "native"))
            assert rows(got) == rows(expected), view
    finally:
        dynsource.drop_table(spark, "twice")


def test_one_dataframe_many_wheres_equals_spark(pushdown, table):
    spark = pushdown
    ours, native = read(spark, table), spark.read.parquet(str(table))
    for where in ["a = 3", None, "v > 20", None, "a IS NULL", "a = 1 AND b = 'y'", None]:
        got, expected = (df if where is None else df.where(where) for df in (ours, native))
        assert got.count() == expected.count(), where
        assert rows(got) == rows(expected), where
