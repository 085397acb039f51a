"""Star joins written as implicit joins over four dimensions: ``dynsource.sql`` against warm ``spark.sql``.

A generated star in the shape users query: ``store_sales`` Hive-partitioned by ``ss_sold_date_sk`` into 2,400 day
partitions (one Parquet file each), and four dimensions (``date_dim`` of the 2,400 days, ``store``, ``item``,
``customer``), each a temporary view of ``spark.read.parquet``. The fact is a registered dynsource table for
``dynsource.sql`` (default mode ``auto``) and a temporary view of one ``spark.read.parquet`` DataFrame for
``spark.sql`` (warm: Spark listed it once). The queries write their joins in ``FROM a, b WHERE``:

- the date dimension unfiltered, joined only to group by ``d_year`` (alone, or beside a filtered store or item
  dimension): nothing to prune by dates; ``dynsource.sql`` should cost Spark's plan plus a few ms;
- a filtered date dimension (a month), alone and with the other three dimensions: Spark's own dynamic partition
  pruning prunes the local fact in ``auto``, so again Spark's plan.

Every query runs in both modes, interleaved, after one untimed round; per query the median seconds of ``--repeat``
runs, the median call of each mode alone (``dynsource.sql``'s analysis and whatever it collects, or ``spark.sql``'s,
before the action), the ratio of the whole runs and that of the actions alone; their geometric means. Rows of both
modes must be equal. Run
``python -m benchmarks.starjoins --repeat 3``.

``--profile`` instead says where ``dynsource.sql``'s call goes, beside ``spark.sql``'s: per query the median call
of both, and, from ``cProfile`` over ``--repeat`` calls after one untimed call, the milliseconds per call of each step
(:data:`STEPS`; the profiler slows them) and how many py4j round trips to Spark's JVM the call makes.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import math
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.run import RESULTS_DIR, ordered, save_report, settle
from benchmarks.star import DEFAULT_DATA_DIR

DAYS, FIRST_DAY = 2400, 2450815
STORES, ITEMS, CUSTOMERS = 12, 2000, 20_000
MODES = ("dynsource.sql", "spark.sql")
SUM = "sum(ss_quantity) AS quantity"
QUERIES = {
    "years": f"SELECT d_year, {SUM} FROM {{fact}}, date_dim WHERE ss_sold_date_sk = d_date_sk GROUP BY d_year",
    "years_tn_stores": f"""SELECT d_year, s_state, {SUM} FROM {{fact}}, date_dim, store
        WHERE ss_sold_date_sk = d_date_sk AND ss_store_sk = s_store_sk AND s_state = 'TN' GROUP BY d_year, s_state""",
    "years_books": f"""SELECT d_year, i_category, {SUM} FROM {{fact}}, date_dim, item
        WHERE ss_sold_date_sk = d_date_sk AND ss_item_sk = i_item_sk AND i_category = 'Books'
        GROUP BY d_year, i_category""",
    "years_four_dimensions": f"""SELECT d_year, s_state, i_category, {SUM}
        FROM {{fact}}, date_dim, store, item, customer
        WHERE ss_sold_date_sk = d_date_sk AND ss_store_sk = s_store_sk AND ss_item_sk = i_item_sk
        AND ss_customer_sk = c_customer_sk AND c_state = 'CA' AND i_category = 'Music'
        GROUP BY d_year, s_state, i_category""",
    "month": f"""SELECT d_moy, {SUM} FROM {{fact}}, date_dim WHERE ss_sold_date_sk = d_date_sk
        AND d_year = 2000 AND d_moy = 12 GROUP BY d_moy""",
    "month_four_dimensions": f"""SELECT s_state, i_category, {SUM} FROM {{fact}}, date_dim, store, item, customer
        WHERE ss_sold_date_sk = d_date_sk AND ss_store_sk = s_store_sk AND ss_item_sk = i_item_sk
        AND ss_customer_sk = c_customer_sk AND d_year = 2000 AND d_moy = 12 AND s_state = 'TN'
        GROUP BY s_state, i_category""",
}


def generate(rows: int, data_dir: Path) -> Path:
    """The star of ``rows`` fact rows under ``data_dir`` (made once, reused after)."""
    root = data_dir / f"starjoins-{rows}"
    if (root / "manifest.json").exists():
        return root
    building = root.with_name(f"{root.name}.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)
    rng = np.random.default_rng(11)
    days = np.sort(rng.integers(FIRST_DAY, FIRST_DAY + DAYS, rows, dtype=np.int32))
    sales = pa.table({"ss_store_sk": rng.integers(1, STORES + 1, rows, dtype=np.int32),
                      "ss_item_sk": rng.integers(1, ITEMS + 1, rows, dtype=np.int32),
                      "ss_customer_sk": rng.integers(1, CUSTOMERS + 1, rows, dtype=np.int32),
                      "ss_quantity": rng.integers(1, 101, rows, dtype=np.int32)})
    values, starts = np.unique(days, return_index=True)
    for value, start, stop in zip(values.tolist(), starts.tolist(), [*starts.tolist()[1:], rows], strict=True):
        directory = building / "store_sales" / f"ss_sold_date_sk={value}"
        directory.mkdir(parents=True)
        pq.write_table(sales.slice(start, stop - start), directory / "part-0.parquet")
    dates = np.arange(DAYS)
    dimensions = {
        "date_dim": {"d_date_sk": dates + FIRST_DAY, "d_year": 1998 + dates // 365, "d_moy": (dates % 365) // 31 + 1},
        "store": {"s_store_sk": np.arange(1, STORES + 1),
                  "s_state": [("TN", "CA", "NY")[i % 3] for i in range(STORES)]},
        "item": {"i_item_sk": np.arange(1, ITEMS + 1),
                 "i_category": [("Books", "Music", "Home", "Sports")[i % 4] for i in range(ITEMS)]},
        "customer": {"c_customer_sk": np.arange(1, CUSTOMERS + 1),
                     "c_state": [("CA", "TX", "NY", "WA", "TN")[i % 5] for i in range(CUSTOMERS)]},
    }
    for name, columns in dimensions.items():
        (building / name).mkdir(parents=True)
        table = pa.table({column: pa.array(values, pa.int32()) if isinstance(values, np.ndarray) else values
                          for column, values in columns.items()})
        pq.write_table(table, building / name / "part-0.parquet")
    (building / "manifest.json").write_text(json.dumps({"rows": rows, "days": DAYS}))
    building.rename(root)
    return root


def run(spark, root: Path, repeat: int) -> dict:
    """Seconds per query and mode, split into the call (``dynsource.sql``'s or ``spark.sql``'s, before the action)
    and the action; raises when the modes' rows differ."""
    import dynsource

    prepare(spark, root)
    report = {"rows": json.loads((root / "manifest.json").read_text())["rows"], "days": DAYS, "repeat": repeat,
              "queries": {}}
    for name, query in QUERIES.items():
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        calls: dict[str, list[float]] = {mode: [] for mode in MODES}
        seen: dict[str, list] = {}
        for round_ in range(repeat + 1):
            for mode in ordered(list(MODES), round_):
                settle(spark)
                started = time.perf_counter()
                df = (dynsource.sql(spark, query.format(fact="store_sales_star")) if mode == "dynsource.sql"
                      else spark.sql(query.format(fact="store_sales_warm")))
                called = time.perf_counter()
                rows = sorted(tuple(row) for row in df.collect())
                seconds = time.perf_counter() - started
                if seen.setdefault(mode, rows) != seen[MODES[0]]:
                    raise RuntimeError(f"{name}: {mode} returned other rows than {MODES[0]}")
                if round_:
                    times[mode].append(seconds)
                    calls[mode].append(called - started)
                    if mode == "dynsource.sql":
                        report_text = str(dynsource.scan_report(df))
        medians = {mode: statistics.median(values) for mode, values in times.items()}
        call_ms = {mode: round(statistics.median(values) * 1000, 1) for mode, values in calls.items()}
        actions = {mode: statistics.median(t - c for t, c in zip(times[mode], calls[mode], strict=True))
                   for mode in MODES}
        report["queries"][name] = {
            "median_s": medians, "runs_s": times, "call_ms": call_ms,
            "ratio": round(medians["dynsource.sql"] / medians["spark.sql"], 3),
            "action ratio": round(actions["dynsource.sql"] / actions["spark.sql"], 3), "report": report_text}
    for key in ("ratio", "action ratio"):
        ratios = [figures[key] for figures in report["queries"].values()]
        report[f"geometric mean {key}"] = round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 3)
    return report


# The steps of dynsource.sql's call, each the cumulative time of one function (its file's name and its own).
STEPS = (("Spark's analysis of the rewritten query", "placeholders.py", "query"),
         ("the unfiltered check (the dimension's analysed plan)", "unfiltered.py", "not_collected"),
         ("the remembered verdict's key (the dimension's plan)", "facttables.py", "verdict_key"),
         ("views expanded", "views.py", "expand"),
         ("table names resolved", "nameresolution.py", "resolve_all"),
         ("session settings read", "settings.py", "get"),
         ("py4j round trips (all of the above's JVM calls)", "java_gateway.py", "__call__"))  # last: counted too


def _entries(stats: dict, file: str, function: str) -> list[tuple]:
    """The profile's entries (primitive calls, calls, own and cumulative seconds, callers) of ``function`` in
    ``file``."""
    return [entry for (path, _, name), entry in stats.items() if path.endswith(f"/{file}") and name == function]


def profile(spark, repeat: int) -> dict:
    """Per query: the median ``dynsource.sql`` and ``spark.sql`` call (no action), then, profiled, ``dynsource.sql``'s
    milliseconds per call in each of :data:`STEPS` and its py4j round trips per call."""
    import dynsource

    found = {}
    for name, query in QUERIES.items():
        ours, theirs = query.format(fact="store_sales_star"), query.format(fact="store_sales_warm")
        dynsource.sql(spark, ours), spark.sql(theirs)  # untimed: the first call judges and remembers
        calls = {mode: [] for mode in MODES}
        for _ in range(repeat):
            for mode, call in (("spark.sql", functools.partial(spark.sql, theirs)),
                               ("dynsource.sql", functools.partial(dynsource.sql, spark, ours))):
                started = time.perf_counter()
                call()
                calls[mode].append(time.perf_counter() - started)
        profiler = cProfile.Profile()
        for _ in range(repeat):
            profiler.runcall(dynsource.sql, spark, ours)
        stats = pstats.Stats(profiler).stats
        steps = {label: round(sum(entry[3] for entry in _entries(stats, file, function)) * 1000 / repeat, 1)
                 for label, file, function in STEPS}
        trips = sum(entry[1] for entry in _entries(stats, *STEPS[-1][1:])) / repeat
        found[name] = {"call_ms": {mode: round(statistics.median(values) * 1000, 1) for mode, values in calls.items()},
                       "dynsource.sql ms per profiled call by step": steps, "py4j round trips per call": trips}
    return found


def prepare(spark, root: Path) -> None:
    """The dimensions as views, the fact as a warm view for ``spark.sql`` and a registered table for dynsource."""
    import dynsource

    dynsource.register(spark)
    for name in ("date_dim", "store", "item", "customer"):
        spark.read.parquet(str(root / name)).createOrReplaceTempView(name)
    spark.read.parquet(str(root / "store_sales")).createOrReplaceTempView("store_sales_warm")
    dynsource.register_table(spark, "store_sales_star", path=str(root / "store_sales"),
                             definitions=tempfile.mkdtemp(), replace=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_400_000, help="fact rows (default 2,400,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query and mode (default 3)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR, help="generated data cache")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON")
    parser.add_argument("--profile", action="store_true", help="where dynsource.sql's call goes (no actions)")
    parser.add_argument("--name", default="", help="a suffix for the JSON's name (a run of another version)")
    args = parser.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = generate(args.rows, args.data)
    from benchmarks.run import spark_session

    spark = spark_session()
    if args.profile:
        prepare(spark, root)
        found = profile(spark, args.repeat)
        for name, figures in found.items():
            print(f"{name:24} {figures}")
        save_report({"rows": args.rows, "repeat": args.repeat, "queries": found}, args.out,
                    f"starjoins-{args.rows}-calls{args.name}.json")
        return
    report = run(spark, root, args.repeat)
    for name, figures in report["queries"].items():
        seconds, call_ms = figures["median_s"], figures["call_ms"]
        print(f"{name:24} dynsource.sql {seconds['dynsource.sql']:.3f} s (call {call_ms['dynsource.sql']:.0f} ms), "
              f"spark.sql {seconds['spark.sql']:.3f} s (call {call_ms['spark.sql']:.0f} ms), ratio {figures['ratio']}, "
              f"actions' ratio {figures['action ratio']}")
    print(f"geometric mean ratio {report['geometric mean ratio']}, actions' {report['geometric mean action ratio']}")
    save_report(report, args.out, f"starjoins-{args.rows}{args.name}.json")


if __name__ == "__main__":
    main()
