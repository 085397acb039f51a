"""Static and dynamic partition enumeration on a real fsspec memory filesystem (no Spark)."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from dynsource.filtering import DynamicFilteringData
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.layout.levels import Level, PartitionTyping


@pytest.fixture
def fs():
    return fsspec.filesystem("memory")


def make_tree(fs, files: list[str]) -> str:
    root = f"/t-{uuid.uuid4().hex}"
    for name in files:
        fs.pipe(f"{root}/{name}", b"x" * 10)
    return root


def dynamic(fs, root, data, types=None, on_error="fallback", data_columns=()):
    enumerator = DynamicPartitionEnumerator(
        PartitionEnumerator(fs, root), types or {}, data_columns=data_columns, on_error=on_error
    )
    enumerator.set_dynamic_filtering_data(data)
    return enumerator


def test_static_lists_every_partition_and_skips_hidden_files(fs):
    root = make_tree(fs, ["a=1/b=x/f.parquet", "a=1/b=y/f.parquet", "a=2/b=x/f.parquet", "a=2/b=x/_SUCCESS",
                          "_temporary/junk", ".hidden/f", "a=2/b=x/.f.crc"])
    listing = PartitionEnumerator(fs, root).enumerate()
    assert listing.columns == ("a", "b")
    assert sorted(p.raw_values for p in listing.partitions) == [("1", "x"), ("1", "y"), ("2", "x")]
    assert all(len(p.files) == 1 and p.files[0].size == 10 for p in listing.partitions)


def test_unpartitioned_table_and_nested_plain_directories(fs):
    root = make_tree(fs, ["f1.parquet", "sub/f2.parquet"])
    listing = PartitionEnumerator(fs, root).enumerate()
    assert listing.columns == ()
    assert [len(p.files) for p in listing.partitions] == [2]


def test_a_typed_walk_types_each_level_once_and_carries_the_values_to_the_leaves(fs):
    root = make_tree(fs, ["a=1/b=x/c=01/f", "a=1/b=y/c=2/f", "a=2/b=x/c=3/f", "a=3/b=z/c=4/.hidden",
                          "a=1/b=__HIVE_DEFAULT_PARTITION__/c=5/f"])
    seen: list[Level] = []

    def keep_a_below_3(level):
        seen.append(level)
        if len(level.columns) > 1:
            return None
        return [value < 3 for value in level.typed("a")[1].to_pylist()]

    listing = PartitionEnumerator(fs, root).enumerate(keep_a_below_3, PartitionTyping({"c": "bigint"}))
    assert [level.values.types for level in seen] == [("int",), ("int", "string"), ("int", "string", "bigint")]
    assert [len(level.raw_rows) for level in seen] == [3, 4, 4]  # a=3 pruned at the first level
    assert sorted(listing.typed_rows(["a", "b", "c"]), key=str) == [(1, "x", 1), (1, "y", 2), (1, None, 5),
                                                                    (2, "x", 3)]
    assert sorted(listing.typed_rows(["c"])) == [(1,), (2,), (3,), (5,)]
    assert PartitionEnumerator(fs, root).enumerate().values is None  # untyped unless asked


def test_a_kept_value_with_no_image_in_its_type_fails_the_listing_a_pruned_one_does_not(fs):
    root = make_tree(fs, ["k=1/f", "k=x/f"])
    kept = PartitionEnumerator(fs, root).enumerate(typing=PartitionTyping({"k": "int"}))
    unconvertible = rf"Partition column 'k' is int, but directory '{root}/k=x' has the value 'x', which cannot"
    with pytest.raises(ValueError, match=unconvertible):
        kept.typed_rows(["k"])
    with pytest.raises(ValueError, match=unconvertible):
        # The dynamic filter cannot judge 'x' and keeps it; the scan then fails, as Spark's does.
        dynamic(fs, root, DynamicFilteringData([("k", "int")], [(1,)]), types={"k": "int"}).enumerate().typed_rows(
            ["k"])
    pruned = PartitionEnumerator(fs, root).enumerate(
        lambda level: [raw != ("x",) for raw in level.raw_rows], PartitionTyping({"k": "int"}))
    assert pruned.typed_rows(["k"]) == [(1,)] and pruned.directories_pruned == 1


def test_an_unconvertible_value_names_its_column_directory_and_what_to_change(fs):
    root = make_tree(fs, ["d=20240430/h=1/f", "d=2024-04-31/h=2/f"])
    listing = PartitionEnumerator(fs, root).enumerate(typing=PartitionTyping({"d": "int"}))
    with pytest.raises(ValueError) as raised:
        listing.typed_rows(["h", "d"])
    assert str(raised.value) == (
        f"Partition column 'd' is int, but directory '{root}/d=2024-04-31' has the value '2024-04-31', which "
        "cannot be converted to int. Declare the column's type with option partitionColumns (e.g. "
        "partitionColumns='d STRING'; register a registered table again with it and replace=True), or fix or "
        "remove the directory.")


def test_level_by_level_pruning_never_lists_pruned_directories(fs):
    root = make_tree(fs, [f"a={a}/b={b}/f.parquet" for a in range(5) for b in range(4)])
    data = DynamicFilteringData([("a", "int")], [(1,), (3,)])
    listing = dynamic(fs, root, data).enumerate()
    assert sorted(p.raw_values for p in listing.partitions) == [(str(a), str(b)) for a in (1, 3) for b in range(4)]
    pruned = [f"{root}/a={a}" for a in (0, 2, 4)]
    assert not [path for path in listing.listed_paths if any(path.startswith(p) for p in pruned)]
    assert len(listing.listed_paths) == 1 + 2 + 2 * 4  # root, the kept a= directories, their b= leaves
    assert listing.directories_pruned == 3


def test_multi_column_filter_prunes_at_each_level(fs):
    root = make_tree(fs, [f"a={a}/b={b}/f.parquet" for a in range(3) for b in "xyz"])
    data = DynamicFilteringData([("a", "int"), ("b", "string")], [(0, "y"), (2, "z")])
    listing = dynamic(fs, root, data).enumerate()
    assert sorted(p.raw_values for p in listing.partitions) == [("0", "y"), ("2", "z")]
    assert f"{root}/a=1" not in listing.listed_paths


def test_filter_on_second_level_column(fs):
    root = make_tree(fs, [f"a={a}/b={b}/f.parquet" for a in range(3) for b in range(3)])
    listing = dynamic(fs, root, DynamicFilteringData([("b", "bigint")], [(2,)])).enumerate()
    assert sorted(p.raw_values for p in listing.partitions) == [(str(a), "2") for a in range(3)]


def test_exceeded_filter_keeps_everything(fs):
    root = make_tree(fs, [f"a={a}/f.parquet" for a in range(4)])
    listing = dynamic(fs, root, DynamicFilteringData([("a", "int")], exceed_threshold=True)).enumerate()
    assert len(listing.partitions) == 4


def test_default_partition_is_pruned_by_exact_filter_and_kept_by_null_safe(fs):
    root = make_tree(fs, ["a=1/f.parquet", "a=__HIVE_DEFAULT_PARTITION__/f.parquet"])
    exact = dynamic(fs, root, DynamicFilteringData([("a", "int")], [(1,), (None,)])).enumerate()
    assert [p.raw_values for p in exact.partitions] == [("1",)]
    null_safe = DynamicFilteringData([("a", "int")], [(1,), (None,)], null_safe=True)
    assert len(dynamic(fs, root, null_safe).enumerate().partitions) == 2


def test_key_is_cast_to_the_partition_type(fs):
    root = make_tree(fs, ["k=01/f.parquet", "k=2/f.parquet", "k=3/f.parquet"])
    listing = dynamic(fs, root, DynamicFilteringData([("k", "bigint")], [(1,), (3,)])).enumerate()
    assert sorted(p.raw_values for p in listing.partitions) == [("01",), ("3",)]


def test_escaped_string_values_match_unescaped_keys(fs):
    root = make_tree(fs, ["s=a%2Fb/f.parquet", "s=c/f.parquet"])
    listing = dynamic(fs, root, DynamicFilteringData([("s", "string")], [("a/b",)])).enumerate()
    assert [p.raw_values for p in listing.partitions] == [("a%2Fb",)]


def test_filter_field_that_is_neither_a_partition_nor_a_data_column_is_an_error(fs):
    root = make_tree(fs, ["a=1/f.parquet"])
    data = DynamicFilteringData([("a", "int"), ("zzz", "int")], [(1, 1)])
    with pytest.raises(ValueError, match=r"\['zzz'\] are neither .* partition columns are \['a'\] and its data "
                                         r"columns are \['v'\]"):
        dynamic(fs, root, data, data_columns=["v", "a"], on_error="fail").enumerate()


def test_data_column_fields_are_accepted_and_partition_fields_still_prune(fs):
    root = make_tree(fs, [f"a={a}/f.parquet" for a in range(3)])
    data = DynamicFilteringData([("a", "int"), ("V", "int")], [(1, 10), (2, 20)])
    listing = dynamic(fs, root, data, data_columns=["v", "a"]).enumerate()
    assert sorted(p.raw_values for p in listing.partitions) == [("1",), ("2",)]
    only_data = dynamic(fs, root, DynamicFilteringData([("v", "int")], [(10,)]), data_columns=["v"]).enumerate()
    assert len(only_data.partitions) == 3


def test_incomparable_types_fall_back_or_fail(fs):
    root = make_tree(fs, ["d=2024-01-01/f.parquet", "d=2024-01-02/f.parquet"])
    data = DynamicFilteringData([("d", "boolean")], [(True,)])
    assert len(dynamic(fs, root, data).enumerate().partitions) == 2
    with pytest.raises(TypeError):
        dynamic(fs, root, data, on_error="fail").enumerate()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["a=1/f.parquet", "b=1/f.parquet"], "Conflicting partition column names"),
        (["a=1/f.parquet", "stray.parquet"], "Conflicting directory structures"),
        (["a=1/f.parquet", "a=2/b=1/f.parquet"], "Conflicting directory structures"),
    ],
)
def test_inconsistent_layouts_are_errors(fs, files, message):
    with pytest.raises(ValueError, match=message):
        PartitionEnumerator(fs, make_tree(fs, files)).enumerate()


def test_missing_path_names_the_option(fs):
    with pytest.raises(FileNotFoundError, match="Option 'path'"):
        PartitionEnumerator(fs, "/does-not-exist").enumerate()
