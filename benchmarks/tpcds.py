"""TPC-DS through ``dynsource.sql`` against ``spark.sql`` on the same Parquet, in one session.

The data and the 99 query texts come from duckdb's ``tpcds`` extension (dsdgen),
which loads offline from the ``duckdb-extension-tpcds`` package. Every fact table
is written Hive-partitioned by its date key with Spark; the dimensions are plain
Parquet. ``spark.sql`` reads the facts as temporary views of ``spark.read.parquet``
made once (their listing cached, Spark's DPP on); ``dynsource.sql`` reads them as
registered dynsource tables. Each query runs once untimed in each mode (a warm-up)
and then ``--repeat`` times timed (default once; the median is kept), or more,
up to ``MAX_RUNS``, until each mode's timed runs add up to ``--min-seconds``: a
query of 0.1 s moves ±30% from run to run, and the median of many runs tells
the two modes apart where that of two cannot (timeit's autorange). The modes are
interleaved, each round starting with the other one, and each run starts when no
Spark stage is left running from the one before; the results are compared
without regard to order. Eight query texts
name columns in double quotes, which Spark reads as strings: they are given
backquotes (:func:`spark_dialect`). Output: per query the two times, their ratio
and what dynsource pruned; then the counts (equal, pruned), the geometric mean
of the ratios, the worst ten.

Besides the ratio of the medians, each query has the ratio of the best runs.
Some queries take either ~0.1 s or 2-3 s in either mode: in q93 at scale 0.1,
adaptive execution submits a one-task dimension job and a 62-task fact job at
once, and when the fact job is submitted first, Spark's FIFO scheduler runs the
dimension after it, although its empty result ends the query. Which job goes
first is a race (q93 was slow in 30 of 90 runs, q37 in 18 and q82 in 13, as
often in both modes); the best of ``--repeat`` runs compares the two modes'
work without it.

    python -m benchmarks.tpcds --scale 0.1                             # all 99 queries
    python -m benchmarks.tpcds --scale 0.1 --queries 3,7,9 --repeat 5   # some, medians of five runs
    python -m benchmarks.tpcds --scale 0.1 --repeat 2 --min-seconds 5  # short queries run until 5 s a mode
"""

from __future__ import annotations

import argparse
import contextlib
import decimal
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from benchmarks.run import FILTERING_FIGURES, settle

MAX_RUNS = 15  # timed runs per query and mode at most, however short the query (--min-seconds)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
# Each fact table and the date key it is partitioned by.
FACTS = {
    "store_sales": "ss_sold_date_sk", "store_returns": "sr_returned_date_sk",
    "catalog_sales": "cs_sold_date_sk", "catalog_returns": "cr_returned_date_sk",
    "web_sales": "ws_sold_date_sk", "web_returns": "wr_returned_date_sk", "inventory": "inv_date_sk",
}


def generate(scale: float, data_dir: Path = DEFAULT_DATA_DIR) -> tuple[Path, dict[int, str]]:
    """dsdgen's tables as Parquet under ``data_dir/tpcds-sf<scale>/raw`` (once), and the 99 query texts."""
    import duckdb
    import duckdb_extension_tpcds

    root = Path(data_dir).resolve() / f"tpcds-sf{scale:g}"
    con = duckdb.connect()
    extension = next(Path(duckdb_extension_tpcds.__file__).parent.glob("extensions/*/tpcds.duckdb_extension"))
    con.load_extension(str(extension))
    queries = {number: spark_dialect(text) for number, text in con.sql("SELECT query_nr, query FROM tpcds_queries()")
               .fetchall()}
    if not (root / "raw" / "done").exists():
        raw = root / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        con.sql(f"CALL dsdgen(sf={scale})")
        for (table,) in con.sql("SHOW TABLES").fetchall():
            con.sql(f"COPY {table} TO '{raw / table}.parquet' (FORMAT parquet)")
        (raw / "done").write_text("")
    return root, queries


def spark_dialect(text: str) -> str:
    """A query text of duckdb's in Spark's dialect: its double-quoted names (``"order count"``) in backquotes, as
    Spark reads a double-quoted text as a string; single-quoted strings stay as they are."""
    def quoted(match: re.Match) -> str:
        name = match.group(1)
        return match.group(0) if name is None else "`" + name.replace("`", "``") + "`"

    return re.sub("'(?:[^']|'')*'|\"([^\"]*)\"", quoted, text)


def partition_facts(spark, root: Path, facts: Mapping[str, str] = FACTS) -> dict[str, Path]:
    """Each of ``facts`` Hive-partitioned by its date key (written by Spark, once), and every other table's file."""
    tables = {}
    for raw in sorted((root / "raw").glob("*.parquet")):
        name = raw.stem
        if name in facts:
            target = root / "facts" / name
            if not (target / "_SUCCESS").exists():
                spark.read.parquet(str(raw)).write.mode("overwrite").partitionBy(facts[name]).parquet(str(target))
            tables[name] = target
        else:
            tables[name] = raw
    return tables


def comparable(rows) -> list[tuple]:
    """Rows in an order-free form: floats rounded (sums may add up in another order), then sorted."""
    def value(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, decimal.Decimal):
            return round(v, 6)
        return v
    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)


def run_query(spark, fn, context: contextlib.AbstractContextManager | None = None,
              ) -> tuple[float, list | None, str | None]:
    """``fn()`` inside ``context`` (entered and left untimed), timed from an idle executor
    (:func:`benchmarks.run.settle`)."""
    with context or contextlib.nullcontext():
        settle(spark)
        started = time.perf_counter()
        try:
            rows = fn()
        except Exception as error:  # a query Spark cannot run is counted, not fatal
            message = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            return time.perf_counter() - started, None, message[:200]
        return time.perf_counter() - started, rows, None


@contextlib.contextmanager
def _shadowing(spark, native_views: Mapping) -> Iterator[None]:
    """The native facts as temporary views, which shadow the registered tables of the same names, inside the block."""
    for name, df in native_views.items():
        df.createOrReplaceTempView(name)
    try:
        yield
    finally:
        for name in native_views:
            spark.catalog.dropTempView(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--queries", default="", help="comma-separated query numbers (default: all 99)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per query and mode, their median kept")
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help=f"more timed runs (up to {MAX_RUNS}) until each mode's add up to this many seconds")
    parser.add_argument("--reader", choices=("auto", "python"), default="auto",
                        help="the registered facts' reader option (python: the read tasks count row groups and rows)")
    parser.add_argument("--pruning", choices=("auto", "collect"), default="auto",
                        help="spark.dynsource.partitionPruning (auto: Spark's DPP prunes these local facts by date)")
    parser.add_argument("--check-interval-ms", type=int, default=0,
                        help="spark.dynsource.listingCheckIntervalMs (0: each fact's files looked up at every query)")
    args = parser.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("DYNSOURCE_FILTER_STORE", tempfile.mkdtemp(prefix="dynsource-tpcds-filters-"))
    from pyspark.sql import SparkSession

    import dynsource

    root, texts = generate(args.scale, args.data)
    spark = (SparkSession.builder.master("local[2]").appName("dynsource-tpcds")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="tpcds-warehouse-"))
             .config("spark.dynsource.partitionPruning", args.pruning)
             .config("spark.dynsource.listingCheckIntervalMs", str(args.check_interval_ms)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    dynsource.register(spark)
    tables = partition_facts(spark, root)
    definitions = tempfile.mkdtemp(prefix="tpcds-defs-")
    for name, path in tables.items():
        if name in FACTS:  # registered for dynsource.sql; spark.sql reads temporary views of the same names
            dynsource.register_table(spark, name, path=str(path), definitions=definitions, replace=True,
                                     reader=args.reader)
        else:
            spark.read.parquet(str(path)).createOrReplaceTempView(name)
    native_views = {name: spark.read.parquet(str(tables[name])) for name in FACTS}
    chosen = [int(q) for q in args.queries.split(",") if q] or sorted(texts)
    results = {}
    for number in chosen:
        results[number] = compare(spark, texts[number].strip().rstrip(";"), native_views, args.repeat,
                                  args.min_seconds)
        result = results[number]
        print(f"q{number}: spark {result['spark_s']:.2f} s, dynsource {result['dynsource_s']:.2f} s, "
              f"ratio {result['ratio']} (best runs {result['best_ratio']}), equal {result['equal']}, "
              f"pruned {len(result['pruned'])}"
              + (", left to Spark's DPP" if result["left_to_spark"] else "")
              + (f", spark error: {result['spark_error']}" if result["spark_error"] else "")
              + (f", dynsource error: {result['dynsource_error']}" if result["dynsource_error"] else ""), flush=True)
    summary = summarize(results)
    print(json.dumps(summary, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = ("-python-reader" if args.reader == "python" else "") + ("-collect" if args.pruning == "collect" else "")
    suffix += f"-checked-every-{args.check_interval_ms}ms" if args.check_interval_ms else ""
    suffix += f"-q{'-'.join(map(str, chosen))}" if args.queries else ""
    out = args.out / f"tpcds-sf{args.scale:g}{suffix}.json"
    out.write_text(json.dumps({"summary": summary, "queries": results}, indent=2))
    print(f"written to {out}")
    spark.stop()


def compare(spark, text: str, native_views: dict, repeat: int = 1, min_seconds: float = 0.0) -> dict:
    """One query through spark.sql (the facts as temporary views of the same Parquet) and through
    dynsource.sql (the registered facts): the median of ``repeat`` timed runs each after an untimed one, or of more
    (up to ``MAX_RUNS``) until each mode's add up to ``min_seconds``, interleaved (every run's time kept, the
    untimed first), and whether their rows agree."""
    import dynsource
    from dynsource.dpp import benefit

    frames = {}

    def native():
        return comparable(spark.sql(text).collect())

    def ours():
        frames["df"] = dynsource.sql(spark, text)
        return comparable(frames["df"].collect())

    native_times, our_times, failed = [], [], False
    while _more_runs(native_times, our_times, repeat, 0.0 if failed else min_seconds):
        # Each round starts with the other mode, so that neither always runs right after the other.
        order = (ours, native) if len(native_times) % 2 else (native, ours)
        timed = {fn: run_query(spark, fn, _shadowing(spark, native_views) if fn is native else None) for fn in order}
        (native_s, native_rows, native_error), (ours_s, our_rows, our_error) = timed[native], timed[ours]
        native_times.append(native_s)
        our_times.append(ours_s)
        failed = bool(native_error or our_error)
    native_s, ours_s = statistics.median(native_times[1:]), statistics.median(our_times[1:])
    native_best, ours_best = min(native_times[1:]), min(our_times[1:])
    report = dynsource.scan_report(frames["df"]) if "df" in frames else None
    assignments = getattr(report, "assignments", ())
    pruned = [a.scan for a in assignments if a.handle or a.partition_filter]
    filters = [{"filter": a.filter, "kind": a.payload_kind, **{f: getattr(scan, f, None) for f in FILTERING_FIGURES}}
               for a, scan in zip(assignments, report.scans() if assignments else (), strict=True) if scan]
    return {
        "spark_s": round(native_s, 3), "dynsource_s": round(ours_s, 3),
        "spark_best_s": round(native_best, 3), "dynsource_best_s": round(ours_best, 3),
        "spark_runs_s": [round(t, 3) for t in native_times], "dynsource_runs_s": [round(t, 3) for t in our_times],
        "ratio": round(ours_s / native_s, 3) if native_s else None,
        "best_ratio": round(ours_best / native_best, 3) if native_best else None,
        "equal": native_error is None and our_rows == native_rows, "pruned": pruned, "filters": filters,
        "left_to_spark": benefit.LEFT_TO_SPARK in str(report),
        "not_applied": list(getattr(report, "notes", ())), "spark_error": native_error, "dynsource_error": our_error,
    }


def _more_runs(native_times: list[float], our_times: list[float], repeat: int, min_seconds: float) -> bool:
    """Whether to run once more: the untimed run and ``repeat`` timed ones first, then up to ``MAX_RUNS`` timed ones
    while either mode's add up to less than ``min_seconds``."""
    timed = len(native_times) - 1
    if timed < repeat:
        return True
    return timed < MAX_RUNS and min(sum(native_times[1:]), sum(our_times[1:])) < min_seconds


def summarize(results: dict[int, dict]) -> dict:
    """The counts, and for the ratio of the medians and that of the best runs: the geometric mean, the queries
    over 1.5 and the worst ten."""
    ran = {n: r for n, r in results.items() if r["spark_error"] is None and r["dynsource_error"] is None}
    return {
        "queries": len(results), "ran": len(ran), "equal": sum(r["equal"] for r in ran.values()),
        "not_equal": sorted(n for n, r in ran.items() if not r["equal"]),
        "spark_errors": sorted(n for n, r in results.items() if r["spark_error"]),
        "dynsource_errors": sorted(n for n, r in results.items() if r["dynsource_error"] and not r["spark_error"]),
        "pruned": sum(bool(r["pruned"]) for r in ran.values()),
        "left_to_spark": sum(bool(r.get("left_to_spark")) for r in ran.values()),
        **_ratio_figures(ran, ""),
        **_ratio_figures(ran, "best_"),
    }


def _ratio_figures(ran: dict[int, dict], kind: str) -> dict:
    """For the ratio of the medians (``kind`` "") or of the best runs ("best_"): geometric mean, over 1.5, worst ten."""
    ratio, spark_s, dynsource_s = f"{kind}ratio", f"spark_{kind}s", f"dynsource_{kind}s"
    ratios = [r[ratio] for r in ran.values() if r[ratio]]
    worst = sorted(ran.items(), key=lambda item: item[1][ratio] or 0, reverse=True)[:10]
    return {
        f"geomean_{ratio}": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3) if ratios else None,
        f"{kind}over_1_5": sorted(n for n, r in ran.items() if (r[ratio] or 0) > 1.5),
        f"{kind}worst_ten": [(f"q{n}", r[ratio], r[spark_s], r[dynsource_s]) for n, r in worst],
    }


if __name__ == "__main__":
    main()
