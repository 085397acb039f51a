"""dynsource: dynamic partition pruning for PySpark's Python data sources (FLIP-248 in Spark)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from dynsource.collector import collect, collect_data
from dynsource.filtering import DynamicFilteringData
from dynsource.join import dynamic_join
from dynsource.report import ScanReport, scan_report
from dynsource.source import DynsourceDataSource
from dynsource.store import publish, resolve

__all__ = [
    "DynamicFilteringData",
    "DynsourceDataSource",
    "ScanReport",
    "collect",
    "collect_data",
    "dynamic_join",
    "publish",
    "register",
    "resolve",
    "scan_report",
]


def register(spark: SparkSession) -> None:
    """Register the ``dynsource`` data source with ``spark`` (calling it again is harmless)."""
    spark.dataSource.register(DynsourceDataSource)
