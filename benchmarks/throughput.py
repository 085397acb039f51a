"""Read throughput over large files: Spark's Parquet reader, dynsource's two readers, a minimal Python source.

Every byte a Python data source returns crosses from a Python worker to the JVM
as Arrow batches, and pyspark 4.0-4.3 give a Python source no column pruning.
:class:`MinimalParquet` (a dozen lines: each file read whole by pyarrow) is the
floor of that path, which no Python source goes below; dynsource's Python
reader is measured against it, and Spark's reader (what ``dynsource.sql`` uses
where Spark can open the files) against ``spark.read.parquet`` on the same files.

Each query is a full scan (every column aggregated) or a one-column scan. The
modes run interleaved in one session, an untimed warm-up round and then
``--repeat`` timed rounds (medians); the run fails unless every mode returns the
same row. Output: a table of seconds and ratios to ``spark.read.parquet`` and
``benchmarks/results/throughput-<files>x<rows>.json``.

    python -m benchmarks.throughput --files 16 --rows 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

import dynsource
from benchmarks.run import RESULTS_DIR, machine, spark_session
from benchmarks.star import DEFAULT_DATA_DIR

QUERIES = {  # each query's aggregates
    "full scan": ("count(*) n", "sum(id) id", "sum(quantity) quantity", "round(sum(price), 2) price",
                  "max(name) name", "max(day) day"),
    "one column": ("round(sum(price), 2) price",),
}
MODES = ("spark.read.parquet", "dynsource.sql, Spark's reader", "dynsource.sql, Python reader",
         "format('dynsource')", "minimal Python source")

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers need not import this module


def generate(files: int, rows: int, data_dir: Path = DEFAULT_DATA_DIR) -> Path:
    """``files`` Parquet files of ``rows`` rows each (five columns), Hive-partitioned by ``part``, once."""
    root = Path(data_dir).resolve() / f"throughput-{files}x{rows}"
    if (root / "_SUCCESS").exists():
        return root
    rng = np.random.default_rng(7)
    for part in range(files):
        ids = np.arange(part * rows, (part + 1) * rows, dtype=np.int64)
        table = pa.table({
            "id": ids,
            "quantity": rng.integers(1, 100, rows, dtype=np.int32),
            "price": np.round(rng.uniform(0, 500, rows), 2),
            "name": pa.array([f"item-{i % 10_000:05d}" for i in ids]),
            "day": pa.array(rng.integers(10_000, 12_000, rows, dtype=np.int32)).cast(pa.date32()),
        })
        (root / f"part={part}").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / f"part={part}" / "data.parquet")
    (root / "_SUCCESS").write_text("")  # hidden from readers, as Spark's own marker
    return root


class _File(InputPartition):
    def __init__(self, path: str, part: int) -> None:
        self.path, self.part = path, part


class MinimalParquet(DataSource):
    """The least a Python source does: each file read whole by pyarrow, its partition value appended."""

    @classmethod
    def name(cls) -> str:
        return "minimal_parquet"

    def reader(self, schema):
        return _MinimalReader(self.options["path"])


class _MinimalReader(DataSourceReader):
    def __init__(self, root: str) -> None:
        self.root = root

    def partitions(self) -> list[_File]:
        paths = sorted(Path(self.root).glob("*/*.parquet"))
        return [_File(str(path), int(path.parent.name.split("=")[1])) for path in paths]

    def read(self, partition: _File) -> Iterator[pa.RecordBatch]:
        for batch in pq.ParquetFile(partition.path).iter_batches():
            yield batch.append_column("part", pa.array([partition.part] * batch.num_rows, pa.int32()))


TABLES = {"throughput_spark": "auto", "throughput_python": "python"}  # registered table -> its reader option


def modes(spark: SparkSession, root: Path, definitions: str) -> dict[str, Callable[[Sequence[str]], tuple]]:
    """Each mode: a function of a query's aggregates returning its one result row."""
    dynsource.register(spark)
    native = spark.read.parquet(str(root))  # one DataFrame: its files listed once, as in a warm session
    for table, reader in TABLES.items():
        dynsource.register_table(spark, table, path=str(root), definitions=definitions, replace=True, reader=reader)
    spark.dataSource.register(MinimalParquet)
    minimal = spark.read.format("minimal_parquet").schema(native.schema).option("path", str(root)).load()
    connector = spark.read.format("dynsource").option("path", str(root)).load()

    def of_frame(df: DataFrame) -> Callable[[Sequence[str]], tuple]:
        return lambda aggregates: tuple(df.selectExpr(*aggregates).first())

    def of_table(table: str) -> Callable[[Sequence[str]], tuple]:
        return lambda aggregates: tuple(dynsource.sql(spark, f"SELECT {', '.join(aggregates)} FROM {table}").first())

    return {
        "spark.read.parquet": of_frame(native),
        "dynsource.sql, Spark's reader": of_table("throughput_spark"),
        "dynsource.sql, Python reader": of_table("throughput_python"),
        "format('dynsource')": of_frame(connector),
        "minimal Python source": of_frame(minimal),
    }


def run(spark: SparkSession, root: Path, repeat: int) -> dict:
    """Seconds per query and mode (median of ``repeat`` after a warm-up), their ratios to spark.read.parquet."""
    definitions = tempfile.mkdtemp(prefix="throughput-definitions-")
    try:
        return _timed(modes(spark, root, definitions), repeat)
    finally:
        for table in TABLES:
            dynsource.drop_table(spark, table, definitions=definitions)


def _timed(timed: dict[str, Callable[[Sequence[str]], tuple]], repeat: int) -> dict:
    results = {}
    for query, aggregates in QUERIES.items():
        seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
        rows = {}
        for round_number in range(repeat + 1):
            for mode in MODES:
                started = time.perf_counter()
                rows[mode] = timed[mode](aggregates)
                if round_number:  # the first round warms up
                    seconds[mode].append(time.perf_counter() - started)
        if len(set(rows.values())) != 1:
            raise AssertionError(f"{query}: the modes disagree: {rows}")
        medians = {mode: statistics.median(times) for mode, times in seconds.items()}
        results[query] = {"seconds": medians, "ratio_to_spark": {
            mode: round(value / medians["spark.read.parquet"], 2) for mode, value in medians.items()}}
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per file (default 1000000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    root = generate(args.files, args.rows, args.data)
    spark = spark_session()
    try:
        report = {"files": args.files, "rows_per_file": args.rows, "repeat": args.repeat,
                  "bytes": sum(path.stat().st_size for path in root.glob("*/*.parquet")),
                  "machine": machine(spark), "queries": run(spark, root, args.repeat)}
    finally:
        spark.stop()
    for query, result in report["queries"].items():
        print(f"{query}: " + ", ".join(f"{mode} {result['seconds'][mode]:.2f} s ({result['ratio_to_spark'][mode]}x)"
                                       for mode in MODES))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"throughput-{args.files}x{args.rows}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
