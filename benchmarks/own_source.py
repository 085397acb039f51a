"""A Python data source of one's own as the fact: the SQLite source of ``tests/sources`` through ``dynsource.sql``
against the same query by ``spark.sql`` (dynsource off), in one local session.

The fact is a real SQLite file of ``--rows`` rows (``k BIGINT, v BIGINT``, 1,000 keys, indexed on ``k``), a catalog
table (``CREATE TABLE own_sales USING <the source>``) read in ``--partitions`` key ranges (2: one per core); the
dimension a 1,000-row Spark table ``own_keys (k, grp)``. Each query joins them and filters the dimension on
``grp``, which holds 1% or 10% of the keys, then aggregates. ``spark.sql`` fetches every row from SQLite;
``dynsource.sql`` collects the dimension's keys and the source pushes them into SQLite as ``WHERE k IN (...)``.
A third mode is the best any filter can do: ``spark.sql`` of the same query over a table of the same source
holding only the rows of the dimension's keys (``own_sales_kept_<groups>``, written per query), so that the
run shows Spark's own cost of one query on a Python data source beside the target.
Per mode: the median seconds of ``--repeat`` runs (interleaved, after one untimed round), the rows fetched from
SQLite and the statements sent; the rows of all modes must be equal. Run
``python -m benchmarks.own_source --repeat 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.run import RESULTS_DIR, ordered, save_report

KEYS = 1000
KEPT_ONLY = "spark.sql, kept rows only"
MODES = ("dynsource.sql", "spark.sql", KEPT_ONLY)
QUERIES = {"1% of keys": 100, "10% of keys": 10}  # grp = k % groups: one group holds 1/groups of the keys
SELECTED_GROUP = 7
QUERY = ("SELECT count(*) AS sales, sum(s.v) AS total FROM {fact} s JOIN own_keys d ON s.k = d.k "
         f"WHERE d.grp_{{groups}} = {SELECTED_GROUP}")


def kept_table(groups: int) -> str:
    """The table of only the rows that the query on ``grp_<groups>`` joins."""
    return f"own_sales_kept_{groups}"


def write_fact(database: Path, rows: int, groups: int | None = None) -> None:
    """``rows`` rows over ``KEYS`` keys, indexed on the key; with ``groups``, only the rows that the query on
    ``grp_<groups>`` joins."""
    from tests.sources import sqlite_source

    kept = ((i % KEYS, i) for i in range(rows))
    if groups is not None:
        kept = ((key, v) for key, v in kept if key % groups == SELECTED_GROUP)
    sqlite_source.write_table(database, "facts", "k", "bigint", kept)


class Fetched:
    """The rows and statements the source's read tasks report in ``directory`` since the last call."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def take(self) -> dict[str, int]:
        paths = list(self.directory.glob("*.json"))
        figures = [json.loads(path.read_text()) for path in paths]
        for path in paths:
            path.unlink()
        return {"rows": sum(f["rows"] for f in figures), "statements": sum(f["statements"] for f in figures)}


def run(spark, rows: int, repeat: int, root: Path, partitions: int = 2) -> dict:
    """Seconds, rows fetched and statements per query and mode; raises when the modes' rows differ."""
    from pyspark import cloudpickle

    import dynsource
    from tests.sources import sqlite_source

    dynsource.register(spark)
    cloudpickle.register_pickle_by_value(sqlite_source)
    counts = root / "counts"
    counts.mkdir()

    def table(name: str, groups: int | None = None) -> None:
        database, source = root / f"{name}.db", f"bench_sqlite_{uuid.uuid4().hex[:8]}"
        write_fact(database, rows, groups)
        spark.dataSource.register(sqlite_source.catalog_source(
            source, database=str(database), table="facts", key="k", keyType="bigint", partitions=str(partitions),
            countsDir=str(counts)))
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING {source}")

    group_columns = ", ".join(f"k % {g} AS grp_{g}" for g in QUERIES.values())
    spark.sql(f"SELECT id AS k, {group_columns} FROM range({KEYS})").createOrReplaceTempView("own_keys")
    tables = {"own_sales": None} | {kept_table(groups): groups for groups in QUERIES.values()}
    try:
        for name, kept in tables.items():
            table(name, kept)
        return _timed(spark, Fetched(counts), rows, repeat, partitions)
    finally:
        for name in tables:
            spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.catalog.dropTempView("own_keys")


def _timed(spark, fetched: Fetched, rows: int, repeat: int, partitions: int) -> dict:
    """Each query in each mode, over the tables :func:`run` wrote."""
    import dynsource

    runs = {"dynsource.sql": lambda text: dynsource.sql(spark, text), "spark.sql": spark.sql, KEPT_ONLY: spark.sql}
    report = {"rows": rows, "keys": KEYS, "partitions": partitions, "repeat": repeat, "queries": {}}
    for label, group_count in QUERIES.items():
        text = QUERY.format(fact="own_sales", groups=group_count)
        texts = {"dynsource.sql": text, "spark.sql": text,
                 KEPT_ONLY: QUERY.format(fact=kept_table(group_count), groups=group_count)}
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        seen: dict[str, tuple] = {}
        figures: dict[str, dict[str, int]] = {}
        for round_ in range(repeat + 1):
            for mode in ordered(list(MODES), round_):
                fetched.take()
                started = time.perf_counter()
                result = tuple(runs[mode](texts[mode]).first())
                seconds = time.perf_counter() - started
                figures[mode] = fetched.take()
                if seen.setdefault(mode, result) != seen[MODES[0]]:
                    raise RuntimeError(f"{label}: {mode} returned {result}, {MODES[0]} {seen[MODES[0]]}")
                if round_:
                    times[mode].append(seconds)
        medians = {mode: statistics.median(values) for mode, values in times.items()}
        report["queries"][label] = {
            "query": text, "median_s": medians, "runs_s": times, "fetched": figures, "result": list(seen[MODES[0]]),
            "ratio dynsource.sql / spark.sql": round(medians["dynsource.sql"] / medians["spark.sql"], 3),
            f"ratio {KEPT_ONLY} / spark.sql": round(medians[KEPT_ONLY] / medians["spark.sql"], 3),
            "rows fetched ratio": round(figures["dynsource.sql"]["rows"] / figures["spark.sql"]["rows"], 4)}
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="fact rows in SQLite (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query and mode (default 3)")
    parser.add_argument("--partitions", type=int, default=2,
                        help="key ranges the source reads in (default 2, the session's cores)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON")
    args = parser.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from benchmarks.run import spark_session

    spark = spark_session()
    report = run(spark, args.rows, args.repeat, Path(tempfile.mkdtemp(prefix="dynsource-own-source-")),
                 args.partitions)
    for label, figures in report["queries"].items():
        print(f"{label}: " + ", ".join(
            f"{mode} {figures['median_s'][mode]:.3f} s, {figures['fetched'][mode]['rows']:,} rows fetched in "
            f"{figures['fetched'][mode]['statements']} statements" for mode in MODES)
              + f"; ratio {figures['ratio dynsource.sql / spark.sql']} (kept rows only: "
                f"{figures[f'ratio {KEPT_ONLY} / spark.sql']})")
    save_report(report, args.out, f"own-source-sqlite-{args.rows}-{args.partitions}ranges.json")


if __name__ == "__main__":
    main()
