"""dynsource: dynamic partition pruning for PySpark's Python data sources (FLIP-248 in Spark).

The public names are imported on first use: Spark's Python workers import this
package to unpickle the data source and should load only what reading needs,
not the driver's SQL analysis, collector and catalog.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dynsource.catalog import drop_table, register_table, register_tables
    from dynsource.collector import collect, collect_data
    from dynsource.explain import scan_report, scan_reports
    from dynsource.filtering import DynamicFilteringData
    from dynsource.handles import expire, publish, resolve
    from dynsource.join import dynamic_join
    from dynsource.query import explain_sql, sql
    from dynsource.queryreport import QueryReport
    from dynsource.report import ScanReport
    from dynsource.source import DynsourceDataSource
    from dynsource.writes import vacuum, write

# Each public name and the module that defines it.
_PUBLIC = {
    "DynamicFilteringData": "dynsource.filtering",
    "DynsourceDataSource": "dynsource.source",
    "QueryReport": "dynsource.queryreport",
    "ScanReport": "dynsource.report",
    "collect": "dynsource.collector",
    "collect_data": "dynsource.collector",
    "drop_table": "dynsource.catalog",
    "dynamic_join": "dynsource.join",
    "expire": "dynsource.handles",
    "explain_sql": "dynsource.query",
    "publish": "dynsource.handles",
    "register_table": "dynsource.catalog",
    "register_tables": "dynsource.catalog",
    "resolve": "dynsource.handles",
    "scan_report": "dynsource.explain",
    "scan_reports": "dynsource.explain",
    "sql": "dynsource.query",
    "vacuum": "dynsource.writes",
    "write": "dynsource.writes",
}

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
    "register_tables",
    "resolve",
    "scan_report",
    "scan_reports",
    "sql",
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
    from dynsource import catalog, deployment, figures, source

    deployment.check_workers(spark)
    spark.dataSource.register(source.DynsourceDataSource.with_figures(figures.channel(spark)))
    catalog.register_tables(spark)  # the tables of earlier sessions in a Hive catalog; see dynsource.catalog
