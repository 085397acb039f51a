"""One local SparkSession for the whole suite; its Python workers run this interpreter."""

from __future__ import annotations

import logging
import os
import sys

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.faults import BUCKET, FaultProxy
from tests.helpers import pushdown_set


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Workers must run this venv's Python, or they start one without pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("DYNSOURCE_FILTER_STORE", str(tmp_path_factory.mktemp("filter-store")))
    from pyspark.sql import SparkSession

    import dynsource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dynsource-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
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
        return {"key": "testing", "secret": "testing", "skip_instance_cache": True,
                "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}

    boto3.client("s3", aws_access_key_id="testing", aws_secret_access_key="testing",
                 endpoint_url=f"http://{host}:{port}", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield proxy, options(proxy.url), options(f"http://{host}:{port}")
    proxy.stop()
    server.stop()
