"""Spark itself as the oracle of the generated cases: how ``spark.read.parquet`` types a case's partitions, and which
partitions a join with its dimension keeps, under the session settings that change either.

A case (tests/generated_tables.py) is a table on a local disk and a dimension's rows. For a batch of cases Spark
answers in one job: for each partition holding a file, its values as Spark types them (``binaryFile`` lists every
data file, empty ones too, and types the partition directories as ``spark.read.parquet`` does); the partitions whose
values join a key row on the filter's partition fields; and those holding a row that joins a key row on all its
fields. A data file's name tells its partition's index (``FILE_NAME``), whatever the reader does with the escaped
directory names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import operator
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import ArithmeticException, NumberFormatException, SparkRuntimeException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dynsource import partitions
from dynsource.partitions import PartitionSettings
from dynsource.types import arrow_type, normalize_type, spark_schema
from tests.generated_tables import DATA_COLUMN, FILE_NAME, Case

ANSI_SETTING = "spark.sql.ansi.enabled"
_DATA = [StructField(DATA_COLUMN, IntegerType())]
# binaryFile takes its own columns only exactly as it makes them.
_BINARY_FILE = [StructField("path", StringType(), False), StructField("modificationTime", TimestampType(), False),
                StructField("length", LongType(), False), StructField("content", BinaryType())]
CASE_SENSITIVE_SETTING = "spark.sql.caseSensitive"


@dataclass(frozen=True)
class Profile:
    """Session settings a case runs under besides its time zone: each changes how Spark types, parses or compares
    partition values or names columns."""

    name: str
    settings: Mapping[str, str] = field(default_factory=dict)

    def conf(self, zone: str) -> dict[str, str]:
        return {partitions.TIME_ZONE_SETTING: zone, **self.settings}

    def partition_settings(self, zone: str) -> PartitionSettings:
        inference = self.settings.get(partitions.INFERENCE_SETTING, "true") == "true"
        ntz = self.settings.get(partitions.TIMESTAMP_TYPE_SETTING, "TIMESTAMP_LTZ") == "TIMESTAMP_NTZ"
        return PartitionSettings(zone, inference, ntz)


PROFILES = (
    Profile("defaults"),
    Profile("ANSI off", {ANSI_SETTING: "false"}),
    Profile("no partition type inference", {partitions.INFERENCE_SETTING: "false"}),
    Profile("case-sensitive", {CASE_SENSITIVE_SETTING: "true"}),
    Profile("TIMESTAMP_NTZ", {partitions.TIMESTAMP_TYPE_SETTING: "TIMESTAMP_NTZ"}),
)


@contextlib.contextmanager
def session_set(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[SparkSession]:
    """``spark`` with ``conf`` set, each setting restored afterwards (unset where it was)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@dataclass
class Answer:
    """What Spark says of one case: each partition column's type, each partition's typed values (by its index),
    the partitions whose values join a key row on the partition fields, and those with a row joining one."""

    types: dict[str, str]
    values: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    matching: set[int] = field(default_factory=set)
    joining: set[int] = field(default_factory=set)
    error: str | None = None  # Spark's error where it refuses the case's query (its values, matching... are unknown)


def dimension(spark: SparkSession, case: Case) -> DataFrame:
    """The filter's key rows as a DataFrame: one ``d_<field>`` column per field, of the field's type."""
    schema = StructType([StructField(f"d_{name}", spark_type(type_name)) for name, type_name in case.filter.fields])
    return spark.createDataFrame([list(row) for row in case.filter.rows], schema)


def spark_fact(spark: SparkSession, root: str, case: Case, source: str = "parquet", *,
               schema_of_data: bool = False) -> DataFrame:
    """``spark.read`` of the case's table (``parquet``, or ``binaryFile`` for a row per data file), its declared
    partition columns in the read schema: Spark infers the others as it does. With ``schema_of_data``, the data
    column is declared too, so that no file's footer is read to learn it."""
    declared = [StructField(name, spark_type(type_name)) for name, type_name in case.table.declared.items()]
    reader = spark.read.format(source)
    if declared or schema_of_data:
        reader = reader.schema(StructType([*(_DATA if source == "parquet" else _BINARY_FILE), *declared]))
    return reader.load(root)


def spark_type(type_name: str) -> DataType:
    """The Spark type of a dynsource type name (``timestamp`` is an instant whatever ``spark.sql.timestampType``)."""
    return spark_schema(pa.schema([("x", arrow_type(type_name))]))[0].dataType


def join_condition(fact: DataFrame, dim: DataFrame, case: Case, *, partition_fields_only: bool = False):
    """The equi-join of the fact with the dimension on the filter's fields (``<=>`` where it is null-safe)."""
    columns = {name.lower(): name for name in fact.columns}
    terms = []
    for name, _ in case.filter.fields:
        if partition_fields_only and name == DATA_COLUMN:
            continue
        left, right = fact[f"`{columns[name.lower()]}`"], dim[f"`d_{name}`"]
        terms.append(left.eqNullSafe(right) if case.filter.null_safe else left == right)
    return functools.reduce(operator.and_, terms) if terms else None


def _type_name(column: StructField) -> str:
    """The column's Spark SQL type name as dynsource writes it; ``void`` (a column of only null partitions)."""
    type_name = column.dataType.simpleString()
    return type_name if type_name == "void" else normalize_type(type_name)


def _json_value(column: StructField) -> Any:
    """The column as its JSON carries its value exactly: an instant as microseconds, a local time or decimal as text."""
    name = F.col(f"`{column.name}`")
    type_name = _type_name(column)
    if type_name == "timestamp":
        return F.unix_micros(name)
    if type_name == "timestamp_ntz":
        return F.date_format(name, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if type_name.startswith("decimal") or type_name == "date":
        return name.cast("string")
    return name


def _pieces(spark: SparkSession, index: int, case: Case, root: str) -> tuple[dict[str, str], list[DataFrame]]:
    """The case's partition types, and the two scans answering it: a row per data file (its partition's values,
    whether they join a key row on the partition fields) and the fact's rows joining a key row."""
    files = spark_fact(spark, root, case, "binaryFile")
    partition_columns = [f for f in files.schema.fields if f.name in case.table.names]
    types = {f.name: _type_name(f) for f in partition_columns}
    tag = F.lit(index).alias("case")
    values = F.to_json(F.struct(*[_json_value(f).alias(f.name) for f in partition_columns]))
    matching = _joins_a_key(files, case, partition_fields_only=True)
    fact = spark_fact(spark, root, case, schema_of_data=True)
    joining = fact.where(_joins_a_key(fact, case)).select(tag, F.col("_metadata.file_path").alias("path"))
    return types, [
        files.select(tag, F.lit(True).alias("file"), _part("path"), values.alias("json"), matching.alias("matching")),
        joining.select("case", F.lit(False), _part("path"), F.lit(None), F.lit(True)),
    ]


def _part(path: str):
    return F.regexp_extract(F.col(path), FILE_NAME, 1).cast("int").alias("part")


def _joins_a_key(fact: DataFrame, case: Case, *, partition_fields_only: bool = False):
    """Whether a row of ``fact`` joins some key row of the case's filter, on its fields (``=``, or ``<=>`` where
    null-safe). The key rows are literals of their fields' types, so each comparison is typed as the join's; they
    are written as SQL text, one expression a case (a column call per value costs more than the job)."""
    columns = {name.lower(): name for name in fact.columns}
    fields = [(position, name, type_name) for position, (name, type_name) in enumerate(case.filter.fields)
              if not (partition_fields_only and name == DATA_COLUMN)]
    if not fields:
        return F.lit(True)
    op = "<=>" if case.filter.null_safe else "="
    condition = " AND ".join(f"`{columns[name.lower()]}` {op} k.k{position}" for position, name, _ in fields)
    # With =, a key row holding a null joins nothing, whichever of its fields are compared here.
    usable = [row for row in case.filter.rows if case.filter.null_safe or None not in row]
    rows = [", ".join(f"'k{position}', {sql_literal(row[position], type_name)}" for position, _, type_name in fields)
            for row in usable]
    keys = f"array({', '.join(f'named_struct({row})' for row in rows)})"
    if not rows:  # an empty array literal has no element type: nothing joins
        return F.lit(False)
    return F.expr(f"coalesce(exists({keys}, k -> {condition}), false)")


def sql_literal(value: Any, type_name: str) -> str:
    """``value`` as a Spark SQL literal of exactly the dynsource type ``type_name``, in any session time zone."""
    spark_name = spark_type(type_name).simpleString()
    if value is None:
        return f"CAST(NULL AS {spark_name})"
    if type_name == "timestamp":
        return f"timestamp_micros({as_json(value, type_name)})"
    if type_name == "string":
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    if type_name == "boolean":
        return "TRUE" if value else "FALSE"
    text = repr(value) if isinstance(value, float) else str(as_json(value, type_name))
    return f"CAST('{text}' AS {spark_name})"


def answers(spark: SparkSession, batch: Sequence[tuple[Case, str]]) -> list[Answer]:
    """Spark's answer for each (case, table root) of ``batch``, in the session's current settings, in one job.

    A query Spark refuses to run (under ANSI, a string partition value its comparison cannot cast) fails the job: the
    batch is then asked again in halves, so that only such cases get an answer holding the error instead.
    """
    with ThreadPoolExecutor(4) as pool:  # each piece is analysed in the JVM: side by side, on both cores
        built = list(pool.map(lambda item: _pieces(spark, item[0], *item[1]), enumerate(batch)))
    found = [Answer(types) for types, _ in built]
    _ask([frames for _, frames in built], range(len(batch)), found)
    return found


def _ask(built: Sequence[list[DataFrame]], indices: Sequence[int], found: list[Answer]) -> None:
    pieces = [frame for index in indices for frame in built[index]]
    try:
        rows = functools.reduce(DataFrame.unionAll, pieces).collect()
    except (SparkRuntimeException, ArithmeticException, NumberFormatException, Py4JJavaError) as error:
        if len(indices) == 1:
            found[indices[0]].error = str(error)
            return
        middle = len(indices) // 2
        _ask(built, indices[:middle], found)
        _ask(built, indices[middle:], found)
        return
    for row in rows:
        answer = found[row["case"]]
        if row["file"]:
            document = json.loads(row["json"], parse_float=Decimal)
            answer.values[row["part"]] = tuple(document.get(name) for name in answer.types)
            if row["matching"]:
                answer.matching.add(row["part"])
        else:
            answer.joining.add(row["part"])


def as_json(value: Any, type_name: str) -> Any:
    """A typed partition value (as dynsource's ``to_arrow`` gives it in Python) in the form :func:`answers` reads
    Spark's in."""
    if value is None:
        return None
    if type_name == "timestamp":
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if type_name == "timestamp_ntz":
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if type_name == "date" or type_name.startswith("decimal"):
        return str(value)
    if type_name == "double":
        return Decimal(repr(value))
    return value
