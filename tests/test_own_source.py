"""The interface any Python data source implements to take a dynamic filter: ``SupportsDynamicFiltering``,
``dynamic_filter(options)`` and the per-field view of the payload (no Spark: what ``partitions()`` runs)."""

from __future__ import annotations

import logging
import math
import threading
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import DataSource

import dynsource
from dynsource import DynamicFilteringData
from dynsource.filtering import filterstore, handles
from dynsource.filtering.fieldview import on_fields
from dynsource.scan import resolution
from dynsource.scan.options import ScanOptions
from dynsource.scan.planner import ScanPlanner
from dynsource.types import arrow_type


@pytest.fixture
def store(tmp_path) -> str:
    return str(tmp_path / "filters")


def exact(rows, fields=(("k", "bigint"),), null_safe=False) -> DynamicFilteringData:
    return DynamicFilteringData(list(fields), rows, null_safe=null_safe)


def of_kind(kind: str, values, type_name="bigint", null_safe=False) -> DynamicFilteringData:
    table = pa.table({"k": pa.array(values, arrow_type(type_name))})
    return DynamicFilteringData.from_table([("k", type_name)], table, kind=kind, null_safe=null_safe)


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


# --- dynamic_filter(options): the rules of dynsource's own reader ----------------------------------------------


def test_without_a_handle_the_filter_filters_nothing():
    for options in ({}, {"database": "/db", "table": "t"}):
        data = dynsource.dynamic_filter(options)
        assert not data.is_filtering and data.fields == () and data.field_filter("k").kind == "none"
    with pytest.raises(ValueError, match=r"cannot be published"):
        DynamicFilteringData.unfiltered().to_bytes()


def test_the_published_filter_is_resolved_whatever_the_case_of_the_option_names(store):
    published = exact([(1,), (2,)])
    handle = dynsource.publish(published, store)
    # Spark hands a Python source its options lower-cased; the source's own options are left alone.
    for options in ({"dynamicFilter": handle, "filterStore": store, "table": "t"},
                    {"dynamicfilter": handle, "filterstore": store, "colour": "red"}):
        assert dynsource.dynamic_filter(options) == published


def test_disabled_filtering_does_not_even_open_the_store(caplog):
    handle = f"dynf-{uuid.uuid4().hex}"
    options = {"dynamicFilter": handle, "filterStore": "nosuchprotocol://x", "dynamicFilteringEnabled": "false"}
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        assert not dynsource.dynamic_filter(options).is_filtering
    assert messages(caplog) == []


def test_an_unusable_filter_filters_nothing_and_says_why_or_fails_under_fail(store, tmp_path, caplog):
    never = f"dynf-{uuid.uuid4().hex}"
    failed = handles.reserve(store)
    filterstore.FilterStore(store).publish_failure(failed, "the dimension's query failed")
    damaged = dynsource.publish(exact([(1,)]), store)
    (tmp_path / "filters" / f"{damaged}.dynf").write_bytes(b"\x89DYNFLT\n" + b"\0" * 40)
    unreachable = tmp_path / "a-file"
    unreachable.write_text("not a directory")
    cases = [(never, store, LookupError, "is not in filter store"),
             (failed, store, filterstore.FilterFailedError, "the dimension's query failed"),
             (damaged, store, ValueError, "Filter payload"),
             (never, str(unreachable), OSError, "cannot be read")]
    for handle, where, error, text in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dynsource"):
            data = dynsource.dynamic_filter({"dynamicFilter": handle, "filterStore": where})
        assert not data.is_filtering
        (message,) = messages(caplog)
        assert message.startswith(f"dynsource: dynamic filter '{handle}' is not usable, filtering nothing: ")
        assert text in message
        with pytest.raises(error, match=text):
            dynsource.dynamic_filter({"dynamicFilter": handle, "filterStore": where, "dynamicFilterOnError": "FAIL"})


def test_a_bad_option_value_is_an_error_naming_the_option_whatever_on_error_says(store):
    with pytest.raises(ValueError, match=r"Dynamic filter handle '../x' \(option 'dynamicFilter'"):
        dynsource.dynamic_filter({"dynamicFilter": "../x"})
    with pytest.raises(ValueError, match=r"Option 'dynamicFilterOnError' = 'maybe' is not valid"):
        dynsource.dynamic_filter({"dynamicFilter": f"dynf-{uuid.uuid4().hex}", "dynamicFilterOnError": "maybe"})
    with pytest.raises(ValueError, match=r"Option 'dynamicFilterWaitMs' = 'soon' is not valid"):
        dynsource.dynamic_filter({"dynamicFilterWaitMs": "soon"})
    with pytest.raises(TypeError, match=r"accepted_fields is a sequence of field names, not the string 'k'"):
        dynsource.dynamic_filter({}, "k")


def test_an_exceeded_filter_is_returned_filtering_nothing_with_how_to_make_one_that_prunes(store, caplog):
    handle = dynsource.publish(DynamicFilteringData([("k", "int")], exceed_threshold=True), store)
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        data = dynsource.dynamic_filter({"dynamicFilter": handle, "filterStore": store})
    assert data.exceed_threshold and not data.is_filtering and data.field_filter("k").kind == "none"
    assert messages(caplog) == [
        f"dynsource: dynamic filter '{handle}' exceeded the collector's threshold and holds no key, so this read "
        "filters nothing by it; to prune, collect it with a larger max_rows or max_bytes, or with kinds that allow "
        "'bloom' or 'range'."]


def test_a_late_filter_is_waited_for_then_given_up_on(store, caplog):
    late = handles.reserve(store)
    threading.Timer(0.3, handles.publish, (exact([(5,)]), store), {"handle": late}).start()
    assert dynsource.dynamic_filter({"dynamicFilter": late, "filterStore": store}) == exact([(5,)])
    never = handles.reserve(store)
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        data = dynsource.dynamic_filter({"dynamicFilter": never, "filterStore": store, "dynamicFilterWaitMs": "100"})
    assert not data.is_filtering
    assert "is still being collected after 100 ms (option 'dynamicFilterWaitMs')" in caplog.text


def test_dynsource_s_own_planner_resolves_by_the_same_rules(store, tmp_path):
    """The ``dynsource`` source's planner and ``dynamic_filter`` give the same filter, or the same lack of one."""
    good = dynsource.publish(exact([(1,), (3,)]), store)
    exceeded = dynsource.publish(DynamicFilteringData([("k", "int")], exceed_threshold=True), store)
    for options in ({"dynamicFilter": good}, {"dynamicFilter": exceeded}, {"dynamicFilter": f"dynf-{'0' * 32}"},
                    {"dynamicFilter": good, "dynamicFilteringEnabled": "false"}, {}):
        given = {**options, "filterStore": store}
        planned, _ = ScanPlanner(ScanOptions.parse({**given, "path": str(tmp_path)}), None).resolve_filter()
        assert (DynamicFilteringData.unfiltered() if planned is None else planned) == dynsource.dynamic_filter(given)
    assert set(resolution.OPTION_NAMES) == {"dynamicFilter", "dynamicFilteringEnabled", "dynamicFilterOnError",
                                            "dynamicFilterWaitMs", "filterStore", "filterStoreOptions", "logLevel"}


# --- the fields a source accepts ---------------------------------------------------------------------------------


def test_a_field_the_source_does_not_accept_filters_nothing_and_is_named_in_the_log(store, caplog):
    two = DynamicFilteringData([("k", "bigint"), ("region", "string")], [(1, "eu"), (2, "us"), (3, None)])
    handle = dynsource.publish(two, store)
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        data = dynsource.dynamic_filter({"dynamicFilter": handle, "filterStore": store}, ["K", "other"])
    # The row (3, None) joins nothing with `=`: its k is not a key either.
    assert data.field_names == ("k",) and data.field_filter("k").to_pylist() == [1, 2]
    assert messages(caplog) == [
        f"dynsource: dynamic filter '{handle}' has field(s) ['region'] that this data source does not accept (it "
        "accepts ['K', 'other']): they filter nothing here."]
    assert dynsource.dynamic_filter({"dynamicFilter": handle, "filterStore": store}) == two  # no accepted fields given


def test_on_fields_keeps_a_superset_of_each_part_and_drops_what_cannot_be_split():
    rows = pa.table({"k": pa.array([1, 2, None], pa.int64()), "region": ["eu", None, "us"]})
    fields = [("k", "bigint"), ("region", "string")]
    null_safe = DynamicFilteringData.from_table(fields, rows, null_safe=True)
    assert on_fields(null_safe, ["k"]).field_filter("k").to_pylist() == [1, 2]
    assert on_fields(null_safe, ["k"]).field_filter("k").matches_null
    bounds = DynamicFilteringData.from_table(fields, rows, kind="range")
    assert on_fields(bounds, ["region"]).bounds == (("eu",), ("eu",))  # of the rows without a null
    bloom = DynamicFilteringData.from_table(fields, rows, kind="bloom")
    assert not on_fields(bloom, ["k"]).is_filtering
    star = DynamicFilteringData.all_of([of_kind("range", [10, 20]), exact([("x",)], [("store", "string")])])
    assert on_fields(star, ["store"]) == exact([("x",)], [("store", "string")])
    assert on_fields(star, ["k", "store"]) == star and not on_fields(star, []).is_filtering


# --- the per-field view: what a source pushes into its backend -----------------------------------------------


def test_exact_keys_as_an_arrow_array_and_python_values():
    view = exact([(3,), (1,), (None,)]).field_filter("K")
    assert view.kind == "exact" and view.is_filtering and view.type_name == "bigint"
    assert view.values.type == pa.int64() and sorted(view.to_pylist()) == [1, 3] and not view.matches_null
    assert view.contains(1) and not view.contains(2) and not view.contains(None)
    # Compared as Spark compares the join: an int column and a zero-padded string both match key 1.
    assert view.mask(pa.array([1, 2, None], pa.int32())).to_pylist() == [True, False, False]
    assert view.mask(pa.array(["01", "x"])).to_pylist() == [True, True]  # 'x' cannot be converted: kept
    assert exact([(3,), (None,)], null_safe=True).field_filter("k").matches_null
    assert exact([], [("k", "date")]).field_filter("k").to_pylist() == []
    with pytest.raises(TypeError, match=r"The exact filter of field 'K' has no bounds"):
        view.min  # noqa: B018


def test_a_range_gives_its_bounds_and_nan_bounds_filter_nothing():
    view = of_kind("range", [7, 3, None]).field_filter("k")
    assert (view.kind, view.min, view.max, view.matches_null) == ("range", 3, 7, False)
    assert view.contains(5) and not view.contains(8)
    assert of_kind("range", [7, None], null_safe=True).field_filter("k").matches_null
    empty = of_kind("range", [])
    assert (empty.field_filter("k").min, empty.field_filter("k").contains(1)) == (None, False)
    assert of_kind("range", [1.5, math.nan], "double").field_filter("k").kind == "none"
    with pytest.raises(TypeError, match=r"The range filter of field 'k' holds no key values"):
        view.values  # noqa: B018


def test_a_bloom_filter_answers_for_its_one_field_and_not_for_one_of_several():
    keys = list(range(0, 2000, 3))
    view = of_kind("bloom", keys).field_filter("k")
    assert view.kind == "bloom" and not view.matches_null
    assert all(view.mask(pa.array(keys)).to_pylist()) and view.contains(keys[-1])
    assert sum(view.mask(pa.array(range(1, 2000, 3))).to_pylist()) < 100  # about fpp of the others
    assert of_kind("bloom", [1, None], null_safe=True).field_filter("k").matches_null
    pairs = DynamicFilteringData.from_table([("k", "bigint"), ("r", "int")],
                                            pa.table({"k": [1, 2], "r": [1, 2]}), kind="bloom")
    assert pairs.field_filter("k").kind == "none" and all(pairs.field_filter("k").mask(pa.array([5])).to_pylist())


def test_fields_of_a_conjunction_are_their_parts_and_an_unknown_field_filters_nothing():
    star = DynamicFilteringData.all_of([of_kind("range", [10, 20]), exact([("x",)], [("store", "string")])])
    assert (star.field_filter("k").kind, star.field_filter("store").to_pylist()) == ("range", ["x"])
    missing = star.field_filter("region")
    assert (missing.kind, missing.matches_null, missing.contains("anything")) == ("none", True, True)


# --- the interface --------------------------------------------------------------------------------------------


def test_a_source_must_name_its_accepted_fields():
    class Forgetful(dynsource.SupportsDynamicFiltering, DataSource):
        pass

    class Keyed(dynsource.SupportsDynamicFiltering, DataSource):
        def accepted_filter_fields(self) -> list[str]:
            return ["k"]

    with pytest.raises(TypeError, match="accepted_filter_fields"):
        Forgetful({})
    assert Keyed({}).accepted_filter_fields() == ["k"]


def test_dynsource_s_own_source_accepts_its_partition_columns_and_atomic_data_columns(tmp_path):
    table = pa.table({"price": [1.5, 2.5], "tags": [{"a": 1}, {"a": 2}], "day": [1, 2]})
    pq.write_to_dataset(table, str(tmp_path / "t"), partition_cols=["day"])
    source = dynsource.DynsourceDataSource({"path": str(tmp_path / "t")})
    assert isinstance(source, dynsource.SupportsDynamicFiltering)
    assert source.accepted_filter_fields() == ["price", "day"]  # a struct is compared with no key
