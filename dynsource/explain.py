"""The public reports: ``dynsource.scan_report`` and ``dynsource.scan_reports``, EXPLAIN for dynamic filtering.

A report is found by a filter handle (its scans' reports, kept in the filter store), or from a DataFrame: what
:func:`dynsource.sql` or :func:`dynsource.dynamic_join` recorded for it, else its reader's newest scan, found from
the DataFrame's analysed plan (:mod:`dynsource.scan.origin`). Spark Connect keeps the plan in the server: there a
DataFrame cannot be traced to its scans, and the handle is the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dynsource.dpp.queryreport import QueryReport, recorded
from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime import deployment
from dynsource.scan.options import ScanOptions
from dynsource.scan.origin import SOURCE, Reader
from dynsource.scan.report import MAX_SCANS_KEPT, ScanReport, handle_report, handle_reports, table_scans
from dynsource.spark import catalog, filereader

_CONNECT = (
    "scan_report(DataFrame) finds the scan in the DataFrame's plan, which Spark Connect keeps in the server: "
    "pass the scan's filter handle instead, or read the scan's INFO log line (reader option logLevel=INFO)"
)


def scan_report(
    target: str | DataFrame, store_url: str | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> ScanReport | QueryReport:
    """The report of the newest scan that used a handle, of a DataFrame made by ``dynamic_join``,
    (a :class:`QueryReport`) of one made by ``dynsource.sql``, or of any other
    DataFrame that reads one dynsource table: its reader's newest scan, found
    from the DataFrame's plan (classic PySpark, not Spark Connect).

    ``print()`` it for a summary; ``dataclasses.asdict()`` gives every figure.
    ``storage_options`` are the fsspec options of the filter store ``store_url``.
    Raises ``LookupError`` when no scan has used the handle, or the DataFrame, yet
    (run an action first).
    """
    if not isinstance(target, DataFrame):
        return handle_report(target, FilterStore.of(store_url, storage_options))
    made = recorded(target)
    if isinstance(made, QueryReport):
        return made
    if made is None:
        return dataframe_report(target)
    if made.handle is None:
        return ScanReport(None, made.fact, None, None, None, False, *[None] * 7, fallback_reason=made.reason)
    try:
        return handle_report(made.handle, made.store)
    except LookupError:
        raise LookupError("No scan of this DataFrame yet: run an action on it first (count(), collect(), a "
                          "write), then ask dynsource.scan_report() again.") from None


def scan_reports(
    handle: str, store_url: str | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> list[ScanReport]:
    """The reports of the scans that used ``handle``, oldest first (at most ``MAX_SCANS_KEPT``, the newest)."""
    return handle_reports(handle, FilterStore.of(store_url, storage_options))


def dataframe_report(df: DataFrame) -> ScanReport:
    """The newest kept scan of the one dynsource reader ``df`` reads through: a Python source of its plan, or
    Spark's file reader handed a scan dynsource planned (``dynsource.table``, the fact of ``dynamic_join`` or
    ``dynsource.sql``, and what derives from them).

    Raises
    ------
    ValueError
        ``df`` reads no dynsource table, or several, or is a Spark Connect DataFrame.
    LookupError
        No scan of the reader is kept: no action ran on ``df`` (or on a DataFrame with the same reader) yet.
    """
    if deployment.is_connect(df.sparkSession):
        raise ValueError(_CONNECT + ".")
    readers = {Reader.of(name, options): _scan_options(df.sparkSession, Reader.of(name, options), options)
               for name, options in _relations(df)}
    readers |= filereader.reads_of(df)
    if len(readers) != 1:
        raise ValueError(
            "scan_report() takes a filter handle, or a DataFrame that reads one dynsource table (read through "
            f"dynsource, by path or as a registered table); this one reads {_tables(readers)}."
        )
    ((reader, scan_options),) = readers.items()
    path, location = scan_options.path, scan_options.filter_store
    found = next((scan for scan in table_scans(reader.table, path, location)
                  if scan.options_digest == reader.options_digest), None)
    if found is None:
        raise LookupError(
            f"No scan of this DataFrame's reader of {f'table {reader.table}' if reader.table else path} is kept in "
            f"filter store '{location}': run an action on it first (count(), collect(), a write), then ask "
            f"dynsource.scan_report() again (the store keeps the newest {MAX_SCANS_KEPT} scans of a table)."
        )
    return found


def _relations(df: DataFrame) -> list[tuple[str, dict[str, str]]]:
    """The source name and options of each dynsource relation of ``df``'s analyzed plan."""
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    relations = []
    for index in range(leaves.size()):
        leaf = leaves.apply(index)
        if leaf.getClass().getSimpleName() != "DataSourceV2Relation":
            continue
        table = leaf.table()
        name = table.name()
        if table.getClass().getSimpleName() == "PythonTable" and (name == SOURCE or name.startswith(SOURCE + ".")):
            options = leaf.options()
            relations.append((name, {key: options.get(key) for key in options.keySet().toArray()}))
    return relations


def _tables(readers: Mapping[Reader, ScanOptions]) -> str:
    if not readers:
        return "none"
    return ", ".join(f"table {reader.table}" if reader.table else options.path for reader, options
                     in readers.items())


def _scan_options(spark: SparkSession, reader: Reader, options: Mapping[str, Any]) -> ScanOptions:
    """The options the scan was planned with: a registered table's stored ones overridden by the reference's."""
    if reader.table is None:
        return ScanOptions.parse(options)
    return catalog.load_definition(spark, reader.table).scan_options.with_options(options)
