"""Scale curves: planning time by partition count, collector time and driver memory by dimension size.

- Planning (enumerate + prune + plan, no reading, no Spark) of a table of 1k,
  10k and 100k partitions, on the local filesystem and on fsspec's memory
  filesystem: with a 31-key dynamic filter, and without a filter (every
  partition listed). Target: at most 2 s with the filter at 100k partitions.
- The collector on a dimension of 10k, 1M and 10M distinct keys with the
  default limits, each in a fresh driver process: time, payload kind and
  size, and how much the driver's peak memory grew (RSS, and the peak of
  pyarrow's allocations), which the limits must bound whatever the dimension's size.

    python -m benchmarks.run --curves     (or python -m benchmarks.curves)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from benchmarks.star import DEFAULT_DATA_DIR

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PARTITION_COUNTS = (1_000, 10_000, 100_000)
DIMENSION_ROWS = (10_000, 1_000_000, 10_000_000)
FILTER_KEYS = 31
# fsspec's MemoryFileSystem.ls scans every stored path, so listing each of N partitions costs N^2: an
# unfiltered planning of 100k in-memory partitions would take hours. It is measured up to this count only.
MEMORY_UNFILTERED_MAX = 10_000


def _tiny_parquet() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"v": pa.array([1], pa.int32())}), sink)
    return sink.getvalue()


def make_table(url: str, partitions: int) -> str:
    """A table of ``partitions`` directories ``k=0`` … each holding one one-row Parquet file (made once)."""
    fs, root = fsspec.core.url_to_fs(url)
    if fs.exists(f"{root}/_complete"):
        return url
    payload = _tiny_parquet()
    # fsspec's memory filesystem has implicit directories, and its makedirs scans every stored path.
    local = isinstance(fs, LocalFileSystem)
    for key in range(partitions):
        if local:
            fs.makedirs(f"{root}/k={key}", exist_ok=True)
        fs.pipe_file(f"{root}/k={key}/part-0.parquet", payload)
    fs.pipe_file(f"{root}/_complete", b"")  # hidden from the enumerator (leading underscore)
    return url


def time_planning(url: str, handle: str | None, filter_store: str) -> tuple[float, int, int]:
    """Seconds, input partitions and (for a filtered scan) directory listings of one planning of ``url``."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    from dynsource import explain
    from dynsource.scan.options import ScanOptions
    from dynsource.scan.planner import plan_scan

    options = {"path": url, "filterStore": filter_store, **({"dynamicFilter": handle} if handle else {})}
    schema = StructType([StructField("v", IntegerType()), StructField("k", IntegerType())])
    started = time.perf_counter()
    planned = plan_scan(ScanOptions.parse(options), schema)
    seconds = time.perf_counter() - started
    listings = explain.scan_report(handle, filter_store).listings if handle else -1
    return seconds, len(planned), listings


def planning_curve(data_dir: Path, repeat: int) -> list[dict]:
    import dynsource

    filter_store = tempfile.mkdtemp(prefix="dynsource-curves-")
    points = []
    for partitions in PARTITION_COUNTS:
        keys = [(k,) for k in range(0, partitions, partitions // FILTER_KEYS)][:FILTER_KEYS]
        handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], keys), filter_store)
        tables = {"local": make_table(str(data_dir / f"partitions-{partitions}"), partitions),
                  "memory": make_table(f"memory://dynsource-curves/partitions-{partitions}", partitions)}
        for filesystem, url in tables.items():
            for label, used in (("31-key filter", handle), ("no filter", None)):
                if filesystem == "memory" and not used and partitions > MEMORY_UNFILTERED_MAX:
                    continue
                runs = [time_planning(url, used, filter_store) for _ in range(repeat)]
                point = {"filesystem": filesystem, "partitions": partitions, "filter": label,
                         "median_s": round(statistics.median(r[0] for r in runs), 3),
                         "times_s": [round(r[0], 3) for r in runs], "input_partitions": runs[0][1],
                         "listings": runs[0][2] if used else None}
                print(f"planning {filesystem:<6} {partitions:>7,} partitions, {label:<13}: {point['median_s']:7.3f} s "
                      f"({point['input_partitions']} input partitions"
                      + (f", {point['listings']} listings)" if used else ")"), flush=True)
                points.append(point)
    return points


def collector_probe(rows: int) -> dict:
    """In this (fresh) process: collect a filter from a ``rows``-key dimension; time and driver memory growth."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import dynsource

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.range(10).toArrow()  # the JVM and Arrow paths warm, outside the measurement
        dimension = spark.range(rows).selectExpr("CAST(id AS INT) AS d_date_sk")
        pool = pa.default_memory_pool()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        arrow_before = pool.max_memory()
        started = time.perf_counter()
        data = dynsource.collect_data(dimension, {"ss_sold_date_sk": "d_date_sk"})
        seconds = time.perf_counter() - started
        rss_growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before  # Linux: kilobytes
        return {
            "rows": rows, "seconds": round(seconds, 2), "kind": data.kind, "payload_bytes": len(data.to_bytes()),
            "driver_peak_rss_growth_mb": round(rss_growth_kb / 1024, 1),
            "driver_arrow_peak_mb": round(((pool.max_memory() or 0) - (arrow_before or 0)) / 2**20, 1),
        }
    finally:
        spark.stop()


def collector_curve() -> list[dict]:
    points = []
    for rows in DIMENSION_ROWS:
        done = subprocess.run([sys.executable, "-m", "benchmarks.curves", "--collector-probe", str(rows)],
                              capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
        point = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"collector {rows:>11,} dimension rows: {point['seconds']:6.2f} s, {point['kind']} payload "
              f"{point['payload_bytes']:,} bytes, driver peak RSS +{point['driver_peak_rss_growth_mb']} MB, "
              f"Arrow peak +{point['driver_arrow_peak_mb']} MB", flush=True)
        points.append(point)
    return points


def draw(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (planning, collector) = plt.subplots(1, 2, figsize=(12, 4.5))
    lines = sorted({(p["filesystem"], p["filter"]) for p in curves["planning"]})
    for filesystem, label in lines:
        points = [p for p in curves["planning"] if (p["filesystem"], p["filter"]) == (filesystem, label)]
        planning.plot([p["partitions"] for p in points], [p["median_s"] for p in points], marker="o",
                      label=f"{filesystem}, {label}")
    planning.axhline(2.0, color="grey", linestyle="--", label="target at 100k (filtered)")
    planning.set(xscale="log", yscale="log", xlabel="partitions", ylabel="planning seconds (median)",
                 title="enumerate + prune + plan")
    planning.legend(fontsize="small")
    points = curves["collector"]
    collector.plot([p["rows"] for p in points], [p["seconds"] for p in points], marker="o", label="seconds")
    collector.set(xscale="log", xlabel="dimension rows (distinct keys)", ylabel="collector seconds",
                  title="collector (default limits)")
    memory = collector.twinx()
    memory.plot([p["rows"] for p in points], [p["driver_peak_rss_growth_mb"] for p in points], marker="s",
                color="C1", label="driver peak RSS growth, MB")
    memory.set_ylabel("MB")
    for p in points:
        collector.annotate(p["kind"], (p["rows"], p["seconds"]), textcoords="offset points", xytext=(4, 4))
    handles = collector.get_legend_handles_labels()[0] + memory.get_legend_handles_labels()[0]
    collector.legend(handles=handles, loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR / "curves", help="cache of the local tables")
    parser.add_argument("--repeat", type=int, default=3, help="plannings per point (default 3)")
    parser.add_argument("--only", choices=("planning", "collector"), help="run one of the two curves")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--collector-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.collector_probe:
        print(json.dumps(collector_probe(args.collector_probe)))
        return
    curves = {"planning": [] if args.only == "collector" else planning_curve(args.data, args.repeat),
              "collector": [] if args.only == "planning" else collector_curve()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "curves.json").write_text(json.dumps(curves, indent=2) + "\n")
    if not args.no_chart and curves["planning"] and curves["collector"]:
        draw(curves, args.out / "curves.png")
    print(f"wrote {args.out / 'curves.json'}")


if __name__ == "__main__":
    main()
