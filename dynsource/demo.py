"""The demo: a small TPC-DS-like star schema, joined three ways (dynsource + DPP, dynsource, native)."""

from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FIRST_DATE = datetime.date(1998, 1, 1)
FIRST_DATE_SK = 2450815  # TPC-DS surrogate key of 1998-01-01
DAYS = 1826
SALES_ROWS = 200_000
QUERY = """
SELECT COUNT(*) AS sales, SUM(ss_sales_price) AS revenue
FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk
WHERE d_year = 2000 AND d_moy = 12
"""


def star_schema_exists(root: Path) -> bool:
    """Whether :func:`write_star_schema` finished writing in ``root`` (an interrupted write is redone)."""
    return (root / ".complete").exists()


def write_star_schema(root: Path, *, sales_rows: int = SALES_ROWS, seed: int = 7) -> tuple[str, str]:
    """Write ``date_dim`` and ``store_sales`` (Hive-partitioned by ss_sold_date_sk, 0.1% null keys); their absolute
    paths (Spark resolves a relative one against the directory its JVM started in)."""
    root = Path(root).resolve()
    date_dim, store_sales = root / "date_dim", root / "store_sales"
    if star_schema_exists(root):
        return str(date_dim), str(store_sales)
    rng = np.random.default_rng(seed)
    dates = [FIRST_DATE + datetime.timedelta(days=i) for i in range(DAYS)]
    date_dim.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({
            "d_date_sk": pa.array(range(FIRST_DATE_SK, FIRST_DATE_SK + DAYS), pa.int32()),
            "d_date": pa.array(dates),
            "d_year": pa.array([d.year for d in dates], pa.int32()),
            "d_moy": pa.array([d.month for d in dates], pa.int32()),
        }),
        date_dim / "part-0.parquet",
    )
    keys = rng.integers(FIRST_DATE_SK, FIRST_DATE_SK + DAYS, sales_rows).astype(np.int32)
    cents = rng.integers(100, 20_000, sales_rows)
    sales = pa.table({
        "ss_item_sk": pa.array(rng.integers(1, 18_000, sales_rows).astype(np.int32)),
        "ss_quantity": pa.array(rng.integers(1, 100, sales_rows).astype(np.int32)),
        # Decimal, like TPC-DS, so that every engine's SUM is exact and the results compare equal.
        "ss_sales_price": pa.array([f"{c // 100}.{c % 100:02d}" for c in cents]).cast(pa.decimal128(7, 2)),
        "ss_sold_date_sk": pa.array(keys, mask=rng.random(sales_rows) < 0.001),
    })
    # Sorted by key, each partition is written as one file, as a batch job's partitioned write would.
    sales = sales.sort_by([("ss_sold_date_sk", "ascending")])
    pq.write_to_dataset(sales, store_sales, partition_cols=["ss_sold_date_sk"], max_partitions=DAYS + 1)
    (root / ".complete").touch()
    return str(date_dim), str(store_sales)


def progress(message: str) -> None:
    # On stderr, ahead of Spark's own start-up lines: the results on stdout stay as they were.
    print(f"dynsource demo: {message}", file=sys.stderr, flush=True)


def run(data_dir: str = "sample_data") -> None:
    """Run the demo query three ways and print results, pruning figures and times."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import dynsource

    star = Path(data_dir).resolve() / "star"
    if star_schema_exists(star):
        progress(f"using the sample star schema in {star}")
    else:
        progress(f"generating the sample star schema in {star} ({SALES_ROWS:,} sales rows) ...")
    date_dim_path, store_sales_path = write_star_schema(star)
    progress("starting a local Spark session (local[*]) ...")
    spark = (SparkSession.builder.master("local[*]").appName("dynsource-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    dynsource.register(spark)
    spark.read.parquet(date_dim_path).createOrReplaceTempView("date_dim")
    spark.sql("SELECT COUNT(*) FROM date_dim").collect()  # warm up the JVM and Python workers before timing

    def once(make_fact) -> tuple[tuple, float]:
        started = time.perf_counter()
        make_fact().createOrReplaceTempView("store_sales")
        return tuple(spark.sql(QUERY).first()), time.perf_counter() - started

    def timed(label: str, make_fact) -> list[tuple]:
        # The first run of a mode also starts Spark's Python workers and JIT-compiles; time the second.
        first, _ = once(make_fact)
        row, seconds = once(make_fact)
        print(f"{label:<34} sales={row[0]:>6}  revenue={row[1]:>14.2f}  {seconds:6.2f} s")
        return [first, row]

    print(f"store_sales: {store_sales_path}\nquery: WHERE d_year = 2000 AND d_moy = 12")
    print("times: end to end (collect + scan + join), second of two runs\n")
    handles = []

    def pruned():
        dimension = spark.sql("SELECT d_date_sk FROM date_dim WHERE d_year = 2000 AND d_moy = 12")
        handles.append(dynsource.collect(dimension, {"ss_sold_date_sk": "d_date_sk"}))
        return spark.read.format("dynsource").option("path", store_sales_path).option(
            "dynamicFilter", handles[-1]).load()

    results = [
        *timed("dynsource + dynamic filter", pruned),
        *timed("dynsource, no filter", lambda: spark.read.format("dynsource").option("path", store_sales_path).load()),
        *timed("spark.read.parquet (native DPP)", lambda: spark.read.parquet(store_sales_path)),
    ]
    report = dynsource.scan_report(handles[-1])
    total_files = sum(1 for p in Path(store_sales_path).rglob("*.parquet"))
    total_bytes = sum(p.stat().st_size for p in Path(store_sales_path).rglob("*.parquet"))
    print(f"\npruning report (dynsource explain {report.handle}):")
    print(report)
    print(f"  of the table's {total_files:,} files and {total_bytes:,} bytes")
    print("results equal: " + ("yes" if len(set(results)) == 1 else f"NO {results}"))
    spark.stop()
    if len(set(results)) != 1:
        raise SystemExit(1)
