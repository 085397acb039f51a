"""The star queries over Spark Connect: ``dynsource.sql`` against ``spark.sql`` on the same files, one run.

A local Spark Connect server (``local[2]``, started here from the installed pyspark, stopped at the end) and
this process as its client, as a managed service's user has it. Every query runs in every mode, interleaved
(rounds in the orders of :func:`benchmarks.run.ordered`), after one untimed warm-up round:

- ``dynsource.sql``: the plain query on the table registered with ``dynsource.register_table``;
- ``dynsource.sql python reader``: the same table registered with ``reader='python'``;
- ``dynsource.sql persistent view``: the query on a persistent view over the registered table
  (``CREATE VIEW ... AS SELECT * FROM``), seen through as the server describes it;
- ``spark.sql warm``: the query on a temporary view of ``spark.read.parquet`` made once (its listing kept);
- ``spark.sql cold``: the view made again before each run (a new DataFrame lists every partition).

Figures are medians of ``--repeat`` runs, with each dynsource mode's ratio to both Spark modes, and each dynsource
mode paired round by round with the warm view: the median per-round difference of the run, of its call
(``dynsource.sql`` or ``spark.sql`` returning the DataFrame) and of its action (``first()``).
Run ``python -m benchmarks.connect --scale 1 --repeat 5``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import star as star_schema
from benchmarks.run import QUERIES, Measurement, ordered, paired_by_round, print_modes, save_report, star_arguments

MODES = ("dynsource.sql", "dynsource.sql python reader", "dynsource.sql persistent view", "spark.sql warm",
         "spark.sql cold")
QUERY_NAMES = ("month", "holidays", "years")
PAIRED_BASE = "spark.sql warm"


def run_connect(spark, star: star_schema.Star, queries, modes=MODES, repeat: int = 3) -> dict:
    """Seconds and results per query and mode; raises when two modes disagree."""
    import dynsource

    dynsource.register(spark)
    spark.read.parquet(str(star.date_dim)).createOrReplaceTempView("date_dim")
    spark.read.parquet(str(star.store_sales)).createOrReplaceTempView("store_sales_warm")
    definitions = tempfile.mkdtemp(prefix="bench-connect-defs-")
    tables = {"dynsource.sql": "store_sales_dyn", "dynsource.sql python reader": "store_sales_dyn_python"}
    for table, reader in zip(tables.values(), ("auto", "python"), strict=True):
        dynsource.register_table(spark, table, path=str(star.store_sales), definitions=definitions, replace=True,
                                 reader=reader)
    spark.sql("CREATE OR REPLACE VIEW store_sales_view AS SELECT * FROM store_sales_dyn")
    tables["dynsource.sql persistent view"] = "store_sales_view"

    def once(mode: str, query) -> tuple[Measurement, str | None]:
        started = time.perf_counter()
        if mode in tables:
            df = dynsource.sql(spark, query.sql(tables[mode]))
        else:
            view = "store_sales_warm"
            if mode == "spark.sql cold":
                view = "store_sales_cold"
                spark.read.parquet(str(star.store_sales)).createOrReplaceTempView(view)
            df = spark.sql(query.sql(view))
        called = time.perf_counter()
        row = tuple(df.first())
        ended = time.perf_counter()
        read_by = None
        if mode in tables:  # a scan's own report, where dynsource pruned it; else the query's notes say why not
            query_report = dynsource.scan_report(df)
            scans = [scan for scan in query_report.scans() if scan is not None]
            read_by = scans[0].read_by if scans else "; ".join(query_report.notes)[:120]
        measured = Measurement(row, ended - started, None, None, None, "client clock",
                               {"call_s": called - started, "run_s": ended - called})
        return measured, read_by

    report = {"scale": star.scale, "rows": star.rows, "repeat": repeat, "queries": {}}
    for query in queries:
        runs: dict[str, list[Measurement]] = {mode: [] for mode in modes}
        results, readers = {}, {}
        for round_ in range(repeat + 1):
            for mode in ordered(list(modes), round_):
                measured, read_by = once(mode, query)
                results.setdefault(mode, measured.result)
                if results[mode] != results[modes[0]]:
                    raise RuntimeError(f"{query.name}: {mode} returned {measured.result}, {modes[0]} "
                                       f"{results[modes[0]]}")
                if round_:
                    runs[mode].append(measured)
                if read_by is not None:
                    readers[mode] = read_by
        medians = {mode: statistics.median(m.seconds for m in measured) for mode, measured in runs.items()}
        ratios = {f"{mode} / {base}": round(medians[mode] / medians[base], 3)
                  for mode in modes if mode in tables for base in ("spark.sql warm", "spark.sql cold")
                  if base in medians}
        report["queries"][query.name] = {
            "description": query.description, "median_s": medians,
            "runs_s": {mode: [m.seconds for m in measured] for mode, measured in runs.items()},
            "call_median_s": {mode: statistics.median(m.phases["call_s"] for m in measured)
                              for mode, measured in runs.items()},
            "paired": {f"{mode} - {PAIRED_BASE}": paired_by_round(runs[mode], runs[PAIRED_BASE])
                       for mode in modes if mode in tables and PAIRED_BASE in runs},
            "ratios": ratios, "read_by": readers,
            "result": list(results[modes[0]])}
    return report


def main(argv: list[str] | None = None) -> None:
    args = star_arguments(__doc__.splitlines()[0], QUERY_NAMES, MODES).parse_args(argv)
    star = star_schema.generate(args.scale, args.seed, args.data)
    # The server and this client share the machine, so one filter store serves both.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    store = Path(tempfile.mkdtemp(prefix="bench-connect-"))
    os.environ["DYNSOURCE_FILTER_STORE"] = str(store / "filters")
    from pyspark.sql import SparkSession

    from tests.cluster import start_connect_server  # the suite's own way of starting one (repo-local)

    server, url = start_connect_server("local[2]", store, filter_store=store / "filters")
    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
        by_name = {q.name: q for q in QUERIES}
        report = run_connect(spark, star, [by_name[n] for n in args.queries.split(",")],
                             tuple(args.modes.split(",")), args.repeat)
        log = server.log.read_text(errors="replace").splitlines()
        report["server_log_errors"] = [" | ".join(log[i:i + 4]) for i, line in enumerate(log) if " ERROR " in line][:20]
        spark.stop()
    finally:
        server.stop()
    print_modes(report)
    if report["server_log_errors"]:
        print("\nthe server logged errors:\n  " + "\n  ".join(report["server_log_errors"]))
    save_report(report, args.out, f"connect-star-scale{args.scale:g}.json")


if __name__ == "__main__":
    main()
