"""dynsource: dynamic partition pruning for PySpark's Python data sources (FLIP-248 in Spark)."""

from __future__ import annotations

from importlib import metadata

from pyspark.sql import SparkSession

from dynsource import deployment, figures
from dynsource.catalog import drop_table, register_table, register_tables
from dynsource.collector import collect, collect_data
from dynsource.filtering import DynamicFilteringData
from dynsource.join import dynamic_join
from dynsource.report import QueryReport, ScanReport, scan_report, scan_reports
from dynsource.source import DynsourceDataSource
from dynsource.sql import explain_sql, sql
from dynsource.store import expire, publish, resolve

__version__ = metadata.version("dynsource")

__all__ = [
    "DynamicFilteringData",
    "DynsourceDataSource",
    "QueryReport",
    "ScanReport",
    "__version__",
    "collect",
    "collect_data",
    "drop_table",
    "dynamic_join",
    "expire",
    "explain_sql",
    "publish",
    "register",
    "register_table",
    "resolve",
    "scan_report",
    "scan_reports",
    "sql",
]


def register(spark: SparkSession) -> None:
    """Register the ``dynsource`` data source with ``spark`` (calling it again is harmless).

    First, once per session, a small probe job checks that Spark's Python
    workers can import dynsource; if not, ``WorkerSetupError`` says what they
    lack and how to install it. The registered source sends its read tasks'
    figures to this process (a Spark accumulator) for :func:`scan_report`.

    It changes no Spark setting. In particular it leaves
    ``spark.sql.python.filterPushdown.enabled`` alone: dynsource prunes by
    ``partitionFilter`` and dynamic filters, never through Spark's filter
    pushdown, whose planned reads go stale when a DataFrame is reused (see the
    README's "Known Spark issues").
    """
    deployment.check_workers(spark)
    spark.dataSource.register(DynsourceDataSource.with_figures(figures.channel(spark)))
    register_tables(spark)  # the tables of earlier sessions in a Hive catalog; see dynsource.catalog
