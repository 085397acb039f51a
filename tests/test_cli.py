"""The console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource import cli
from dynsource.filtering import handles

DATA = dynsource.DynamicFilteringData([("k", "int")], [(1,)])


def run_cli(*args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynsource.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def dynsource_lines(stderr: str) -> list[str]:
    """What the command itself wrote to stderr, without Spark's start-up lines."""
    return [line for line in stderr.splitlines() if line.startswith("dynsource")]


def test_explain_prints_a_summary_and_json_of_the_newest_or_every_scan(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2, 3], "k": [1, 2, 3]}), tmp_path, partition_cols=["k"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(2,)]))
    df = spark.read.format("dynsource").option("path", str(tmp_path)).option("dynamicFilter", handle).load()
    df.collect()
    summary = run_cli("explain", handle)
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.splitlines() == str(dynsource.scan_report(handle)).splitlines()
    assert summary.stdout.startswith(f"dynamic filter {handle} on {tmp_path} (scan ")
    assert "  partitions: 1 of 3 kept" in summary.stdout.splitlines() and "None" not in summary.stdout
    df.filter("v > 0").collect()  # another query of the DataFrame: another scan
    machine = run_cli("explain", handle, "--all", "--json")
    scans = json.loads(machine.stdout)
    assert [(scan["partitions_kept"], scan["partitions_total"]) for scan in scans] == [(1, 3)] * len(scans)
    assert len(scans) >= 1 and len({scan["scan_id"] for scan in scans}) == len(scans)
    assert json.loads(run_cli("explain", handle, "--json").stdout)["scan_id"] == scans[-1]["scan_id"]


def test_explain_of_an_unknown_handle_or_store_says_so(tmp_path):
    result = run_cli("explain", "dynf-" + "e" * 32, "--store", str(tmp_path))
    assert result.returncode == 1 and "No scan has used" in result.stderr
    result = run_cli("explain", "dynf-" + "e" * 32, "--store", str(tmp_path / "does-not-exist"))
    assert result.returncode == 1
    missing = tmp_path / "does-not-exist"
    assert result.stderr.strip() == (f"dynsource explain: filter store {missing} (--store) does not exist: give the "
                                     "store the handle was published in")


def test_output_piped_to_a_reader_that_stops_ends_without_a_traceback(spark, tmp_path):
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(2,)]), str(tmp_path))
    pq.write_to_dataset(pa.table({"v": [1, 2, 3], "k": [1, 2, 3]}), tmp_path / "t", partition_cols=["k"])
    spark.read.format("dynsource").option("path", str(tmp_path / "t")).option("dynamicFilter", handle) \
        .option("filterStore", str(tmp_path)).load().collect()
    # `true` exits without reading: the command's first write meets a closed pipe, as `| head` leaves one.
    piped = subprocess.run(f"{sys.executable} -m dynsource.cli explain {handle} --json --store {tmp_path} | true",
                           shell=True, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in piped.stderr and "BrokenPipeError" not in piped.stderr, piped.stderr


@pytest.mark.spark  # in a process of its own
def test_demo_runs_and_its_three_results_agree(tmp_path):
    result = run_cli("demo", "--data", str(tmp_path), env=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "results equal: yes" in result.stdout
    assert "  partitions: 31 of 1,827 kept" in result.stdout.splitlines()
    assert dynsource_lines(result.stderr)[:2] == [
        f"dynsource demo: generating the sample star schema in {tmp_path / 'star'} (200,000 sales rows) ...",
        "dynsource demo: starting a local Spark session (local[*]) ...",
    ]


def test_version_is_the_installed_distributions():
    result = run_cli("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"dynsource {dynsource.__version__}")


def test_expire_of_a_store_with_an_unknown_protocol_fails_naming_it(tmp_path):
    # 'x://' is what fsspec would otherwise read as the local directory 'x:/y' (a Windows drive), and find empty.
    for url, protocol in (("x://y", "Protocol not known: x;"), ("xy://y", "Protocol not known: xy;")):
        result = run_cli("expire", "--older-than", "7d", "--store", url, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"dynsource expire: filter store '{url}' (--store)") and protocol in line
        assert "Windows" not in line
    assert list(tmp_path.iterdir()) == []


def test_expire_refuses_an_age_without_its_unit(tmp_path):
    # 7 meant as days, read as seconds, would remove every handle of a shared store, other processes' too.
    handle = handles.publish(DATA, str(tmp_path))
    for age in ("7", "7 days", "1.5"):
        result = run_cli("expire", "--older-than", age, "--store", str(tmp_path))
        assert result.returncode == 2 and "a number and its unit, s, m, h, d or w: 30s, 12h, 7d" in result.stderr
    assert [path.name for path in tmp_path.iterdir()] == [f"{handle}.dynf"]


def test_expire_dry_run_lists_what_expire_then_removes_and_echoes_the_age_as_typed(tmp_path):
    root = str(tmp_path)
    old, fresh = handles.publish(DATA, root), handles.publish(DATA, root)
    stamp = time.time() - 8 * 86400
    os.utime(tmp_path / f"{old}.dynf", (stamp, stamp))
    dry = run_cli("expire", "--older-than", "7d", "--store", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split() == [old]
    assert dry.stderr.strip() == f"would remove 1 handle(s) unused for 7d from {root} (dry run: nothing removed)"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([f"{old}.dynf", f"{fresh}.dynf"])
    removed = run_cli("expire", "--older-than", "1w", "--store", root)
    assert (removed.returncode, removed.stdout.split()) == (0, [old]), removed.stderr
    assert removed.stderr.strip() == f"removed 1 handle(s) unused for 1w from {root}"
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"{fresh}.dynf"]
    missing = run_cli("expire", "--older-than", "7d", "--store", str(tmp_path / "missing"))
    assert missing.returncode == 0
    assert missing.stderr.strip() == f"dynsource expire: filter store {tmp_path / 'missing'} does not exist; " \
        "nothing to remove"


@pytest.mark.spark  # in a process of its own
def test_a_table_command_says_where_the_catalog_goes_and_fails_in_one_line(tmp_path):
    session = ("--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}", "--definitions", str(tmp_path / "defs"),
               "--metastore", "meta")
    dropped = run_cli("table", "drop", "nonexistent", *session, cwd=tmp_path)
    assert dropped.returncode == 1, dropped.stderr[-3000:]
    meta = tmp_path / "meta"
    assert dynsource_lines(dropped.stderr) == [
        f"dynsource: starting a local Spark session with a Hive catalog (metastore {meta / 'metastore_db'}, "
        f"Derby log {meta / 'derby.log'}, warehouse {tmp_path / 'wh'}) ...",
        f"dynsource table drop: Table 'default.nonexistent' is not registered (no catalog table and no definition "
        f"in {tmp_path / 'defs'}); `dynsource table list` shows the registered ones (drop_table(..., if_exists=True) "
        "takes a name that is not)."]
    assert "Traceback" not in dropped.stderr
    assert (meta / "derby.log").is_file() and (meta / "metastore_db").is_dir()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["meta"]  # no derby.log, metastore_db in the cwd


@pytest.mark.spark  # in a process of its own
def test_a_failed_write_of_sql_says_sparks_error_in_one_line_without_spark_logs_before_it(tmp_path):
    query = (f"CREATE TABLE cli_bad USING dynsource LOCATION '{tmp_path / 't'}' AS "
             "SELECT 1 AS v, CAST(s AS DATE) AS d FROM VALUES ('2024-02-30') AS rows(s)")
    failed = run_cli("sql", query, "--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}", "--metastore", "meta",
                     cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert dynsource_lines(failed.stderr)[-1].startswith("dynsource sql: [CAST_INVALID_INPUT] The value '2024-02-30'")
    # Before: the executor's ERROR lines with the task's stack trace, and pyspark's error logged with its context.
    assert not [line for line in failed.stderr.splitlines() if "ERROR" in line or line.startswith("\tat ")]
    assert "Traceback" not in failed.stderr


def test_table_create_without_path_fails_before_spark_starts():
    result = run_cli("table", "create", "x")
    # argparse's error and nothing else: no "dynsource: starting a local Spark session" line came before it.
    assert result.returncode == 2 and dynsource_lines(result.stderr) == [
        "dynsource table create: error: the following arguments are required: --path"]


# In this process's session (no JVM start per command): sys.exit(message) is the one line and exit code 1 above.
def test_sql_and_explain_of_a_query_spark_rejects_exit_with_sparks_first_line(spark):
    for query, error in (("SELEC 1", "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'"),
                         ("SELECT * FROM nosuchtable", "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nosuchtable` "
                                                       "cannot be found.")):
        for explain in ([], ["--explain"]):
            with pytest.raises(SystemExit) as exited:
                cli.main(["sql", query, *explain])
            assert exited.value.code.startswith(f"dynsource sql: {error}"), exited.value.code
            assert "\n" not in exited.value.code


def test_table_list_and_create_say_what_is_registered_and_what_is_wrong(spark, tmp_path, capsys):
    definitions = ("--definitions", str(tmp_path / "defs"))
    cli.main(["table", "list", *definitions])
    assert capsys.readouterr().out.strip() == f"no dynsource tables registered in {tmp_path / 'defs'}"
    with pytest.raises(SystemExit) as exited:
        cli.main(["table", "create", "x", "--path", "/nothing", *definitions])
    assert exited.value.code == "dynsource table create: Option 'path': '/nothing' does not exist."


def test_table_list_reads_the_definitions_without_a_spark_session_unless_asked_for_the_catalog(
        spark, tmp_path, capsys):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path / "t", partition_cols=["k"])
    defs = str(tmp_path / "defs")
    dynsource.register_table(spark, "cli_listed", path=str(tmp_path / "t"), definitions=defs)
    try:
        no_java = {key: value for key, value in os.environ.items() if key != "DYNSOURCE_DEFINITIONS"}
        no_java["JAVA_HOME"] = str(tmp_path / "no-java")  # a command that started Spark would fail
        listed = run_cli("table", "list", "--definitions", defs, env=no_java)
        assert (listed.returncode, listed.stdout) == (0, f"default.cli_listed\t{tmp_path / 't'}\n"), listed.stderr
        empty = run_cli("table", "list", env=no_java, cwd=tmp_path)  # where a session would look: its warehouse
        assert empty.stdout.strip() == f"no dynsource tables registered in file:{tmp_path}/spark-warehouse/_dynsource"
        cli.main(["table", "list", "--catalog", "--definitions", defs])
        assert capsys.readouterr().out == f"default.cli_listed\tin catalog\t{tmp_path / 't'}\n"
    finally:
        dynsource.drop_table(spark, "cli_listed", definitions=defs)


def test_table_create_of_an_existing_name_says_to_pass_replace(spark, tmp_path, capsys):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path / "t", partition_cols=["k"])
    create = ["table", "create", "cli_existing", "--path", str(tmp_path / "t"), "--definitions",
              str(tmp_path / "defs")]
    try:
        cli.main(create)
        with pytest.raises(SystemExit) as exited:
            cli.main(create)
        assert exited.value.code == ("dynsource table create: table default.cli_existing already exists; pass "
                                     "--replace to replace it")
        cli.main([*create, "--replace"])
        assert capsys.readouterr().out.splitlines() == ["created table default.cli_existing"] * 2
    finally:
        dynsource.drop_table(spark, "cli_existing", definitions=str(tmp_path / "defs"))


def test_table_create_takes_a_declared_schema(spark, tmp_path, capsys):
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path / "t", partition_cols=["k"])
    create = ["table", "create", "cli_declared", "--path", str(tmp_path / "t"), "--definitions",
              str(tmp_path / "defs")]
    try:
        with pytest.raises(SystemExit) as exited:
            cli.main([*create, "--schema", "v BIGINT, nope INT, k STRING"])
        assert exited.value.code.startswith("dynsource table create: ") and "'nope'" in exited.value.code
        assert "\n" not in exited.value.code
        cli.main([*create, "--schema", "v BIGINT, k STRING"])
        assert capsys.readouterr().out.splitlines() == ["created table default.cli_declared"]
        table = spark.table("cli_declared")
        assert [(f.name, f.dataType.simpleString()) for f in table.schema] == [("v", "bigint"), ("k", "string")]
        assert sorted(table.collect()) == [(1, "1"), (2, "2")]
    finally:
        dynsource.drop_table(spark, "cli_declared", definitions=str(tmp_path / "defs"))
