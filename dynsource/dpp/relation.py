"""What a table reference of a query resolves to, as Spark resolves it (:mod:`dynsource.dpp.nameresolution`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructType

from dynsource.spark import catalog
from dynsource.spark.pythonsources import FilteringSource


@dataclass(frozen=True)
class Relation:
    """What a table reference resolves to: where the analysis files it, its schema, and whether dynsource reads it."""

    database: str  # TEMPORARY for the session's temporary views (and the DataFrames a rewrite refers to)
    name: str
    schema: StructType
    definition: catalog.TableDefinition | None = None  # set for a registered dynsource table
    source: FilteringSource | None = None  # set for a table of a Python data source
    # The registered table a view reads, where a Spark Connect lookup shows one.
    view_of: str | None = None

    @property
    def key(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def prunable(self) -> bool:
        """Whether a dynamic filter can prune this relation's scans: a registered table, a filtering source's."""
        return self.definition is not None or (self.source is not None and self.source.filters)

    @property
    def read_by_dynsource(self) -> bool:
        """Whether a query's rewrite reads this relation in its own way (a registered table, a view over one)."""
        return self.definition is not None or self.view_of is not None
