"""Where dynsource runs: Spark's Python workers must import it, and the planner must reach the filter store.

Spark runs dynsource's code in Python workers: planning on the driver's host,
``read()`` on the executors, each with the interpreter ``PYSPARK_PYTHON`` named
when the session started. A worker that cannot import dynsource fails the first
query with a ``ModuleNotFoundError`` deep in an executor log, so
:func:`check_workers` runs a probe job first and turns that into an error that
says how to install dynsource on the cluster. The planning workers of
``spark.read.format("dynsource")`` fail the same way, with Spark's raw traceback
of the unpickled source, so :func:`check_planner` tries the interpreter they run
on this host when dynsource registers its source.

Read tasks never open the filter store (their filter travels in the plan), but
the planner does, and it runs where the Spark driver runs. :func:`warn_if_local_store`
says once what a store on this machine's disk implies when the driver or the
executors are elsewhere.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import weakref
from importlib import metadata
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

from dynsource import storage

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "Install dynsource in the Python that Spark's workers run, on every node ('pip install dynsource' with that "
    "interpreter), and name it with PYSPARK_PYTHON (or spark.pyspark.python) before the session starts. See the "
    "'Running on a cluster' in dynsource's docs/object-stores-and-clusters.md."
)
_checked: weakref.WeakSet[SparkSession] = weakref.WeakSet()
_CHECK_LOCK = threading.Lock()
WORKER_MODULE = "dynsource.spark.source"  # what Spark's Python workers import to read and write
_warned: set[tuple[str, str]] = set()


class WorkerSetupError(RuntimeError):
    """Spark's Python workers cannot run dynsource; the message says what they lack and how to install it."""


def check_workers(spark: SparkSession, module: str) -> None:
    """Run a small probe job on the executors (once per session) and raise if dynsource cannot run there.

    The probe is a plain Python UDF over as many tasks as the session's default
    parallelism: it needs only the Python Spark starts, and it reports that
    Python's path, its version and dynsource's version, or why importing ``module``
    (what the workers load, named by the caller) failed.

    Raises
    ------
    WorkerSetupError
        A worker cannot import dynsource, runs another version of it, or cannot start at all.
    """
    if spark in _checked:
        return
    try:
        reports = {json.dumps(found, sort_keys=True) for found in _probe(spark, module)}
    except Exception as error:  # the worker did not start: a missing interpreter, a Python without pyspark
        raise WorkerSetupError(
            f"Spark's Python workers could not run a dynsource probe task: {_failure(error)}. {INSTALL_HINT}"
        ) from error
    expected = metadata.version("dynsource")
    for found in map(json.loads, sorted(reports)):
        if found["error"]:
            raise WorkerSetupError(
                f"Spark's Python workers (interpreter '{found['python']}', Python {found['version']}) cannot import "
                f"dynsource: {found['error']}. {INSTALL_HINT}"
            )
        if found["dynsource"] != expected:
            raise WorkerSetupError(
                f"Spark's Python workers (interpreter '{found['python']}') run dynsource {found['dynsource']}, this "
                f"driver runs {expected}; plans are not compatible across versions. {INSTALL_HINT}"
            )
    _checked.add(spark)


def workers_checked(spark: SparkSession) -> None:
    """:func:`check_workers` of dynsource's source module, before dynsource first runs code in Spark's Python
    workers (a read by its Python reader, a write, a Bloom filter's build), once per session.

    Not at :func:`dynsource.register`: a job that reads only by Spark's file reader never starts a Python worker,
    and the probe (the session's first Python worker and a Spark job, 2-5 s in a new session on two cores) would
    stand before its first query, or beside it, slowing it as much.
    """
    with _CHECK_LOCK:  # concurrent first reads (dimensions collected side by side) run one probe
        check_workers(spark, WORKER_MODULE)


def check_planner(spark: SparkSession) -> None:
    """Raise :class:`WorkerSetupError` where the interpreter Spark's Python workers run on this host (``PYSPARK_PYTHON``
    when the session started, else ``python3``) cannot import dynsource: it plans every read of a dynsource source.

    Free where that interpreter is this one, as when ``PYSPARK_PYTHON`` is ``sys.executable``; another is tried once
    per interpreter, in a subprocess (~1 s). Over Spark Connect the server's workers plan: nothing to try here.
    """
    if is_connect(spark):
        return
    python = spark.sparkContext.pythonExec
    found = shutil.which(python)
    if found is not None and os.path.abspath(found) == sys.executable:
        return
    error = _planner_error(python, found)
    if error is not None:
        raise WorkerSetupError(error)


@functools.lru_cache(maxsize=8)
def _planner_error(python: str, found: str | None) -> str | None:
    if found is None:
        return (f"Spark's Python workers run '{python}' (PYSPARK_PYTHON when the session started, else python3), "
                f"which this host does not have; they plan every read of dynsource's source here. {INSTALL_HINT}")
    tried = subprocess.run([found, "-c", _PLANNER_PROBE.format(module=WORKER_MODULE)], capture_output=True,
                           text=True, timeout=300, check=False)
    version, _, dynsource_version = tried.stdout.strip().partition("\n")
    if tried.returncode == 0 and dynsource_version == metadata.version("dynsource"):
        return None
    said = tried.stderr.strip().splitlines()[-1:] or [f"it exited with {tried.returncode}"]
    if tried.returncode == 0:
        said = [f"it runs dynsource {dynsource_version}, this driver runs {metadata.version('dynsource')}"]
    return (f"Spark's Python workers (interpreter '{found}', Python {version or 'unknown'}, PYSPARK_PYTHON when the "
            f"session started, else python3) cannot plan dynsource's reads: {said[0]}. {INSTALL_HINT}")


# The interpreter's version first: it is printed even where the import fails.
_PLANNER_PROBE = ("import platform; print(platform.python_version(), flush=True); import importlib.metadata, {module}; "
                  "print(importlib.metadata.version('dynsource'))")


def _probe(spark: SparkSession, module: str) -> list[dict[str, Any]]:
    def probe(_: int) -> str:
        # Runs in an executor: imports only the standard library until it tries dynsource.
        import importlib
        import importlib.metadata
        import json
        import platform
        import sys

        found = {"python": sys.executable, "version": platform.python_version(), "dynsource": None, "error": None}
        try:
            importlib.import_module(module)
            found["dynsource"] = importlib.metadata.version("dynsource")
        except Exception as error:  # whatever stops the import is what the driver must report
            found["error"] = f"{type(error).__name__}: {error}"
        return json.dumps(found)

    tasks = _parallelism(spark)
    # useArrow=False: the probe must run where pyarrow is missing too.
    rows = spark.range(0, tasks, 1, tasks).select(udf(probe, "string", useArrow=False)("id").alias("found"))
    return [json.loads(row.found) for row in rows.distinct().collect()]


def _parallelism(spark: SparkSession) -> int:
    if is_connect(spark):
        return max(2, int(spark.conf.get("spark.default.parallelism", "2")))
    return max(2, spark.sparkContext.defaultParallelism)


def warn_if_local_store(spark: SparkSession | None, store_url: str) -> None:
    """Log once per (store, master) what a filter store on this machine's disk means off ``local[*]``."""
    if spark is None or not storage.is_local(store_url):
        return
    master = spark.conf.get("spark.master", "")
    remote = is_connect(spark)
    if master.startswith("local") and not remote:
        return
    if (store_url, master) in _warned:
        return
    _warned.add((store_url, master))
    where = "the Spark Connect server's" if remote else "the driver's"
    log.warning(
        "dynsource: filter store '%s' is on this machine's disk and the master is '%s'. Read tasks do not need it "
        "(the filter travels in the plan), but the query planner, which runs on %s host, reads it: this works "
        "while that host is this machine. When it is not (Spark Connect to another host, --deploy-mode cluster), "
        "publish to a store both reach, e.g. filterStore / store= / $DYNSOURCE_FILTER_STORE = 's3://bucket/dynsource'.",
        store_url, master, where,
    )


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no accumulators in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _failure(error: BaseException) -> str:
    """The task failure Spark reports (a Py4J error's first line only names the call), else the first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    failure = next((line for line in lines if "most recent failure:" in line), None)
    if failure is not None:
        return failure.split("most recent failure:", 1)[1].strip()
    return lines[0] if lines else type(error).__name__
