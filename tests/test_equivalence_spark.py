"""Generated equivalence through Spark, Spark being the oracle.

Every case of the planner suite (tests/test_equivalence.py, whose plain-Python oracle is fast but shares
dynsource's reading of Spark) is checked against Spark itself, each under one of the session profiles
(tests/spark_oracle.py): its partition types and values as ``spark.read.parquet`` types them, and the partitions
its join keeps. Then smaller cases go through a dynamic-filtered dynsource read joined to the dimension, which must
equal the plain join of ``spark.read.parquet`` with it; the filter is collected from the dimension DataFrame by
``dynsource.collect`` with the kind asked.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import fsspec
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import dynsource
from dynsource import partitions
from tests import spark_oracle
from tests.generated_tables import DATA_COLUMN, Case, cases, for_each_case, write_table
from tests.helpers import read
from tests.test_equivalence import PLANNER_CASES, exactly_comparable, plan, planner_cases

_LOCAL = fsspec.filesystem("file")


@dataclass(frozen=True)
class Planned:
    """A planner case as dynsource planned it under a profile: its table's root, types and kept partitions."""

    case: Case
    profile: spark_oracle.Profile
    root: str
    types: dict[str, str]
    kept: frozenset[int]  # the partitions (indices in the table's) the pruned walk kept


def test_every_planner_case_is_typed_and_pruned_as_spark_reads_and_joins_it(spark, tmp_path):
    """The planner suite's cases, each under a session profile and its own zone, against Spark's answers."""
    planned: list[Planned] = []

    def record(case: Case) -> None:
        if not case.table.with_files():
            return  # no data file: Spark has no table to read
        profile = spark_oracle.PROFILES[len(planned) % len(spark_oracle.PROFILES)]
        settings = profile.partition_settings(case.time_zone)
        root = str(tmp_path / f"case-{len(planned)}")
        _, _, listing = plan(case, _LOCAL, root, settings)
        index = {raw: i for i, (raw, _) in enumerate(case.table.partitions)}
        kept = frozenset(index[p.raw_values] for p in listing.partitions)
        planned.append(Planned(case, profile, root, case.table.column_types(settings), kept))

    for_each_case(planner_cases(), PLANNER_CASES, record)
    groups: dict[tuple[str, str], list[Planned]] = {}
    for item in planned:
        groups.setdefault((item.profile.name, item.case.time_zone), []).append(item)
    stats: Counter = Counter()
    for items in groups.values():
        first = items[0]
        with spark_oracle.session_set(spark, first.profile.conf(first.case.time_zone)):
            found = spark_oracle.answers(spark, [(item.case, item.root) for item in items])
        for item, answer in zip(items, found, strict=True):
            check_against_spark(item, answer, stats)
    print(f"planner cases against Spark: {dict(stats)}")
    assert stats["cases"] == len(planned) > PLANNER_CASES * 0.9
    assert stats["exact pruning checked"] > PLANNER_CASES // 5 and stats["joining partitions"] > PLANNER_CASES // 2
    assert all(stats[f"profile {profile.name}"] >= 50 for profile in spark_oracle.PROFILES)


def check_against_spark(item: Planned, answer: spark_oracle.Answer, stats: Counter) -> None:
    case, table = item.case, item.case.table
    where = f"{item.profile.name}, {case.time_zone}: {case}"
    stats["cases"] += 1
    stats[f"profile {item.profile.name}"] += 1
    assert all(answer.types[name] == item.types[name] or answer.types[name] == "void" for name in table.names), \
        (answer.types, item.types, where)
    if answer.error is not None:
        # Under ANSI a string partition value the comparison cannot cast fails the query: the doors' suite checks
        # that dynsource's does too (it keeps every value it cannot convert, so Spark meets it).
        assert "CAST_INVALID_INPUT" in answer.error, answer.error[:2000]
        assert item.profile.settings.get(spark_oracle.ANSI_SETTING) != "false", where
        stats["refused by Spark"] += 1
        return
    with_files = {i for i, (_, files) in enumerate(table.partitions) if files}
    assert set(answer.values) == with_files, where
    typed = [partitions.to_arrow([raw[c] for raw, _ in table.partitions], item.types[name],
                                 time_zone=case.time_zone, strict=False).to_pylist()
             for c, name in enumerate(table.names)]
    for i in with_files:
        ours = tuple(spark_oracle.as_json(values[i], item.types[name])
                     for values, name in zip(typed, table.names, strict=True))
        assert ours == answer.values[i], (table.partitions[i][0], ours, answer.values[i], where)
    lost = sorted(answer.joining - item.kept)
    assert not lost, f"lost partitions with joining rows {lost}: {where}"
    stats["joining partitions"] += len(answer.joining)
    if case.filter.kind == "exceeded":
        assert item.kept == with_files, where
    by_name = {name.lower(): name for name in table.names}
    fields = [(by_name[name.lower()], key_type) for name, key_type in case.filter.fields if name != DATA_COLUMN]
    if case.filter.kind == "exact" and fields and all(exactly_comparable(item.types[c], t) for c, t in fields):
        stats["exact pruning checked"] += 1
        assert item.kept == answer.matching, (sorted(item.kept), sorted(answer.matching), where)

# ---------------------------------------------------------------------------------------------
# Every door, in every session profile
# ---------------------------------------------------------------------------------------------

_KINDS = {"exact": ("exact",), "bloom": ("bloom",), "range": ("range",), "exceeded": ()}
DOOR_CASES = 4  # cases per session profile, all their doors read in one Spark job
# Each profile in a zone of its own: the defaults twice, once where DST skips and repeats an hour.
DOOR_PROFILES = (
    (spark_oracle.PROFILES[0], "UTC"),
    (spark_oracle.PROFILES[0], "America/Los_Angeles"),
    (spark_oracle.PROFILES[1], "Asia/Kolkata"),
    (spark_oracle.PROFILES[2], "Europe/Paris"),
    (spark_oracle.PROFILES[3], "Pacific/Kiritimati"),
    (spark_oracle.PROFILES[4], "America/Los_Angeles"),
)
_MODES = ("collect", "auto")  # spark.dynsource.partitionPruning: dynsource collects, or leaves it to Spark's DPP


def door_cases(zone: str) -> st.SearchStrategy[Case]:
    kinds = ("exact", "range", "bloom", "exceeded", "exact")  # hypothesis favours both ends
    names = ("p", "q r", "é=x")  # Spark escapes the last two in directory names
    generated = cases(max_partitions=6, zones=(zone,), kinds=kinds, names=names)
    return generated.filter(lambda case: case.table.with_files())  # Spark infers a schema from a data file


@dataclass(frozen=True)
class Door:
    """One way into one case's table, and the same query on Spark's own reading of the files."""

    name: str
    case: int
    ours: DataFrame
    spark: DataFrame


def _tagged(door: Door, side: str) -> DataFrame:
    df = door.ours if side == "ours" else door.spark
    return df.select(F.lit(door.name).alias("door"), F.lit(door.case).alias("case"), F.lit(side).alias("side"),
                     F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("row"))


def test_every_door_reads_as_spark_does_in_every_session_profile(spark, tmp_path_factory):
    """Generated tables and filters read through every dynsource door, under each session profile: the rows equal
    Spark's own reading of the same files (``spark.read.parquet``, and ``spark.sql`` with Spark's DPP)."""
    stats: Counter = Counter()
    for profile, zone in DOOR_PROFILES:
        generated: list[Case] = []
        for_each_case(door_cases(zone), DOOR_CASES, generated.append)
        root = tmp_path_factory.mktemp("doors")
        with spark_oracle.session_set(spark, profile.conf(zone)):
            check_doors(spark, root, profile, zone, generated, stats)
    print(f"doors against Spark: {dict(stats)}")
    assert stats["profiles"] == len(DOOR_PROFILES) and stats["cases"] >= DOOR_CASES * len(DOOR_PROFILES)
    assert stats["rows"] > 0 and stats["pruned directories"] > 0
    doors = ("format(dynsource)", "format(dynsource) + handle", "table join, python reader", "table join, spark reader",
             "sql collect, python reader", "sql collect, spark reader", "sql auto, spark reader")
    assert all(stats[f"door {name}"] >= len(DOOR_PROFILES) for name in doors), stats


def check_doors(spark, root: Path, profile: spark_oracle.Profile, zone: str, generated: list[Case],
                stats: Counter) -> None:
    stats["profiles"] += 1
    doors: list[Door] = []
    handles = []
    for index, case in enumerate(generated):
        stats["cases"] += 1
        table_root = str(root / f"t{index}")
        write_table(_LOCAL, table_root, case.table)
        made, handle = _doors(spark, root, index, table_root, case, profile, zone)
        doors += made
        handles.append((case, handle))
    for mode in _MODES:
        doors += _sql_doors(spark, generated, mode)
    found: dict[tuple[str, int, str], Counter] = {}
    every = functools.reduce(DataFrame.unionAll, [_tagged(d, side) for d in doors for side in ("ours", "spark")])
    for row in every.collect():  # every door of every case in one Spark job
        found.setdefault((row["door"], row["case"], row["side"]), Counter())[row["row"]] += 1
    for door in doors:
        ours, expected = (found.get((door.name, door.case, side), Counter()) for side in ("ours", "spark"))
        assert ours == expected, (door.name, profile.name, zone, generated[door.case], ours - expected,
                                  expected - ours)
        stats[f"door {door.name}"] += 1
        stats["rows"] += sum(expected.values())
    # Reuse: a joined DataFrame acted on again reads the same partitions.
    again = next(d for d in doors if d.name == "format(dynsource) + handle")
    assert again.ours.count() == sum(found.get((again.name, again.case, "spark"), Counter()).values())
    for case, handle in handles:
        if case.filter.rows:  # Spark drops a join with an empty side: the fact table may never be scanned
            report = dynsource.scan_report(handle)
            assert report.filtering == (case.filter.kind != "exceeded"), report.fallback_reason
            stats["pruned directories"] += sum(report.pruned_by_column.values())


def _declared(case: Case) -> dict[str, str]:
    if not case.table.declared:
        return {}
    return {"partitionColumns": ", ".join(f"`{name}` {t}" for name, t in case.table.declared.items())}


def _fact_columns(case: Case) -> list[str]:
    return [DATA_COLUMN, *case.table.names]


def _on(case: Case) -> list[tuple[str, str]]:
    by_name = {name.lower(): name for name in _fact_columns(case)}
    return [(by_name[name.lower()], f"d_{name}") for name, _ in case.filter.fields]


def _doors(spark, root: Path, index: int, table_root: str, case: Case, profile: spark_oracle.Profile,
           zone: str) -> tuple[list[Door], str]:
    """The DataFrame doors of one case: a user's own load with and without a handle (the session's settings given as
    options, as Spark passes a Python data source none), a registered table read by each reader, ``dynamic_join``."""
    dim = spark_oracle.dimension(spark, case)
    native = spark_oracle.spark_fact(spark, table_root, case)
    columns = _fact_columns(case)
    settings = profile.partition_settings(zone)
    session = {"timeZone": zone, "partitionColumnTypeInference": str(settings.infer_types).lower(),
               "timestampType": "TIMESTAMP_NTZ" if settings.timestamp_ntz else "TIMESTAMP_LTZ"}
    keys = {name: f"d_{name}" for name, _ in case.filter.fields}
    handle = dynsource.collect(dim, keys, kinds=_KINDS[case.filter.kind], null_safe=case.filter.null_safe)

    def semi(fact):
        return fact.join(dim, spark_oracle.join_condition(fact, dim, case), "left_semi").select(*_quoted(columns))

    loaded = read(spark, table_root, **session, **_declared(case))
    doors = [
        Door("format(dynsource)", index, loaded.select(*_quoted(columns)), native.select(*_quoted(columns))),
        Door("format(dynsource) + handle", index, semi(read(spark, table_root, dynamicFilter=handle, **session,
                                                            **_declared(case))), semi(native)),
    ]
    definitions = str(root / "definitions")
    for reader in ("python", "spark"):
        name = f"door_{index}_{reader}"
        dynsource.register_table(spark, name, path=table_root, replace=True, definitions=definitions, reader=reader,
                                 **_declared(case))
        doors.append(Door(f"table join, {reader} reader", index, semi(dynsource.table(spark, name)), semi(native)))
    dim.createOrReplaceTempView(f"door_dim_{index}")
    native.createOrReplaceTempView(f"door_{index}_native")
    if not case.filter.null_safe:  # dynamic_join joins on =
        on = _on(case)
        equal = functools.reduce(operator.and_, [native[f"`{f}`"] == dim[f"`{d}`"] for f, d in on])
        joined = dynsource.dynamic_join(f"door_{index}_spark", dim, on, how="left_semi")
        doors.append(Door("dynamic_join", index, joined.select(*_quoted(columns)),
                          native.join(dim, equal, "left_semi").select(*_quoted(columns))))
    return doors, handle


def _quoted(columns):
    return [F.col(f"`{c}`") for c in columns]


def _sql_doors(spark, generated: list[Case], mode: str) -> list[Door]:
    """``dynsource.sql`` on the registered tables, each reader in one query of every case, against ``spark.sql`` of
    the same text on Spark's own reading: per case a star join with the filtered dimension (pruned automatically)
    and a predicate on a partition column (the scan's ``partitionFilter``)."""
    doors = []
    # auto differs from collect only where Spark's reader reads the fact (it then leaves the join to Spark's DPP).
    readers = ("python", "spark") if mode == "collect" else ("spark",)
    with spark_oracle.session_set(spark, {"spark.dynsource.partitionPruning": mode}):
        for reader in readers:
            branches = [branch for index, case in enumerate(generated) for branch in _sql_branches(index, case)]
            text = " UNION ALL ".join(branches)
            doors.append(Door(f"sql {mode}, {reader} reader", -1, dynsource.sql(spark, text.format(fact=reader)),
                              spark.sql(text.format(fact="native"))))
    return doors


def _sql_branches(index: int, case: Case) -> list[str]:
    op = "<=>" if case.filter.null_safe else "="
    on = " AND ".join(f"f.`{f}` {op} d.`{d}`" for f, d in _on(case))
    row = "to_json(named_struct({}))".format(", ".join(f"'{c}', f.`{c}`" for c in _fact_columns(case)))
    fact = f"door_{index}_{{fact}}"
    first_key = f"d.`d_{case.filter.fields[0][0]}`"
    return [
        # A tautology, yet a predicate that makes the dimension a filtered one for the star-join detection.
        f"SELECT {index} AS c, 'star join' AS k, {row} AS r FROM {fact} f JOIN door_dim_{index} d ON {on} "
        f"WHERE {first_key} IS NOT NULL OR {first_key} IS NULL",
        f"SELECT {index}, 'partition predicate', {row} FROM {fact} f WHERE f.`{case.table.names[0]}` IS NOT NULL",
    ]
