"""The user flows run against a real cluster, as a driver program: ``python -m tests.cluster_flows``.

One process holds one classic SparkContext, so the test suite (whose own session
is ``local[2]``) runs these flows in a process of their own: with ``--master``
as a classic driver of the standalone cluster, with ``--remote`` as a Spark
Connect client. Each flow returns the facts the tests assert on (rows compared
with ``spark.read.parquet`` inside the flow, figures of the scan report), and
all of them are written as JSON to ``--out``; a flow that raises records its
error instead, so one failure does not hide the others.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import io
import json
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FIRST_DAY, DAYS, DAYS_PER_MONTH = 2451545, 60, 20
CUSTOMERS, ROWS_PER_DAY = 500, 200
MONTH = 2  # 20 of the 60 day partitions
STATE = "TN"  # 50 of the 500 customers

Flow = Callable[..., dict]


def write_tables(root: Path) -> dict[str, str]:
    """store_sales partitioned by ss_sold_date_sk (one file of 200 rows per day), date_dim, customer."""
    days = range(FIRST_DAY, FIRST_DAY + DAYS)
    sales = pa.table({
        "ss_customer_sk": pa.array([(i * 7919) % CUSTOMERS + 1 for i in range(DAYS * ROWS_PER_DAY)], pa.int32()),
        "ss_sales_price": pa.array([f"{i % 997}.{i % 100:02d}" for i in range(DAYS * ROWS_PER_DAY)]).cast(
            pa.decimal128(7, 2)),
        "ss_sold_date_sk": pa.array([day for day in days for _ in range(ROWS_PER_DAY)], pa.int32()),
    })
    pq.write_to_dataset(sales, root / "store_sales", partition_cols=["ss_sold_date_sk"])
    (root / "date_dim").mkdir()
    pq.write_table(pa.table({
        "d_date_sk": pa.array(days, pa.int32()),
        "d_moy": pa.array([(day - FIRST_DAY) // DAYS_PER_MONTH + 1 for day in days], pa.int32()),
    }), root / "date_dim" / "part-0.parquet")
    (root / "customer").mkdir()
    pq.write_table(pa.table({
        "c_customer_sk": pa.array(range(1, CUSTOMERS + 1), pa.int32()),
        "c_state": pa.array([STATE if sk % 10 == 0 else "CA" for sk in range(1, CUSTOMERS + 1)]),
    }), root / "customer" / "part-0.parquet")
    return {name: str(root / name) for name in ("store_sales", "date_dim", "customer")}


def rows(df) -> list:
    return sorted((tuple(row) for row in df.collect()), key=repr)


def report_facts(report) -> dict:
    return {key: value for key, value in dataclasses.asdict(report).items() if not key.endswith("_ms")}


def month_join(spark, fact_df, paths: dict[str, str]):
    dim = spark.read.parquet(paths["date_dim"]).where(f"d_moy = {MONTH}")
    return fact_df.join(dim, fact_df.ss_sold_date_sk == dim.d_date_sk).groupBy("d_moy").agg(
        {"ss_sales_price": "sum", "*": "count"})


def demo_join(spark, dynsource, paths):
    dim = spark.read.parquet(paths["date_dim"]).where(f"d_moy = {MONTH}")
    handle = dynsource.collect(dim, {"ss_sold_date_sk": "d_date_sk"})
    fact_df = spark.read.format("dynsource").option("path", paths["store_sales"]).option("dynamicFilter", handle).load()
    native = month_join(spark, spark.read.parquet(paths["store_sales"]), paths)
    return {"equal": rows(month_join(spark, fact_df, paths)) == rows(native),
            "report": report_facts(dynsource.scan_report(handle))}


def row_filter(spark, dynsource, paths):
    customers = spark.read.parquet(paths["customer"]).where(f"c_state = '{STATE}'")
    handle = dynsource.collect(customers, {"ss_customer_sk": "c_customer_sk"})
    fact_df = spark.read.format("dynsource").option("path", paths["store_sales"]).option("dynamicFilter", handle).load()
    native = spark.read.parquet(paths["store_sales"])
    matching = native.join(customers, native.ss_customer_sk == customers.c_customer_sk, "left_semi")
    joined = fact_df.join(customers, fact_df.ss_customer_sk == customers.c_customer_sk)
    native_joined = native.join(customers, native.ss_customer_sk == customers.c_customer_sk)
    return {"equal": rows(joined) == rows(native_joined), "scan_rows": fact_df.count(),
            "matching_rows": matching.count(), "table_rows": native.count(),
            "report": report_facts(dynsource.scan_report(handle))}


def dynamic_join(spark, dynsource, paths):
    dim = spark.read.parquet(paths["date_dim"]).where(f"d_moy = {MONTH}")
    joined = dynsource.dynamic_join(paths["store_sales"], dim, {"ss_sold_date_sk": "d_date_sk"})
    native = spark.read.parquet(paths["store_sales"])
    equal = rows(joined) == rows(native.join(dim, native.ss_sold_date_sk == dim.d_date_sk))
    return {"equal": equal, "report": report_facts(dynsource.scan_report(joined))}


def catalog_sql(spark, dynsource, paths):
    dynsource.register_table(spark, "cluster_sales", path=paths["store_sales"], replace=True)
    spark.read.parquet(paths["date_dim"]).createOrReplaceTempView("cluster_dates")
    spark.read.parquet(paths["store_sales"]).createOrReplaceTempView("cluster_sales_native")
    handle = dynsource.collect(spark.sql(f"SELECT d_date_sk FROM cluster_dates WHERE d_moy = {MONTH}"),
                               {"ss_sold_date_sk": "d_date_sk"})
    query = """SELECT d_moy, count(*), sum(ss_sales_price) FROM {fact} s
               JOIN cluster_dates d ON s.ss_sold_date_sk = d.d_date_sk WHERE d.d_moy = {month} GROUP BY d_moy"""
    pruned = dynsource.sql(spark, query.format(fact=f"cluster_sales WITH ('dynamicFilter' = '{handle}')",
                                               month=MONTH))
    native = spark.sql(query.format(fact="cluster_sales_native", month=MONTH))
    return {"equal": rows(pruned) == rows(native), "report": report_facts(dynsource.scan_report(handle))}


def auto_dpp(spark, dynsource, paths):
    """The plain query through dynsource.sql: it finds the join and prunes it itself."""
    dynsource.register_table(spark, "cluster_auto_sales", path=paths["store_sales"], replace=True)
    spark.read.parquet(paths["date_dim"]).createOrReplaceTempView("cluster_dates")
    spark.read.parquet(paths["store_sales"]).createOrReplaceTempView("cluster_sales_native")
    query = """SELECT d_moy, count(*), sum(ss_sales_price) FROM {fact} s
               JOIN cluster_dates d ON s.ss_sold_date_sk = d.d_date_sk WHERE d.d_moy = {month} GROUP BY d_moy"""
    native = spark.sql(query.format(fact="cluster_sales_native", month=MONTH))
    # By default Spark's own DPP prunes a local table that Spark's reader reads; dynsource collects elsewhere.
    by_spark = dynsource.sql(spark, query.format(fact="cluster_auto_sales", month=MONTH))
    equal = rows(by_spark) == rows(native)
    spark.conf.set("spark.dynsource.partitionPruning", "collect")
    pruned = dynsource.sql(spark, query.format(fact="cluster_auto_sales", month=MONTH))
    equal = equal and rows(pruned) == rows(native)
    (scan,) = dynsource.scan_report(pruned).scans()
    # Only a DataFrame derived from it left: on Spark Connect the dimension's checkpoint must outlive the result.
    derived = dynsource.sql(spark, query.format(fact="cluster_auto_sales", month=MONTH)).where("true")
    gc.collect()
    equal = equal and rows(derived) == rows(native)
    # A dimension nothing filters is not collected; one whose DataFrame filters it is, seen in its analysed plan.
    spark.read.parquet(paths["date_dim"]).where(f"d_moy = {MONTH}").createOrReplaceTempView("cluster_month")
    unfiltered = {}
    for dates in ("cluster_dates", "cluster_month"):
        plain = (f"SELECT d_moy, count(*) FROM {{fact}} s JOIN {dates} d ON s.ss_sold_date_sk = d.d_date_sk "
                 "GROUP BY d_moy")
        df = dynsource.sql(spark, plain.format(fact="cluster_auto_sales"))
        equal = equal and rows(df) == rows(spark.sql(plain.format(fact="cluster_sales_native")))
        report = dynsource.scan_report(df)
        unfiltered[dates] = ("nothing filters the dimension" in str(report),
                             any(a.handle is not None for a in report.assignments))
    return {"equal": equal, "report": report_facts(scan),
            "unfiltered": unfiltered == {"cluster_dates": (True, False), "cluster_month": (False, True)}}


def late_filter(spark, dynsource, paths):
    dim = spark.read.parquet(paths["date_dim"]).where(f"d_moy = {MONTH}")
    handle = dynsource.collect(dim, {"ss_sold_date_sk": "d_date_sk"}, wait=False)
    fact_df = (spark.read.format("dynsource").option("path", paths["store_sales"])
               .option("dynamicFilter", handle).option("dynamicFilterWaitMs", "60000").load())
    native = month_join(spark, spark.read.parquet(paths["store_sales"]), paths)
    return {"equal": rows(month_join(spark, fact_df, paths)) == rows(native),
            "report": report_facts(dynsource.scan_report(handle))}


def s3_store(spark, dynsource, paths):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        credentials = {"key": "testing", "secret": "testing"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="filters")
        options = {**credentials, "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        store = "s3://filters/dynsource"
        customers = spark.read.parquet(paths["customer"]).where(f"c_state = '{STATE}'")
        handle = dynsource.collect(customers, {"ss_customer_sk": "c_customer_sk"}, store=store,
                                   storage_options=options)
        fact_df = (spark.read.format("dynsource").option("path", paths["store_sales"])
                   .option("dynamicFilter", handle).option("filterStore", store)
                   .option("filterStoreOptions", json.dumps(options)).load())
        native = spark.read.parquet(paths["store_sales"])
        equal = rows(fact_df.join(customers, fact_df.ss_customer_sk == customers.c_customer_sk)) == rows(
            native.join(customers, native.ss_customer_sk == customers.c_customer_sk))
        report = dynsource.scan_report(handle, store, storage_options=options)
        return {"equal": equal, "scan_rows": fact_df.count(), "report": report_facts(report)}
    finally:
        server.stop()


def readers(spark, dynsource, paths):
    """A registered table read by each reader through dynsource.sql: one DataFrame's actions again, rows equal
    Spark's, the report names the reader; a table written between two queries is read whole by the second."""
    spark.conf.set("spark.dynsource.partitionPruning", "collect")
    spark.read.parquet(paths["date_dim"]).createOrReplaceTempView("cluster_dates")
    spark.read.parquet(paths["store_sales"]).createOrReplaceTempView("cluster_sales_native")
    query = """SELECT d_moy, count(*), sum(ss_sales_price) FROM {fact} s
               JOIN cluster_dates d ON s.ss_sold_date_sk = d.d_date_sk WHERE d.d_moy = {month} GROUP BY d_moy"""
    native = rows(spark.sql(query.format(fact="cluster_sales_native", month=MONTH)))
    result = {}
    for reader in ("auto", "python"):
        dynsource.register_table(spark, f"cluster_{reader}_sales", path=paths["store_sales"], reader=reader,
                                 replace=True)
        pruned = dynsource.sql(spark, query.format(fact=f"cluster_{reader}_sales", month=MONTH))
        equal = rows(pruned) == rows(pruned) == native
        (scan,) = dynsource.scan_report(pruned).scans()  # the Python reader's scan is planned by the first action
        result[reader] = {"equal": equal, "report": report_facts(scan)}
    written = tempfile.mkdtemp(dir=Path(paths["store_sales"]).parent, prefix="written-")
    seen = []
    for day in (1, 2):
        dynsource.write(spark.range(10).selectExpr("id", f"{day} AS day"), written,
                        options={"partitionColumns": "day INT"})
        if day == 1:
            dynsource.register_table(spark, "cluster_written", path=written, replace=True)
        seen.append(rows(dynsource.sql(spark, "SELECT day, count(*) FROM cluster_written GROUP BY day")))
    with contextlib.redirect_stdout(io.StringIO()) as plan:
        dynsource.sql(spark, "SELECT * FROM cluster_written").explain()
    plan = plan.getvalue()
    result["written"] = {"seen": seen, "read_by": "spark" if "FileScan parquet" in plan else plan}
    return result


def names_change(spark, dynsource, paths):
    """One query text run again while its names change meaning: each run's rows equal ``spark.sql``'s of the text
    then; how many runs were planned twice (over Spark Connect, names an earlier query resolved are trusted and
    confirmed beside the query: planned again where they mean something else now)."""
    spark.conf.set("spark.dynsource.partitionPruning", "auto")
    planned_again = _Records("planned again")
    logging.getLogger("dynsource.dpp.query").addHandler(planned_again)
    logging.getLogger("dynsource.dpp.query").setLevel(logging.DEBUG)
    dynsource.register_table(spark, "cluster_names_sales", path=paths["store_sales"], replace=True)
    spark.read.parquet(paths["date_dim"]).createOrReplaceTempView("cluster_names_dates")
    query = f"""SELECT d_moy, count(*), sum(ss_sales_price) FROM cluster_names_sales s
                JOIN cluster_names_dates d ON s.ss_sold_date_sk = d.d_date_sk WHERE d.d_moy = {MONTH} GROUP BY d_moy"""
    runs = []

    def run(step: str) -> None:
        before = len(planned_again.messages)
        df = dynsource.sql(spark, query)
        runs.append({"step": step, "rows": rows(df), "spark": rows(spark.sql(query)),
                     "planned_again": len(planned_again.messages) - before})

    run("first")
    run("again")
    spark.read.parquet(paths["date_dim"]).where("d_date_sk % 2 = 0").createOrReplaceTempView("cluster_names_dates")
    run("dates replaced")
    # A column the query names renamed: Spark's error, whether the call or the action raises it.
    spark.read.parquet(paths["date_dim"]).withColumnRenamed("d_moy", "month").createOrReplaceTempView(
        "cluster_names_dates")
    errors = {}
    for name, action in (("spark", lambda: spark.sql(query).collect()),
                         ("dynsource", lambda: dynsource.sql(spark, query).collect())):
        try:
            action()
        except Exception as error:  # the error class is what is compared
            errors[name] = getattr(error, "getCondition", lambda: None)() or type(error).__name__
    spark.read.parquet(paths["date_dim"]).where("d_date_sk % 2 = 0").createOrReplaceTempView("cluster_names_dates")
    run("dates named again")
    spark.read.parquet(paths["store_sales"]).where("ss_customer_sk < 100").createOrReplaceTempView(
        "cluster_names_sales")
    run("table shadowed by a temporary view")
    spark.catalog.dropTempView("cluster_names_sales")
    run("temporary view dropped")
    logging.getLogger("dynsource.dpp.query").removeHandler(planned_again)
    return {"runs": runs, "errors": errors}


def views(spark, dynsource, paths):
    """A temporary view of SQL text, a DataFrame's view and a persistent view over a registered table, each queried
    twice through dynsource.sql (one DataFrame, two actions): the rows, ``spark.sql``'s, whether Spark's reader read
    the table, and the report."""
    dynsource.register_table(spark, "cluster_views_sales", path=paths["store_sales"], replace=True)
    spark.read.parquet(paths["date_dim"]).createOrReplaceTempView("cluster_views_dates")
    spark.sql("CREATE OR REPLACE TEMP VIEW cluster_views_text AS SELECT * FROM cluster_views_sales")
    spark.table("cluster_views_sales").where("ss_customer_sk < 500").createOrReplaceTempView("cluster_views_frame")
    spark.sql("CREATE OR REPLACE VIEW cluster_views_persistent AS SELECT ss_sold_date_sk, ss_sales_price "
              "FROM cluster_views_sales WHERE ss_customer_sk < 700")
    result = {}

    def run(view: str) -> dict:
        query = f"""SELECT d_moy, count(*), sum(ss_sales_price) FROM {view} s JOIN cluster_views_dates d
                    ON s.ss_sold_date_sk = d.d_date_sk WHERE d.d_moy = {MONTH} GROUP BY d_moy"""
        df = dynsource.sql(spark, query)
        with contextlib.redirect_stdout(io.StringIO()) as plan:
            df.explain()
        return {"rows": [rows(df), rows(df)], "spark": rows(spark.sql(query)),
                "read_by": "python" if "(Python)" in plan.getvalue() else "spark",
                "report": str(dynsource.scan_report(df))}

    for view in ("cluster_views_text", "cluster_views_frame", "cluster_views_persistent"):
        result[view] = run(view)
    # Replaced under its name: a warm query follows the view's new text.
    spark.sql("CREATE OR REPLACE VIEW cluster_views_persistent AS SELECT ss_sold_date_sk, ss_sales_price "
              "FROM cluster_views_sales WHERE ss_customer_sk >= 700")
    result["cluster_views_persistent replaced"] = run("cluster_views_persistent")
    return result

def own_source(spark, dynsource, paths):
    """A catalog table of a Python data source of one's own (SQLite, ``tests/sources``) pruned by dynsource.sql and
    dynamic_join: classic learns the class from the session, Spark Connect is told it by
    dynsource.register_filtering_source. Rows equal spark.sql's; the rows the source fetched are counted."""
    from pyspark import cloudpickle

    from tests.sources import sqlite_source

    cloudpickle.register_pickle_by_value(sqlite_source)  # the server and the executors need not import the tests
    root = Path(tempfile.mkdtemp(prefix="own-source-"))
    database, counts = root / "sales.db", root / "counts"
    counts.mkdir()
    sqlite_source.write_table(database, "facts", "k", "bigint",
                              [(sk, sk * 10 + index) for sk in range(1, CUSTOMERS + 1) for index in range(4)])
    source = sqlite_source.catalog_source("cluster_sqlite_sales", database=str(database), table="facts", key="k",
                                          keyType="bigint", countsDir=str(counts))
    if spark.__class__.__module__.startswith("pyspark.sql.connect"):
        dynsource.register_filtering_source(spark, source)
    else:
        spark.dataSource.register(source)
    spark.sql("DROP TABLE IF EXISTS cluster_own_sales")
    spark.sql("CREATE TABLE cluster_own_sales USING cluster_sqlite_sales")
    spark.read.parquet(paths["customer"]).createOrReplaceTempView("cluster_customers")

    def fetched() -> int:
        figures = [json.loads(path.read_text()) for path in counts.glob("*.json")]
        for path in counts.glob("*.json"):
            path.unlink()
        return sum(figure["rows"] for figure in figures)

    query = (f"SELECT c.c_state, count(*), sum(s.v) FROM cluster_own_sales s JOIN cluster_customers c "
             f"ON s.k = c.c_customer_sk WHERE c.c_state = '{STATE}' GROUP BY c.c_state")
    expected, whole = rows(spark.sql(query)), fetched()
    pruned = dynsource.sql(spark, query)
    result = {"equal": rows(pruned) == expected, "whole": whole, "pruned": fetched(),
              "report": str(dynsource.scan_report(pruned))}
    customers = spark.table("cluster_customers").where(f"c_state = '{STATE}'")
    joined = dynsource.dynamic_join("cluster_own_sales", customers, {"k": "c_customer_sk"})
    table = spark.table("cluster_own_sales")
    native = table.join(customers, table.k == customers.c_customer_sk)
    result["dynamic_join"] = {"pruned": (rows(joined), fetched())[1], "equal": rows(joined) == rows(native)}
    return result


FLOWS: dict[str, Flow] = {flow.__name__: flow for flow in (demo_join, row_filter, dynamic_join, catalog_sql, auto_dpp,
                                                           late_filter, s3_store, readers, names_change, views,
                                                           own_source)}


class _Records(logging.Handler):
    """The messages logged at ``level`` or above that contain ``containing``."""

    def __init__(self, containing: str = "", level: int = logging.DEBUG) -> None:
        super().__init__(level)
        self.containing = containing
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.containing in record.getMessage():
            self.messages.append(record.getMessage())


def session(args: argparse.Namespace):
    from pyspark.sql import SparkSession

    if args.remote:
        return SparkSession.builder.remote(args.remote).getOrCreate()
    return (SparkSession.builder.master(args.master).appName("dynsource-cluster-flows")
            .config("spark.executor.memory", "1g").config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--master")
    target.add_argument("--remote")
    parser.add_argument("--data", required=True, help="directory of the tables (written if missing)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import dynsource

    warnings = _Records(level=logging.WARNING)
    logging.getLogger("dynsource").addHandler(warnings)
    data = Path(args.data)
    paths = write_tables(data) if not data.exists() else {n: str(data / n) for n in ("store_sales", "date_dim",
                                                                                      "customer")}
    spark = session(args)
    dynsource.register(spark)
    results = {}
    for name, flow in FLOWS.items():
        try:
            results[name] = flow(spark, dynsource, paths)
        except Exception:
            results[name] = {"error": traceback.format_exc()}
    results["warnings"] = warnings.messages
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    spark.stop()


if __name__ == "__main__":
    main()
