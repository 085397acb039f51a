"""Small helpers shared by the Spark tests."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql.types import NullType, StringType, StructType

from tests.generated_tables import DATA_COLUMN, Table

# Spark's filter pushdown to Python sources (pyspark 4.1+; 4.0 keeps the setting and pushes nothing).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def read(spark, path, schema=None, **options):
    """``spark.read.format("dynsource")`` of ``path`` with ``options`` (and ``schema`` when given)."""
    reader = spark.read.format("dynsource").option("path", str(path))
    if schema is not None:
        reader = reader.schema(schema)
    return reader.options(**options).load()


def rows(df):
    """The rows of ``df`` in a stable order, for comparing results."""
    return sorted(df.collect(), key=repr)


def plain_fact(spark, root: str, table: Table):
    """``spark.read.parquet`` of a generated table, with its declared partition column types."""
    if not table.declared:
        return spark.read.parquet(root)
    # Spark takes declared partition types from a full read schema; the other columns as it infers them.
    types = table.column_types()
    ddl = ", ".join([f"{DATA_COLUMN} int", *(f"`{name}` {types[name]}" for name in table.names)])
    return spark.read.schema(ddl).parquet(root)


def same_types(actual: StructType, expected: StructType) -> bool:
    """Same columns and types; dynsource types a column of only null partitions string where Spark says void."""
    return [f.name for f in actual] == [f.name for f in expected] and all(
        a.dataType == e.dataType or (isinstance(e.dataType, NullType) and isinstance(a.dataType, StringType))
        for a, e in zip(actual, expected, strict=True)
    )


@contextlib.contextmanager
def pushdown_set(spark, value: str):
    """``spark`` with Spark's filter pushdown to Python sources set to ``value``, restored afterwards."""
    previous = spark.conf.get(PUSHDOWN_CONF, None)
    spark.conf.set(PUSHDOWN_CONF, value)
    try:
        yield spark
    finally:
        if previous is None:
            spark.conf.unset(PUSHDOWN_CONF)
        else:
            spark.conf.set(PUSHDOWN_CONF, previous)


def read_by_spark(spark, path, **options):
    """The table at ``path`` planned by dynsource and read by Spark's file reader (reader 'spark')."""
    from dynsource.scan.options import ScanOptions
    from dynsource.spark import filereader
    from dynsource.spark.source import DynsourceDataSource

    options = {"path": str(path), **options, "reader": "spark"}
    schema = DynsourceDataSource(options).table_schema()
    return filereader.read_by_choice(spark, "dynsource", options, ScanOptions.parse(options), schema)


@contextlib.contextmanager
def generating(run_data: Path, name: str) -> Iterator[Path]:
    """``run_data / name``, made by one process of the run at a time (both pyspark lines of ``./test`` run at
    once): the first to hold the lock generates what is missing, the other finds it made."""
    run_data.mkdir(parents=True, exist_ok=True)
    with open(run_data / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield run_data / name
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
