"""Write throughput: a daily-load-like DataFrame written by dynsource and by Spark's Parquet writer.

The same rows (``--rows``, spread over ``--days`` date partitions, six columns)
are written in one session by ``df.write.partitionBy("day").parquet(path)`` and
by ``df.write.format("dynsource").option("partitionColumns", "day DATE")``,
each into a fresh directory, interleaved: an untimed warm-up round, then
``--repeat`` timed rounds (medians). The rows are cached first, so both writers
start from the same data in memory. Every round checks that both tables read
back the same. Output: seconds, the ratio to Spark, and
``benchmarks/results/writes-<rows>x<days>.json``.

    python -m benchmarks.writes --rows 2000000 --days 100 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

import dynsource
from benchmarks.run import RESULTS_DIR, machine, spark_session

MODES = ("spark.write.partitionBy().parquet", "dynsource")


def rows(spark: SparkSession, count: int, days: int) -> DataFrame:
    """``count`` rows over ``days`` days, cached: id, customer, quantity, price (decimal), name and day."""
    df = spark.range(count).selectExpr(
        "id", "CAST(id % 50000 AS INT) AS customer", "CAST(id % 97 AS INT) AS quantity",
        "CAST((id % 10007) / 100 AS DECIMAL(7,2)) AS price", "concat('item-', id % 1000) AS name",
        f"date_add(DATE'2024-01-01', CAST(id % {days} AS INT)) AS day")
    return df.repartition(spark.sparkContext.defaultParallelism).cache()


def write(df: DataFrame, mode: str, path: str) -> None:
    if mode == "dynsource":
        df.write.format("dynsource").option("path", path).option("partitionColumns", "day DATE").option(
            "partitionOverwriteMode", "static").mode("overwrite").save()
    else:
        df.write.partitionBy("day").mode("overwrite").parquet(path)


def run(spark: SparkSession, count: int, days: int, repeat: int = 3) -> dict:
    """Seconds per mode (median of ``repeat`` rounds after a warm-up) and each mode's ratio to Spark's writer."""
    df = rows(spark, count, days)
    df.count()
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    scratch = Path(tempfile.mkdtemp(prefix="dynsource-writes-"))
    try:
        for round_ in range(repeat + 1):
            paths = {}
            for mode in MODES:
                paths[mode] = str(scratch / f"{round_}-{MODES.index(mode)}")
                started = time.perf_counter()
                write(df, mode, paths[mode])
                if round_:
                    seconds[mode].append(time.perf_counter() - started)
            _check_equal(spark, paths)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        df.unpersist()
    medians = {mode: statistics.median(times) for mode, times in seconds.items()}
    spark_s = medians[MODES[0]]
    return {"rows": count, "days": days, "repeat": repeat, "seconds": medians,
            "ratio_to_spark": {mode: round(value / spark_s, 3) for mode, value in medians.items()}}


def _check_equal(spark: SparkSession, paths: dict[str, str]) -> None:
    counts = {mode: spark.read.parquet(path).selectExpr("count(*)", "sum(id)", "sum(price)", "count(DISTINCT day)")
              .collect()[0] for mode, path in paths.items()}
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"The writers' tables differ: {counts}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    spark = spark_session()
    dynsource.register(spark)
    result = {**run(spark, args.rows, args.days, args.repeat), "machine": machine(spark)}
    for mode in MODES:
        print(f"{mode:36} {result['seconds'][mode]:8.2f} s  {result['ratio_to_spark'][mode]:6.2f}x")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"writes-{args.rows}x{args.days}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
