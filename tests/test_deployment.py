"""Cluster set-up is detected, not guessed: workers without dynsource, and a driver-local filter store."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from dynsource.runtime import deployment


@contextlib.contextmanager
def workers_running(spark, python: str) -> Iterator[None]:
    """Python workers started meanwhile run ``python``: what PYSPARK_PYTHON names when a session starts."""
    context = spark.sparkContext
    saved, context.pythonExec = context.pythonExec, python
    try:
        yield
    finally:
        context.pythonExec = saved


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A real interpreter in a virtualenv with nothing installed: dynsource's dependencies are missing."""
    directory = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    return str(directory / "bin" / "python")


def test_workers_without_dynsource_fail_with_how_to_install(spark, bare_python):
    session = spark.newSession()  # the check runs once per session
    with workers_running(spark, bare_python), pytest.raises(deployment.WorkerSetupError) as raised:
        deployment.check_workers(session, "dynsource.spark.source")
    message = str(raised.value)
    assert f"interpreter '{bare_python}'" in message and "cannot import dynsource: ModuleNotFoundError" in message
    assert "pip install dynsource" in message and "PYSPARK_PYTHON" in message


def test_dynsources_first_python_work_of_a_session_checks_the_workers_and_says_what_they_lack(
        spark, bare_python, tmp_path):
    import dynsource
    from dynsource.spark import source

    assert source.__name__ == deployment.WORKER_MODULE
    session = spark.newSession()  # dynsource.register ran in the suite's session: it runs no probe
    with (workers_running(spark, bare_python),
          pytest.raises(deployment.WorkerSetupError, match="cannot import dynsource: ModuleNotFoundError")):
        dynsource.write(session.range(3), str(tmp_path / "table"))  # its tasks would run in those workers
    assert not (tmp_path / "table").exists()


def test_workers_that_cannot_start_fail_with_the_cause(spark, tmp_path):
    missing = str(tmp_path / "no-such-python")
    with workers_running(spark, missing), pytest.raises(deployment.WorkerSetupError) as raised:
        deployment.check_workers(spark.newSession(), "dynsource.spark.source")
    assert f'Cannot run program "{missing}"' in str(raised.value) and "pip install dynsource" in str(raised.value)


def test_working_workers_pass_once_per_session(spark):
    session = spark.newSession()
    deployment.check_workers(session, "dynsource.spark.source")
    with workers_running(spark, "/no/such/python"):
        deployment.check_workers(session, "dynsource.spark.source")  # already checked: no second probe job


def test_registering_where_the_planning_interpreter_lacks_dynsource_says_what_it_lacks(spark, bare_python, tmp_path):
    import dynsource

    # Before: format("dynsource") failed later, in its planning worker, with the raw traceback of the unpickling.
    with workers_running(spark, bare_python), pytest.raises(deployment.WorkerSetupError) as raised:
        dynsource.register(spark)
    message = str(raised.value)
    assert f"interpreter '{bare_python}'" in message and "cannot plan dynsource's reads" in message
    assert "ModuleNotFoundError: No module named" in message and "PYSPARK_PYTHON" in message
    missing = str(tmp_path / "no-such-python")
    with workers_running(spark, missing), pytest.raises(deployment.WorkerSetupError, match="this host does not have"):
        dynsource.register(spark)
    dynsource.register(spark)  # the session's own interpreter: nothing to try


def test_local_store_says_nothing_on_local_master(spark, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        deployment.warn_if_local_store(spark, str(tmp_path))
        deployment.warn_if_local_store(None, str(tmp_path))
    assert caplog.text == ""
