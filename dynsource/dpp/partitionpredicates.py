"""The query's own predicates on a fact scan's partition columns: its ``partitionFilter``, and those that cannot be one.

``dynsource.sql`` turns each WHERE conjunct naming only a fact scan's partition columns into that scan's
``partitionFilter`` where one evaluates it exactly (so it prunes directories); Spark still applies every conjunct to
the rows read. A scan that reads every partition is read with ``warnUnpruned`` off: its own WARNING would name
doors the query already took. Instead, where the query has a predicate on a partition column that no
``partitionFilter`` evaluates (``hour(ts) = 3``), the query's report says so, and a WARNING on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dynsource.dpp import detection
from dynsource.layout.partitionfilter import SUPPORTED_TYPES, PartitionFilter
from dynsource.scan.options import ScanOptions

log = logging.getLogger(__name__)
WHOLE = {"warnUnpruned": "false"}  # the options of a scan read whole: dynsource.sql says itself when it matters


def partition_filter(scan: detection.FactScan, stored: ScanOptions, column_types: Mapping[str, str],
                     partition_columns: Sequence[str]) -> str | None:
    """The query's own predicates on the scan's partition columns, as a ``partitionFilter`` (the ``stored`` one of
    the table kept)."""
    partition_columns = {column.lower() for column in partition_columns}
    kept = []
    for text in scan.predicates:
        try:
            predicate = PartitionFilter.parse(text).under(stored.partition_settings)
            predicate.check_types(column_types)
        except ValueError:
            continue  # not one partitionFilter evaluates exactly: Spark applies it to the rows read
        if predicate.columns() <= partition_columns:
            kept.append(text)
    if not kept:
        return None
    before = [stored.partition_filter.text] if stored.partition_filter is not None else []
    return " AND ".join(f"({text})" for text in [*before, *kept])


def unpruned(scan: detection.FactScan, name: str, partition_columns: Sequence[str]) -> list[str]:
    """The note, also logged as a WARNING, on the query's predicates on the partition columns of a scan (``name``)
    that no ``partitionFilter`` evaluates, for a scan that reads every partition: none without such a predicate."""
    columns = {column.lower() for column in partition_columns}
    found = [text for text in scan.predicates if columns and _names_only(text, columns)]
    if not found:
        return []
    note = (f"{name}: the predicate(s) {', '.join(found)} on its partition columns prune no partition "
            f"(partitionFilter evaluates comparisons, IN, BETWEEN and IS NULL of {SUPPORTED_TYPES} columns with "
            "literals); the scan reads every partition and Spark filters the rows read")
    log.warning("dynsource: %s.", note)
    return [note]


def _names_only(predicate: str, columns: set[str]) -> bool:
    try:
        named = {column.name.lower() for column in sqlglot.parse_one(predicate, read="spark").find_all(exp.Column)}
    except SqlglotError:
        return False
    return bool(named) and named <= columns
