"""dynsource against Spark's own Parquet reader and DPP on the star schema: times, bytes read, results.

Every query runs in every mode, interleaved, in one SparkSession: one untimed
warm-up round, then ``--repeat`` timed rounds, each in another order of the modes
(:func:`ordered`: no mode always runs right after the same one), each run from
an idle executor (:func:`settle`). The results of all modes must be identical
(the run fails otherwise). Output: a table on the console, and a JSON file and a
PNG chart under ``benchmarks/results/``.

    python -m benchmarks.run --scale 1 --repeat 3
    python -m benchmarks.run --curves      # planning and collector scale curves (benchmarks/curves.py)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from benchmarks import star as star_schema

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DPP_CONF = "spark.sql.optimizer.dynamicPartitionPruning.enabled"
PAIRED_BASE = "native DPP warm"  # what dynsource.sql modes are paired with, round by round
PAIRED_PHASES = ("call", "run")  # the phases paired too, where both modes split them (``<name>_s``)
SQL = """
SELECT COUNT(*) AS sales, SUM(ss_sales_price) AS revenue
FROM {fact} JOIN date_dim ON ss_sold_date_sk = d_date_sk{joins}
WHERE {where}
"""
STORE_STATES = ("TN", "CA", "NY", "TX")  # store s_store_sk (1 to 12) is in STORE_STATES[s_store_sk % 4]


@dataclass(frozen=True)
class Query:
    name: str
    where: str  # the predicate on date_dim: the keys the date filter selects
    description: str
    stores: str | None = None  # a predicate on the store dimension, which the query then joins too

    def sql(self, fact: str) -> str:
        if self.stores is None:
            return SQL.format(fact=fact, joins="", where=self.where)
        return SQL.format(fact=fact, joins="\nJOIN store ON ss_store_sk = s_store_sk",
                          where=f"{self.where} AND {self.stores}")


QUERIES = (
    Query("month", "d_year = 2000 AND d_moy = 12", "December 2000 (31 days)"),
    Query("holidays", "d_year = 2000 AND d_holiday = 'Y'", "the 6 holidays of 2000"),
    Query("years", "d_year >= 1999", "1999 to 2002 (1,461 days)"),
    Query("month_stores", "d_year = 2000 AND d_moy = 12", "December 2000 in the 3 stores of TN (a star)",
          stores="s_state = 'TN'"),
)


@dataclass
class Measurement:
    """One timed run of one query in one mode.

    ``partitions``/``files``/``bytes`` are what the scan of ``store_sales`` read,
    and ``source`` says where the figures come from. ``phases`` splits a run:
    ``collect_s`` (the collector job and publishing), ``load_s`` (``load()``:
    schema inference in a Python worker, or Spark's listing of a fresh
    DataFrame), ``call_s`` (``dynsource.sql`` or ``spark.sql`` returning its
    DataFrame: analysis, and whatever ``dynsource.sql`` collects),
    ``planning_s`` (listing and planning, from the scan report) and ``run_s``
    (the action, physical planning included).
    """

    result: tuple
    seconds: float
    partitions: int | None
    files: int | None
    bytes: int | None
    source: str
    phases: dict[str, float] = field(default_factory=dict)
    filtering: dict = field(default_factory=dict)  # dynsource.sql: what its scan report says was filtered and how


class Bench:
    """The star schema opened in ``spark``, with what every mode needs prepared outside the timed runs."""

    def __init__(self, spark, star: star_schema.Star, reader_options: dict[str, str] | None = None) -> None:
        import dynsource

        self.spark = spark
        self.star = star
        self.fact = str(star.store_sales)
        self.reader_options = dict(reader_options or {})
        dynsource.register(spark)
        spark.read.parquet(str(star.date_dim)).createOrReplaceTempView("date_dim")
        spark.createDataFrame([(sk, STORE_STATES[sk % 4]) for sk in range(1, 13)],
                              "s_store_sk int, s_state string").createOrReplaceTempView("store")
        self.sizes = star_schema.partition_sizes(star.store_sales)
        # One DataFrame for the warm native modes: its file index lists the table once and is then cached.
        spark.read.parquet(self.fact).createOrReplaceTempView("store_sales_native_warm")
        # For the dynsource.sql mode: the fact as a registered table (its schema inferred here, untimed).
        self.table = f"store_sales_bench_{os.getpid()}"
        # The same table read by dynsource's Python reader: reader 'auto' picks Spark's file reader here.
        self.table_python = f"{self.table}_python"
        definitions = tempfile.mkdtemp(prefix="bench-defs-")
        for table, reader in ((self.table, "auto"), (self.table_python, "python")):
            dynsource.register_table(spark, table, path=self.fact, definitions=definitions, replace=True,
                                     **{"reader": reader, **self.reader_options})
        self.keys: dict[str, list[int]] = {}
        self.static_handles: dict[str, str] = {}
        self.worker_warmups_s: list[float] = []

    def warm_python_workers(self) -> None:
        """Have Spark's Python workers running with dynsource imported before a timed run of a mode that reads with
        dynsource's reader (untimed; ``PYTHON_READER_MODES``).

        Spark stops Python workers idle for a minute, which the native modes in between can outlast: without
        this, a dynsource mode would pay worker start or not depending on its place in the order. What the
        warm-up costs is kept: it is the worker start a batch job's first dynsource query pays. Modes that read
        with Spark's reader use no worker, and the warm-up job's garbage would slow their run (holidays, 20 runs:
        dynsource.sql at 1.28 times Spark's warm DataFrame after it, 0.98 without it).
        """
        started = time.perf_counter()
        self.spark.read.format("dynsource").option("path", str(self.star.date_dim)).load().count()
        self.worker_warmups_s.append(time.perf_counter() - started)

    def keys_of(self, query: Query) -> list[int]:
        """The date keys the query's dimension filter selects."""
        if query.name not in self.keys:
            rows = self.spark.sql(f"SELECT d_date_sk FROM date_dim WHERE {query.where}").collect()
            self.keys[query.name] = sorted(row[0] for row in rows)
        return self.keys[query.name]

    def static_handle(self, query: Query) -> str:
        """A filter of the query's keys published once: scans with it show the floor of a pruned dynsource scan."""
        import dynsource

        if query.name not in self.static_handles:
            data = dynsource.DynamicFilteringData([(star_schema.KEY, "int")], [(k,) for k in self.keys_of(query)])
            self.static_handles[query.name] = dynsource.publish(data)
        return self.static_handles[query.name]

    def matching(self, query: Query) -> tuple[int, int, int]:
        """Partitions, files and bytes on disk of the partitions holding the query's keys."""
        kept = [self.sizes[k] for k in self.keys_of(query) if k in self.sizes]
        return len(kept), sum(f for f, _ in kept), sum(b for _, b in kept)

    def table_totals(self) -> tuple[int, int, int]:
        return len(self.sizes), sum(f for f, _ in self.sizes.values()), sum(b for _, b in self.sizes.values())

    def sql(self, fact_view: str, query: Query):
        return self.spark.sql(query.sql(fact_view))


def _row(df) -> tuple:
    return tuple(df.collect()[0])


def _dynsource_read(bench: Bench, handle: str | None):
    reader = bench.spark.read.format("dynsource").options(**bench.reader_options).option("path", bench.fact)
    return (reader.option("dynamicFilter", handle) if handle else reader).load()


def _dynsource_measurement(bench: Bench, started: float, handle: str, result: tuple, phases: dict) -> Measurement:
    import dynsource

    seconds = time.perf_counter() - started
    report = dynsource.scan_report(handle)
    if not report.filtering or report.fallback_reason:
        raise RuntimeError(f"The dynsource scan did not prune: {report.fallback_reason or 'no filtering'}")
    phases["planning_s"] = report.planning_ms / 1000
    return Measurement(result, seconds, report.partitions_kept, report.files_kept, report.bytes_kept,
                       "dynsource scan report", phases)


def dynsource_dpp(bench: Bench, query: Query) -> Measurement:
    """End to end: collect the dimension's keys, publish them, scan with the filter, join."""
    import dynsource

    bench.spark.conf.set(DPP_CONF, "true")
    started = time.perf_counter()
    dimension = bench.spark.sql(f"SELECT d_date_sk FROM date_dim WHERE {query.where}")
    handle = dynsource.collect(dimension, {star_schema.KEY: "d_date_sk"})
    collected = time.perf_counter()
    _dynsource_read(bench, handle).createOrReplaceTempView("store_sales_dynsource_dpp")
    loaded = time.perf_counter()
    result = _row(bench.sql("store_sales_dynsource_dpp", query))
    phases = {"collect_s": collected - started, "load_s": loaded - collected, "run_s": time.perf_counter() - loaded}
    return _dynsource_measurement(bench, started, handle, result, phases)


def _dynsource_sql(python_reader: bool, pruning: str = "auto",
                   check_interval_ms: int = 0) -> Callable[[Bench, Query], Measurement]:
    def run(bench: Bench, query: Query) -> Measurement:
        return dynsource_sql(bench, query, bench.table_python if python_reader else bench.table, pruning,
                             check_interval_ms)

    run.__doc__ = (f"dynsource.sql (spark.dynsource.partitionPruning = {pruning}, listingCheckIntervalMs = "
                   f"{check_interval_ms}), the kept files read by {'dynsource' if python_reader else 'Spark'}'s reader")
    return run


@contextlib.contextmanager
def _settings(spark, settings: dict[str, str]) -> Iterator[None]:
    """The session's ``settings`` set inside the block, each restored after it."""
    before = {name: spark.conf.get(name, None) for name in settings}
    for name, value in settings.items():
        spark.conf.set(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)


def dynsource_sql(bench: Bench, query: Query, table: str, pruning: str = "auto",
                  check_interval_ms: int = 0) -> Measurement:
    """The plain query through ``dynsource.sql``: it finds the join, collects (or leaves the join of a local table to
    Spark's DPP, with ``pruning`` = ``auto``), prunes and reads only used columns; a table found unchanged less than
    ``check_interval_ms`` ago is read as found."""
    import dynsource
    from dynsource.dpp import benefit
    from dynsource.scan import planner

    bench.spark.conf.set(DPP_CONF, "true")
    settings = {benefit.PRUNING_CONF: pruning, planner.CHECK_INTERVAL_CONF: str(check_interval_ms)}
    with _settings(bench.spark, settings):  # set before the timed run and restored after it, untimed
        started = time.perf_counter()
        df = dynsource.sql(bench.spark, query.sql(table))
        planned = time.perf_counter()
        result = _row(df)
        seconds = time.perf_counter() - started
    report = dynsource.scan_report(df)
    phases = {"call_s": planned - started, "run_s": seconds - (planned - started)}
    (scan,) = report.scans()
    filtering = {} if scan is None else {figure: getattr(scan, figure, None) for figure in FILTERING_FIGURES}
    if scan is not None:
        phases["planning_s"] = scan.planning_ms / 1000
        filtering["not_applied"] = list(report.notes)
    if benefit.LEFT_TO_SPARK in str(report):
        # Spark pruned the partitions at run time (a data-column filter dynsource collected may apply too).
        metrics = native_scan_metrics(df, bench.fact)
        return Measurement(result, seconds, metrics.get("numPartitions"), metrics.get("numFiles"),
                           metrics.get("filesSize"), "Spark SQL metrics of the scan Spark's DPP pruned", phases,
                           filtering)
    if scan is None and report.assignments[0].reason and "fallback_filter_ratio" in report.assignments[0].reason:
        # Spark's benefit check declined the filter (it keeps most partitions), as native DPP would.
        return Measurement(result, seconds, *bench.table_totals(), "every file: the benefit check declined", phases)
    if scan is None or not scan.filtering:
        raise RuntimeError(f"dynsource.sql did not prune: {report}")
    return Measurement(result, seconds, scan.partitions_kept, scan.files_kept, scan.bytes_kept,
                       "dynsource scan report", phases, filtering)


# What a dynsource.sql run's scan report says of its filter: the payload, what each read task got, what it skipped.
FILTERING_FIGURES = ("payload_kind", "keys", "payload_bytes", "parts", "task_filter_bytes", "row_groups_total",
                     "row_groups_skipped", "rows_read", "rows_filtered", "fallback_reason")


def dynsource_static(bench: Bench, query: Query) -> Measurement:
    """The scan pruned by the query's keys published beforehand: no collector job (the floor for dynsource DPP)."""
    handle = bench.static_handle(query)
    bench.spark.conf.set(DPP_CONF, "true")
    started = time.perf_counter()
    _dynsource_read(bench, handle).createOrReplaceTempView("store_sales_dynsource_static")
    loaded = time.perf_counter()
    result = _row(bench.sql("store_sales_dynsource_static", query))
    phases = {"load_s": loaded - started, "run_s": time.perf_counter() - loaded}
    return _dynsource_measurement(bench, started, handle, result, phases)


def dynsource_partition_filter(bench: Bench, query: Query) -> Measurement:
    """Static pruning: the query's keys as the ``partitionFilter`` option (``ss_sold_date_sk IN (...)``)."""
    bench.spark.conf.set(DPP_CONF, "true")
    keys = bench.keys_of(query)
    started = time.perf_counter()
    reader = bench.spark.read.format("dynsource").options(**bench.reader_options).option("path", bench.fact)
    predicate = f"{star_schema.KEY} IN ({', '.join(map(str, keys))})"
    reader.option("partitionFilter", predicate).load().createOrReplaceTempView("store_sales_dynsource_pf")
    loaded = time.perf_counter()
    result = _row(bench.sql("store_sales_dynsource_pf", query))
    partitions, files, size = bench.matching(query)
    phases = {"load_s": loaded - started, "run_s": time.perf_counter() - loaded}
    return Measurement(result, time.perf_counter() - started, partitions, files, size,
                       "the partitions matching the predicate, which partitionFilter keeps exactly", phases)


def dynsource_full(bench: Bench, query: Query) -> Measurement:
    """dynsource without a filter: it lists, plans and reads every partition."""
    bench.spark.conf.set(DPP_CONF, "true")
    started = time.perf_counter()
    _dynsource_read(bench, None).createOrReplaceTempView("store_sales_dynsource_full")
    loaded = time.perf_counter()
    result = _row(bench.sql("store_sales_dynsource_full", query))
    seconds = time.perf_counter() - started
    partitions, files, size = bench.table_totals()
    phases = {"load_s": loaded - started, "run_s": time.perf_counter() - loaded}
    return Measurement(result, seconds, partitions, files, size, "every file of the table (no filter)", phases)


def _native(dpp: bool, warm: bool) -> Callable[[Bench, Query], Measurement]:
    def run(bench: Bench, query: Query) -> Measurement:
        bench.spark.conf.set(DPP_CONF, str(dpp).lower())
        started = time.perf_counter()
        view = "store_sales_native_warm"
        if not warm:  # a new DataFrame, as a batch job makes: Spark lists every partition directory again
            view = "store_sales_native_cold"
            bench.spark.read.parquet(bench.fact).createOrReplaceTempView(view)
        loaded = time.perf_counter()
        df = bench.sql(view, query)
        called = time.perf_counter()
        result = _row(df)
        seconds = time.perf_counter() - started
        phases = {"call_s": called - loaded, "run_s": seconds - (called - started)}
        if not warm:
            phases["load_s"] = loaded - started
        metrics = native_scan_metrics(df, bench.fact)
        return Measurement(result, seconds, metrics.get("numPartitions"), metrics.get("numFiles"),
                           metrics.get("filesSize"), "Spark SQL metrics of the scan", phases)

    run.__doc__ = f"spark.read.parquet, DPP {'on' if dpp else 'off'}, {'warm' if warm else 'cold'}"
    return run


def native_scan_metrics(df, path: str) -> dict[str, int]:
    """SQL metrics of the executed ``FileSourceScanExec`` that read ``path`` (files, bytes, partitions read).

    Walks the executed plan through adaptive query stages, which hide their
    plans from ``children``; works on Spark 4.0 and 4.1+.
    """
    scans = [node for node in _plan_nodes(df._jdf.queryExecution().executedPlan())
             if node.getClass().getSimpleName() == "FileSourceScanExec"
             and _under(_scan_root(node), path)]
    if len(scans) != 1:
        raise RuntimeError(f"Expected one Parquet scan of '{path}' in the executed plan, found {len(scans)}.")
    metrics = scans[0].metrics()
    names = ("numFiles", "filesSize", "numPartitions")
    return {name: int(metrics.apply(name).value()) for name in names if metrics.contains(name)}


def _under(found: str, path: str) -> bool:
    found, path = found.rstrip("/"), os.path.abspath(path)
    return found == path or found.startswith(path + "/")


def _plan_nodes(node):
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":
        yield from _plan_nodes(node.executedPlan())
        return
    if name.endswith("QueryStageExec"):
        yield from _plan_nodes(node.plan())
        return
    yield node
    children = node.children()
    for index in range(children.size()):
        yield from _plan_nodes(children.apply(index))


def _scan_root(scan) -> str:
    """Where a scan reads: its one root path, or the first of the files it was handed (dynsource.sql's reads)."""
    roots = scan.relation().location().rootPaths()
    return roots.apply(0).toUri().getPath() if roots.size() else ""


MODES: dict[str, Callable[[Bench, Query], Measurement]] = {
    "dynsource DPP": dynsource_dpp,
    "dynsource.sql": _dynsource_sql(python_reader=False),
    "dynsource.sql python reader": _dynsource_sql(python_reader=True),
    "dynsource.sql collect": _dynsource_sql(python_reader=False, pruning="collect"),
    "dynsource.sql checked every 60 s": _dynsource_sql(python_reader=False, check_interval_ms=60_000),
    "dynsource static keys": dynsource_static,
    "dynsource partitionFilter": dynsource_partition_filter,
    "dynsource no filter": dynsource_full,
    "native DPP cold": _native(dpp=True, warm=False),
    "native DPP warm": _native(dpp=True, warm=True),
    "native no DPP cold": _native(dpp=False, warm=False),
    "native no DPP warm": _native(dpp=False, warm=True),
}

# The modes whose scans run in Spark's Python workers (dynsource's reader); the others read with Spark's own reader.
PYTHON_READER_MODES = frozenset({"dynsource DPP", "dynsource.sql python reader", "dynsource static keys",
                                 "dynsource partitionFilter", "dynsource no filter"})


class ResultMismatch(RuntimeError):
    """Two modes returned different results for one query."""


def run_benchmark(
    spark,
    star: star_schema.Star,
    *,
    queries: Sequence[Query] = QUERIES,
    modes: Sequence[str] = tuple(MODES),
    repeat: int = 3,
    warmup: bool = True,
    reader_options: dict[str, str] | None = None,
) -> dict:
    """Run every query in every mode, interleaved; the report as a JSON-ready dict.

    ``reader_options`` are extra options of every dynsource read (e.g. ``openCostInBytes``).

    Raises ``ResultMismatch`` as soon as two modes disagree on a query's result.
    """
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"Unknown mode(s) {unknown}; modes are {list(MODES)}.")
    if repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {repeat}.")
    bench = Bench(spark, star, reader_options)
    runs: dict[str, dict[str, list[Measurement]]] = {q.name: {m: [] for m in modes} for q in queries}
    started = time.perf_counter()
    results: dict[str, dict[str, tuple]] = {}
    dpp_setting = spark.conf.get(DPP_CONF)
    try:
        for round_ in range(repeat + int(warmup)):
            for query in queries:
                for mode in ordered(modes, round_):
                    if mode in PYTHON_READER_MODES:
                        bench.warm_python_workers()
                    settle(spark)
                    measurement = MODES[mode](bench, query)
                    check_result(query, mode, measurement.result, results.setdefault(query.name, {}))
                    if round_ >= int(warmup):
                        runs[query.name][mode].append(measurement)
    finally:
        spark.conf.set(DPP_CONF, dpp_setting)
    return _report(bench, queries, runs, repeat, time.perf_counter() - started)


def star_arguments(description: str, queries: Sequence[str], modes: Sequence[str]) -> argparse.ArgumentParser:
    """The flags of a benchmark of star queries in several modes (``connect.py``, ``doors.py``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", default=",".join(queries))
    parser.add_argument("--modes", default=",".join(modes))
    parser.add_argument("--data", type=Path, default=star_schema.DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    return parser


def print_modes(report: dict) -> None:
    """The medians per query and mode of ``connect.py``'s and ``doors.py``'s reports, with what read each scan
    where the report says, their ratios, and the differences paired by round where the report has them."""
    for name, query in report["queries"].items():
        print(f"\n{name}: {query['description']}")
        for mode, seconds in query["median_s"].items():
            read_by = query.get("read_by", {}).get(mode)
            print(f"  {mode:<30} {seconds:8.3f} s" + (f"  (read by {read_by})" if read_by else ""))
        print("  " + ", ".join(f"{pair} = {ratio}" for pair, ratio in query["ratios"].items()))
        for pair, paired in query.get("paired", {}).items():
            print(f"  paired by round, {pair}: run {paired['median_ms']:+.1f} ms, "
                  f"call {paired['call_median_ms']:+.1f} ms, action {paired['run_median_ms']:+.1f} ms; "
                  f"faster in {paired['rounds_faster']} of {paired['rounds']}")


def save_report(report: dict, out_dir: Path, name: str) -> None:
    """``report`` as ``out_dir/name`` (JSON), said on the console."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / name
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwrote {out}")


def ordered(modes: Sequence[str], round_: int) -> list[str]:
    """The modes in the order of ``round_``, by a Williams design: over ``len(modes)`` rounds (twice that for an odd
    number of modes), each mode runs right after each other mode equally often. A cold mode's listing leaves the run
    after it hundreds of MB of garbage; a plain rotation keeps the cyclic order, so one mode would always follow it.
    """
    count = len(modes)
    first, low, high = [0], 1, count - 1  # 0, 1, n-1, 2, n-2, ...
    while len(first) < count:
        first.append(low)
        low += 1
        if len(first) < count:
            first.append(high)
            high -= 1
    row = [(index + round_) % count for index in first]
    if count % 2 and (round_ // count) % 2:
        row.reverse()
    return [modes[index] for index in row]


def settle(spark, idle_wait_s: float = 120.0) -> None:
    """Wait (at most ``idle_wait_s``) until no Spark stage runs: a query whose join side turns out empty returns while
    Spark's adaptive execution leaves stages it no longer needs running, which would slow whatever runs next.

    The heap is not collected here: a warm session's runs pay for their garbage, and a run after ``System.gc()``
    starts with a shrunk heap (TPC-DS q21: 0.54 s against 0.36 s).
    """
    deadline = time.monotonic() + idle_wait_s
    while spark.sparkContext.statusTracker().getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.05)


def check_result(query: Query, mode: str, result: tuple, seen: dict[str, tuple]) -> None:
    """Record ``mode``'s ``result`` in ``seen``; raise ``ResultMismatch`` if any run of any mode returned another."""
    for other, earlier in seen.items():
        if earlier != result:
            raise ResultMismatch(f"Query '{query.name}': mode '{mode}' returned {result}, mode '{other}' returned "
                                 f"{earlier}.")
    seen.setdefault(mode, result)


def _report(bench: Bench, queries: Sequence[Query], runs: dict, repeat: int, total_s: float) -> dict:
    report = {"machine": machine(bench.spark), "scale": bench.star.scale, "seed": bench.star.seed,
              "rows": bench.star.rows, "repeat": repeat, "total_seconds": round(total_s, 1),
              "dynsource_options": bench.reader_options,
              "python_worker_warmup_s": _spread(bench.worker_warmups_s),
              "table": dict(zip(("partitions", "files", "bytes"), bench.table_totals(), strict=True)), "queries": {}}
    for query in queries:
        modes = {mode: _summary(measured) for mode, measured in runs[query.name].items()}
        partitions, files, size = bench.matching(query)
        report["queries"][query.name] = {
            "where": query.where, "stores": query.stores, "description": query.description,
            "keys": len(bench.keys_of(query)),
            "matching": {"partitions": partitions, "files": files, "bytes": size},
            "modes": modes, "ratios": _ratios(modes, size),
            "paired": {f"{mode} - {PAIRED_BASE}": paired_by_round(measured, runs[query.name][PAIRED_BASE])
                       for mode, measured in runs[query.name].items()
                       if mode.startswith("dynsource.sql") and PAIRED_BASE in runs[query.name]},
        }
    return report


def paired_by_round(measured: list[Measurement], base: list[Measurement]) -> dict:
    """Per-round differences of ``measured`` against ``base`` (both run once in every round): medians in ms of
    the whole run and of each phase both split, and the rounds ``measured`` was faster in.

    A round's two runs share the machine's state (its load, the heap), which medians over all runs do not pair:
    a systematic difference of a few ms is visible here when the runs' spread hides it.
    """
    def median_ms(values) -> float:
        return round(statistics.median(values) * 1000, 1)

    rounds = list(zip(measured, base, strict=True))
    differences = [m.seconds - b.seconds for m, b in rounds]
    phases = [name for name in PAIRED_PHASES if f"{name}_s" in measured[0].phases and f"{name}_s" in base[0].phases]
    return {
        "median_ms": median_ms(differences),
        **{f"{name}_median_ms": median_ms([m.phases[f"{name}_s"] - b.phases[f"{name}_s"] for m, b in rounds])
           for name in phases},
        "rounds_faster": sum(d < 0 for d in differences), "rounds": len(differences),
    }


def _summary(measured: list[Measurement]) -> dict:
    times = [m.seconds for m in measured]
    last = measured[-1]
    phases = {name: round(statistics.median(m.phases[name] for m in measured), 3) for name in last.phases}
    return {
        "median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3), "max_s": round(max(times), 3),
        "times_s": [round(t, 3) for t in times], "partitions": last.partitions, "files": last.files,
        "bytes": last.bytes, "figures_from": last.source, "result": [_plain(v) for v in last.result],
        "phases_median_s": phases, **({"filtering": last.filtering} if last.filtering else {}),
    }


def _spread(times: list[float]) -> dict | None:
    if not times:
        return None
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3), "max": round(max(times), 3)}


def _plain(value):
    return str(value) if isinstance(value, Decimal) else value


def _ratios(modes: dict, matching_bytes: int) -> dict:
    """The issue's targets: how dynsource DPP compares (a time ratio below 1 means dynsource DPP is faster)."""
    def time_ratio(mode: str, other: str) -> float | None:
        if mode in modes and other in modes:
            return round(modes[mode]["median_s"] / modes[other]["median_s"], 3)
        return None

    dpp = modes.get("dynsource DPP")
    return {
        "dpp_bytes_over_matching": round(dpp["bytes"] / matching_bytes, 3) if dpp and matching_bytes else None,
        "no_filter_over_dpp": (round(1 / r, 2) if (r := time_ratio("dynsource DPP", "dynsource no filter")) else None),
        "dpp_over_native_dpp_cold": time_ratio("dynsource DPP", "native DPP cold"),
        "dpp_over_native_dpp_warm": time_ratio("dynsource DPP", "native DPP warm"),
        "static_over_native_dpp_warm": time_ratio("dynsource static keys", "native DPP warm"),
        "sql_over_dpp": time_ratio("dynsource.sql", "dynsource DPP"),
        "sql_over_native_dpp_warm": time_ratio("dynsource.sql", "native DPP warm"),
        "sql_over_native_dpp_cold": time_ratio("dynsource.sql", "native DPP cold"),
        "sql_python_reader_over_native_dpp_warm": time_ratio("dynsource.sql python reader", "native DPP warm"),
        "sql_collect_over_native_dpp_warm": time_ratio("dynsource.sql collect", "native DPP warm"),
        "sql_checked_every_60s_over_native_dpp_warm": time_ratio("dynsource.sql checked every 60 s", "native DPP warm"),
    }


def machine(spark) -> dict:
    """What the figures were measured on."""
    import pyarrow
    import pyspark

    memory = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), None) if Path("/proc/meminfo").exists() else None
    return {
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "memory_gib": round(int(memory) / 2**20, 1) if memory else None,
        "load_average": [round(x, 2) for x in os.getloadavg()], "master": spark.sparkContext.master,
        "python": platform.python_version(), "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
        "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version"),
    }


def print_table(report: dict, out=sys.stdout) -> None:
    print(f"store_sales: scale {report['scale']:g} ({report['rows']:,} rows, {report['table']['partitions']:,} "
          f"partitions, {report['table']['bytes'] / 1e6:,.1f} MB), {report['repeat']} timed runs after a warm-up, "
          f"machine: {report['machine']['cpus']} CPUs, {report['machine']['master']}", file=out)
    warmup = report.get("python_worker_warmup_s")
    if warmup:
        print(f"untimed Python worker warm-up before each dynsource run: median {warmup['median']:.2f} s, "
              f"max {warmup['max']:.2f} s (the worker start a cold dynsource query pays)", file=out)
    for name, query in report["queries"].items():
        matching = query["matching"]
        print(f"\n{name}: {query['description']}: {query['keys']} keys, matching partitions hold "
              f"{matching['files']} files, {matching['bytes']:,} bytes", file=out)
        header = f"{'mode':<28} {'median s':>9} {'min-max s':>13} {'partitions':>10} {'files':>6} {'MB read':>9}"
        print(f"  {header}  result", file=out)
        for mode, m in query["modes"].items():
            spread = f"{m['min_s']:.2f}-{m['max_s']:.2f}"
            megabytes = f"{m['bytes'] / 1e6:.2f}" if m["bytes"] is not None else "?"
            print(f"  {mode:<28} {m['median_s']:>9.2f} {spread:>13} {m['partitions']!s:>10} {m['files']!s:>6} "
                  f"{megabytes:>9}  {m['result']}", file=out)
        print("  ratios: " + ", ".join(f"{k}={v}" for k, v in query["ratios"].items() if v is not None), file=out)
        for pair, paired in query.get("paired", {}).items():
            split = ", ".join(f"{name} {paired[f'{name}_median_ms']:+.1f} ms" for name in PAIRED_PHASES
                              if f"{name}_median_ms" in paired)
            print(f"  paired by round, {pair}: median {paired['median_ms']:+.1f} ms ({split}); faster in "
                  f"{paired['rounds_faster']} of {paired['rounds']} rounds", file=out)


def draw_chart(report: dict, path: Path) -> None:
    """Median time (bars, min-max whiskers) and bytes read (log scale) per query and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries = list(report["queries"])
    fig, axes = plt.subplots(2, len(queries), figsize=(5 * len(queries), 8), squeeze=False)
    for column, name in enumerate(queries):
        modes = report["queries"][name]["modes"]
        labels = list(modes)
        colors = [f"C{i}" for i in range(len(labels))]
        medians = [modes[m]["median_s"] for m in labels]
        whiskers = [[modes[m]["median_s"] - modes[m]["min_s"] for m in labels],
                    [modes[m]["max_s"] - modes[m]["median_s"] for m in labels]]
        time_axis, bytes_axis = axes[0][column], axes[1][column]
        time_axis.bar(labels, medians, yerr=whiskers, color=colors, capsize=3)
        time_axis.set_title(f"{name}: {report['queries'][name]['description']}")
        time_axis.set_ylabel("seconds (median, min-max)")
        bytes_axis.bar(labels, [(modes[m]["bytes"] or 0) / 1e6 for m in labels], color=colors)
        bytes_axis.set_yscale("log")
        smallest = min((modes[m]["bytes"] for m in labels if modes[m]["bytes"]), default=1)
        bytes_axis.set_ylim(bottom=smallest / 1e6 / 3)  # log-scale bars need a floor below the smallest
        bytes_axis.set_ylabel("MB read from store_sales")
        for axis in (time_axis, bytes_axis):
            axis.tick_params(axis="x", labelrotation=60)
    fig.suptitle(f"dynsource vs spark.read.parquet, star schema scale {report['scale']:g} "
                 f"({report['rows']:,} rows), {report['machine']['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def spark_session():
    """The benchmark's own local session: 2 cores, UTC, Python workers on this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # A fresh filter store per run, set before the session starts so that its Python workers inherit it.
    os.environ.setdefault("DYNSOURCE_FILTER_STORE", tempfile.mkdtemp(prefix="dynsource-bench-filters-"))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dynsource-benchmark")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1 = 10 million store_sales rows (default 1)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query and mode (default 3)")
    parser.add_argument("--queries", default=",".join(q.name for q in QUERIES),
                        help=f"comma-separated subset of {[q.name for q in QUERIES]}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {list(MODES)}")
    parser.add_argument("--data", type=Path, default=star_schema.DEFAULT_DATA_DIR, help="generated data cache")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON and the chart")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of every dynsource read, e.g. openCostInBytes=65536 (repeatable)")
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG (no matplotlib needed)")
    parser.add_argument("--curves", action="store_true", help="run the scale curves instead (benchmarks/curves.py)")
    args = parser.parse_args(argv)
    if args.curves:
        from benchmarks import curves

        curves.main(["--out", str(args.out)])
        return
    by_name = {q.name: q for q in QUERIES}
    unknown = [name for name in args.queries.split(",") if name not in by_name]
    if unknown:
        parser.error(f"--queries: unknown {unknown}; queries are {list(by_name)}")
    malformed = [o for o in args.option if "=" not in o]
    if malformed:
        parser.error(f"--option takes KEY=VALUE, got {malformed}")
    star = star_schema.generate(args.scale, args.seed, args.data)
    spark = spark_session()
    try:
        report = run_benchmark(spark, star, queries=[by_name[n] for n in args.queries.split(",")],
                               modes=args.modes.split(","), repeat=args.repeat,
                               reader_options=dict(o.split("=", 1) for o in args.option))
    finally:
        spark.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"star-scale{args.scale:g}"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    if not args.no_chart:
        draw_chart(report, Path(f"{stem}.png"))
    print(f"\nwrote {stem}.json" + ("" if args.no_chart else f" and {stem}.png"))


if __name__ == "__main__":
    main()
