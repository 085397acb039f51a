"""dynsource on an object store: a real S3 API server (moto's server mode) on loopback, reached through s3fs.

The server listens on a port chosen at start and known only through the storage
options, so every request it receives from Spark's Python workers proves that the
endpoint and credentials travelled in ``storageOptions`` / ``storage_options``
(no ``AWS_*`` variable names it). It counts the LIST requests per bucket on the
server side, because planning lists the table in a Spark worker process.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from urllib.parse import parse_qs

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
import s3fs
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

import dynsource
from dynsource import DynamicFilteringData
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.scan import files, tableschema
from dynsource.scan.options import ScanOptions
from tests.helpers import read, rows

TABLE_BUCKET, STORE_BUCKET = "tables", "filters"
REGIONS = ("east", "north", "west")
DAYS = range(1, 21)  # 3 regions x 20 days: 60 partitions on two levels
LEVELS = 2
# Besides one LIST per kept directory of each level: the table root's info(), the root's own listing and the
# commit records' directory, read again after the walk (a write that committed meanwhile means walking again).
LIST_OVERHEAD = 3
# pyspark 4.3 plans a DataFrame's Python-source scan once for all its actions, 4.0 calls partitions() per action
# (4.1 and 4.2 untried).
PLANS_ONCE_PER_DATAFRAME = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 1)
SCHEMA = "id bigint, amount double, region string, day int"
COLUMNS = ("id", "amount", "region", "day")


class CountingMotoServer(ThreadedMotoServer):
    """moto's threaded S3 server that records the method, bucket and query of every request it serves."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.requests: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def _server_entry(self) -> None:
        # ThreadedMotoServer._server_entry with the WSGI app wrapped: moto has no public per-request hook.
        app = DomainDispatcherApplication(create_backend_app)

        def recording(environ, start_response):
            bucket = environ.get("PATH_INFO", "/").lstrip("/").split("/", 1)[0]
            with self._lock:
                self.requests.append((environ["REQUEST_METHOD"], bucket, environ.get("QUERY_STRING", "")))
            return app(environ, start_response)

        self._server = make_server(self._ip_address, self._port, recording, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    def lists(self, bucket: str) -> int:
        """LIST (ListObjects/ListObjectsV2) requests served so far on ``bucket``."""
        with self._lock:
            return sum(1 for method, name, query in self.requests
                       if method == "GET" and name == bucket and _is_list(query))

    def requests_on(self, bucket: str) -> Counter:
        with self._lock:
            return Counter(method for method, name, _ in self.requests if name == bucket)


def _is_list(query: str) -> bool:
    parameters = parse_qs(query, keep_blank_values=True)
    return "list-type" in parameters or "prefix" in parameters or "delimiter" in parameters


@pytest.fixture(scope="module")
def s3():
    werkzeug_log = logging.getLogger("werkzeug")
    level = werkzeug_log.level
    werkzeug_log.setLevel(logging.WARNING)  # not one line per request
    server = CountingMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "key": "testing-key-id",
        "secret": "testing-secret",
        "client_kwargs": {"endpoint_url": f"http://{host}:{port}", "region_name": "us-east-1"},
    }
    client = boto3.client("s3", aws_access_key_id=options["key"], aws_secret_access_key=options["secret"],
                          **options["client_kwargs"])
    for bucket in (TABLE_BUCKET, STORE_BUCKET):
        client.create_bucket(Bucket=bucket)
    yield server, options
    server.stop()
    werkzeug_log.setLevel(level)


@pytest.fixture(scope="module")
def table(s3, tmp_path_factory):
    """The same 60-partition table in S3 (written by pyarrow through s3fs) and in a local directory."""
    _, options = s3
    fs = s3fs.S3FileSystem(**options)
    data = pa.table({
        "id": pa.array(range(2 * len(REGIONS) * len(DAYS)), pa.int64()),
        "amount": pa.array([i * 0.5 for i in range(2 * len(REGIONS) * len(DAYS))]),
        "region": [region for region in REGIONS for _ in DAYS for _ in range(2)],
        "day": pa.array([day for _ in REGIONS for day in DAYS for _ in range(2)], pa.int32()),
    })
    local = tmp_path_factory.mktemp("s3-table-copy") / "sales"
    pq.write_to_dataset(data, str(local), partition_cols=["region", "day"])
    pq.write_to_dataset(data, f"{TABLE_BUCKET}/sales", partition_cols=["region", "day"], filesystem=fs)
    return f"s3://{TABLE_BUCKET}/sales", str(local)


@pytest.fixture(scope="module")
def registered(spark, table, s3, tmp_path_factory):
    _, options = s3
    url, _ = table
    dynsource.register_table(spark, "s3_sales", path=url, storageOptions=options,
                             definitions=str(tmp_path_factory.mktemp("s3-definitions")))
    yield "s3_sales"
    dynsource.drop_table(spark, "s3_sales")


@pytest.fixture(scope="module")
def expected_rows(spark, table):
    """Every row of the table, as spark.read.parquet reads the local copy."""
    _, local = table
    return rows(spark.read.parquet(local).select(*COLUMNS))


def test_filter_store_on_s3_round_trips_with_storage_options(s3):
    server, options = s3
    data = DynamicFilteringData([("day", "int")], [(3,), (7,)])
    store = f"s3://{STORE_BUCKET}/round-trip"
    before = server.requests_on(STORE_BUCKET)["PUT"]
    handle = dynsource.publish(data, store, storage_options=options)
    assert server.requests_on(STORE_BUCKET)["PUT"] > before
    assert dynsource.resolve(handle, store, storage_options=options) == data


def test_storage_options_are_a_json_object_and_their_secrets_stay_hidden(s3):
    _, options = s3
    parsed = ScanOptions.parse({"path": "s3://tables/sales", "storageoptions": json.dumps(options)})
    assert dict(parsed.storage_options) == options
    assert options["secret"] not in repr(parsed) and options["key"] not in repr(parsed)
    assert options["client_kwargs"]["endpoint_url"] in repr(parsed)  # not a secret: shown for diagnosis
    for text, expected in [('{"secret": "s3cr3t"', "not valid JSON"), ('["s3cr3t"]', "JSON list, not an object")]:
        with pytest.raises(ValueError, match=f"Option 'storageOptions' is (a )?{expected}") as error:
            ScanOptions.parse({"path": "s3://tables/sales", "storageOptions": text})
        assert "s3cr3t" not in str(error.value)
    with pytest.raises(ValueError, match="Option 'filterStoreOptions' is a JSON int"):
        ScanOptions.parse({"path": "s3://tables/sales", "filterStoreOptions": "3"})


def test_a_new_partition_is_listed_by_the_next_scan_in_the_same_process(s3):
    # Spark reuses Python workers, and fsspec reuses one s3fs instance per options, listing cache included.
    _, options = s3
    client = boto3.client("s3", aws_access_key_id=options["key"], aws_secret_access_key=options["secret"],
                          **options["client_kwargs"])
    blob = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": [1]}), blob)
    client.put_object(Bucket=TABLE_BUCKET, Key="growing/day=1/part-0.parquet", Body=blob.getvalue().to_pybytes())
    fs, root = files.open_table(f"s3://{TABLE_BUCKET}/growing", options)
    assert [p.raw_values for p in PartitionEnumerator(fs, root).enumerate().partitions] == [("1",)]
    # Written behind the cached instance's back, as another process would.
    client.put_object(Bucket=TABLE_BUCKET, Key="growing/day=2/part-0.parquet", Body=blob.getvalue().to_pybytes())
    fs, root = files.open_table(f"s3://{TABLE_BUCKET}/growing", options)
    assert [p.raw_values for p in PartitionEnumerator(fs, root).enumerate().partitions] == [("1",), ("2",)]


def test_s3_reads_equal_spark_read_parquet_and_list_only_kept_partitions(spark, s3, table, registered, expected_rows):
    server, options = s3
    url, _ = table
    # Nothing in the environment, which Spark's workers inherit, points at the loopback server: only the options do.
    assert not [name for name in os.environ if name.startswith("AWS_ENDPOINT_URL")]
    store = f"s3://{STORE_BUCKET}/handles"

    def scan(df) -> tuple[list, int]:
        """The rows of ``df`` and the LIST requests on the table's bucket that reading it cost."""
        before = server.lists(TABLE_BUCKET)
        got = rows(df.select(*COLUMNS))
        return got, server.lists(TABLE_BUCKET) - before

    # Two of 60 partitions, in SQL on the registered table, with a handle collected by Spark into the s3:// store.
    # filterStoreOptions is not given: the s3:// store beside the s3:// table takes the table's storageOptions.
    dim = spark.createDataFrame([("west", 4), ("west", 17)], "region string, day int")
    two = dynsource.collect(dim, {"region": "region", "day": "day"}, store=store, storage_options=options)
    got_two, lists_two = scan(spark.sql(
        f"SELECT * FROM {registered} WITH ('dynamicFilter' = '{two}', 'filterStore' = '{store}')"))
    # Thirty of 60 (all regions), through the reader's options.
    keys = [(region, day) for region in REGIONS for day in range(1, 11)]
    thirty = dynsource.publish(DynamicFilteringData([("region", "string"), ("day", "int")], keys), store,
                               storage_options=options)
    got_thirty, lists_thirty = scan(read(spark, url, SCHEMA, storageOptions=json.dumps(options),
                                         dynamicFilter=thirty, filterStore=store))
    got_all, lists_all = scan(spark.table(registered))

    assert got_two == [row for row in expected_rows if (row.region, row.day) in {("west", 4), ("west", 17)}]
    assert got_thirty == [row for row in expected_rows if (row.region, row.day) in set(keys)]
    assert got_all == expected_rows and len(got_all) == 2 * 60
    for handle, kept, regions in [(two, 2, 1), (thirty, 30, 3)]:
        report = dynsource.scan_report(handle, store, storage_options=options)
        assert (report.partitions_kept, report.filtering, report.listings) == (kept, True, 1 + regions + kept)
    # One LIST per kept directory of each level, plus the root's: pruned directories are never listed.
    assert 2 + 1 <= lists_two <= 2 + LEVELS + LIST_OVERHEAD
    assert 30 + 3 <= lists_thirty <= 30 + len(REGIONS) + LIST_OVERHEAD
    assert 60 + 3 <= lists_all <= 60 + len(REGIONS) + LIST_OVERHEAD
    print(f"S3 LIST requests on the table: 2 of 60 partitions kept -> {lists_two}, 30 -> {lists_thirty}, "
          f"all 60 -> {lists_all}")


def test_a_schema_with_every_partition_column_declared_lists_one_branch(spark, s3, table):
    server, options = s3
    url, _ = table

    def load_lists(**declared) -> tuple[str, int]:
        before = server.lists(TABLE_BUCKET)
        df = read(spark, url, storageOptions=json.dumps(options), **declared)
        return df.schema.simpleString(), server.lists(TABLE_BUCKET) - before

    inferred, lists_inferred = load_lists()
    declared, lists_declared = load_lists(partitionColumns="region STRING, day INT")
    half, lists_half = load_lists(partitionColumns="day INT")  # region's type needs every region's value
    assert inferred == declared == half == "struct<id:bigint,amount:double,region:string,day:int>"
    assert lists_declared <= LEVELS + LIST_OVERHEAD < 60 <= lists_inferred and lists_half >= 60
    print(f"S3 LIST requests of the schema: inferred -> {lists_inferred}, every partition column declared -> "
          f"{lists_declared}")


def test_filter_store_options_are_used_for_the_store(spark, s3, table):
    _, options = s3
    url, _ = table
    store = f"s3://{STORE_BUCKET}/separate"
    handle = dynsource.publish(DynamicFilteringData([("day", "int")], [(5,)]), store, storage_options=options)
    # A store endpoint nothing listens on, tried once; the table's own options would have reached the store.
    unreachable = {**options, "client_kwargs": {**options["client_kwargs"], "endpoint_url": "http://127.0.0.1:9"},
                   "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}
    reads = {"dynamicFilter": handle, "filterStore": store, "storageOptions": json.dumps(options)}

    with pytest.raises(Exception, match=r"127\.0\.0\.1:9\b") as failure:
        read(spark, url, SCHEMA, filterStoreOptions=json.dumps(unreachable), dynamicFilterOnError="fail",
             **reads).count()
    assert options["secret"] not in str(failure.value)
    assert read(spark, url, SCHEMA, filterStoreOptions=json.dumps(options), **reads).count() == 2 * len(REGIONS)


def test_dynamic_join_on_an_s3_table_with_an_s3_filter_store(spark, s3, registered, expected_rows):
    server, options = s3
    store = f"s3://{STORE_BUCKET}/joins"
    dim = spark.createDataFrame([("north", 9, "nine"), ("north", 11, "eleven")], "r string, d int, label string")
    before = server.lists(TABLE_BUCKET)
    # The table's storageOptions come from its definition; the store's are storage_options.
    joined = dynsource.dynamic_join(registered, dim, {"region": "r", "day": "d"}, store=store,
                                    storage_options=options)
    got = rows(joined.select(*COLUMNS))
    assert got == [row for row in expected_rows if (row.region, row.day) in {("north", 9), ("north", 11)}]
    report = dynsource.scan_report(joined)
    assert (report.partitions_kept, report.filtering) == (2, True)
    # The benefit check walks the first branch (the root, a directory of each level) and lists the commit records
    # once, to judge the filter at the level where it keeps least; the scan lists the root, 'north' and the two
    # kept days.
    assert server.lists(TABLE_BUCKET) - before <= (1 + LEVELS + 1) + 2 + LEVELS + LIST_OVERHEAD


def test_auto_reads_an_s3_table_by_the_python_reader_as_spark_cannot_open_it(spark, s3, table, registered,
                                                                             expected_rows):
    from dynsource.spark import filereader

    _, options = s3
    url, _ = table
    with_options = ScanOptions.parse({"path": url, "storageOptions": json.dumps(options)})
    assert filereader.choose(spark, with_options)[0] == "python"
    # Without fsspec's options too: the session has no Hadoop filesystem for 's3://'.
    assert filereader.choose(spark, ScanOptions.parse({"path": url})) == (
        "python", f"Spark's Hadoop filesystem cannot open '{url}'")
    df = dynsource.sql(spark, f"SELECT * FROM {registered} WHERE day = 4")
    assert rows(df.select(*COLUMNS)) == [row for row in expected_rows if row.day == 4]
    assert "BatchScan" in df._jdf.queryExecution().executedPlan().toString()


def test_writes_to_s3_equal_the_same_writes_on_local_disk(spark, s3, tmp_path):
    _, options = s3
    url, local = f"s3://{TABLE_BUCKET}/written", str(tmp_path / "written")
    given = {"storageOptions": json.dumps(options), "partitionColumns": "region STRING, day INT"}

    def loaded(days, region):
        return spark.createDataFrame([(day * 10 + i, i * 0.5, region, day) for day in days for i in range(3)], SCHEMA)

    steps = [("append", loaded(range(1, 4), "east"), {}), ("append", loaded(range(2, 5), "west"), {}),
             ("overwrite", loaded(range(3, 4), "east"), {"partitionOverwriteMode": "dynamic"}),
             ("append", loaded(range(4, 5), "east"), {}),
             ("overwrite", loaded(range(5, 7), "west"), {"partitionOverwriteMode": "static"}),
             ("append", loaded(range(1, 2), "east"), {})]
    for mode, df, extra in steps:
        for path in (url, local):
            df.write.format("dynsource").option("path", path).options(**given, **extra).mode(mode).save()
        assert rows(read(spark, url, SCHEMA, storageOptions=given["storageOptions"])) == \
            rows(spark.read.parquet(local).select(*COLUMNS)), (mode, extra)
    fs = s3fs.S3FileSystem(**options)
    fs.invalidate_cache()
    assert not [key for key in fs.find(f"{TABLE_BUCKET}/written") if ".dynsource-staging" in key]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{TABLE_BUCKET}/written")) == \
        ["_dynsource_commits", "region=east", "region=west"]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{TABLE_BUCKET}/written/region=west")) == ["day=5", "day=6"]


def test_a_scan_asks_the_store_for_no_metadata_its_listing_gave(spark, s3, table, caplog, tmp_path, monkeypatch):
    """Per file and action: no HEAD (sizes and existence come from the listing; the one HEAD is the table root's,
    at planning), one footer and the data; a second
    action on the same DataFrame lists nothing. Registering without declared partition columns says that it walked
    the whole table, and what to declare."""
    server, options = s3
    url, _ = table
    df = read(spark, url, SCHEMA, storageOptions=json.dumps(options))
    data_files = sum(1 for key in s3fs.S3FileSystem(**options).find(f"{TABLE_BUCKET}/sales") if key.endswith(
        ".parquet"))
    figures = {}
    for action in ("first", "second"):
        before, lists = server.requests_on(TABLE_BUCKET), server.lists(TABLE_BUCKET)
        assert df.agg({"amount": "sum"}).first()[0] is not None
        made = server.requests_on(TABLE_BUCKET) - before
        figures[action] = {"HEAD": made["HEAD"], "LIST": server.lists(TABLE_BUCKET) - lists,
                           "GET": made["GET"] - (server.lists(TABLE_BUCKET) - lists)}
    if PLANS_ONCE_PER_DATAFRAME:
        assert figures["first"]["HEAD"] <= 1 and figures["second"]["HEAD"] == 0, figures
        assert figures["second"]["LIST"] == 0, figures
    else:  # pyspark 4.0 plans each action's scan again: the listing's requests again, still no HEAD per file
        assert figures["first"]["HEAD"] <= 1 and figures["second"]["HEAD"] <= 1, figures
        assert figures["second"]["LIST"] == figures["first"]["LIST"], figures
    planning_gets = 0 if PLANS_ONCE_PER_DATAFRAME else 1  # planning again makes one GET beside its LISTs
    assert figures["second"]["GET"] <= 2 * data_files + planning_gets, figures
    print(f"S3 requests of a scan of {data_files} files, by action: {figures}")
    monkeypatch.setattr(tableschema, "_said_walked", set())  # said once per table: the fixtures' walks said it
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        dynsource.register_table(spark, "s3_walked", path=f"s3://{TABLE_BUCKET}/sales", storageOptions=options,
                                 definitions=str(tmp_path))
    try:
        assert "partitionColumns='region STRING, day INT', one branch is listed" in caplog.text
    finally:
        dynsource.drop_table(spark, "s3_walked", definitions=str(tmp_path))
