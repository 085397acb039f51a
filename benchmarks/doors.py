"""The doors to a registered table, against plain Spark on the same files, in one local session.

A user reaches a registered dynsource table by SQL text (``dynsource.sql``, here through a temporary view over
the table, as teams share tables) or by DataFrame code (``dynsource.table``, or Spark's ``spark.table``, which
reads it by the Python reader). Each is paired with what the user would otherwise write on
``spark.read.parquet`` of the same files, made once (warm):

- ``dynsource.sql on a view``: ``CREATE TEMP VIEW v AS SELECT * FROM <table>``, the query on ``v``;
- ``dynsource.sql on a DataFrame's view``: ``spark.table(<table>).createOrReplaceTempView(v)``, the query on ``v``;
- ``spark.sql warm view``: the query on a temporary view of ``spark.read.parquet``;
- ``dynsource.table DataFrame``: ``dynsource.table(spark, name)`` joined with the filtered ``date_dim``, a new
  DataFrame each run;
- ``spark.table DataFrame``: ``spark.table(name)`` joined alike (the Python reader, the whole table);
- ``DataFrame warm``: the same join on one ``spark.read.parquet`` DataFrame.

Every query runs in every mode, interleaved, after one untimed round; figures are medians of ``--repeat`` runs.
Run ``python -m benchmarks.doors --scale 1 --repeat 3``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from benchmarks import star as star_schema
from benchmarks.run import QUERIES, ordered, print_modes, save_report, star_arguments

MODES = ("dynsource.sql on a view", "dynsource.sql on a DataFrame's view", "spark.sql warm view",
         "dynsource.table DataFrame", "spark.table DataFrame", "DataFrame warm")
PAIRS = {"dynsource.sql on a view": "spark.sql warm view", "dynsource.sql on a DataFrame's view": "spark.sql warm view",
         "dynsource.table DataFrame": "DataFrame warm", "spark.table DataFrame": "DataFrame warm"}
QUERY_NAMES = ("month", "years")
TABLE = "store_sales_doors"


def _joined(spark, fact, query):
    """The query of ``query`` as DataFrame code on ``fact``."""
    from pyspark.sql import functions as F

    dates = spark.table("date_dim").where(query.where)
    return fact.join(dates, fact.ss_sold_date_sk == dates.d_date_sk).agg(
        F.count("*").alias("sales"), F.sum("ss_sales_price").alias("revenue"))


def run_doors(spark, star: star_schema.Star, queries, modes=MODES, repeat: int = 3) -> dict:
    """Seconds and results per query and mode; raises when two modes disagree."""
    import dynsource

    dynsource.register(spark)
    spark.read.parquet(str(star.date_dim)).createOrReplaceTempView("date_dim")
    warm = spark.read.parquet(str(star.store_sales))
    warm.createOrReplaceTempView("store_sales_warm")
    dynsource.register_table(spark, TABLE, path=str(star.store_sales), definitions=tempfile.mkdtemp(), replace=True)
    spark.sql(f"CREATE OR REPLACE TEMP VIEW store_sales_shared AS SELECT * FROM {TABLE}")
    spark.table(TABLE).createOrReplaceTempView("store_sales_frame")
    runs = {
        "dynsource.sql on a view": lambda q: dynsource.sql(spark, q.sql("store_sales_shared")),
        "dynsource.sql on a DataFrame's view": lambda q: dynsource.sql(spark, q.sql("store_sales_frame")),
        "spark.sql warm view": lambda q: spark.sql(q.sql("store_sales_warm")),
        "dynsource.table DataFrame": lambda q: _joined(spark, dynsource.table(spark, TABLE), q),
        "spark.table DataFrame": lambda q: _joined(spark, spark.table(TABLE), q),
        "DataFrame warm": lambda q: _joined(spark, warm, q),
    }
    report = {"scale": star.scale, "rows": star.rows, "repeat": repeat, "queries": {}}
    for query in queries:
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        results: dict[str, tuple] = {}
        for round_ in range(repeat + 1):
            for mode in ordered(list(modes), round_):
                started = time.perf_counter()
                row = tuple(runs[mode](query).first())
                seconds = time.perf_counter() - started
                if results.setdefault(mode, row) != results[modes[0]]:
                    raise RuntimeError(f"{query.name}: {mode} returned {row}, {modes[0]} {results[modes[0]]}")
                if round_:
                    times[mode].append(seconds)
        medians = {mode: statistics.median(seconds) for mode, seconds in times.items()}
        ratios = {f"{mode} / {base}": round(medians[mode] / medians[base], 3)
                  for mode, base in PAIRS.items() if mode in medians and base in medians}
        report["queries"][query.name] = {"description": query.description, "median_s": medians, "runs_s": times,
                                         "ratios": ratios, "result": list(results[modes[0]])}
    return report


def main(argv: list[str] | None = None) -> None:
    args = star_arguments(__doc__.splitlines()[0], QUERY_NAMES, MODES).parse_args(argv)
    star = star_schema.generate(args.scale, args.seed, args.data)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from benchmarks.run import spark_session

    spark = spark_session()
    by_name = {q.name: q for q in QUERIES}
    report = run_doors(spark, star, [by_name[n] for n in args.queries.split(",")], tuple(args.modes.split(",")),
                       args.repeat)
    print_modes(report)
    save_report(report, args.out, f"doors-star-scale{args.scale:g}.json")


if __name__ == "__main__":
    main()
