"""The Spark session of a ``dynsource`` command: local, with a Hive catalog placed where the flags say, a lean JVM,
and quiet logs (a command says a failure in one line)."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_CONNECTION_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"
_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_WAREHOUSE = "spark.sql.warehouse.dir"
_DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
_LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Hive's default: an embedded Derby database in the directory the JVM starts in.
_DEFAULT_METASTORE = "jdbc:derby:;databaseName=metastore_db;create=true"


def hive_session(conf: list[str], metastore: str | None) -> SparkSession:
    """The command's session: this process's active one, else a local one with a Hive catalog, said on stderr."""
    # Workers must run this interpreter (the system python3 lacks pyarrow), and only a Hive catalog keeps
    # tables after the command.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import dynsource

    settings = pairs(conf, "--conf")
    started = SparkSession.getActiveSession() is None
    if started:  # otherwise these settings would not take: the JVM runs already
        places = _place_catalog(settings, metastore)
        print(f"dynsource: starting a local Spark session with a Hive catalog ({places}) ...", file=sys.stderr,
              flush=True)
    builder = (SparkSession.builder.appName("dynsource-table").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").enableHiveSupport())
    # A command's JVM lives seconds: C2's compilations and the parallel collector's threads cost more than they
    # save there (`table list --catalog` measured 8.7 s against 9.1-10.5 s on two cores). A --conf of the key wins.
    builder = builder.config(_DEFAULT_JAVA_OPTIONS, _LEAN_JVM)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if started:
        _quiet(spark)
    dynsource.register(spark)
    return spark


def _quiet(spark: SparkSession) -> None:
    """A command prints a failure as one line: Spark's logs of it (a failed task's stack trace from the executor,
    pyspark's error with its query context) would stand before that line, ~100 lines of them."""
    from pyspark.logger import PySparkLogger

    spark.sparkContext.setLogLevel("FATAL")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # pyspark's loggers of query errors
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _place_catalog(settings: dict[str, str], metastore: str | None) -> str:
    """Point the Derby log next to the metastore (updating ``settings``); say where the catalog's files go."""
    if metastore is not None:
        if _CONNECTION_URL in settings:
            sys.exit(f"dynsource: give --metastore or --conf {_CONNECTION_URL}=..., not both")
        directory = Path(metastore).resolve()
        directory.mkdir(parents=True, exist_ok=True)  # Derby creates its database, not the log's directory
        settings[_CONNECTION_URL] = f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true"
    database = _derby_directory(settings.get(_CONNECTION_URL, _DEFAULT_METASTORE))
    place = warehouse(settings).removeprefix("file:")
    if database is None:
        return f"metastore {settings[_CONNECTION_URL]}, warehouse {place}"
    derby_log = database.parent / "derby.log"
    # Derby reads the property once, when it boots in the driver JVM, which this process has not started yet.
    settings[_JAVA_OPTIONS] = f'{settings.get(_JAVA_OPTIONS, "")} "-Dderby.stream.error.file={derby_log}"'.strip()
    return f"metastore {database}, Derby log {derby_log}, warehouse {place}"


def warehouse(settings: dict[str, str]) -> str:
    """The warehouse URL the session of ``settings`` has (Spark resolves a path from the current directory)."""
    warehouse = settings.get(_WAREHOUSE, "spark-warehouse")
    return warehouse if ":" in warehouse else f"file:{os.path.abspath(warehouse)}"


def _derby_directory(url: str) -> Path | None:
    """The directory of an embedded Derby database URL; None for another database or a non-directory Derby."""
    if not url.startswith("jdbc:derby:"):
        return None
    name, *attributes = url.removeprefix("jdbc:derby:").split(";")
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        if key.strip() == "databaseName":
            name = value.strip()
    name = name.removeprefix("directory:")
    if not name or name.startswith("//") or re.match(r"(memory|classpath|jar):", name):
        return None
    return Path(name).resolve()  # a relative name is relative to derby.system.home, by default the cwd


def pairs(items: list[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments of ``flag``; another form exits with a one-line error."""
    pairs = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            sys.exit(f"dynsource: {flag} {item!r} is not KEY=VALUE")
        pairs[key.strip()] = value
    return pairs
