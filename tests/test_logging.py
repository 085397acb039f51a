"""dynsource's log lines in Spark's Python workers follow the level the user chose, not Python's default."""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import re
import subprocess
import sys
import textwrap

import pyspark.daemon
import pytest

from dynsource.runtime import logs

# A session of its own: the Python workers' stderr reaches the JVM's, and only a fresh process can capture it.
SESSION = textwrap.dedent("""
    import json, logging, os, sys, tempfile, time
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["DYNSOURCE_FILTER_STORE"] = tempfile.mkdtemp()  # its own: scan reports of other runs stay apart
    import pyarrow as pa, pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    import dynsource

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.warehouse.dir", tempfile.mkdtemp())
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    root = tempfile.mkdtemp()
    pq.write_to_dataset(pa.table({"v": [1, 2, 3], "k": [1, 2, 3]}), root, partition_cols=["k"])
    unpublished = lambda: "dynf-" + os.urandom(16).hex()
    def count(handle, **options):
        reader = spark.read.format("dynsource").option("path", root).option("dynamicFilter", handle)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load().count()

    handles = {"silenced": unpublished(), "info": None, "default": unpublished()}
    logging.getLogger("dynsource").setLevel(logging.ERROR)
    dynsource.register(spark)
    assert count(handles["silenced"]) == 3
    handles["info"] = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(2,)]))
    assert count(handles["info"], logLevel="info") == 1
    static = spark.read.format("dynsource").option("path", root).option("partitionFilter", "k >= 2")
    assert static.option("logLevel", "info").load().count() == 2
    logging.getLogger("dynsource").setLevel(logging.NOTSET)
    dynsource.register(spark)
    assert count(handles["default"]) == 3

    # Reads that Spark stops early, of a table larger than a socket's buffers (some read tasks are mid-write).
    big, n = tempfile.mkdtemp(), 200_000
    pq.write_to_dataset(pa.table({"v": [i % 1000 for i in range(n)], "k": [i % 4 for i in range(n)]}), big,
                        partition_cols=["k"])
    every_v = dynsource.publish(dynsource.DynamicFilteringData([("v", "bigint")], [(i,) for i in range(1000)]))
    by_path = spark.read.format("dynsource").option("path", big).load()
    by_path.show(2)
    assert by_path.first() is not None and len(by_path.limit(3).collect()) == 3
    filtered = spark.read.format("dynsource").option("path", big).option("dynamicFilter", every_v).load()
    assert len(filtered.limit(3).collect()) == 3  # its read tasks send figures when stopped, too
    dynsource.register_table(spark, "sales", path=big)
    assert len(spark.table("sales").limit(3).collect()) == 3
    where = spark.table("sales").where("k BETWEEN 1 AND 2")  # two more actions, one WARNING in all
    assert where.count() == where.count() == n // 2
    scan = dynsource.scan_report(where)
    time.sleep(2)  # the JVM copies the workers' stderr to its own on a thread of its own
    print(json.dumps({"handles": handles, "root": root, "big": big,
                      "where": [scan.partitions_kept, scan.partitions_total, scan.pruned_by()]}))
    spark.stop()
""")


@pytest.fixture(scope="module")
def session():
    """The session's facts (handles, paths) and its stderr lines, the workers' included."""
    result = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr.splitlines()


@pytest.mark.spark  # in a process of its own
def test_workers_log_at_the_driver_level_or_the_log_level_option(session):
    facts, lines = session
    handles = facts["handles"]
    assert not [line for line in lines if handles["silenced"] in line]  # ERROR set in the driver before register
    assert [line for line in lines if line.startswith(f"INFO dynsource.scan.report: Dynamic filtering with handle "
                                                      f"{handles['info']} on ") and "original partition number is 3, "
                                                      "remaining partition number is 1" in line]
    assert [line for line in lines if line.startswith("WARNING dynsource.scan.resolution: dynsource: dynamic filter "
                                                      f"'{handles['default']}' is not usable")]


@pytest.fixture
def dynsource_logger():
    logger = logging.getLogger("dynsource")
    saved = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]


def test_a_worker_without_a_chosen_level_takes_the_environment_then_warning(dynsource_logger, monkeypatch):
    monkeypatch.setenv(logs.LEVEL_ENV, "debug")
    logs.configure_worker(None)
    assert dynsource_logger.level == logging.DEBUG
    logs.configure_worker("ERROR")
    assert dynsource_logger.level == logging.ERROR
    monkeypatch.delenv(logs.LEVEL_ENV)
    logs.configure_worker(None)
    assert dynsource_logger.level == logging.WARNING
    monkeypatch.setenv(logs.LEVEL_ENV, "loud")
    with pytest.raises(ValueError, match=r"\$DYNSOURCE_LOG_LEVEL 'loud' is not a log level; expected one of"):
        logs.configure_worker(None)


def test_the_log_level_option_is_validated():
    from dynsource.scan.options import ScanOptions

    assert ScanOptions.parse({"path": "/t", "logLevel": "info"}).log_level == "INFO"
    with pytest.raises(ValueError, match=r"Option 'logLevel' 'verbose' is not a log level; expected one of"):
        ScanOptions.parse({"path": "/t", "logLevel": "verbose"})


@pytest.mark.spark  # in a process of its own
def test_every_scan_logs_a_line_and_a_table_read_whole_warns_once_per_worker(session):
    facts, lines = session
    assert [line for line in lines if line.startswith(f"INFO dynsource.scan.report: Scan of {facts['root']}: original "
                                                      "partition number is 3, remaining partition number is 2 ") and
            re.search(r"; planning [\d.]+ ms; pruned by partitionFilter 'k >= 2'$", line)]
    warnings = [line for line in lines if line.startswith(
        "WARNING dynsource.scan.planner: dynsource: the scan of table default.sales reads all 4 partitions: it has "
        "neither a partitionFilter nor a dynamicFilter. If the query filters on partition column k, note that Spark "
        "does not pass a query's WHERE to a Python data source, so such a filter prunes nothing here; give the "
        "partitionFilter option (SELECT ... FROM default.sales WITH ('partitionFilter' = 'k = ...')), or run the "
        "query with dynsource.sql(spark, query), which turns WHERE predicates on partition columns into "
        "partitionFilter, or in DataFrame code read the table with dynsource.table(spark, 'default.sales'), whose "
        "joins Spark's own pruning reaches.")]
    assert len(warnings) == 1  # three actions planned in one worker
    assert len([line for line in lines if f"the scan of {facts['big']} reads all 4 partitions" in line]) == 1
    assert facts["where"] == [4, 4, "none"]


def tracebacks(lines: list[str]) -> list[tuple[list[str], str]]:
    """Each traceback printed in ``lines``: the files of its frames, and its last line (the exception)."""
    found = []
    for start, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            body = list(itertools.takewhile(lambda text: text.startswith(" "), lines[start + 1:]))
            frames = [match.group(1) for text in body if (match := re.match(r'\s+File "([^"]+)"', text))]
            end = start + 1 + len(body)
            found.append((frames, lines[end] if end < len(lines) else ""))
    return found


@pytest.mark.spark  # in a process of its own
def test_reads_stopped_early_print_no_traceback_of_dynsource(session):
    """show(), first() and a LIMIT stop read tasks mid-write. pyspark 4.1 and later then print its daemon's failed
    flush to the closed socket (its killWorkerOnFlushFailure), for any Python UDF as well; nothing else may show."""
    _, lines = session
    daemon_reraises = "KILL_WORKER_ON_FLUSH_FAILURE" in inspect.getsource(pyspark.daemon)
    for frames, error in tracebacks(lines):
        assert daemon_reraises and error.startswith(("BrokenPipeError", "ConnectionResetError")), "\n".join(lines)
        assert frames and all(frame.endswith("pyspark/daemon.py") for frame in frames), "\n".join(lines)


def test_register_table_leaves_the_driver_logging_as_it_is(spark, tmp_path, dynsource_logger):
    """Working out the schema in the driver must not set the driver's logger up as a worker's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import dynsource

    pq.write_to_dataset(pa.table({"v": [1], "k": [1]}), str(tmp_path / "t"), partition_cols=["k"])
    dynsource_logger.setLevel(logging.DEBUG)  # chosen after register ran: the source knows another level
    handlers = list(dynsource_logger.handlers)
    definitions = str(tmp_path / "definitions")
    dynsource.register_table(spark, "logging_kept", path=str(tmp_path / "t"), definitions=definitions)
    try:
        assert (dynsource_logger.level, dynsource_logger.handlers) == (logging.DEBUG, handlers)
    finally:
        dynsource.drop_table(spark, "logging_kept", definitions=definitions)
