"""Static partition pruning from WHERE: the filters Spark pushes to the reader (pyspark >= 4.1)."""

from __future__ import annotations

import datetime
import shutil
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
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


# Data-column filters: row groups skipped by Parquet statistics (Spark still evaluates the filters).
ROW_GROUP_WHERE = [
    "v > 40",
    "v BETWEEN 10 AND 13",
    "v = 7 AND p = 2",
    "s IN ('k005', 'k030')",
    "s < 'k004'",
    "d >= DATE'2024-02-10'",
    "n IS NULL",
    "n IS NOT NULL AND v < 30",
    "flag = true",
    "NOT (v < 44)",
    "v <=> 3",
    "amount > 4.5",
]
ROW_GROUP_SIZE = 4


@pytest.fixture(scope="module")
def sorted_table(tmp_path_factory) -> Path:
    """Sorted data columns (tight row-group statistics) and ``g``, each row's row-group number in its file."""
    root = tmp_path_factory.mktemp("row-groups") / "t"
    for p in (1, 2):
        count = 48
        (root / f"p={p}").mkdir(parents=True)
        pq.write_table(pa.table({
            "v": pa.array(range(count), pa.int64()),
            "s": [f"k{i:03d}" for i in range(count)],
            "d": [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(count)],
            "n": [None if 8 <= i < 16 else i for i in range(count)],
            "flag": [i >= 36 for i in range(count)],
            "amount": pa.array([Decimal(i) / 10 for i in range(count)], pa.decimal128(6, 2)),
            "g": [i // ROW_GROUP_SIZE for i in range(count)],
        }), root / f"p={p}" / "part-0.parquet", row_group_size=ROW_GROUP_SIZE)
    return root


def corrupt_row_groups_but(spark, source: Path, target: Path, where: str) -> Path:
    """A copy of ``source`` whose row groups holding no row satisfying ``where`` are zeroed: reading one fails."""
    shutil.copytree(source, target)
    matching = spark.read.parquet(str(target)).where(where).select(F.input_file_name().alias("f"), "g").distinct()
    keep = {(Path(unquote(urlparse(r.f).path)), r.g) for r in matching.collect()}
    for data_file in target.rglob("*.parquet"):
        metadata = pq.read_metadata(data_file)
        content = bytearray(data_file.read_bytes())
        for index in range(metadata.num_row_groups):
            if (data_file, index) in keep:
                continue
            row_group = metadata.row_group(index)
            for column in range(row_group.num_columns):
                chunk = row_group.column(column)
                start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                content[start:start + chunk.total_compressed_size] = bytes(chunk.total_compressed_size)
        data_file.write_bytes(bytes(content))
    return target


@needs_pushdown
@pytest.mark.parametrize("where", ROW_GROUP_WHERE)
def test_data_column_filters_skip_row_groups(pushdown_on, sorted_table, tmp_path, where):
    spark = pushdown_on
    expected = rows(spark.read.parquet(str(sorted_table)).where(where))
    corrupt = corrupt_row_groups_but(spark, sorted_table, tmp_path / "t", where)
    assert rows(read(spark, corrupt).where(where)) == expected
    if where != "NOT (v < 44)":  # every row group holds a match: nothing to corrupt
        with pytest.raises(Exception, match="Cannot read data file"):
            read(spark, corrupt).count()


def test_data_column_filters_on_every_line_equal_spark(pushdown_on, sorted_table):
    spark = pushdown_on
    for where in [*ROW_GROUP_WHERE, "NOT (n IN (1, NULL))", "NOT (v <=> 3)", "s IN ('k001', NULL)"]:
        assert rows(read(spark, sorted_table).where(where)) == rows(spark.read.parquet(str(sorted_table)).where(where))


# One row per row group, so a kept row group is a kept value: x is null, 0, 1, 2, 5, 7 in row groups 0 to 5.
ONE_ROW_GROUPS = [None, 0, 1, 2, 5, 7]
# (pushed filter, row groups kept): exactly those with a row Spark keeps, but for two NOT IN, which also keep
# the null row group and one the IN list's null rules out (more read, never less).
ROW_GROUP_CASES = [
    (lambda f: f.EqualTo(("x",), 5), [4]),
    (lambda f: f.EqualTo(("x",), None), [0, 1, 2, 3, 4, 5]),  # never true: not worth an expression
    (lambda f: f.Not(f.EqualTo(("x",), 5)), [1, 2, 3, 5]),
    (lambda f: f.EqualNullSafe(("x",), 5), [4]),
    (lambda f: f.Not(f.EqualNullSafe(("x",), 5)), [0, 1, 2, 3, 5]),
    (lambda f: f.EqualNullSafe(("x",), None), [0]),
    (lambda f: f.Not(f.EqualNullSafe(("x",), None)), [1, 2, 3, 4, 5]),
    (lambda f: f.In(("x",), (1, 5, None)), [2, 4]),
    (lambda f: f.Not(f.In(("x",), (1, 5))), [0, 1, 3, 5]),
    (lambda f: f.Not(f.In(("x",), (1, None))), [0, 1, 3, 4, 5]),
    (lambda f: f.IsNull(("x",)), [0]),
    (lambda f: f.Not(f.IsNull(("x",))), [1, 2, 3, 4, 5]),
    (lambda f: f.IsNotNull(("x",)), [1, 2, 3, 4, 5]),
    (lambda f: f.LessThan(("x",), 2), [1, 2]),
    (lambda f: f.Not(f.GreaterThanOrEqual(("x",), 5)), [1, 2, 3]),
    (lambda f: f.LessThanOrEqual(("x",), 0), [1]),
    (lambda f: f.GreaterThan(("x",), 5), [5]),
]


@needs_pushdown
@pytest.mark.parametrize(("make", "kept"), ROW_GROUP_CASES)
def test_row_group_filter_keeps_every_row_group_spark_keeps_a_row_of(tmp_path, make, kept):
    from pyspark.sql import datasource

    values = pa.array(ONE_ROW_GROUPS, pa.int32())
    path = tmp_path / "one-row-groups.parquet"
    pq.write_table(pa.table({"x": values}), path, row_group_size=1)
    fragment = ds.ParquetFileFormat().make_fragment(str(path), filesystem=pafs.LocalFileSystem())
    pushed = make(datasource)
    where = pushdown.PartitionFilter([pushed], {"x": "int"}).row_group_filter(())
    got = where.keep_row_groups(fragment, range(len(values))) if where else list(range(len(values)))
    # Spark's answer for each value, as partition pruning evaluates it (checked against Spark above).
    answers = pushdown._evaluate(pushed, values, "int").to_pylist()
    spark_keeps = {index for index, answer in enumerate(answers) if answer}
    assert spark_keeps <= set(got)
    assert got == kept


@needs_pushdown
def test_row_group_filter_leaves_floats_timestamps_and_partition_columns_to_spark():
    from pyspark.sql.datasource import EqualTo, GreaterThan, StringStartsWith

    filters = [GreaterThan(("f",), 1.5), EqualTo(("t",), datetime.datetime(2024, 1, 1)), EqualTo(("p",), 1),
               StringStartsWith(("s",), "k")]
    partition_filter = pushdown.PartitionFilter(filters, {"f": "double", "t": "timestamp", "p": "int", "s": "string"})
    assert partition_filter.row_group_filter(("p",)) is None


@needs_pushdown
def test_row_group_filter_ignores_a_file_storing_the_column_as_another_type(tmp_path):
    from pyspark.sql.datasource import EqualTo

    path = tmp_path / "wider.parquet"
    pq.write_table(pa.table({"x": pa.array(range(8), pa.int64())}), path, row_group_size=2)
    fragment = ds.ParquetFileFormat().make_fragment(str(path), filesystem=pafs.LocalFileSystem())
    where = pushdown.PartitionFilter([EqualTo(("x",), 3)], {"x": "int"}).row_group_filter(())
    assert where.keep_row_groups(fragment, range(4)) == [0, 1, 2, 3]
