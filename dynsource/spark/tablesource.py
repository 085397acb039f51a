"""A registered table's own data source and its stored definition: what Spark's Python workers load of a table.

Spark keeps no OPTIONS, LOCATION or TBLPROPERTIES for a table of a Python data source: the source sees only the
options of the table reference (``WITH (...)``). What survives is the source name. So each registered table gets
its own source, ``dynsource.<db>.<table>``, a subclass of ``DynsourceDataSource`` whose class attributes say where
the table's definition is stored; they travel with the pickled class to the Python workers, which read the
definition (JSON: path, reader options, schema) from that fsspec directory. Registering, listing and dropping
tables is the driver's (:mod:`dynsource.spark.catalog`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pyspark.sql.types import StructType

from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime import logs
from dynsource.runtime.lru import LruMap
from dynsource.scan import taskfigures
from dynsource.scan.options import ScanOptions
from dynsource.spark.source import DynsourceDataSource, said_plainly

SOURCE_PREFIX = "dynsource."
DEFINITIONS_ENV = "DYNSOURCE_DEFINITIONS"
SUFFIX = ".json"  # a definition's file: <location>/<db>.<table>.json
_VERSION = 1
# Definitions parsed, by table, location and stored bytes: a query reads its tables' definitions two or three times.
_parsed: LruMap[TableDefinition] = LruMap(256)


class TableDefinitionError(ValueError):
    """A registered table's definition is missing or cannot be read; the message names the table and where."""


@dataclass(frozen=True)
class TableDefinition:
    """What a registered table reads: its qualified name, reader options (``path`` among them) and schema.

    ``session`` holds the reader options that carry the reading session's settings (its time zone...) where the
    stored options leave them out; they are not stored: a table is read in each session as that session types
    partition values, as Spark reads a catalog table.
    """

    table: str
    options: dict[str, str]
    schema: StructType
    session: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> str:
        return self.options["path"]

    @functools.cached_property
    def scan_options(self) -> ScanOptions:
        """The stored options over the session's, parsed (once per definition: each query's source overrides them)."""
        return ScanOptions.parse({**dict(self.session), **self.options})

    def to_json(self) -> bytes:
        document = {"version": _VERSION, "table": self.table, "options": self.options,
                    "schema": json.loads(self.schema.json())}
        return json.dumps(document, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, table: str, location: str, blob: bytes) -> TableDefinition:
        """Parse a stored definition; anything unexpected is a ``TableDefinitionError`` naming ``location``."""
        try:
            document = json.loads(blob)
            if document["version"] != _VERSION or document["table"] != table:
                raise ValueError(f"it is version {document['version']} of table '{document['table']}'")
            options = {str(k): str(v) for k, v in document["options"].items()}
            definition = cls(table, options, StructType.fromJson(document["schema"]))
            definition.scan_options  # noqa: B018 -- parsed now, so that damage is reported as such
            return definition
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise TableDefinitionError(
                f"The dynsource definition of table '{table}' at '{url(location, table)}' is damaged ({error!r}); "
                "register the table again with dynsource.register_table(..., replace=True)."
            ) from None


class TableSource(DynsourceDataSource):
    """The source of one registered table: its stored definition, overridden by the table reference's options.

    Subclasses made by :func:`table_source` set ``table`` and ``location``.
    """

    table: ClassVar[str] = ""
    location: ClassVar[str] = ""

    @classmethod
    def name(cls) -> str:
        return SOURCE_PREFIX + cls.table

    @said_plainly
    def __init__(self, options: dict[str, str]) -> None:
        self.definition = read_definition(self.table, self.location)
        super().__init__(options)

    def parse_options(self, options: Mapping[str, str]) -> ScanOptions:
        return self.definition.scan_options.with_options(options)

    def schema(self) -> StructType:
        return self.definition.schema


def table_source(
    table: str, location: str, task_figures: taskfigures.Channel | taskfigures.Unavailable
) -> type[TableSource]:
    """A new ``TableSource`` class for ``table`` whose definition is in the directory ``location``."""
    # Not importable by name, so cloudpickle ships the class by value, attributes included.
    attributes = {"table": table, "location": location, "task_figures": task_figures,
                  "driver_log_level": logs.driver_level()}
    return type(f"TableSource_{table.replace('.', '_')}", (TableSource,), attributes)


def read_definition(table: str, location: str) -> TableDefinition:
    """The definition of qualified ``table`` in the directory ``location`` (runs in Python workers too)."""
    try:
        blob = FilterStore.of(location).get(table + SUFFIX)
    except FileNotFoundError:
        raise TableDefinitionError(
            f"Table '{table}' has no dynsource definition at '{url(location, table)}'; register it again with "
            "dynsource.register_table(..., replace=True), or call dynsource.register(spark) with the definitions "
            f"location it was registered with (${DEFINITIONS_ENV})."
        ) from None
    except OSError as error:
        raise TableDefinitionError(
            f"The dynsource definition of table '{table}' at '{url(location, table)}' cannot be read: {error}"
        ) from None
    key = (table, location, blob)
    definition = _parsed.get(key)
    if definition is None:
        definition = TableDefinition.from_json(table, location, blob)
        _parsed.put(key, definition)
    return definition


def url(location: str, table: str) -> str:
    """Where the definition of ``table`` is in ``location``."""
    return f"{location}/{table}{SUFFIX}"
