"""Schemas beyond the first file's: option mergeSchema, and a schema declared to register_table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

import dynsource
from dynsource.scan import tableschema
from dynsource.spark import catalog


def write_day(root: Path, day: str, table: pa.Table) -> str:
    (root / f"day={day}").mkdir(parents=True, exist_ok=True)
    path = root / f"day={day}" / "part-0.parquet"
    pq.write_table(table, path)
    return str(path)


def gained_table(root: Path) -> str:
    """Day 01 stores v; day 02, written later, stores v and name."""
    write_day(root, "01", pa.table({"v": pa.array([1, 2], pa.int32())}))
    write_day(root, "02", pa.table({"v": pa.array([3], pa.int32()), "name": ["c"]}))
    return str(root)


@pytest.fixture
def table_name(spark, definitions, request):
    """A name for this test's table, dropped afterwards if the test registered it."""
    name = f"schema_{request.node.name.split('[')[0].removeprefix('test_')}"[:60]
    yield name
    dynsource.drop_table(spark, name, definitions=definitions, if_exists=True)


def rows(df):
    return sorted(df.collect(), key=repr)


def test_merge_schema_sees_columns_later_files_gained_and_replace_picks_up_new_ones(
        spark, tmp_path, definitions, table_name):
    path = gained_table(tmp_path / "t")
    native = spark.read.option("mergeSchema", "true").parquet(path)
    dynsource.register_table(spark, table_name, path=path, definitions=definitions, mergeSchema=True)
    assert spark.table(table_name).schema == native.schema
    assert rows(spark.table(table_name)) == rows(native)  # day 01's rows have name null
    reader = spark.read.format("dynsource").option("path", path).option("mergeSchema", "true").load()
    assert rows(reader) == rows(native)

    write_day(tmp_path / "t", "03", pa.table({"v": pa.array([4], pa.int32()), "name": ["d"], "score": [0.5]}))
    assert spark.table(table_name).columns == ["v", "name", "day"]  # the stored schema, until registered again
    dynsource.register_table(spark, table_name, path=path, definitions=definitions, mergeSchema=True, replace=True)
    native = spark.read.option("mergeSchema", "true").parquet(path)
    assert spark.table(table_name).columns == native.columns == ["v", "name", "score", "day"]
    assert rows(spark.table(table_name)) == rows(native)


def test_without_merge_schema_the_first_file_decides_as_in_spark(spark, tmp_path, definitions, table_name):
    path = gained_table(tmp_path / "t")
    definition = dynsource.register_table(spark, table_name, path=path, definitions=definitions)
    assert definition.schema.names == spark.read.parquet(path).columns == ["v", "day"]


@pytest.mark.parametrize("declared", [
    "v INT, name STRING, day STRING",
    StructType([StructField("v", IntegerType()), StructField("name", StringType()), StructField("day", StringType())]),
], ids=["ddl", "struct"])
def test_a_declared_schema_is_stored_and_types_the_partition_values(spark, tmp_path, definitions, table_name,
                                                                    declared):
    path = gained_table(tmp_path / "t")
    dynsource.register_table(spark, table_name, path=path, definitions=definitions, schema=declared,
                             mergeSchema=True)
    native = spark.read.schema("v INT, name STRING, day STRING").parquet(path)
    assert rows(spark.table(table_name)) == rows(native)  # day '01', not the 1 an int would make it
    assert spark.table(table_name).schema == native.schema
    stored = json.loads((Path(definitions) / f"default.{table_name}.json").read_text())
    assert [(f["name"], f["type"]) for f in stored["schema"]["fields"]] == [
        ("v", "integer"), ("name", "string"), ("day", "string")]


@pytest.mark.parametrize(("declared", "merge", "message"), [
    ("v INT, month INT, day INT", False,
     r"Column 'month' of the declared schema is not a partition column \(the table's are \['day'\]\) and is not "
     r"stored in data file '.*day=01/part-0.parquet' \(columns \['v'\]\)\. .*mergeSchema=true"),
    ("v INT, name STRING, day INT", False, r"Column 'name' .* is not stored in data file '.*day=01/part-0.parquet'"),
    ("v INT, name STRING, month INT", True, r"Column 'month' .* is not stored in the data files of '.*t'"),
    ("v INT, day DATE", False, r"Partition column 'day' of the declared schema: Partition value '01' cannot be "
                               r"converted to type date"),
    ("v STRUCT<a: INT>, day INT", False, r"Column 'v' of the declared schema is struct<a:int>, but it is stored as "
                                         r"int in data file '.*day=01/part-0.parquet', which cannot be read"),
])
def test_a_declared_schema_that_does_not_fit_the_table_is_an_error_naming_the_column(
        spark, tmp_path, definitions, table_name, declared, merge, message):
    path = gained_table(tmp_path / "t")
    with pytest.raises(ValueError, match=message):
        dynsource.register_table(spark, table_name, path=path, definitions=definitions, schema=declared,
                                 mergeSchema=merge)
    assert not catalog.in_catalog(spark, f"default.{table_name}")


def test_conflicting_types_under_merge_schema_name_the_column_and_two_files(spark, tmp_path, definitions,
                                                                            table_name):
    root = tmp_path / "t"
    first = write_day(root, "01", pa.table({"v": pa.array([1], pa.int32()), "w": ["a"]}))
    second = write_day(root, "02", pa.table({"v": pa.array([2], pa.int64()), "w": ["b"]}))
    message = rf"column 'v' is int in data file '{first}' and bigint in data file '{second}'"
    with pytest.raises(ValueError, match=message):
        dynsource.register_table(spark, table_name, path=str(root), definitions=definitions, mergeSchema=True)
    with pytest.raises(Exception, match=message):  # the reader's inference, in a Python worker
        spark.read.format("dynsource").option("path", str(root)).option("mergeSchema", "true").load()


def test_merging_compares_the_types_spark_reads_not_arrow_units(tmp_path):
    # Spark reads timestamps of any Parquet unit as one timestamp type, so they merge; int and string do not.
    first = write_day(tmp_path, "1", pa.table({"t": pa.array([0], pa.timestamp("ms", tz="UTC"))}))
    second = write_day(tmp_path, "2", pa.table({"t": pa.array([0], pa.timestamp("us", tz="UTC")), "n": [1]}))
    merged = tableschema.merged_schema([first, second], pafs.LocalFileSystem(), "parquet")
    assert merged.simpleString() == "struct<t:timestamp,n:bigint>"
    third = write_day(tmp_path, "3", pa.table({"n": ["x"]}))
    with pytest.raises(ValueError, match=rf"column 'n' is bigint in data file '{second}' and string in .*'{third}'"):
        tableschema.merged_schema([first, second, third], pafs.LocalFileSystem(), "parquet")
