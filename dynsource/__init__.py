"""dynsource: dynamic partition pruning for PySpark's Python data sources (FLIP-248 in Spark).

The package's layers, bottom to top, each importing only those below it:

- the root modules: the shared vocabulary (Spark types and CASTs, Hive partition names, DDL, storage URLs and
  options, logging, where code runs, a bounded LRU map);
- ``filtering``: the dynamic filter's payload, its store and handles, the collector;
- ``layout``: a Hive-partitioned table on a filesystem: its walk, listing, commit records;
- ``scan``: planning one scan, and its report;
- ``spark``: what plugs into Spark: the data source, its readers and writer, registered tables;
- ``dpp``: automatic dynamic partition pruning (``dynsource.sql``, ``dynamic_join``);
- ``explain``, ``cli``, ``demo`` and this module: the public reports and entry points.

Spark's Python workers load the root, ``filtering``, ``layout``, ``scan`` and ``spark``'s source and writer, never
``dpp``, the reports or the catalog; so the public names are imported on first use.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dynsource.dpp.join import dynamic_join
    from dynsource.dpp.query import explain_sql, sql
    from dynsource.dpp.queryreport import QueryReport
    from dynsource.explain import scan_report, scan_reports
    from dynsource.filtering import DynamicFilteringData
    from dynsource.filtering.collector import collect, collect_data
    from dynsource.filtering.handles import expire, publish, resolve
    from dynsource.scan.report import ScanReport
    from dynsource.spark.catalog import drop_table, register_table, register_tables, table
    from dynsource.spark.dynamicfiltering import SupportsDynamicFiltering, dynamic_filter
    from dynsource.spark.pythonsources import register_filtering_source
    from dynsource.spark.source import DynsourceDataSource
    from dynsource.spark.tablewrites import vacuum, write

# Each public name and the module that defines it.
_PUBLIC = {
    "DynamicFilteringData": "dynsource.filtering",
    "DynsourceDataSource": "dynsource.spark.source",
    "QueryReport": "dynsource.dpp.queryreport",
    "ScanReport": "dynsource.scan.report",
    "SupportsDynamicFiltering": "dynsource.spark.dynamicfiltering",
    "collect": "dynsource.filtering.collector",
    "collect_data": "dynsource.filtering.collector",
    "drop_table": "dynsource.spark.catalog",
    "dynamic_filter": "dynsource.spark.dynamicfiltering",
    "dynamic_join": "dynsource.dpp.join",
    "expire": "dynsource.filtering.handles",
    "explain_sql": "dynsource.dpp.query",
    "publish": "dynsource.filtering.handles",
    "register_filtering_source": "dynsource.spark.pythonsources",
    "register_table": "dynsource.spark.catalog",
    "register_tables": "dynsource.spark.catalog",
    "resolve": "dynsource.filtering.handles",
    "scan_report": "dynsource.explain",
    "scan_reports": "dynsource.explain",
    "sql": "dynsource.dpp.query",
    "table": "dynsource.spark.catalog",
    "vacuum": "dynsource.spark.tablewrites",
    "write": "dynsource.spark.tablewrites",
}

__all__ = [
    "DynamicFilteringData",
    "DynsourceDataSource",
    "QueryReport",
    "ScanReport",
    "SupportsDynamicFiltering",
    "__version__",
    "collect",
    "collect_data",
    "drop_table",
    "dynamic_filter",
    "dynamic_join",
    "expire",
    "explain_sql",
    "publish",
    "register",
    "register_filtering_source",
    "register_table",
    "register_tables",
    "resolve",
    "scan_report",
    "scan_reports",
    "sql",
    "table",
    "vacuum",
    "write",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's: read when asked, not by every worker's import
        return metadata.version("dynsource")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'dynsource' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    # Set after the import: importing dynsource.sql binds the package's `sql` to the module, not the function.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def register(spark: SparkSession) -> None:
    """Register the ``dynsource`` data source with ``spark`` (calling it again is harmless).

    Before dynsource first runs code in Spark's Python workers (a read by its
    Python reader, a write, a Bloom filter's build), a small probe job checks,
    once per session, that they can import dynsource; if not,
    ``WorkerSetupError`` says what they lack and how to install it. A job that
    reads only by Spark's file reader starts no Python worker and runs no probe.
    The interpreter that plans the reads of ``format("dynsource")`` on this host
    is checked here, at no cost where it is this one (``PYSPARK_PYTHON`` set to
    ``sys.executable``): ``WorkerSetupError`` where it cannot import dynsource.
    The registered source sends its read tasks' figures to this process (a Spark
    accumulator) for :func:`scan_report`.

    It also makes the catalog tables that Spark's own writes of format dynsource
    create (``df.write.format("dynsource").option("path", P).saveAsTable("t")``,
    ``df.writeTo("t").using("dynsource")...create()``) registered tables, right
    after the write, in this process (see :mod:`dynsource.spark.catalogwrites`).

    It changes no Spark setting. In particular it leaves
    ``spark.sql.python.filterPushdown.enabled`` alone: dynsource prunes by
    ``partitionFilter`` and dynamic filters, never through Spark's filter
    pushdown, whose planned reads go stale when a DataFrame is reused (see the
    docs/spark-known-issues.md).
    """
    from dynsource.runtime import deployment
    from dynsource.scan import taskfigures
    from dynsource.spark import catalog, catalogwrites, source

    deployment.check_planner(spark)
    spark.dataSource.register(source.DynsourceDataSource.with_figures(taskfigures.channel(spark)))
    catalogwrites.install(spark)
    catalog.register_tables(spark)  # the tables of earlier sessions in a Hive catalog; see dynsource.spark.catalog
