"""Schemas beyond the first file's: option mergeSchema, and a schema declared to register_table."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
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


def two_level_table(root: Path) -> str:
    """Partitioned by day, then hr; data columns w (string) and v (bigint)."""
    pq.write_to_dataset(pa.table({"w": ["x", "y", "z"], "v": pa.array([1, 2, 3], pa.int64()), "day": [1, 2, 2],
                                  "hr": ["03", "04", "x"]}), str(root), partition_cols=["day", "hr"])
    return str(root)


@pytest.mark.parametrize("declared", ["v BIGINT", "v BIGINT, w STRING", "day INT, v BIGINT",
                                      "hr STRING, v BIGINT, w STRING", "w STRING, day STRING"])
def test_a_declared_schema_keeps_the_partition_columns_it_leaves_out_in_sparks_order(
        spark, tmp_path, definitions, table_name, declared):
    # spark.read.schema(...) of a partitioned directory: the declared data columns in their order, then every
    # partition column in the directories' order, of its declared type where declared, else inferred from every
    # directory (hr: '03', '04' and 'x' make it a string).
    path = two_level_table(tmp_path / "t")
    native = spark.read.schema(declared).parquet(path)
    definition = dynsource.register_table(spark, table_name, path=path, definitions=definitions, schema=declared)
    assert definition.schema == native.schema
    assert spark.table(table_name).schema == native.schema
    assert rows(spark.table(table_name)) == rows(dynsource.table(spark, table_name)) == rows(native)


def typed_table(root: Path) -> str:
    """One file per day of int32, int64, float32, decimal(5,2), string, binary, date and UTC timestamp columns."""
    for day in ("1", "2"):
        write_day(root, day, pa.table({
            "i32": pa.array([1, -2], pa.int32()), "i64": pa.array([2**40, None], pa.int64()),
            "f32": pa.array([0.1, 2.5], pa.float32()), "dec": pa.array([Decimal("123.45"), None], pa.decimal128(5, 2)),
            "s": ["a", None], "b": [b"a", b"b"], "d": [dt.date(2024, 1, 2), None],
            "ts": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("us", tz="UTC"))}))
    return str(root)


TYPED = ["i32", "i64", "f32", "dec", "s", "b", "d", "ts"]


@pytest.mark.parametrize(("column", "declared"), [
    ("i32", "BIGINT"), ("i32", "DOUBLE"), ("i32", "DECIMAL(10,0)"), ("i32", "DECIMAL(12,2)"),
    ("i64", "DECIMAL(20,0)"), ("f32", "DOUBLE"), ("dec", "DECIMAL(7,2)"), ("dec", "DECIMAL(8,3)"),
    ("s", "BINARY"), ("b", "STRING"), ("d", "TIMESTAMP_NTZ"), ("ts", "TIMESTAMP_NTZ"),
])
def test_a_declared_type_sparks_reader_widens_the_stored_one_to_reads_as_spark_reads_it(
        spark, tmp_path, definitions, table_name, column, declared):
    path = typed_table(tmp_path / "t")
    schema = ", ".join(f"{name} {declared}" if name == column else f"{name} {stored}" for name, stored in
                       zip(TYPED, ["INT", "BIGINT", "FLOAT", "DECIMAL(5,2)", "STRING", "BINARY", "DATE", "TIMESTAMP"],
                           strict=True))
    native = spark.read.schema(schema).parquet(path)
    dynsource.register_table(spark, table_name, path=path, definitions=definitions, schema=schema)
    assert spark.table(table_name).schema == native.schema
    expected = rows(native)
    assert rows(spark.table(table_name)) == expected  # the Python reader
    assert rows(dynsource.table(spark, table_name, reader="python")) == expected
    assert rows(dynsource.table(spark, table_name, reader="spark")) == expected


@pytest.mark.parametrize(("column", "declared", "stored", "spark_fails"), [
    ("i64", "STRING", "bigint", True), ("i64", "INT", "bigint", True), ("i64", "DOUBLE", "bigint", True),
    ("i64", "DECIMAL(19,0)", "bigint", True), ("i32", "FLOAT", "int", True), ("i32", "DECIMAL(10,2)", "int", True),
    ("i32", "SMALLINT", "int", False), ("i32", "DATE", "int", False), ("f32", "DECIMAL(10,2)", "float", True),
    ("dec", "DECIMAL(6,4)", "decimal(5,2)", True), ("dec", "DECIMAL(5,1)", "decimal(5,2)", True),
    ("s", "INT", "string", True), ("d", "TIMESTAMP", "date", True), ("d", "INT", "date", False),
    ("ts", "BIGINT", "timestamp", False), ("b", "BOOLEAN", "binary", True),
])
def test_a_declared_type_the_first_file_cannot_be_read_as_is_an_error_at_registration(
        spark, tmp_path, definitions, table_name, column, declared, stored, spark_fails):
    # Spark's Parquet reader fails on these (FAILED_READ_FILE), or reads the stored bits as another value (a date's
    # days as an INT, a timestamp's microseconds as a BIGINT): either way no read of the table would give rows.
    path = typed_table(tmp_path / "t")
    first = str(tmp_path / "t" / "day=1" / "part-0.parquet")
    if spark_fails:
        with pytest.raises(Exception, match=r"FAILED_READ_FILE|PARQUET_COLUMN_DATA_TYPE_MISMATCH"):
            spark.read.schema(f"{column} {declared}").parquet(path).collect()
    message = (rf"^Column '{column}' of the declared schema is {re.escape(declared.lower())}, but it is stored as "
               rf"{re.escape(stored)} in data file '{re.escape(first)}', which cannot be read as "
               rf"{re.escape(declared.lower())}: Spark's parquet reader fails on it, or reads other values than those "
               rf"stored\. Declare it {re.escape(stored)} ")
    with pytest.raises(ValueError, match=message):
        dynsource.register_table(spark, table_name, path=path, definitions=definitions,
                                 schema=f"{column} {declared}")
    assert not catalog.in_catalog(spark, f"default.{table_name}")


def json_table(root: Path, line: dict) -> str:
    (root / "k=1").mkdir(parents=True)
    (root / "k=1" / "part-0.json").write_text(json.dumps(line) + "\n" + json.dumps({**line, "zeta": 2}) + "\n")
    return str(root)


def test_a_json_tables_columns_are_in_the_order_spark_read_json_gives(spark, tmp_path, definitions, table_name):
    # Spark sorts the fields it infers from JSON by name (upper case before '_' before lower case); the partition
    # columns follow.
    path = json_table(tmp_path / "t", {"zeta": 1, "alpha": "a", "Beta": 1.5, "_u": True, "b": "x"})
    native = spark.read.json(path)
    assert native.columns == ["Beta", "_u", "alpha", "b", "zeta", "k"]
    reader = spark.read.format("dynsource").option("path", path).option("format", "json").load()
    assert reader.schema == native.schema
    assert rows(reader) == rows(native)
    dynsource.register_table(spark, table_name, path=path, definitions=definitions, format="json")
    assert spark.table(table_name).schema == native.schema
    assert rows(spark.table(table_name)) == rows(dynsource.table(spark, table_name)) == rows(native)
    assert rows(dynsource.sql(spark, f"SELECT * FROM {table_name}")) == rows(native)


def test_a_json_tables_nested_fields_are_sorted_as_spark_read_json_sorts_them(spark, tmp_path):
    path = json_table(tmp_path / "t", {"zeta": 1, "mid": {"z": 1, "a": {"y": 2, "x": 3}}})
    reader = spark.read.format("dynsource").option("path", path).option("format", "json").load()
    assert reader.schema == spark.read.json(path).schema
    assert reader.schema.simpleString() == "struct<mid:struct<a:struct<x:bigint,y:bigint>,z:bigint>,zeta:bigint,k:int>"


def test_an_orc_tables_declared_types_follow_sparks_orc_reader(spark, tmp_path, definitions, table_name):
    root = tmp_path / "t"
    (root / "day=1").mkdir(parents=True)
    first = root / "day=1" / "part-0.orc"
    orc.write_table(pa.table({"i32": pa.array([1, None], pa.int32()), "i64": pa.array([2**40, 3], pa.int64())}),
                    str(first))
    declared = "i32 BIGINT, i64 DECIMAL(20,0)"
    native = spark.read.schema(declared).orc(str(root))
    dynsource.register_table(spark, table_name, path=str(root), definitions=definitions, schema=declared,
                             format="orc")
    assert spark.table(table_name).schema == native.schema
    assert rows(spark.table(table_name)) == rows(dynsource.table(spark, table_name)) == rows(native)
    # Spark's ORC reader narrows a BIGINT to an INT, which 2**40 does not fit; the Python reader's cast refuses it.
    with pytest.raises(ValueError, match=rf"^Column 'i64' of the declared schema is int, but it is stored as bigint in "
                                         rf"data file '{re.escape(str(first))}', which cannot be read as int: Spark's "
                                         r"orc reader fails on it, or reads other values"):
        dynsource.register_table(spark, table_name, path=str(root), definitions=definitions, schema="i64 INT",
                                 format="orc", replace=True)
