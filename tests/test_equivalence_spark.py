"""Generated equivalence through Spark: a dynamic-filtered dynsource read joined to the dimension equals the
plain join of ``spark.read.parquet`` with it.

The tables and filters are the planner suite's (tests/generated_tables.py), smaller and in the session's
time zone; the filter is collected from the dimension DataFrame by ``dynsource.collect`` with the kind asked.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from pathlib import Path

import fsspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, _parse_datatype_string

import dynsource
from tests.generated_tables import DATA_COLUMN, Case, cases, write_table
from tests.helpers import plain_fact, read, read_by_spark, rows, same_types

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


def joined(fact, dim, case: Case):
    def equal(name):
        left, right = fact[name.lower()], dim[f"d_{name}"]
        return left.eqNullSafe(right) if case.filter.null_safe else left == right

    condition = functools.reduce(operator.and_, [equal(name) for name, _ in case.filter.fields])
    columns = [fact[c] for c in (DATA_COLUMN, *case.table.names)] + [dim[c] for c in dim.columns]
    return fact.join(dim, condition, "inner").select(*columns)


def check_case(spark, root: str, case: Case, stats: Counter) -> None:
    stats["cases"] += 1
    write_table(fsspec.filesystem("file"), root, case.table)
    dim = dimension(spark, case)
    keys = {name: f"d_{name}" for name, _ in case.filter.fields}
    handle = dynsource.collect(dim, keys, kinds=_KINDS[case.filter.kind], null_safe=case.filter.null_safe)
    options = {"dynamicFilter": handle, "timeZone": "UTC"}
    if case.table.declared:
        options["partitionColumns"] = ", ".join(f"`{name}` {t}" for name, t in case.table.declared.items())
    expected_df = joined(plain_fact(spark, root, case.table), dim, case)
    actual_df = joined(read(spark, root, **options), dim, case)
    by_spark_df = joined(read_by_spark(spark, root, **options), dim, case)  # planned by dynsource, read by Spark
    assert same_types(actual_df.schema, expected_df.schema), (actual_df.schema, expected_df.schema)
    assert by_spark_df.schema == actual_df.schema
    # The joins in one Spark job: each case costs a few seconds of Spark, mostly fixed costs per job.
    sides = {"dynsource": actual_df, "spark reader": by_spark_df, "parquet": expected_df}
    every = functools.reduce(lambda a, b: a.union(b),
                             [df.withColumn("_side", F.lit(side)) for side, df in sides.items()])
    found = {side: [] for side in sides}
    for row in rows(every):
        found[row["_side"]].append(row[:-1])
    expected, actual = found["parquet"], found["dynsource"]
    assert actual == expected
    assert found["spark reader"] == expected
    # Reuse: the same joined DataFrame, queried again, reads the same partitions.
    assert actual_df.count() == len(expected)
    check_two_references(spark, root, case, dim, handle, stats)
    if not case.filter.rows:
        return  # Spark drops a join with an empty side: the fact table may never be scanned
    report = dynsource.scan_report(handle)
    assert report.filtering == (case.filter.kind != "exceeded"), report.fallback_reason
    stats["joined rows"] += len(expected)
    stats["pruned directories"] += sum(report.pruned_by_column.values())
    stats[f"kind {report.payload_kind if report.filtering else 'exceeded'}"] += 1


def check_two_references(spark, root: str, case: Case, dim, handle: str, stats: Counter) -> None:
    """One query naming the table twice, with the handle and without: equal to the native query."""
    options = {"timeZone": "UTC"}
    if case.table.declared:
        options["partitionColumns"] = ", ".join(f"`{name}` {t}" for name, t in case.table.declared.items())
    dynsource.register_table(spark, "gen_fact", path=root, replace=True,
                             definitions=str(Path(root).parent / "definitions"), **options)
    plain_fact(spark, root, case.table).createOrReplaceTempView("gen_fact_native")
    dim.createOrReplaceTempView("gen_dim")
    operator_sql = "<=>" if case.filter.null_safe else "="
    condition = " AND ".join(f"f.`{name}` {operator_sql} d.`d_{name}`" for name, _ in case.filter.fields)
    query = ("SELECT 1 AS ref, f.v FROM {fact} f LEFT SEMI JOIN gen_dim d ON " + condition +
             " UNION ALL SELECT 2 AS ref, v FROM {plain}")
    ours = dynsource.sql(spark, query.format(fact=f"gen_fact WITH ('dynamicFilter' = '{handle}')", plain="gen_fact"))
    native = spark.sql(query.format(fact="gen_fact_native", plain="gen_fact_native"))
    assert rows(ours) == rows(native)
    stats["two-reference queries"] += 1


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
    assert stats["joined rows"] > 0 and stats["pruned directories"] > 0
    assert stats["two-reference queries"] == stats["cases"]
