"""Several filters on one scan as one (no Spark): the combined filter keeps exactly what each of them keeps."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynsource.filtering import DynamicFilteringData
from dynsource.filtering.conjunction import combine, conjoin

LIMITS = {"max_rows": 10_000, "max_bytes": 1 << 20}
days = st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=6)
states = st.lists(st.one_of(st.none(), st.sampled_from(["TN", "CA", "NY"])), max_size=4)


def exact(field: str, type_name: str, values: list, null_safe: bool = False) -> DynamicFilteringData:
    return DynamicFilteringData([(field, type_name)], [(value,) for value in values], null_safe=null_safe)


@given(days, states, st.booleans(), st.booleans(),
       st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 9)),
                          st.one_of(st.none(), st.sampled_from(["TN", "CA", "WA"]))), max_size=12))
def test_the_combined_filter_keeps_a_row_exactly_when_each_filter_keeps_it(day_keys, state_keys, day_safe,
                                                                          state_safe, rows):
    by_day, by_state = exact("day", "int", day_keys, day_safe), exact("state", "string", state_keys, state_safe)
    both = conjoin(by_day, by_state, **LIMITS)
    candidates = pa.table({"day": pa.array([d for d, _ in rows], pa.int32()),
                           "state": pa.array([s for _, s in rows], pa.string())})
    expected = [a and b for a, b in zip(by_day.matching_mask(candidates.select(["day"])).to_pylist(),
                                         by_state.matching_mask(candidates.select(["state"])).to_pylist(),
                                         strict=True)]
    assert both.matching_mask(candidates).to_pylist() == expected
    # A partition level that knows only the day keeps what the day filter keeps, if any state can match.
    any_state = len(by_state.table.drop_null() if not state_safe else by_state.table) > 0
    assert both.matching_mask(candidates.select(["day"])).to_pylist() == [
        kept and any_state for kept in by_day.matching_mask(candidates.select(["day"])).to_pylist()]
    assert DynamicFilteringData.from_bytes(both.to_bytes()) == both


def test_filters_that_do_not_combine_say_why():
    by_day = exact("day", "int", [1, 2, 3])
    with pytest.raises(ValueError, match=r"both filter field\(s\) \['day'\]"):
        conjoin(by_day, exact("DAY", "int", [2]), **LIMITS)
    with pytest.raises(ValueError, match="3 x 2 = 6 keys, more than 5"):
        conjoin(by_day, exact("s", "string", ["a", "b"]), max_rows=5, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="bytes, more than 10"):
        conjoin(by_day, exact("s", "string", ["a", "b"]), max_rows=100, max_bytes=10)
    bloom = DynamicFilteringData.from_table([("s", "string")], pa.table({"s": ["a"]}), kind="bloom")
    with pytest.raises(ValueError, match="only exact filters combine, and one is bloom"):
        conjoin(by_day, bloom, **LIMITS)
    with pytest.raises(ValueError, match="one is exceeded"):
        conjoin(by_day, DynamicFilteringData([("s", "string")], exceed_threshold=True), **LIMITS)


def test_combine_applies_what_combines_best_first_and_notes_the_rest():
    exceeded = DynamicFilteringData([("x", "int")], exceed_threshold=True)
    bloom = DynamicFilteringData.from_table([("s", "string")], pa.table({"s": ["a"]}), kind="bloom")
    applied, data, notes = combine([("exceeded", exceeded), ("days", exact("day", "int", [1, 2])),
                                    ("bloom", bloom), ("stores", exact("store", "int", [7, 8, 9]))], **LIMITS)
    assert applied == ["days", "stores"] and len(data) == 6
    assert data.field_names == ("day", "store")
    assert notes == ["bloom: not applied with days on one scan: only exact filters combine, and one is bloom",
                     "exceeded: not applied with days AND stores on one scan: only exact filters combine, "
                     "and one is exceeded"]
    alone, data, notes = combine([("exceeded", exceeded)], **LIMITS)
    assert (alone, data.is_filtering, notes) == (["exceeded"], False, [])
