"""dynsource's log lines in Spark's Python workers follow the level the user chose, not Python's default."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from dynsource import logs

# A session of its own: the Python workers' stderr reaches the JVM's, and only a fresh process can capture it.
SESSION = textwrap.dedent("""
    import json, logging, os, sys, tempfile, time
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa, pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    import dynsource

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
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
    logging.getLogger("dynsource").setLevel(logging.NOTSET)
    dynsource.register(spark)
    assert count(handles["default"]) == 3
    time.sleep(2)  # the JVM copies the workers' stderr to its own on a thread of its own
    print(json.dumps(handles))
    spark.stop()
""")


def test_workers_log_at_the_driver_level_or_the_log_level_option():
    result = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    handles = json.loads(result.stdout.strip().splitlines()[-1])
    lines = result.stderr.splitlines()
    assert not [line for line in lines if handles["silenced"] in line]  # ERROR set in the driver before register
    assert [line for line in lines if line.startswith(f"INFO dynsource.report: Dynamic filtering with handle "
                                                      f"{handles['info']} on ") and "original partition number is 3, "
                                                      "remaining partition number is 1" in line]
    assert [line for line in lines if line.startswith("WARNING dynsource.scan: dynsource: dynamic filter "
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
    from dynsource.options import ScanOptions

    assert ScanOptions.parse({"path": "/t", "logLevel": "info"}).log_level == "INFO"
    with pytest.raises(ValueError, match=r"Option 'logLevel' 'verbose' is not a log level; expected one of"):
        ScanOptions.parse({"path": "/t", "logLevel": "verbose"})
