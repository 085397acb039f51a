"""Which reader planned a scan, and the report of a DataFrame's scan found from its plan.

A scan is planned in a Python worker, which has no way to hand anything back to
the DataFrame whose action planned it; it saves its report under its table
(:func:`dynsource.report.save`). The DataFrame's analyzed plan names the same
reader: each Python data source relation in it carries the source's name
(``dynsource``, or ``dynsource.<db>.<table>`` for a registered table) and the
reader options, the very ones the planner's source was made with. Their digest
(:class:`Reader`) picks the DataFrame's own scans among the other readers' of
the table. Spark Connect keeps the plan in the server: there a DataFrame cannot
be traced to its scans.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dynsource import deployment, report
from dynsource.options import ScanOptions

SOURCE = "dynsource"  # the source's name; a registered table's is SOURCE + ".<db>.<table>"
_CONNECT = (
    "scan_report(DataFrame) finds the scan in the DataFrame's plan, which Spark Connect keeps in the server: "
    "pass the scan's filter handle instead, or read the scan's INFO log line (reader option logLevel=INFO)"
)


@dataclass(frozen=True)
class Reader:
    """The reader that planned a scan, as the planner and a DataFrame's plan both know it.

    ``table`` is the registered table (None for a read by path); ``options_digest``
    a digest of the reader options as Spark hands them to the source, never the
    options themselves, which may hold credentials.
    """

    table: str | None
    options_digest: str

    @classmethod
    def of(cls, source_name: str, options: Mapping[str, str]) -> Reader:
        """The reader of source ``source_name`` (``dynsource``, or ``dynsource.<db>.<table>``) with ``options``."""
        # The plan keeps the option names lower-cased, the source may get them as typed: compare them lower-cased.
        canonical = json.dumps(sorted((str(name).lower(), str(value)) for name, value in options.items()))
        return cls(source_name.partition(".")[2] or None, hashlib.sha256(canonical.encode()).hexdigest()[:32])


def dataframe_report(df: DataFrame) -> report.ScanReport:
    """The newest kept scan of the one dynsource reader ``df`` reads through.

    Raises
    ------
    ValueError
        ``df`` reads no dynsource table, or several, or is a Spark Connect DataFrame.
    LookupError
        No scan of the reader is kept: no action ran on ``df`` (or on a DataFrame with the same reader) yet.
    """
    if deployment.is_connect(df.sparkSession):
        raise ValueError(_CONNECT + ".")
    readers = {Reader.of(name, options): options for name, options in _relations(df)}
    if len(readers) != 1:
        raise ValueError(
            "scan_report() takes a filter handle, or a DataFrame that reads one dynsource table (read through "
            f"dynsource, by path or as a registered table); this one reads {_tables(readers)}."
        )
    ((reader, options),) = readers.items()
    scan_options = _scan_options(df.sparkSession, reader, options)
    path, location = scan_options.path, scan_options.filter_store
    found = next((scan for scan in report.table_scans(reader.table, path, location)
                  if scan.options_digest == reader.options_digest), None)
    if found is None:
        raise LookupError(
            f"No scan of this DataFrame's reader of {f'table {reader.table}' if reader.table else path} is kept in "
            f"filter store '{location}': run an action on it first (count(), collect(), a write), then ask "
            f"dynsource.scan_report() again (the store keeps the newest {report.MAX_SCANS_KEPT} scans of a table)."
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


def _tables(readers: Mapping[Reader, Mapping[str, str]]) -> str:
    if not readers:
        return "none"
    return ", ".join(f"table {reader.table}" if reader.table else str(options.get("path")) for reader, options
                     in readers.items())


def _scan_options(spark: SparkSession, reader: Reader, options: Mapping[str, Any]) -> ScanOptions:
    """The options the scan was planned with: a registered table's stored ones overridden by the reference's."""
    if reader.table is None:
        return ScanOptions.parse(options)
    from dynsource import catalog  # catalog imports the source, which imports this module

    return catalog.load_definition(spark, reader.table).scan_options.with_options(options)
