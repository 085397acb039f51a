"""Generated equivalence of partition pruning, planner layer (no Spark).

Hypothesis writes random Hive-partitioned tables of real Parquet files to fsspec's memory filesystem and
builds random filters; the real enumerator prunes them. A plain-Python oracle, working on the
generated rows with Spark's join semantics (``=`` or ``<=>``, both sides compared in Spark's
comparison type), says which partitions hold a joining row, and which partitions each payload
must keep exactly.
"""

from __future__ import annotations

import uuid
from collections import Counter
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import fsspec
import pyarrow as pa
import pytest

from dynsource.filtering import DynamicFilteringData
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.layout.listing import Listing
from dynsource.partitions import PartitionSettings
from tests.generated_tables import (
    DATA_COLUMN,
    NULL,
    Case,
    cases,
    for_each_case,
    moment,
    parse_text,
    typed_values,
    write_table,
)

PLANNER_CASES = 500
# Column names Spark escapes in directory names too, and one that differs from its upper case.
COLUMN_NAMES = ("p", "q r", "é=x")


def planner_cases():
    """The cases of this suite, which tests/test_equivalence_spark.py checks against Spark too."""
    return cases(names=COLUMN_NAMES)
_INTEGRAL = ("smallint", "int", "bigint")
_UNPARSEABLE = object()  # a string Spark cannot cast: it equals nothing, not even under <=>
_DATETIMES = {"date", "timestamp", "timestamp_ntz"}


# ---------------------------------------------------------------------------------------------
# The oracle: Spark's comparison of a partition value with a key, in plain Python
# ---------------------------------------------------------------------------------------------


def _numeric(type_name: str) -> bool:
    return type_name in _INTEGRAL or type_name == "double" or type_name.startswith("decimal")


def domain(column_type: str, key_type: str) -> str:
    """What Spark compares a ``column_type`` value and a ``key_type`` key as."""
    if column_type == key_type:
        return column_type
    if _numeric(column_type) and _numeric(key_type):
        return "double" if "double" in (column_type, key_type) else "number"
    if column_type == "string":
        return key_type
    if key_type == "string":
        return column_type
    assert {column_type, key_type} <= _DATETIMES, (column_type, key_type)
    return "timestamp" if "timestamp" in (column_type, key_type) else "timestamp_ntz"


def exactly_comparable(column_type: str, key_type: str) -> bool:
    """Whether pruning must be exact: no string parsing and no time-zone-dependent date/timestamp mix."""
    return column_type == key_type or (_numeric(column_type) and _numeric(key_type))


def in_domain(value: Any, type_name: str, target: str, zone: str) -> Any:
    if value is None or type_name == target:
        return value
    if type_name == "string":
        parsed = parse_text(value, target, zone)
        return _UNPARSEABLE if parsed is None else parsed
    if target == "double":
        return float(value)
    if target == "number":
        return Decimal(value)
    assert {type_name, target} <= _DATETIMES, (type_name, target)
    return moment(value, target, ZoneInfo(zone))


def spark_equal(left: Any, right: Any, null_safe: bool) -> bool:
    if left is None or right is None:
        return null_safe and left is None and right is None
    return left is not _UNPARSEABLE and right is not _UNPARSEABLE and left == right


class Oracle:
    """What a join of the generated table with the filter's rows would match."""

    def __init__(self, case: Case) -> None:
        self.case = case
        table, self.filter = case.table, case.filter
        self.types = table.column_types()
        self.values = typed_values(table, case.time_zone)
        for (raw, files), typed in zip(table.partitions, self.values, strict=True):
            # A value typed as null must be the null partition, or the oracle would match it as one.
            # (A directory without files is no partition for Spark: its value need not fit the type.)
            assert not files or all((r == NULL) == (t is None) for r, t in zip(raw, typed, strict=True)), (raw, typed)
        by_name = {name.lower(): index for index, name in enumerate(table.names)}
        # (position in the key row, partition column index, comparison domain) of each partition field.
        self.partition_fields = []
        self.data_field = None
        for position, (name, key_type) in enumerate(self.filter.fields):
            if name == DATA_COLUMN:
                self.data_field = (position, key_type)
                continue
            index = by_name[name.lower()]
            column_type = self.types[table.names[index]]
            self.partition_fields.append((position, index, column_type, key_type))
        null_safe = self.filter.null_safe
        self.usable_keys = [row for row in self.filter.rows if null_safe or None not in row]

    def _equal(self, partition: tuple, key: tuple, field: tuple) -> bool:
        position, index, column_type, key_type = field
        target = domain(column_type, key_type)
        zone = self.case.time_zone
        left = in_domain(partition[index], column_type, target, zone)
        right = in_domain(key[position], key_type, target, zone)
        return spark_equal(left, right, self.filter.null_safe)

    def partition_matches(self, partition: tuple, key: tuple) -> bool:
        return all(self._equal(partition, key, field) for field in self.partition_fields)

    def joining(self) -> set[tuple[str, ...]]:
        """Partitions holding a row that joins some key row."""
        found = set()
        for (raw, files), partition in zip(self.case.table.partitions, self.values, strict=True):
            rows = [v for file in files for v in file]
            for key in self.usable_keys:
                if not self.partition_matches(partition, key):
                    continue
                if self.data_field is None:
                    hit = bool(rows)
                else:
                    hit = any(spark_equal(v, key[self.data_field[0]], self.filter.null_safe) for v in rows)
                if hit:
                    found.add(raw)
        return found

    def matching_partitions(self) -> set[tuple[str, ...]]:
        """Partitions (with files) whose values join some key row on the partition fields."""
        return {
            raw
            for (raw, files), partition in zip(self.case.table.partitions, self.values, strict=True)
            if files and any(self.partition_matches(partition, key) for key in self.usable_keys)
        }

    def within_bounds(self) -> set[tuple[str, ...]]:
        """Partitions (with files) within each partition field's [min, max] of the keys (range payloads)."""
        if not self.usable_keys:
            return set()
        zone, null_safe = self.case.time_zone, self.filter.null_safe
        kept = set()
        for (raw, files), partition in zip(self.case.table.partitions, self.values, strict=True):
            inside = True
            for position, index, column_type, key_type in self.partition_fields:
                target = domain(column_type, key_type)
                keys = [in_domain(k[position], key_type, target, zone) for k in self.usable_keys]
                keys = [k for k in keys if k is not None and k is not _UNPARSEABLE]
                value = in_domain(partition[index], column_type, target, zone)
                if value is None:
                    inside &= null_safe
                else:
                    inside &= value is not _UNPARSEABLE and bool(keys) and min(keys) <= value <= max(keys)
            if files and inside:
                kept.add(raw)
        return kept

    def exact(self) -> bool:
        return all(exactly_comparable(column_type, key_type) for _, _, column_type, key_type in self.partition_fields)


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


def plan(case: Case, fs: fsspec.AbstractFileSystem, root: str,
         settings: PartitionSettings) -> tuple[dict[tuple[str, ...], list[str]], Listing, Listing]:
    """Write the case's table under ``root`` and prune it with its filter, typed under the session ``settings``:
    the files written per partition, the plain walk and the pruned one."""
    table = case.table
    written = write_table(fs, root, table)
    static = PartitionEnumerator(fs, root).enumerate()
    enumerator = DynamicPartitionEnumerator(
        PartitionEnumerator(fs, root), table.column_types(settings), data_columns=[DATA_COLUMN, *table.names],
        settings=settings,
    )
    enumerator.set_dynamic_filtering_data(case.filter.data())
    return written, static, enumerator.enumerate()


def check_case(case: Case, stats: Counter) -> None:
    """Prune the generated table with the generated filter and compare with the oracle."""
    stats["cases"] += 1
    oracle = Oracle(case)
    fs = fsspec.filesystem("memory")
    root = f"/equivalence-{uuid.uuid4().hex}"
    try:
        written, static, listing = plan(case, fs, root, PartitionSettings(case.time_zone))
    finally:
        fs.rm(root, recursive=True)
    all_files = {p.raw_values: sorted(f.path for f in p.files) for p in static.partitions}
    # The plain walk finds every partition holding a file, with its files, and only those.
    assert all_files == {raw: sorted(paths) for raw, paths in written.items() if paths}
    kept = {p.raw_values: sorted(f.path for f in p.files) for p in listing.partitions}

    assert listing.filter_set_aside is None  # every generated pair of types is comparable
    # A kept partition keeps all its files; nothing is kept that the plain walk did not find.
    assert all(all_files.get(raw) == paths for raw, paths in kept.items()), kept
    joining = oracle.joining()
    assert joining <= set(kept), f"lost partitions with joining rows: {sorted(joining - set(kept))}"
    stats["joining partitions"] += len(joining)
    stats["joining null partitions"] += sum(NULL in raw for raw in joining)
    stats["pruned partitions"] += len(all_files) - len(kept)

    kind = case.filter.kind
    stats[f"kind {kind}"] += 1
    stats["null-safe"] += case.filter.null_safe
    if kind == "exceeded":
        assert set(kept) == set(all_files)
        return
    if kind == "range":
        within = oracle.within_bounds()
        assert within <= set(kept), f"range lost partitions within its bounds: {sorted(within - set(kept))}"
    if not oracle.partition_fields or not oracle.exact():
        return
    if kind == "exact":
        stats["exact pruning checked"] += 1
        assert set(kept) == oracle.matching_partitions()
    elif kind == "range":
        stats["exact range pruning checked"] += 1
        assert set(kept) == oracle.within_bounds()


def test_generated_tables_and_filters_never_lose_a_joining_partition():
    stats: Counter = Counter()
    for_each_case(planner_cases(), PLANNER_CASES, lambda case: check_case(case, stats))
    print(f"planner equivalence: {dict(stats)}")
    assert stats["cases"] >= PLANNER_CASES
    # The strategies must reach the interesting cases, not only trivial ones.
    assert stats["joining partitions"] > PLANNER_CASES // 2 and stats["pruned partitions"] > PLANNER_CASES // 2
    assert stats["joining null partitions"] > 0 and stats["exact pruning checked"] > PLANNER_CASES // 5


# ---------------------------------------------------------------------------------------------
# Failing examples the generated cases found, kept as plain tests
# ---------------------------------------------------------------------------------------------


def _enumerate(root, types: dict[str, str], data: DynamicFilteringData) -> Listing:
    enumerator = DynamicPartitionEnumerator(PartitionEnumerator(fsspec.filesystem("file"), str(root)), types,
                                            settings=PartitionSettings("UTC"))
    enumerator.set_dynamic_filtering_data(data)
    return enumerator.enumerate()


def test_an_empty_directory_whose_value_does_not_fit_the_column_type_does_not_disable_pruning(tmp_path):
    # Spark types q from the directories holding files (q=0, q=1: int) and ignores the empty q=2147483648;
    # converting that one failed, and the enumerator dropped the whole filter (read everything, warned).
    for name in ("q=0/part-0.parquet", "q=1/part-0.parquet"):
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "q=2147483648").mkdir()
    listing = _enumerate(tmp_path, {"q": "int"}, DynamicFilteringData([("q", "int")], [(1,)]))
    assert listing.filter_set_aside is None
    assert [p.raw_values for p in listing.partitions] == [("1",)]
    # An unconvertible directory is kept, never pruned: had it held files, the scan would have said so.
    (tmp_path / "q=2147483648" / "part-0.parquet").write_bytes(b"x")
    listing = _enumerate(tmp_path, {"q": "int"}, DynamicFilteringData([("q", "int")], [(1,)]))
    assert sorted(p.raw_values for p in listing.partitions) == [("1",), ("2147483648",)]


@pytest.mark.parametrize("kind", ["exact", "range"])
def test_decimal_keys_match_a_double_partition_column_as_spark_rounds_them(tmp_path, kind):
    # Spark infers q=19.99 as a double and compares a decimal(10,2) key 19.99 with it as a double:
    # equal. Arrow's decimal->double cast gave 19.990000000000002 and the partition was pruned.
    for value in ("19.99", "0.07", "20.5"):
        (tmp_path / f"q={value}").mkdir()
        (tmp_path / f"q={value}" / "part-0.parquet").write_bytes(b"x")
    keys = pa.table({"q": pa.array([Decimal("19.99"), Decimal("20.5")], pa.decimal128(10, 2))})
    data = DynamicFilteringData.from_table([("q", "decimal(10,2)")], keys, kind=kind)
    listing = _enumerate(tmp_path, {"q": "double"}, data)
    assert sorted(p.raw_values for p in listing.partitions) == [("19.99",), ("20.5",)]
