"""A batch job's first query: each run a fresh Python process and Spark session with a Hive catalog.

Daily pipelines are fresh processes (``spark-submit``, a new session, a few queries, exit): their first query
on a big partitioned table is where Spark is slowest, as it lists every partition before its DPP prunes. Each
run here is a new process with a local[2] session whose Hive catalog is an embedded Derby database (made once,
beside the generated data); it times its first query from the session's start (excluded: the session's state
and its connection to the metastore, made by a ``SHOW DATABASES``) to the first row, ``dynsource.register``
included:

- ``catalog table``: ``spark.sql`` on Spark's own table (``CREATE TABLE ... USING parquet LOCATION``,
  ``MSCK REPAIR TABLE``: every partition in the metastore);
- ``path``: ``spark.sql`` on a temporary view of ``spark.read.parquet(path)`` made in the run;
- ``dynsource.sql``: the query on the table registered with ``dynsource.register_table`` (after
  ``dynsource.register``), as it comes;
- ``dynsource.sql collect``: the same with ``spark.dynsource.partitionPruning`` = ``collect``;
- ``kept partitions named``: the floor of any reader that prunes and lets Spark read: ``spark.sql`` on a
  temporary view of ``spark.read.parquet`` given exactly the partitions the query keeps (their keys computed
  beforehand, in another process), as if an oracle had pruned at no cost.

``date_dim`` is a catalog table in every mode. Modes run interleaved, ``--repeat`` processes each; figures are
medians, with each mode's ratio to the catalog table. Run ``python -m benchmarks.firstquery --scale 1 --repeat 3``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import star as star_schema
from benchmarks.run import QUERIES, ordered, print_modes, save_report, star_arguments

MODES = ("catalog table", "path", "dynsource.sql", "dynsource.sql collect", "kept partitions named")
QUERY_NAMES = ("month", "years")
CATALOG, REGISTERED = "store_sales_catalog", "store_sales_dyn"
_READY = "ready"


def hive_session(directory: Path):
    """A local[2] session whose Hive catalog (Derby) and warehouse live in ``directory``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("DYNSOURCE_FILTER_STORE", tempfile.mkdtemp(prefix="dynsource-bench-filters-"))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dynsource-first-query")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.warehouse.dir", str(directory / "warehouse"))
             .config("javax.jdo.option.ConnectionURL",
                     f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true")
             .config("spark.driver.extraJavaOptions", f"-Dderby.stream.error.file={directory / 'derby.log'}")
             .enableHiveSupport().getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def catalog_directory(star: star_schema.Star) -> Path:
    """Where the star's Hive catalog lives, made once (with every partition of the fact in it)."""
    directory = star.root / "hive-catalog"
    if not (directory / _READY).exists():
        _child(star, directory, "setup", "")
        (directory / _READY).write_text("")
    return directory


def _setup(spark, star: star_schema.Star, directory: Path) -> None:
    import dynsource

    dynsource.register(spark)
    spark.sql(f"CREATE TABLE IF NOT EXISTS date_dim USING parquet LOCATION '{star.date_dim}'")
    # The partitioning is inferred from the directories; MSCK REPAIR puts every partition in the metastore.
    spark.sql(f"CREATE TABLE IF NOT EXISTS {CATALOG} USING parquet LOCATION '{star.store_sales}'")
    spark.sql(f"MSCK REPAIR TABLE {CATALOG}")
    # Its definition in the default place (beside the warehouse), where dynsource.register finds it in a new process.
    dynsource.register_table(spark, REGISTERED, path=str(star.store_sales), replace=True)


def _kept_keys(spark, query) -> list[int]:
    """The date keys ``query`` keeps, by Spark on the catalog's ``date_dim`` (in a process of its own)."""
    return sorted(row[0] for row in spark.sql(f"SELECT d_date_sk FROM date_dim WHERE {query.where}").collect())


def _first_query(spark, star: star_schema.Star, mode: str, query, kept: list[int]) -> tuple:
    """The first row of ``query`` in ``mode``, from a session that ran nothing yet."""
    if mode == "catalog table":
        return tuple(spark.sql(query.sql(CATALOG)).first())
    if mode == "path":
        spark.read.parquet(str(star.store_sales)).createOrReplaceTempView("store_sales_path")
        return tuple(spark.sql(query.sql("store_sales_path")).first())
    if mode == "kept partitions named":
        root = str(star.store_sales)
        paths = [f"{root}/{star_schema.KEY}={key}" for key in kept]
        spark.read.option("basePath", root).parquet(*paths).createOrReplaceTempView("store_sales_kept")
        return tuple(spark.sql(query.sql("store_sales_kept")).first())
    import dynsource

    dynsource.register(spark)
    if mode == "dynsource.sql collect":
        spark.conf.set("spark.dynsource.partitionPruning", "collect")
    return tuple(dynsource.sql(spark, query.sql(REGISTERED)).first())


def _child(star: star_schema.Star, directory: Path, mode: str, query: str, kept: list[int] | None = None) -> dict:
    """Run ``mode`` (or the setup, or the kept keys' computation) in a new process; its report."""
    argv = [sys.executable, "-m", "benchmarks.firstquery", "--child", mode, query, "--catalog", str(directory),
            "--scale", f"{star.scale:g}", "--seed", str(star.seed), "--data", str(star.root.parent),
            "--kept", ",".join(map(str, kept or []))]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {query}: the run failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_child(star: star_schema.Star, directory: Path, mode: str, query_name: str, kept: list[int]) -> dict:
    """One run in this (fresh) process: the session's start and the first query, timed apart."""
    started = time.perf_counter()
    spark = hive_session(directory)
    query = {q.name: q for q in QUERIES}[query_name] if query_name else None
    if mode == "setup":
        _setup(spark, star, directory)
        return {}
    if mode == "kept keys":
        return {"kept": _kept_keys(spark, query)}
    # The session's start: its state and its connection to the metastore, which every mode's first query would
    # otherwise make (3-5 s together on this machine), paid by whichever call comes first.
    spark.sql("SHOW DATABASES").collect()
    session_s = time.perf_counter() - started
    import dynsource  # noqa: F401 -- a job imports it at its top, before its session runs anything

    started = time.perf_counter()
    row = _first_query(spark, star, mode, query, kept)
    return {"session_s": session_s, "seconds": time.perf_counter() - started, "row": [str(v) for v in row]}


def run_first_queries(star: star_schema.Star, queries, modes=MODES, repeat: int = 3) -> dict:
    """Seconds per query and mode (each run a fresh process); raises when two modes disagree."""
    directory = catalog_directory(star)
    report = {"scale": star.scale, "rows": star.rows, "repeat": repeat, "queries": {}}
    for query in queries:
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        results: dict[str, list] = {}
        kept = _child(star, directory, "kept keys", query.name)["kept"] if "kept partitions named" in modes else None
        for round_ in range(repeat):
            for mode in ordered(list(modes), round_):
                run = _child(star, directory, mode, query.name, kept)
                if results.setdefault(mode, run["row"]) != results[modes[0]]:
                    raise RuntimeError(f"{query.name}: {mode} returned {run['row']}, {modes[0]} {results[modes[0]]}")
                times[mode].append(run["seconds"])
        medians = {mode: statistics.median(seconds) for mode, seconds in times.items()}
        ratios = {f"{mode} / catalog table": round(medians[mode] / medians["catalog table"], 3)
                  for mode in modes if mode != "catalog table" and "catalog table" in medians}
        report["queries"][query.name] = {"description": query.description, "median_s": medians, "runs_s": times,
                                         "ratios": ratios, "result": results[modes[0]]}
    return report


def main(argv: list[str] | None = None) -> None:
    parser = star_arguments(__doc__.splitlines()[0], QUERY_NAMES, MODES)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "QUERY"), help="run one mode in this process")
    parser.add_argument("--catalog", type=Path, help="the Hive catalog's directory (with --child)")
    parser.add_argument("--kept", default="", help="the keys the query keeps, comma-separated (with --child)")
    args = parser.parse_args(argv)
    star = star_schema.generate(args.scale, args.seed, args.data)
    if args.child:
        kept = [int(key) for key in args.kept.split(",") if key]
        print(json.dumps(run_child(star, args.catalog, *args.child, kept)))
        return
    by_name = {q.name: q for q in QUERIES}
    report = run_first_queries(star, [by_name[n] for n in args.queries.split(",")], tuple(args.modes.split(",")),
                               args.repeat)
    print_modes(report)
    save_report(report, args.out, f"firstquery-star-scale{args.scale:g}.json")


if __name__ == "__main__":
    main()
