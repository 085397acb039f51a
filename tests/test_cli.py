"""The console script, run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

import dynsource


def run_cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynsource.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_explain_prints_the_report_of_a_scan(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1, 2, 3], "k": [1, 2, 3]}), tmp_path, partition_cols=["k"])
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(2,)]))
    spark.read.format("dynsource").option("path", str(tmp_path)).option("dynamicFilter", handle).load().collect()
    result = run_cli("explain", handle)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert lines["handle"] == handle
    assert (lines["partitions_kept"], lines["partitions_total"]) == ("1", "3")


def test_explain_of_an_unknown_handle_says_so():
    result = run_cli("explain", "dynf-" + "e" * 32)
    assert result.returncode == 1 and "No scan has used" in result.stderr


def test_demo_runs_and_its_three_results_agree(tmp_path):
    result = run_cli("demo", "--data", str(tmp_path), env=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "results equal: yes" in result.stdout
    assert "partitions kept/total: 31/1827" in result.stdout
