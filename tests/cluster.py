"""A Spark standalone cluster and a Spark Connect server on loopback, started from the installed pyspark.

The pyspark wheel has no ``sbin/start-*.sh`` scripts, so the daemons are its
classes run by ``bin/spark-class`` (and ``bin/spark-submit`` for the Connect
server, which is an application of the cluster). The worker gets its own HOME,
cache and work directory, as a separate node would: nothing the driver writes
under its HOME is visible to the executors. Every process is started in its
own process group and stopped by PID (the executors the worker launched go
with it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

from tests import jvm

SPARK_HOME = Path(pyspark.__file__).parent
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
_START_SECONDS = 120
# The test process's own store and Spark Connect mode must not leak into the cluster's processes.
_NOT_INHERITED = ("XDG_CACHE_HOME", "DYNSOURCE_FILTER_STORE", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spark_environment(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a Spark process on loopback; ``home`` isolates its HOME and caches."""
    environment = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
    environment.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                       # No REST submission server: it would take a fixed port.
                       SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false", SPARK_DAEMON_JAVA_OPTS=jvm.JVM_OPTIONS)
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        environment["HOME"] = str(home)
    environment.update(extra)
    return environment


@dataclass
class Daemon:
    """A started Spark process and its log file."""

    name: str
    process: subprocess.Popen
    log: Path

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} did not log {text!r} in time; its log:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start(name: str, command: list[str], environment: dict[str, str], logs: Path) -> Daemon:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True, cwd=logs)
    return Daemon(name, process, log)


@dataclass
class Cluster:
    """A standalone master and one worker; ``worker_home`` is the worker's (and its executors') HOME."""

    master_url: str
    worker_home: Path
    daemons: list[Daemon]

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


def start_cluster(root: Path, *, cores: int = 2, memory: str = "2g") -> Cluster:
    port = free_port()
    master = start("master", [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                              "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                   spark_environment(root / "master-home"), root / "logs")
    master.wait_for("I have been elected leader")
    url = f"spark://127.0.0.1:{port}"
    worker_home = root / "worker-home"
    worker = start("worker", [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                              "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                              "--work-dir", str(root / "worker-work"), "--webui-port", str(free_port())],
                   spark_environment(worker_home), root / "logs")
    cluster = Cluster(url, worker_home, [master, worker])
    try:
        worker.wait_for("Successfully registered with master")
    except RuntimeError:
        cluster.stop()
        raise
    return cluster


def start_connect_server(master: str, root: Path, *, filter_store: Path) -> tuple[Daemon, str]:
    """A Spark Connect server with ``master`` (a cluster's URL, or ``local[2]``); returns it and its ``sc://`` URL.

    The server is the driver: its planning workers find filters in ``filter_store``.
    """
    port = free_port()
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", CONNECT_SERVER, "--master", master,
               "--conf", f"spark.connect.grpc.binding.port={port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=1g",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.session.timeZone=UTC",
               *(arg for key, value in jvm.DEFAULT_OPTIONS.items() for arg in ("--conf", f"{key}={value}")),
               "spark-internal"]
    server = start("connect-server", command,
                   spark_environment(root / "connect-home", DYNSOURCE_FILTER_STORE=str(filter_store)), root / "logs")
    server.wait_for("Spark Connect server started")
    return server, f"sc://127.0.0.1:{port}"
