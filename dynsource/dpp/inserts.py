"""``INSERT`` statements of :func:`dynsource.sql` into registered dynsource tables, written by ``dynsource.write``.

Spark's own ``INSERT`` reaches a Python data source without the session's
``spark.sql.sources.partitionOverwriteMode`` (under ``dynamic`` Spark refuses the
statement: a Python source cannot declare dynamic overwrites) and without
``PARTITION (k = v)`` clauses (a Python source's table has no partition columns
Spark knows of). So :func:`run` takes the ``INSERT`` statements of a query text
that Spark cannot write as written, ``INSERT OVERWRITE`` and any with a
``PARTITION`` clause or ``REPLACE WHERE``, and writes them itself:

- the source query runs through :func:`dynsource.sql` (its star joins pruned);
- its columns are matched to the table's by position (by name with ``BY NAME``)
  and cast to the table's types, as Spark's ``INSERT`` does; the values of
  ``PARTITION (k = v)`` are added as columns;
- ``dynsource.write`` writes the rows: ``INSERT INTO`` appends; ``INSERT
  OVERWRITE`` replaces what Spark would: the partitions the ``PARTITION`` values
  name when every partition column has one, else as the table's or the session's
  ``partitionOverwriteMode`` says, the whole table (within the ``PARTITION``
  values) under ``static``, the partitions written under ``dynamic``;
  ``REPLACE WHERE`` replaces the partitions its predicate keeps.

Other statements, and ``INSERT``s naming a column list or another table, are
Spark's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlglot
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from dynsource.dpp import nameresolution, sqltree
from dynsource.scan import tableschema
from dynsource.spark import tablewrites
from dynsource.spark.tablesource import TableDefinition

# Where an INSERT's query starts after REPLACE WHERE's predicate: a token no predicate has at its top level.
_QUERY_STARTS = (TokenType.SELECT, TokenType.WITH, TokenType.FROM, TokenType.VALUES, TokenType.TABLE)


@dataclass(frozen=True)
class Insert:
    """One INSERT statement dynsource writes: the table, its query's text, and what the statement says."""

    definition: TableDefinition
    query: str
    overwrite: bool
    static: tuple[tuple[str, str], ...]  # PARTITION (k = v): column, the value's SQL
    by_name: bool
    replace_where: str | None


def run(spark: SparkSession, text: str, sql: Callable[[SparkSession, str], DataFrame]) -> DataFrame | None:
    """Write ``text`` if it is an INSERT this module takes, reading its query with ``sql`` (``dynsource.sql``);
    None for any other statement, which Spark runs."""
    insert = parse(spark, text)
    if insert is None:
        return None
    rows = _aligned(sql(spark, insert.query), insert)
    if not insert.overwrite:
        tablewrites.write(rows, insert.definition.table, mode="append")
        return spark.createDataFrame([], StructType([]))
    options = {}
    if insert.replace_where is not None:
        options = {"partitionFilter": insert.replace_where, "partitionOverwriteMode": "static"}
    elif insert.static:
        options["partitionFilter"] = " AND ".join(f"`{column}` = {value}" for column, value in insert.static)
        if {c.lower() for c, _ in insert.static} >= {c.lower() for c in _partition_columns(insert.definition)}:
            options["partitionOverwriteMode"] = "static"  # a value for every column: those partitions, as Spark
    tablewrites.write(rows, insert.definition.table, mode="overwrite", options=options)
    return spark.createDataFrame([], StructType([]))


def _partition_columns(definition: TableDefinition) -> tuple[str, ...]:
    """The table's partition columns, from the walk down its first branch."""
    _, walk = tableschema.table_walk(definition.scan_options)
    return walk.enumerate(tableschema.first_branch).columns


def parse(spark: SparkSession, text: str) -> Insert | None:
    """``text`` as an INSERT into a registered dynsource table that Spark cannot write as written, else None."""
    if "insert" not in text.lower():
        return None
    try:
        statement = sqlglot.parse_one(text, read="spark")
    except SqlglotError:
        return None
    if not isinstance(statement, exp.Insert) or not isinstance(statement.this, exp.Table):
        return None  # a column list (exp.Schema), a directory: Spark's
    table = statement.this
    partition = table.args.get("partition")
    where = statement.args.get("where")
    if not (statement.args.get("overwrite") or partition is not None or where is not None):
        return None  # a plain INSERT INTO, which Spark writes
    relation = nameresolution.Resolver(spark).resolve(tuple(part.name for part in table.parts))
    if relation is None or relation.definition is None:
        return None
    static = tuple((item.this.name, item.expression.sql(dialect="spark"))
                   for item in (partition.expressions if partition is not None else ()) if isinstance(item, exp.EQ))
    overwrite = bool(statement.args.get("overwrite")) or where is not None  # REPLACE WHERE replaces, INTO or not
    return Insert(relation.definition, _query_text(text, table, where is not None), overwrite, static,
                  bool(statement.args.get("by_name")), where.sql(dialect="spark") if where is not None else None)


def _query_text(text: str, table: exp.Table, replace_where: bool) -> str:
    """The INSERT's query as written (after the table, its PARTITION clause, BY NAME and REPLACE WHERE), with the
    common table expressions written before INSERT, if any."""
    tokens = sqltree.tokens(text)
    table_end = max(part.meta["end"] for part in table.parts if "end" in part.meta)
    index = next(i for i, token in enumerate(tokens) if token.start > table_end)
    if tokens[index].token_type == TokenType.PARTITION:
        index = _after_parentheses(tokens, index + 1)
    if tokens[index].text.upper() == "BY" and index + 1 < len(tokens) and tokens[index + 1].text.upper() == "NAME":
        index += 2
    if replace_where:
        index = next(i for i in range(index, len(tokens)) if tokens[i].token_type in _QUERY_STARTS
                     and _depth(tokens, index, i) == 0)
    insert = next(i for i, token in enumerate(tokens) if token.token_type == TokenType.INSERT)
    return text[:tokens[insert].start] + text[tokens[index].start:]


def _after_parentheses(tokens: Sequence, index: int) -> int:
    """The index after the parenthesized group opening at ``tokens[index]``."""
    depth = 0
    for position in range(index, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[position].token_type, 0)
        if depth == 0:
            return position + 1
    raise ValueError("an unclosed parenthesis in the INSERT's PARTITION clause")


def _depth(tokens: Sequence, start: int, end: int) -> int:
    return sum({TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0) for t in tokens[start:end])


def _aligned(df: DataFrame, insert: Insert) -> DataFrame:
    """The query's rows as the table's columns: by position (or name) and cast to the table's types, with the
    PARTITION clause's values added."""
    schema = insert.definition.schema
    given = {column.lower() for column, _ in insert.static}
    wanted = [field for field in schema.fields if field.name.lower() not in given]
    if len(df.columns) != len(wanted):
        raise ValueError(
            f"Cannot write into table '{insert.definition.table}': the query gives {len(df.columns)} column(s), "
            f"{df.columns}, but the table takes {len(wanted)}, {[f.name for f in wanted]}"
            + (f" besides those of its PARTITION clause, {sorted(given)}." if given else "."))
    if insert.by_name:
        by_lower = {column.lower(): column for column in df.columns}
        missing = [f.name for f in wanted if f.name.lower() not in by_lower]
        if missing:
            raise ValueError(f"Cannot write into table '{insert.definition.table}' BY NAME: the query has no "
                             f"column(s) {missing}; its columns are {df.columns}.")
        sources = [df[f"`{by_lower[f.name.lower()]}`"] for f in wanted]
    else:
        sources = [df[f"`{column}`"] for column in df.columns]
    columns: dict[str, Column] = {f.name: source.cast(f.dataType).alias(f.name)
                                  for f, source in zip(wanted, sources, strict=True)}
    types = {f.name.lower(): f for f in schema.fields}
    for column, value in insert.static:
        field = types.get(column.lower())
        if field is None:
            raise ValueError(f"PARTITION clause of the INSERT into '{insert.definition.table}' names column "
                             f"'{column}', which the table does not have; its columns are {schema.names}.")
        columns[field.name] = F.expr(value).cast(field.dataType).alias(field.name)
    return df.select(*(columns[name] for name in schema.names))
