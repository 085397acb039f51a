"""One local SparkSession for the whole suite; its Python workers run this interpreter."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests import jvm
from tests.faults import BUCKET, FaultProxy
from tests.helpers import pushdown_set

# Spark's JVMs, this process's and those of the processes the tests start, with the tests' options (tests/jvm.py).
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", jvm.SUBMIT_ARGS)
# and the Python processes they start, Spark's workers among them, with pyspark's compiled modules
# (tests/workersite/sitecustomize.py).
os.environ["PYTHONPATH"] = os.pathsep.join(
    entry for entry in (str(Path(__file__).parent / "workersite"), os.environ.get("PYTHONPATH")) if entry)

# Every run publishes into a filter store of its own, never the user's default one (~/.cache/dynsource/filters),
# and so do the processes the tests start: they inherit this environment.
os.environ["DYNSOURCE_FILTER_STORE"] = tempfile.mkdtemp(prefix="dynsource-tests-filters-")


@pytest.fixture(scope="session")
def spark():
    # Workers must run this venv's Python, or they start one without pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import dynsource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dynsource-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The run's own warehouse (and the default definitions location in it): never the current directory's,
        # which another run, the other pyspark line's of ./test among them, may use at the same time.
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="dynsource-tests-warehouse-"))
        # List partition directories in the driver: a Spark job per listing would dominate the suite's time.
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
        .config("spark.ui.showConsoleProgress", "false")
        # The suite's tables are tiny: collect data-column filters as for a large fact (tests of the size rule
        # set it back).
        .config("spark.dynsource.dataFilterMinScanBytes", "0")
        # and collect partition-column filters of these local tables, which dynsource.sql leaves to Spark's own
        # dynamic partition pruning by default (tests of that set it back).
        .config("spark.dynsource.partitionPruning", "collect")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    dynsource.register(session)
    yield session
    session.stop()


def pytest_collection_modifyitems(items) -> None:
    """Mark ``spark`` every test that uses the session's SparkSession (``./test`` runs the others, which do not depend
    on pyspark's version, on one pyspark line only); a test that starts Spark processes of its own says so itself."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def run_data(tmp_path_factory):
    """Where generated data sets that no test changes are written once per run: ``./test`` shares one directory
    between its pyspark lines ($DYNSOURCE_TEST_DATA), a plain pytest run has its own."""
    shared = os.environ.get("DYNSOURCE_TEST_DATA")
    return Path(shared) if shared else tmp_path_factory.mktemp("data")


@pytest.fixture
def definitions(tmp_path) -> str:
    """A directory of this test's own for the definitions of the tables it registers."""
    return str(tmp_path / "definitions")


@pytest.fixture(params=["false", "true"], ids=lambda value: f"pushdown-{value}")
def pushdown(spark, request):
    """The session with Spark's filter pushdown off, then on (as the user or another library may set it)."""
    with pushdown_set(spark, request.param) as session:
        yield session


@pytest.fixture(scope="session")
def proxied():
    """A moto S3 server, the fault proxy before it, and the storage options of each (the direct ones check)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = FaultProxy(f"http://{host}:{port}").start()

    def options(endpoint: str) -> dict:
        # Few retries and short waits: every fault the rules arm shows in a second, not in botocore's backoff.
        # Filesystem instances are cached, as fsspec does by default: one per call would build a botocore client
        # per call, parsing S3's service model again (a fifth of the fault suite's time).
        return {"key": "testing", "secret": "testing",
                "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}

    boto3.client("s3", aws_access_key_id="testing", aws_secret_access_key="testing",
                 endpoint_url=f"http://{host}:{port}", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield proxy, options(proxy.url), options(f"http://{host}:{port}")
    proxy.stop()
    server.stop()
