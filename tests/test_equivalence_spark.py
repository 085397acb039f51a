"""Generated equivalence through Spark: a dynamic-filtered dynsource read joined to the dimension equals the
plain join of ``spark.read.parquet`` with it.

The tables and filters are the planner suite's (tests/generated_tables.py), smaller and in the session's
time zone; the filter is collected from the dimension DataFrame by ``dynsource.collect`` with the kind asked.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter

import fsspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import NullType, StringType, StructField, StructType, _parse_datatype_string

import dynsource
from tests.generated_tables import DATA_COLUMN, Case, cases, write_table
from tests.helpers import read, rows

SPARK_CASES = 12  # about 4 s of Spark each on two idle cores: 12 keep the test near 45 s
_KINDS = {"exact": ("exact",), "bloom": ("bloom",), "range": ("range",), "exceeded": ()}


def spark_cases() -> st.SearchStrategy[Case]:
    # The session's zone is UTC; Spark needs a data file to infer the schema from.
    kinds = ("exact", "range", "bloom", "exceeded", "exact")  # hypothesis favours both ends
    names = ("p", "q r", "é=x")  # Spark escapes the last two in directory names
    generated = cases(max_partitions=6, zones=("UTC",), kinds=kinds, names=names)
    return generated.filter(lambda case: case.table.with_files())


def dimension(spark, case: Case):
    """The filter rows as a DataFrame: one ``d_<field>`` column per field, of the field's type."""
    schema = StructType([
        StructField(f"d_{name}", _parse_datatype_string(type_name), nullable=True)
        for name, type_name in case.filter.fields
    ])
    return spark.createDataFrame([list(row) for row in case.filter.rows], schema)


def plain_fact(spark, root: str, case: Case):
    declared = case.table.declared
    if not declared:
        return spark.read.parquet(root)
    # Spark takes declared partition types from a full read schema; the other columns as it infers them.
    types = case.table.column_types()
    ddl = ", ".join([f"{DATA_COLUMN} int", *(f"`{name}` {types[name]}" for name in case.table.names)])
    return spark.read.schema(ddl).parquet(root)


def joined(fact, dim, case: Case):
    def equal(name):
        left, right = fact[name.lower()], dim[f"d_{name}"]
        return left.eqNullSafe(right) if case.filter.null_safe else left == right

    condition = functools.reduce(operator.and_, [equal(name) for name, _ in case.filter.fields])
    columns = [fact[c] for c in (DATA_COLUMN, *case.table.names)] + [dim[c] for c in dim.columns]
    return fact.join(dim, condition, "inner").select(*columns)


def same_types(actual: StructType, expected: StructType) -> bool:
    """Same columns and types; dynsource types a column of only null partitions string where Spark says void."""
    return [f.name for f in actual] == [f.name for f in expected] and all(
        a.dataType == e.dataType or (isinstance(e.dataType, NullType) and isinstance(a.dataType, StringType))
        for a, e in zip(actual, expected, strict=True)
    )


def check_case(spark, root: str, case: Case, stats: Counter) -> None:
    stats["cases"] += 1
    write_table(fsspec.filesystem("file"), root, case.table)
    dim = dimension(spark, case)
    keys = {name: f"d_{name}" for name, _ in case.filter.fields}
    handle = dynsource.collect(dim, keys, kinds=_KINDS[case.filter.kind], null_safe=case.filter.null_safe)
    options = {"dynamicFilter": handle, "timeZone": "UTC"}
    if case.table.declared:
        options["partitionColumns"] = ", ".join(f"`{name}` {t}" for name, t in case.table.declared.items())
    expected_df = joined(plain_fact(spark, root, case), dim, case)
    actual_df = joined(read(spark, root, **options), dim, case)
    assert same_types(actual_df.schema, expected_df.schema), (actual_df.schema, expected_df.schema)
    # Both joins in one Spark job: each case costs a few seconds of Spark, mostly fixed costs per job.
    both = actual_df.withColumn("_side", F.lit("dynsource")).union(expected_df.withColumn("_side", F.lit("parquet")))
    sides = {"dynsource": [], "parquet": []}
    for row in rows(both):
        sides[row["_side"]].append(row[:-1])
    expected, actual = sides["parquet"], sides["dynsource"]
    assert actual == expected
    if not case.filter.rows:
        return  # Spark drops a join with an empty side: the fact table may never be scanned
    report = dynsource.scan_report(handle)
    assert report.filtering == (case.filter.kind != "exceeded"), report.fallback_reason
    stats["joined rows"] += len(expected)
    stats["pruned partitions"] += report.partitions_total - report.partitions_kept
    stats[f"kind {report.payload_kind if report.filtering else 'exceeded'}"] += 1


def test_dynamic_read_joined_to_the_dimension_equals_the_plain_join(spark, tmp_path_factory):
    stats: Counter = Counter()

    @settings(max_examples=SPARK_CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=spark_cases())
    def run(case):
        check_case(spark, str(tmp_path_factory.mktemp("equivalence")), case, stats)

    run()
    print(f"spark equivalence: {dict(stats)}")
    assert stats["cases"] >= SPARK_CASES
    assert stats["joined rows"] > 0 and stats["pruned partitions"] > 0
