"""Registered tables through SQL: in the session's in-memory catalog, and across processes with a Hive catalog."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource import cli
from dynsource.spark import catalog

KEYS = 10


def write_fact(root: Path) -> str:
    table = pa.table({"amount": [float(i) for i in range(100)], "k": [i % KEYS for i in range(100)]})
    pq.write_to_dataset(table, root, partition_cols=["k"])
    return str(root)


@pytest.fixture
def fact(spark, tmp_path, definitions, request):
    """A table registered for this test over freshly written files, dropped afterwards."""
    name = f"fact_{request.node.name.split('[')[0].removeprefix('test_')}"[:60]
    path = write_fact(tmp_path / "fact")
    dynsource.register_table(spark, name, path=path, definitions=definitions)
    yield name, path
    dynsource.drop_table(spark, name, definitions=definitions)


def rows(df):
    return sorted(df.collect(), key=repr)


def describe(spark, table: str) -> list[tuple[str, str]]:
    return [(r.col_name, r.data_type) for r in spark.sql(f"DESCRIBE {table}").collect()]


def test_select_and_describe_equal_spark_read_parquet(spark, fact):
    name, path = fact
    native = spark.read.parquet(path)
    assert rows(spark.sql(f"SELECT * FROM {name}")) == rows(native)
    assert describe(spark, name) == [(f.name, f.dataType.simpleString()) for f in native.schema.fields]
    assert rows(spark.sql(f"SELECT amount FROM {name} WHERE k = 3")) == rows(native.where("k = 3").select("amount"))


def corrupt_partitions_except(path: str, keep: set[int]) -> None:
    for directory in Path(path).iterdir():
        if int(directory.name.split("=", 1)[1]) not in keep:
            for data_file in directory.iterdir():
                data_file.write_bytes(b"not parquet")  # reading a pruned partition now fails loudly


def test_dynamic_filter_from_sql_prunes_as_the_reader_does(spark, fact):
    name, path = fact
    spark.sql(f"SELECT CAST(id AS INT) AS dk, id AS label FROM range({KEYS})").createOrReplaceTempView("dim")
    query = ("SELECT f.amount, d.label FROM {table} f JOIN dim d ON f.k = d.dk WHERE d.label IN (2, 5)")
    expected = rows(spark.sql(query.format(table=name)))
    handle = dynsource.collect(spark.sql("SELECT dk FROM dim WHERE label IN (2, 5)"), {"k": "dk"})
    corrupt_partitions_except(path, keep={2, 5})
    with_filter = f"{name} WITH ('dynamicFilter' = '{handle}')"
    assert rows(spark.sql(query.format(table=with_filter))) == expected
    report = dynsource.scan_report(handle)
    assert (report.partitions_kept, report.partitions_total) == (2, KEYS)
    reader = (spark.read.format("dynsource").schema(spark.table(name).schema).option("path", path)
              .option("dynamicFilter", handle).load())
    assert rows(reader) == rows(spark.sql(f"SELECT * FROM {with_filter}"))
    with pytest.raises(Exception, match=r"not parquet|Parquet|magic"):
        spark.sql(f"SELECT * FROM {name}").collect()


def test_dynamic_join_with_a_table_name(spark, fact):
    name, path = fact
    dim = spark.sql("SELECT CAST(id AS INT) AS dk FROM range(3, 5)")
    joined = dynsource.dynamic_join(name, dim, {"k": "dk"})
    native = spark.read.parquet(path)
    assert rows(joined) == rows(native.join(dim, native["k"] == dim["dk"]))
    report = dynsource.scan_report(joined)
    assert report.filtering and report.partitions_kept == 2


def test_benefit_check_works_for_a_table_name(spark, fact):
    name, _ = fact
    dim = spark.sql("SELECT CAST(id AS INT) AS dk FROM range(1, 9)")
    joined = dynsource.dynamic_join(name, dim, {"k": "dk"})
    assert joined.count() == 80
    report = dynsource.scan_report(joined)
    assert report.handle is None and "keeps 8 of 10 partitions" in report.fallback_reason


def test_missing_or_damaged_definition_names_the_table_and_location(spark, fact, definitions):
    name, _ = fact
    stored = Path(definitions) / f"default.{name}.json"
    stored.write_bytes(b"\x00junk")
    with pytest.raises(Exception, match=rf"definition of table 'default.{name}' at '.*{stored.name}' is damaged"):
        spark.sql(f"SELECT * FROM {name}").collect()
    stored.unlink()
    with pytest.raises(Exception, match=rf"Table 'default.{name}' has no dynsource definition at '.*{stored.name}'"):
        spark.sql(f"SELECT * FROM {name}").collect()
    with pytest.raises(catalog.TableDefinitionError, match=str(stored.name)):
        dynsource.dynamic_join(name, spark.sql("SELECT 1 AS dk"), {"k": "dk"})


def test_register_rejects_a_taken_name_a_query_option_and_a_bad_name(spark, fact, definitions):
    name, path = fact
    with pytest.raises(ValueError, match=r"already exists with these very options \(nothing changed\); pass "
                                         r"replace=True"):
        dynsource.register_table(spark, name, path=path, definitions=definitions)
    with pytest.raises(ValueError, match="already exists with other options; pass replace=True"):
        dynsource.register_table(spark, name, path=path, definitions=definitions, reader="python")
    dynsource.register_table(spark, name, path=path, definitions=definitions, replace=True, partitionColumns="k BIGINT")
    assert dict(describe(spark, name))["k"] == "bigint"
    with pytest.raises(ValueError, match="'dynamicFilter' belongs to a query"):
        dynsource.register_table(spark, "other", path=path, definitions=definitions, dynamicFilter="x")
    with pytest.raises(ValueError, match="'dynamicFilter' belongs to a query"):
        dynsource.register_table(spark, "other", path=path, definitions=definitions, dynamicfilter="x")
    with pytest.raises(ValueError, match=r"is not valid; expected 'table' or 'db\.table'"):
        dynsource.register_table(spark, "a.b.c", path=path, definitions=definitions)


def test_definition_is_json_with_the_options_and_schema(spark, fact, definitions):
    name, path = fact
    document = json.loads((Path(definitions) / f"default.{name}.json").read_text())
    assert document["options"] == {"path": path}
    assert [f["name"] for f in document["schema"]["fields"]] == ["amount", "k"]


def test_definition_stores_options_under_their_documented_names(spark, fact, definitions):
    name, path = fact
    dynsource.register_table(spark, name, path=path, definitions=definitions, replace=True,
                             partitioncolumns="k BIGINT", BATCHSIZE=100)
    document = json.loads((Path(definitions) / f"default.{name}.json").read_text())
    assert document["options"] == {"path": path, "partitionColumns": "k BIGINT", "batchSize": "100"}
    assert spark.sql(f"SELECT count(*) FROM {name} WITH ('batchsize' = '7')").first()[0] == 100


def test_a_relative_path_is_stored_absolute(spark, tmp_path, definitions, monkeypatch):
    write_fact(tmp_path / "fact")
    monkeypatch.chdir(tmp_path)
    definition = dynsource.register_table(spark, "relative_fact", path="fact", definitions=definitions)
    try:
        assert definition.path == str(tmp_path / "fact")
    finally:
        dynsource.drop_table(spark, "relative_fact")


def test_cli_table_create_list_drop(spark, tmp_path, definitions, capsys):
    path = write_fact(tmp_path / "fact")
    cli.main(["table", "create", "cli_fact", "--path", path, "--option", "format=parquet",
              "--definitions", definitions])
    assert spark.sql("SELECT count(*) FROM cli_fact").first()[0] == 100
    cli.main(["table", "list", "--catalog", "--definitions", definitions])
    cli.main(["table", "drop", "cli_fact", "--definitions", definitions])
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["created table default.cli_fact", f"default.cli_fact\tin catalog\t{path}",
                       "dropped table default.cli_fact"]
    assert not spark.catalog.tableExists("cli_fact") and not list(Path(definitions).iterdir())


HIVE_SESSION = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    import dynsource

    warehouse, step, path = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.warehouse.dir", warehouse)
             .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
             .enableHiveSupport().getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if step == "create":
        dynsource.register(spark)
        dynsource.register_table(spark, "store_sales", path=path)
    else:
        try:
            spark.sql("SELECT count(*) FROM store_sales").collect()
            before_register = "read"
        except Exception as error:
            before_register = str(error)[:400]
        dynsource.register(spark)
        native = spark.read.parquet(path)
        handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(3,)]))
        result = {
            "tables": [r.tableName for r in spark.sql("SHOW TABLES").collect()],
            "describe": [[r.col_name, r.data_type] for r in spark.sql("DESCRIBE store_sales").collect()],
            "schema": [[f.name, f.dataType.simpleString()] for f in native.schema.fields],
            "rows_equal": sorted(map(tuple, spark.sql("SELECT * FROM store_sales").collect()))
            == sorted(map(tuple, native.collect())),
            "filtered": spark.sql(f"SELECT count(*) FROM store_sales WITH ('dynamicFilter' = '{handle}')").first()[0],
            "kept": dynsource.scan_report(handle).partitions_kept,
            "before_register": before_register,
        }
        spark.sql("DROP TABLE store_sales")
        dynsource.register(spark)
        print(json.dumps(result))
""")


def run_hive_session(warehouse: Path, step: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "DYNSOURCE_FILTER_STORE": str(warehouse / "filters")}
    env.pop("DYNSOURCE_DEFINITIONS", None)  # the default location, next to the warehouse
    return subprocess.run([sys.executable, "-c", HIVE_SESSION, str(warehouse), step, path], capture_output=True,
                          text=True, env=env, cwd=warehouse, timeout=300)


@pytest.mark.spark  # in a process of its own
def test_hive_table_survives_into_a_new_process_and_drop_removes_its_definition(tmp_path):
    path = write_fact(tmp_path / "fact")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    created = run_hive_session(warehouse, "create", path)
    assert created.returncode == 0, created.stderr[-3000:]
    assert (warehouse / "_dynsource" / "default.store_sales.json").exists()
    read = run_hive_session(warehouse, "read", path)
    assert read.returncode == 0, read.stderr[-3000:]
    result = json.loads(read.stdout.splitlines()[-1])
    assert result["tables"] == ["store_sales"]
    assert result["describe"] == result["schema"] == [["amount", "double"], ["k", "int"]]
    assert result["rows_equal"] and (result["filtered"], result["kept"]) == (10, 1)
    # What a new session meets before dynsource.register, which fixes it (docs/errors.md says so).
    assert "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: dynsource.default.store_sales" in result[
        "before_register"]
    assert not (warehouse / "_dynsource" / "default.store_sales.json").exists()


def test_register_table_docstring_example_runs(spark):
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner()
    for example in finder.find(dynsource.register_table, globs={"spark": spark}):
        runner.run(example)
    assert runner.failures == 0 and runner.tries > 0


def test_dropping_a_table_that_is_not_registered_is_an_error_as_sparks_drop_table(spark, definitions):
    with pytest.raises(ValueError, match=r"Table 'default.never_registered' is not registered"):
        dynsource.drop_table(spark, "never_registered", definitions=definitions)
    dynsource.drop_table(spark, "never_registered", definitions=definitions, if_exists=True)  # DROP TABLE IF EXISTS
