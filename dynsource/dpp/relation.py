"""What a table reference of a query resolves to, as Spark resolves it (:mod:`dynsource.dpp.nameresolution`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructType

from dynsource.spark import catalog


@dataclass(frozen=True)
class Relation:
    """What a table reference resolves to: where the analysis files it, its schema, and whether dynsource reads it."""

    database: str  # TEMPORARY for the session's temporary views (and the DataFrames a rewrite refers to)
    name: str
    schema: StructType
    definition: catalog.TableDefinition | None = None  # set for a registered dynsource table
    # The registered table a view reads, where a Spark Connect lookup shows one.
    view_of: str | None = None

    @property
    def key(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def read_by_dynsource(self) -> bool:
        """Whether a query's rewrite reads this relation in its own way (a registered table, a view over one)."""
        return self.definition is not None or self.view_of is not None
