"""What star-join detection (:mod:`dynsource.dpp.starjoin`) takes and finds: the tables a query names, its
dynsource table scans, the pairings of a fact scan with a dimension's keys, and the joins refused."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dynsource.dpp import snapshots


@dataclass(frozen=True)
class TableInfo:
    """What detection knows of a table: its columns and Spark SQL types, and whether a dynamic filter can prune it
    (a dynsource table; a table of a Python data source that takes one, on its ``accepted`` fields only)."""

    columns: Mapping[str, str]
    dynsource: bool = False
    accepted: frozenset[str] | None = None  # lower case; None: every column


@dataclass(frozen=True)
class FactScan:
    """One reference to a dynsource table in the query text: its name, alias and the span of the name."""

    table: str
    alias: str
    start: int
    end: int  # exclusive
    written_alias: bool  # whether the text gives the alias (else it is the table's name)
    columns: tuple[str, ...] | None = None  # the table's columns the query uses; None: all of them
    predicates: tuple[str, ...] = ()  # WHERE conjuncts naming only this table, unqualified (it is not null-extended)


@dataclass(frozen=True)
class Pruning:
    """A detected pairing: the fact scan may keep only the rows whose ``fact_columns`` are a row of ``dimension_sql``.

    ``dimension_sql`` returns one column per fact column, in order, named ``k0``, ``k1``...
    """

    fact: FactScan
    fact_columns: tuple[str, ...]
    dimension: str
    dimension_keys: tuple[str, ...]
    dimension_sql: str
    null_safe: bool
    selective: bool = True  # the dimension side holds a selective predicate; else it pays only if it is small
    # The dimension is also filtered by a subquery, left out of ``dimension_sql`` (Spark's dynamic partition
    # pruning counts it as selective: TPC-DS q6's ``d.d_month_seq = (SELECT ...)``).
    filtered_by_subquery: bool = False
    # A join strategy hint (``MERGE(d)``) under which Spark does not broadcast the dimension, and so drops the filter
    # of its dynamic partition pruning; None without one.
    strategy_hint: str | None = None
    pin: snapshots.Pin | None = field(default=None, compare=False)  # how the query reads the keys' rows from a snapshot

    def __str__(self) -> str:
        fact = ", ".join(f"{self.fact.alias}.{column}" for column in self.fact_columns)
        return f"{self.fact.table} ({fact}) <- {self.dimension} ({', '.join(self.dimension_keys)})"


@dataclass(frozen=True)
class Refusal:
    """A join of a fact scan that is not pruned, and why."""

    fact: FactScan | None
    reason: str


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found: the pairings to apply, the refusals to report, and every dynsource table scan."""

    prunings: tuple[Pruning, ...]
    refusals: tuple[Refusal, ...]
    scans: tuple[FactScan, ...] = ()
