"""One local SparkSession for the whole suite; its Python workers run this interpreter."""

from __future__ import annotations

import os
import sys

import pytest

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
