"""Generated sessions: random sequences of actions on one reused DataFrame, view, table or filtered DataFrame.

Each machine writes a random Hive-partitioned table (tests/generated_tables.py), makes one object of one kind
and then runs steps on that same object: count, collect, group-by aggregates, reads of no column (``count(*)``,
constants), show, explain then act, cache and uncache, write then read back; each step with a random WHERE of
every shape docs/sql.md lists for partitionFilter, or none. Every step is compared with the same step on
``spark.read.parquet`` of the same files, in one Spark job.

Kinds: a ``spark.read.format("dynsource")`` DataFrame; a temporary view (``CREATE TEMPORARY VIEW ... USING
dynsource``) queried with SQL; ``spark.table`` of a registered table; a DataFrame read with a ``dynamicFilter``
handle, left-semi-joined to its dimension (its rows then equal the native semi join's).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import itertools
from collections import Counter

import fsspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, _parse_datatype_string

import dynsource
from tests.generated_tables import DATA_COLUMN, Table, tables, typed_values, write_table
from tests.helpers import plain_fact, pushdown_set, read, rows, same_types

KINDS = ("dataframe", "view", "table", "filtered")
MIN_STEPS = 200
_counter = itertools.count()


def sql_literal(value, type_name: str) -> str:
    """``value`` (typed as ``typed_values`` gives it) as a Spark SQL literal of ``type_name``."""
    if value is None:
        return "NULL"
    if type_name == "string":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if type_name == "date":
        return f"DATE'{value.isoformat()}'"
    if type_name == "timestamp":
        return f"TIMESTAMP'{value.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"
    if type_name == "boolean":
        return "TRUE" if value else "FALSE"
    if type_name.startswith("decimal"):
        return f"CAST('{value}' AS {type_name.upper()})"
    return str(value)


@st.composite
def wheres(draw, table: Table, values: list[tuple]) -> str | None:
    """None or a WHERE of one of the documented shapes, on a partition column (literals from its values) or ``v``."""
    if draw(st.integers(0, 5)) == 0:
        return None
    return draw(_condition(table, values, depth=1))


@st.composite
def _condition(draw, table: Table, values: list[tuple], depth: int) -> str:
    types = table.column_types()
    shape = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "<=>", "in", "not in", "is null", "is not null",
                                  "not", "between", "v", "and", "or"][: 16 if depth else 14]))
    if shape in ("and", "or"):
        left, right = (draw(_condition(table, values, depth - 1)) for _ in range(2))
        return f"({left}) {shape.upper()} ({right})"
    if shape == "v":
        return draw(st.sampled_from([f"{DATA_COLUMN} > 2", f"{DATA_COLUMN} IS NULL", f"{DATA_COLUMN} IN (0, 4)"]))
    index = draw(st.integers(0, len(table.names) - 1))
    column, type_name = f"`{table.names[index]}`", types[table.names[index]]
    pool = [row[index] for row in values]
    literal = lambda: sql_literal(draw(st.sampled_from([*pool, None] if draw(st.booleans()) else pool)), type_name)  # noqa: E731
    if shape in ("is null", "is not null"):
        return f"{column} {shape.upper()}"
    if shape in ("in", "not in"):
        return f"{column} {shape.upper()} ({', '.join(literal() for _ in range(draw(st.integers(1, 3))))})"
    if shape == "not":
        return f"NOT ({column} = {literal()})"
    if shape == "between":
        return f"{column} BETWEEN {literal()} AND {literal()}"
    return f"{column} {shape} {literal()}"


def usable(table: Table) -> bool:
    """A table Spark can infer a schema of, with no all-null partition column (Spark types that void)."""
    seen = table.with_files()
    return bool(seen) and all(any(raw[i] != "__HIVE_DEFAULT_PARTITION__" for raw in seen)
                              for i in range(len(table.names)))


STATS: Counter = Counter()


class SessionMachine(RuleBasedStateMachine):
    spark = None
    tmp = None

    @initialize(table=tables(max_columns=2, max_partitions=6, names=("p", "q")).filter(usable),
                kind=st.sampled_from(KINDS), data=st.data())
    def make_object(self, table: Table, kind: str, data) -> None:
        spark, number = self.spark, next(_counter)
        self.table, self.kind, self.data = table, kind, data
        self.values = [row for row in typed_values(table, "UTC")]
        self.root = str(self.tmp / f"t{number}")
        write_table(fsspec.filesystem("file"), self.root, table)
        options = {"timeZone": "UTC"}
        if table.declared:
            options["partitionColumns"] = ", ".join(f"`{name}` {t}" for name, t in table.declared.items())
        self.native = plain_fact(spark, self.root, table)
        self.view = None
        if kind == "dataframe":
            self.ours = read(spark, self.root, **options)
        elif kind == "view":
            self.view = f"seq_view_{number}"
            listed = ", ".join(f"{key} '{value}'" for key, value in {"path": self.root, **options}.items())
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {self.view} USING dynsource OPTIONS ({listed})")
            self.native.createOrReplaceTempView(f"{self.view}_native")
            self.ours = spark.table(self.view)
        elif kind == "table":
            dynsource.register_table(spark, "seq_table", path=self.root, replace=True,
                                     definitions=str(self.tmp / "definitions"), **options)
            self.ours = spark.table("seq_table")
        else:
            self.ours, self.native = self._filtered(options)
        assert same_types(self.ours.schema, self.native.schema), (self.ours.schema, self.native.schema)
        self.cached = False
        STATS[f"kind {kind}"] += 1

    def _filtered(self, options):
        """The dynamic-filtered read and the native read, each left-semi-joined to a dimension of some values."""
        column = self.table.names[0]
        type_name = self.table.column_types()[column]
        keys = self.data.draw(st.lists(st.sampled_from([row[0] for row in self.values]), min_size=1, max_size=3))
        schema = StructType([StructField("d_key", _parse_datatype_string(type_name))])
        dim = self.spark.createDataFrame([(key,) for key in keys], schema)
        handle = dynsource.collect(dim, {column: "d_key"})
        ours = read(self.spark, self.root, dynamicFilter=handle, **options)
        return (ours.join(dim, ours[column] == dim["d_key"], "left_semi"),
                self.native.join(dim, self.native[column] == dim["d_key"], "left_semi"))

    def _pair(self, where: str | None):
        """This step's DataFrames, dynsource's and native, on the reused object."""
        if self.view is not None:
            clause = f" WHERE {where}" if where else ""
            return (self.spark.sql(f"SELECT * FROM {self.view}{clause}"),
                    self.spark.sql(f"SELECT * FROM {self.view}_native{clause}"))
        return tuple(df.where(where) if where else df for df in (self.ours, self.native))

    def _both(self, where: str | None):
        ours, native = self._pair(where)
        return ours.withColumn("_side", F.lit(0)).unionByName(native.withColumn("_side", F.lit(1)))

    def _step(self, name: str, where: str | None) -> None:
        STATS["steps"] += 1
        STATS[f"action {name}"] += 1
        STATS["steps with WHERE" if where else "steps without WHERE"] += 1

    @rule(where=st.data())
    def count(self, where) -> None:
        clause = where.draw(wheres(self.table, self.values))
        self._step("count", clause)
        counts = dict(self._both(clause).groupBy("_side").count().collect())
        assert counts.get(0, 0) == counts.get(1, 0), clause

    @rule(where=st.data())
    def collect(self, where) -> None:
        clause = where.draw(wheres(self.table, self.values))
        self._step("collect", clause)
        sides = {0: [], 1: []}
        for row in rows(self._both(clause)):
            sides[row["_side"]].append(row[:-1])
        assert sides[0] == sides[1], clause

    @rule(where=st.data())
    def aggregate(self, where) -> None:
        clause = where.draw(wheres(self.table, self.values))
        self._step("groupBy/agg", clause)
        key = f"`{self.table.names[-1]}`"
        grouped = self._both(clause).groupBy("_side", key).agg(F.count("*").alias("n"), F.sum(DATA_COLUMN).alias("s"))
        sides = {0: [], 1: []}
        for row in rows(grouped):
            sides[row["_side"]].append(row[1:])
        assert sides[0] == sides[1], clause

    @rule(where=st.data(), shape=st.sampled_from(["count(*)", "count(1)", "1 LIMIT 3", "max(2)"]))
    def read_no_column(self, where, shape) -> None:
        """Aggregates and constants that need no column still see one row per stored row."""
        clause = where.draw(wheres(self.table, self.values))
        self._step(f"no column {shape}", clause)
        expression, _, limit = shape.partition(" LIMIT ")
        ours, native = self._pair(clause)
        found = [df.selectExpr(f"{expression} AS x") for df in (ours, native)]
        if limit:
            found = [df.limit(int(limit)) for df in found]
        assert rows(found[0]) == rows(found[1]), (shape, clause)

    @rule(where=st.data(), explain=st.booleans())
    def show_or_explain_then_count(self, where, explain) -> None:
        clause = where.draw(wheres(self.table, self.values))
        self._step("explain then count" if explain else "show then count", clause)
        ours, native = self._pair(clause)
        with contextlib.redirect_stdout(io.StringIO()):
            ours.explain() if explain else ours.show(3)
        assert ours.count() == native.count(), clause

    @rule()
    def cache_or_uncache(self) -> None:
        self._step("uncache" if self.cached else "cache", None)
        if self.view is not None:
            self.spark.sql(f"{'UNCACHE' if self.cached else 'CACHE'} TABLE {self.view}")
        elif self.cached:
            self.ours.unpersist()
        else:
            self.ours.cache()
        self.cached = not self.cached

    @rule(where=st.data())
    def write_then_read_back(self, where) -> None:
        clause = where.draw(wheres(self.table, self.values))
        self._step("write then read", clause)
        ours, native = self._pair(clause)
        target = str(self.tmp / f"written{next(_counter)}")
        ours.write.parquet(target)
        assert rows(self.spark.read.parquet(target)) == rows(native.select(*ours.columns)), clause

    def teardown(self) -> None:
        if self.cached and self.view is not None:
            self.spark.sql(f"UNCACHE TABLE {self.view}")
        elif self.cached:
            self.ours.unpersist()


@pytest.mark.parametrize("setting", ["false", "true"])  # each run does half of MIN_STEPS
def test_generated_session_sequences_equal_spark(spark, tmp_path_factory, setting, capsys):
    STATS.clear()
    SessionMachine.spark, SessionMachine.tmp = spark, tmp_path_factory.mktemp(f"sessions-{setting}")
    runner = SessionMachine.TestCase
    runner.settings = settings(max_examples=13, stateful_step_count=10, derandomize=True, database=None,
                               deadline=None, suppress_health_check=list(HealthCheck))
    try:
        with pushdown_set(spark, setting):
            runner().runTest()
    finally:
        with capsys.disabled():  # the figures belong in CI's output
            print(f"\nsession sequences (pushdown {setting}): {dict(STATS)}")
    assert STATS["steps"] >= MIN_STEPS // 2, STATS
