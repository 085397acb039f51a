"""dynsource on a real Spark standalone cluster and through Spark Connect (loopback, real processes).

A master and a worker are started from the installed pyspark; the worker has its
own HOME, so its executors share nothing with the driver but the table files.
The flows of ``tests/cluster_flows.py`` run once as a classic driver of the
cluster and once as a Spark Connect client of a server that runs on the cluster.
Skip them for a quick local run with ``./test -m "not cluster"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import Cluster, spark_environment, start_cluster, start_connect_server

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

REPOSITORY = Path(__file__).resolve().parent.parent
KEPT, TOTAL = 20, 60  # day partitions of the filtered month, of the table
MODES = ("classic", "connect")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    started = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tables") / "star"


def run_flows(root: Path, target: list[str], data: Path, environment: dict[str, str]) -> dict:
    out = root / "results.json"
    command = [sys.executable, "-m", "tests.cluster_flows", *target, "--data", str(data), "--out", str(out)]
    completed = subprocess.run(command, env=environment, cwd=REPOSITORY, capture_output=True, text=True, timeout=1200)
    if completed.returncode != 0 or not out.exists():
        pytest.fail(f"the flows' driver exited with {completed.returncode}:\n{completed.stderr[-6000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def classic(cluster, data, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("classic-driver")
    environment = spark_environment(root / "home", DYNSOURCE_FILTER_STORE=str(root / "store"))
    return run_flows(root, ["--master", cluster.master_url], data, environment)


@pytest.fixture(scope="module")
def connect(cluster, data, tmp_path_factory, classic) -> dict:
    # After the classic driver: one application at a time holds the worker's cores.
    root = tmp_path_factory.mktemp("connect")
    store = root / "store"  # the client's and the server's default store: one machine here
    server, url = start_connect_server(cluster.master_url, root, filter_store=store)
    try:
        return run_flows(root, ["--remote", url], data, spark_environment(root / "home",
                                                                          DYNSOURCE_FILTER_STORE=str(store)))
    finally:
        server.stop()


def flow(request, mode: str, name: str) -> dict:
    result = request.getfixturevalue(mode)[name]
    assert "error" not in result, result["error"]
    return result


def assert_pruned(report: dict) -> None:
    assert report["filtering"] and report["fallback_reason"] is None
    assert (report["partitions_kept"], report["partitions_total"]) == (KEPT, TOTAL)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["demo_join", "dynamic_join", "catalog_sql", "auto_dpp", "late_filter"])
def test_partition_pruning_flows_equal_spark(request, mode, name):
    result = flow(request, mode, name)
    assert result["equal"]
    assert_pruned(result["report"])
    if name == "auto_dpp":  # a dimension nothing filters is not collected; one its DataFrame filters is
        assert result["unfiltered"], result


@pytest.mark.parametrize("mode", MODES)
def test_data_column_filter_reads_only_matching_rows(request, mode):
    result = flow(request, mode, "row_filter")
    report = result["report"]
    assert result["equal"] and report["row_filtering"] and report["data_columns"] == ["ss_customer_sk"]
    assert result["scan_rows"] == result["matching_rows"] < result["table_rows"]  # the tasks really filtered
    if mode == "classic":
        assert report["task_figures_unavailable"] is None
        assert report["tasks_reported"] == report["row_filtering_tasks"] == report["input_partitions"]
        assert report["rows_read"] - report["rows_filtered"] == result["matching_rows"]
        assert report["rows_read"] <= result["table_rows"]
    else:
        assert "Spark Connect" in report["task_figures_unavailable"]
        assert report["tasks_reported"] is None and report["rows_read"] is None and report["rows_filtered"] is None


@pytest.mark.parametrize("mode", MODES)
def test_filter_store_on_an_s3_server(request, mode):
    result = flow(request, mode, "s3_store")
    assert result["equal"] and result["report"]["filtering"] and result["report"]["row_filtering"]
    assert result["scan_rows"] == flow(request, mode, "row_filter")["matching_rows"]


@pytest.mark.parametrize("mode", MODES)
def test_auto_reads_with_sparks_reader_where_the_server_opens_the_files(request, mode):
    """Over Spark Connect as in a classic session: this client plans the scan, the server's Spark reads the kept
    files; the Python reader where asked; a write is seen by the next query."""
    result = flow(request, mode, "readers")
    for reader, read_by in (("auto", "spark"), ("python", "python")):
        assert result[reader]["equal"], reader
        assert_pruned(result[reader]["report"])
        assert result[reader]["report"]["read_by"] == read_by
    assert result["written"]["seen"] == [[[1, 10]], [[1, 10], [2, 10]]]  # rows as JSON keeps them
    assert result["written"]["read_by"] == "spark"


@pytest.mark.parametrize("mode", MODES)
def test_a_query_run_again_while_its_names_change_meaning_reads_what_they_mean_now(request, mode):
    """Over Spark Connect a name an earlier query resolved is trusted and confirmed beside the query: a run whose
    names mean what they meant is planned once (a view replaced by other rows of the same columns too: the query
    names it, the server reads what it holds now), one where a temporary view shadows (or no longer shadows) the
    registered table is planned again, and every run's rows are Spark's; a dimension renamed a column the query
    names between two runs: the same error as Spark's."""
    result = flow(request, mode, "names_change")
    runs = result["runs"]
    for run in runs:
        assert run["rows"] == run["spark"], run["step"]
    assert len({json.dumps(run["rows"]) for run in runs}) == 3  # the replaced and shadowing views change the rows
    planned_again = [run["planned_again"] for run in runs]
    assert planned_again == ([0, 0, 0, 0, 1, 1] if mode == "connect" else [0, 0, 0, 0, 0, 0])
    # A dimension whose column the query names was renamed between runs: Spark's own error either way.
    assert result["errors"]["dynsource"] == result["errors"]["spark"] == "UNRESOLVED_COLUMN.WITH_SUGGESTION"


@pytest.mark.parametrize("mode", MODES)
def test_views_over_a_registered_table_are_seen_through_where_the_client_reads_their_definitions(request, mode):
    """In a classic session a temporary view of SQL text, a DataFrame's view and a persistent view over a registered
    table are seen through (Spark's reader reads the table). Over Spark Connect the server describes the persistent
    view, which is seen through and followed when replaced; it cannot give a temporary view's settings, so those
    are read as Spark reads them and the report says why. The rows are Spark's in both, action after action."""
    results = flow(request, mode, "views")
    assert results["cluster_views_persistent replaced"]["spark"] != results["cluster_views_persistent"]["spark"]
    for view, result in results.items():
        assert result["rows"] == [result["spark"], result["spark"]], view
        if mode == "classic" or view.startswith("cluster_views_persistent"):
            assert result["read_by"] == "spark" and "read as Spark reads it" not in result["report"], result
        else:
            assert result["read_by"] == "python", result
            assert (f"view {view} is read as Spark reads it: it reads the registered table "
                    "default.cluster_views_sales, and over Spark Connect") in result["report"], result


@pytest.mark.parametrize("mode", MODES)
def test_a_python_data_source_of_ones_own_is_pruned_by_dynsource_sql_and_dynamic_join(request, mode):
    """The SQLite source's catalog table: the class learned from the session (classic) or given once by
    register_filtering_source (Spark Connect); the executors fetch only the 50 customers' rows of 500."""
    result = flow(request, mode, "own_source")
    assert result["equal"] and result["dynamic_join"]["equal"], result
    assert result["whole"] == 4 * 500 and result["pruned"] == result["dynamic_join"]["pruned"] == 4 * 50, result
    assert "cluster_own_sales (s.k) <- " in result["report"], result


def test_executors_never_open_a_filter_store(cluster, classic, connect):
    assert cluster.worker_home.is_dir()
    assert not (cluster.worker_home / ".cache" / "dynsource").exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_local_store_off_local_master_is_reported_once(request, mode):
    said = [message for message in request.getfixturevalue(mode)["warnings"] if "is on this machine's disk" in message]
    assert len(said) == 1 and "spark://127.0.0.1:" in said[0]
