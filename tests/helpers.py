"""Small helpers shared by the Spark tests."""

from __future__ import annotations


def read(spark, path, schema=None, **options):
    """``spark.read.format("dynsource")`` of ``path`` with ``options`` (and ``schema`` when given)."""
    reader = spark.read.format("dynsource").option("path", str(path))
    if schema is not None:
        reader = reader.schema(schema)
    return reader.options(**options).load()


def rows(df):
    """The rows of ``df`` in a stable order, for comparing results."""
    return sorted(df.collect(), key=repr)
