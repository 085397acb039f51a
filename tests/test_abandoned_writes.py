"""Writes that never finish: a real writer process killed (SIGKILL) in its task phase and in its commit, and what
the next commit, ``dynsource.vacuum`` and ``dynsource table vacuum`` do with what it left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource import cli
from dynsource.layout import commits
from dynsource.spark import writer
from tests.helpers import read, rows

# A writer process: its own Spark session appends 30 rows of p=7 and p=8 to the table, held at a step of the write
# (dynsource.spark.writer._pause_at) until the test kills it.
WRITER = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    import dynsource
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    dynsource.register(spark)
    rows = spark.range(30).selectExpr("id", "CAST(7 + id % 2 AS INT) AS p")
    rows.write.format("dynsource").option("path", sys.argv[1]).mode("append").save()
""")


def killed_writer(table: Path, step: str, hold: Path) -> None:
    """Run the writer process until it reaches ``step``, then kill it and every process it started."""
    hold.mkdir(exist_ok=True)
    (hold / f"{step}.hold").touch()
    env = {**os.environ, writer.PAUSE_ENV: f"{step}:{hold}"}
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(table)], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    try:
        while not (hold / f"{step}.reached").exists():
            assert process.poll() is None and time.monotonic() < deadline, f"the writer never reached {step}"
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and their Python workers
        process.wait()


def hidden(table: Path) -> list[str]:
    return sorted(name for name in os.listdir(table) if name.startswith((".dynsource", commits.DIRECTORY)))


def test_a_killed_writers_leavings_are_hidden_and_the_next_commit_removes_them(spark, tmp_path):
    table = tmp_path / "t"
    first = spark.range(20).selectExpr("id", "CAST(id % 2 AS INT) AS p")
    first.write.format("dynsource").option("path", str(table)).option("partitionColumns", "p INT").mode("append").save()
    expected = rows(read(spark, table))
    killed_writer(table, "tasks", tmp_path / "hold-tasks")
    staging = [name for name in os.listdir(table) if name.startswith(commits.STAGING_PREFIX)]
    assert len(staging) == 1 and list((table / staging[0]).rglob("*.parquet"))
    killed_writer(table, "moved", tmp_path / "hold-moved")
    (pending,) = [r for r in commits.records(*_opened(table)) if r["state"] == "pending"]
    assert sorted(path.split("/")[0] for path in pending["files"]) == ["p=7", "p=8"]
    # dynsource's readers see the table as before; a reader of the directories sees the moved files too.
    assert rows(read(spark, table)) == expected
    assert spark.read.parquet(str(table)).count() == 20 + 30
    # A commit younger than the age leaves them; one with age 0 removes them, files first.
    more = spark.range(100, 104).selectExpr("id", "CAST(id % 2 AS INT) AS p")
    more.write.format("dynsource").option("path", str(table)).mode("append").save()
    assert len([n for n in os.listdir(table) if n.startswith(commits.STAGING_PREFIX)]) == 2
    more.write.format("dynsource").option("path", str(table)).option("abandonedWriteAgeMs", "0").mode("append").save()
    assert hidden(table) == [commits.DIRECTORY]
    assert not [r for r in commits.records(*_opened(table)) if r["state"] == "pending"]
    expected = sorted(expected + rows(more) * 2, key=repr)
    assert rows(read(spark, table)) == expected == rows(spark.read.parquet(str(table)).select("id", "p"))


def test_vacuum_lists_with_a_dry_run_then_removes_only_what_is_older_than_the_age(spark, tmp_path, capsys):
    table = tmp_path / "t"
    spark.range(10).selectExpr("id", "CAST(id % 2 AS INT) AS p").write.format("dynsource") \
        .option("path", str(table)).option("partitionColumns", "p").mode("append").save()
    job = "a" * 32
    stale = table / f"{commits.STAGING_PREFIX}{job}" / "attempt" / "p=1"
    stale.mkdir(parents=True)
    pq.write_table(pq.read_table(next((table / "p=1").glob("*.parquet"))), stale / "part-00000.parquet")
    moved = f"p=1/{commits.file_name('00000', job, 'b' * 32, 'parquet')}"
    (table / moved).write_bytes((stale / "part-00000.parquet").read_bytes())
    fs, root = _opened(table)
    commits.write(fs, root, job, "pending", files=[moved])
    week_ago = time.time() - 7 * 86400
    for path in [*stale.parent.parent.rglob("*"), stale.parent.parent]:
        os.utime(path, (week_ago, week_ago))
    young = table / f"{commits.STAGING_PREFIX}{'c' * 32}"
    young.mkdir()
    found = dynsource.vacuum(str(table), older_than_s=3600, dry_run=True)  # the record was written just now
    assert found.staging == (f"{commits.STAGING_PREFIX}{job}",) and found.pending == ()
    found = dynsource.vacuum(str(table), older_than_s=0, dry_run=True)
    assert len(found.staging) == 2 and found.pending == (job,) and found.files == (moved,)
    assert (table / moved).exists()
    cli.main(["table", "vacuum", str(table), "--older-than", "2d"])  # the week-old staging only
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [f"staging directory {commits.STAGING_PREFIX}{job}"]
    assert "removed 1 staging director(ies), 0 pending commit(s)" in printed.err
    assert young.exists() and (table / moved).exists()
    cli.main(["table", "vacuum", str(table), "--older-than", "0s"])
    assert not young.exists() and not (table / moved).exists() and hidden(table) == [commits.DIRECTORY]
    assert read(spark, table).count() == 10
    with pytest.raises(SystemExit, match=r"dynsource table vacuum: Table '.*nowhere': '.*nowhere' is not a directory"):
        cli.main(["table", "vacuum", str(tmp_path / "nowhere")])


def _opened(table: Path):
    from dynsource.scan import files

    return files.open_table(str(table))
