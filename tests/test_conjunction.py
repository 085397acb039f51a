"""Several filters on one scan as the parts of one (no Spark): a row is kept exactly when every part keeps it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynsource.dpp.benefit import conjoin
from dynsource.filtering import DynamicFilteringData, wire

DATA = Path(__file__).parent / "data"
# The fields a part may filter, each with a small domain so that keys and candidates meet.
FIELDS = {"day": ("int", pa.int32(), st.integers(0, 9)), "state": ("string", pa.string(), st.sampled_from("ABC")),
          "store": ("bigint", pa.int64(), st.integers(0, 5)), "item": ("int", pa.int32(), st.integers(0, 20))}


@st.composite
def parts(draw) -> list[tuple[DynamicFilteringData, pa.Table]]:
    """Two to four parts over disjoint fields, each with its key rows: exact, Bloom or range; one or two fields;
    '=' or '<=>'; nulls."""
    names = draw(st.permutations(list(FIELDS)))
    groups, start = [], 0
    while start < len(names) and len(groups) < 4:
        width = draw(st.integers(1, 2))
        groups.append(names[start:start + width])
        start += width
    if len(groups) < 2:
        groups = [names[:1], names[1:2]]
    drawn = []
    for group in groups:
        fields = [(name, FIELDS[name][0]) for name in group]
        rows = draw(st.lists(st.tuples(*(st.one_of(st.none(), FIELDS[name][2]) for name in group)), max_size=8))
        table = pa.table({name: pa.array([row[i] for row in rows], FIELDS[name][1]) for i, name in enumerate(group)})
        kind, null_safe = draw(st.sampled_from(["exact", "bloom", "range"])), draw(st.booleans())
        drawn.append((DynamicFilteringData.from_table(fields, table, kind=kind, null_safe=null_safe), table))
    return drawn


candidates = st.lists(st.fixed_dictionaries({name: st.one_of(st.none(), strategy)
                                             for name, (_, _, strategy) in FIELDS.items()}), max_size=12)


def table_of(rows: list[dict], names) -> pa.Table:
    return pa.table({name: pa.array([row[name] for row in rows], FIELDS[name][1]) for name in names})


def answer(part: DynamicFilteringData, keys: pa.Table, table: pa.Table) -> list[bool]:
    """The part's own answer on the columns of ``table`` it filters; with none, whether any key can match at all."""
    known = [name for name in table.column_names if name in part.field_names]
    if known:
        return part.matching_mask(table.select(known)).to_pylist()
    return [any(part.matching_mask(keys).to_pylist())] * table.num_rows


@given(parts(), candidates, st.data())
def test_the_conjunction_keeps_a_row_exactly_when_every_part_keeps_it(drawn, rows, data):
    both = DynamicFilteringData.all_of([part for part, _ in drawn])
    assert both.kind == "all" and len(both.parts) == len(drawn)
    assert len(both) == sum(len(part) for part, _ in drawn)
    assert both.size_bytes == sum(part.size_bytes for part, _ in drawn)
    # Some of the columns, as a partition level knows some: each part answers on those it has.
    known = data.draw(st.lists(st.sampled_from(both.field_names), unique=True, min_size=1))
    table = table_of(rows, known)
    expected = [all(kept) for kept in zip(*(answer(part, keys, table) for part, keys in drawn), strict=True)]
    assert both.matching_mask(table).to_pylist() == expected
    decoded = DynamicFilteringData.from_bytes(both.to_bytes())
    assert decoded == both and decoded.matching_mask(table).to_pylist() == expected


@given(parts(), candidates)
def test_a_conjunction_of_exact_parts_never_drops_a_joining_row(drawn, rows):
    exact = [part for part, _ in drawn if part.kind == "exact"]
    if len(exact) < 2:
        return
    both = DynamicFilteringData.all_of(exact)
    table = table_of(rows, both.field_names)
    for row, kept in zip(rows, both.matching_mask(table).to_pylist(), strict=True):
        assert kept == all(_joins(part, row) for part in exact)  # exact parts: kept if and only if the row joins


def _joins(part: DynamicFilteringData, row: dict) -> bool:
    values = tuple(row[name] for name in part.field_names)
    if not part.null_safe and None in values:
        return False
    return values in set(map(tuple, zip(*(part.table.column(n).to_pylist() for n in part.field_names), strict=True)))


def test_row_group_overlap_asks_the_part_owning_the_column():
    days = DynamicFilteringData([("day", "int")], [1, 2])
    stores = DynamicFilteringData.from_bounds([("store", "int")], (10,), (20,), key_count=11)
    both = DynamicFilteringData.all_of([days, stores])
    assert both.may_overlap("store", 15, 30) and not both.may_overlap("store", 21, 30)
    assert both.may_overlap("day", 2, 5) and not both.may_overlap("day", 3, 5)
    nothing = DynamicFilteringData.all_of([days, DynamicFilteringData([("store", "int")], [])])
    assert not nothing.may_overlap("day", 1, 2)  # an empty dimension joins no row at all
    assert both.contains((1, 12)) and not both.contains((1, 9)) and not both.contains((3, 12))


def test_all_of_leaves_out_exceeded_parts_and_refuses_shared_fields():
    days = DynamicFilteringData([("day", "int")], [1, 2])
    exceeded = DynamicFilteringData([("store", "int")], exceed_threshold=True)
    assert DynamicFilteringData.all_of([days, exceeded]) == days
    assert DynamicFilteringData.all_of([exceeded]) is exceeded
    with pytest.raises(ValueError, match="declared twice"):
        DynamicFilteringData.all_of([days, DynamicFilteringData([("DAY", "int")], [2])])


def test_conjoin_applies_every_filter_on_its_own_fields_and_notes_the_rest():
    exceeded = DynamicFilteringData([("x", "int")], exceed_threshold=True)
    bloom = DynamicFilteringData.from_table([("s", "string")], pa.table({"s": ["a"]}), kind="bloom")
    applied, data, notes = conjoin([("exceeded", exceeded), ("days", DynamicFilteringData([("day", "int")], [1, 2])),
                                    ("bloom", bloom), ("stores", DynamicFilteringData([("store", "int")], [7, 8, 9])),
                                    ("again", DynamicFilteringData([("day", "int")], [2]))])
    assert applied == ["days", "bloom", "stores"] and len(data) == 6
    assert data.field_names == ("day", "s", "store") and [p.kind for p in data.parts] == ["exact", "bloom", "exact"]
    assert notes[0].startswith("again: not applied with days AND bloom AND stores on one scan: ")
    assert notes[1] == "exceeded: not applied: it exceeded the collector's threshold and holds no key"
    alone, data, notes = conjoin([("exceeded", exceeded)])
    assert (alone, data.is_filtering, notes) == (["exceeded"], False, [])


@pytest.mark.parametrize("name", ["exact", "bloom", "range", "exceeded"])
def test_version_1_payloads_still_decode(name):
    blob = (DATA / f"payload-v1-{name}.bin").read_bytes()
    assert blob[8:10] == b"\x00\x01"  # written by version 1 of the wire format
    data = DynamicFilteringData.from_bytes(blob)
    assert data.kind == ("exact" if name == "exceeded" else name) and data.exceed_threshold == (name == "exceeded")
    assert DynamicFilteringData.from_bytes(data.to_bytes()) == data  # and re-encode as the current version
    if name == "exact":
        assert data.contains((1, "eu")) and not data.contains((1, "us"))


def _conjunction_blob(blobs: list[bytes], **header) -> bytes:
    fields = [list(f) for blob in blobs for f in DynamicFilteringData.from_bytes(blob).fields]
    base = {"kind": "all", "fields": fields, "exceed_threshold": False, "null_safe": False,
            "row_count": sum(len(DynamicFilteringData.from_bytes(blob)) for blob in blobs),
            "parts": [len(blob) for blob in blobs]}
    return wire.encode({**base, **header}, b"".join(blobs))


def test_a_damaged_conjunction_is_refused_with_its_reason():
    days = DynamicFilteringData([("day", "int")], [1]).to_bytes()
    stores = DynamicFilteringData([("store", "int")], [2]).to_bytes()
    assert len(DynamicFilteringData.from_bytes(_conjunction_blob([days, stores])).parts) == 2
    with pytest.raises(ValueError, match=r"parts of \[\d+, 1\] bytes for a"):
        DynamicFilteringData.from_bytes(_conjunction_blob([days, stores], parts=[len(days), 1]))
    with pytest.raises(ValueError, match="two or more parts"):
        DynamicFilteringData.from_bytes(_conjunction_blob([days]))
    nested = DynamicFilteringData.all_of([DynamicFilteringData.from_bytes(days),
                                          DynamicFilteringData.from_bytes(stores)]).to_bytes()
    other = DynamicFilteringData([("item", "int")], [3]).to_bytes()
    with pytest.raises(ValueError, match="part is of kind 'all'"):
        DynamicFilteringData.from_bytes(wire.encode(
            {"kind": "all", "fields": [["day", "int"], ["store", "int"], ["item", "int"]], "exceed_threshold": False,
             "null_safe": False, "row_count": 3, "parts": [len(nested), len(other)]}, nested + other))
    exceeded = DynamicFilteringData([("item", "int")], exceed_threshold=True).to_bytes()
    with pytest.raises(ValueError, match="and exceeded"):
        DynamicFilteringData.from_bytes(_conjunction_blob([days, exceeded]))
    with pytest.raises(ValueError, match="does not describe its parts"):
        DynamicFilteringData.from_bytes(_conjunction_blob([days, stores], row_count=5))


# --- the benefit check of a filter on data columns (no Spark) ---------------------------------------


@pytest.fixture
def fact(tmp_path):
    """A fact partitioned by day (two days) whose data column item holds 0..299 in every file."""
    import pyarrow.parquet as pq

    for day in (1, 2):
        directory = tmp_path / f"day={day}"
        directory.mkdir()
        pq.write_table(pa.table({"item": pa.array(range(300), pa.int32())}), directory / "part-0.parquet")
    return tmp_path


def test_a_data_column_filter_keeping_nearly_every_row_is_declined_and_a_selective_one_applied(fact):
    from dynsource.dpp import benefit
    from dynsource.scan.options import ScanOptions

    shallow = benefit.survey(ScanOptions.parse({"path": str(fact)}), {"day": "int", "item": "int"}, deep=False)
    every_item = DynamicFilteringData([("item", "int")], [(value,) for value in range(290)])
    reason = benefit.no_benefit(every_item, shallow, 0.5)
    assert reason == ("the filter keeps 290 of 300 rows sampled from the table's first data file(s) by data column(s) "
                      "['item'] (more than 90%), so it is not worth applying")
    assert benefit.no_benefit(DynamicFilteringData([("item", "int")], [(1,), (2,)]), shallow, 0.5) is None
    # A filter on the partition column is judged by its directories (both days kept: more than half).
    days = DynamicFilteringData([("day", "int")], [(1,), (2,)])
    assert "keeps 2 of 2 partitions of 'day'" in benefit.no_benefit(days, shallow, 0.5)
    applied = benefit.worth_applying([benefit.Candidate("items", ["item"], lambda: (every_item, None)),
                                      benefit.Candidate("days", ["day"], lambda: (days, None))], shallow, 0.5)
    # The filter on the first partition column is collected and judged first.
    assert applied.data is None and [label for label, _ in applied.declined] == ["days", "items"]


def test_a_partition_column_filter_of_a_local_table_is_left_to_spark_and_any_other_is_not(fact):
    import fsspec
    import pyarrow.parquet as pq

    from dynsource.dpp import benefit
    from dynsource.scan.options import ScanOptions

    types = {"day": "int", "item": "int"}
    local = benefit.survey(ScanOptions.parse({"path": str(fact)}), types)
    assert benefit.left_to_spark(["DAY"], local).startswith("left to Spark's dynamic partition pruning at run time")
    assert benefit.left_to_spark(["day", "item"], local) is None  # a data column: Spark's DPP does not prune by it
    # Off the local disk, listing all partitions is what a collection saves: dynsource collects.
    memory = fsspec.filesystem("memory")
    with memory.open("/conjunction/day=1/part-0.parquet", "wb") as file:
        pq.write_table(pa.table({"item": pa.array([1], pa.int32())}), file)
    try:
        remote = benefit.survey(ScanOptions.parse({"path": "memory://conjunction"}), types)
        assert remote.columns == ("day",) and benefit.left_to_spark(["day"], remote) is None
    finally:
        memory.rm("/conjunction", recursive=True)
