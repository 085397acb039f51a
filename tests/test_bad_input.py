"""The bad input matrix (issue 6, item 5): each input gives a clear error naming what and where, or a logged full read.

Rows already covered elsewhere, not repeated here:

- missing ``path`` option, ``path`` = '', a path that does not exist, unknown options:
  ``test_source.py::test_missing_path_option`` and ``test_source.py::test_bad_options_are_clear_errors``;
- a table whose only partition directory holds no files: ``test_source.py::test_empty_table_is_a_clear_error``;
- a corrupt file in a *pruned* partition is never opened:
  ``test_source.py::test_pruning_proven_by_deleting_non_matching_partitions``;
- a filter that exceeded the collector's limits reads everything:
  ``test_source.py::test_collector_exceed_path_reads_everything``;
- a handle that was never published: ``test_source.py::test_unpublished_handle_falls_back_or_fails``;
- a data-column field of an incomparable type: ``test_row_filtering.py::test_plan_with_an_incomparable_data_column...``.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

import dynsource
from dynsource.filtering import DynamicFilteringData, collector, filterstore
from dynsource.layout.enumerator import DynamicPartitionEnumerator, PartitionEnumerator
from dynsource.scan import files
from dynsource.scan.options import ScanOptions
from dynsource.scan.planner import plan_scan
from tests.helpers import read, rows

# --- tables -----------------------------------------------------------------------------------------


def write_files(root: Path, names: list[str]) -> Path:
    """A tiny Parquet file (``v`` = 1, 2) at each of ``names`` under ``root``; other names get a few junk bytes."""
    for name in names:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            pq.write_table(pa.table({"v": pa.array([1, 2], pa.int64())}), target)
        else:
            target.write_bytes(b"junk")
    return root


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """``k`` = 1, 2, 3, one file each."""
    root = tmp_path_factory.mktemp("table")
    pq.write_to_dataset(pa.table({"v": list(range(6)), "k": [1, 1, 2, 2, 3, 3]}), root, partition_cols=["k"])
    return root


def publish(fields, keys) -> str:
    return dynsource.publish(DynamicFilteringData(fields, keys))


# --- path: no data, unpartitioned -------------------------------------------------------------------


@pytest.mark.parametrize("names", [[], ["_SUCCESS", ".part-0.parquet.crc", "_temporary/part-0.parquet"]],
                         ids=["empty-directory", "only-hidden-files"])
def test_a_path_without_data_files_is_a_clear_error(spark, tmp_path, names):
    write_files(tmp_path, names)
    with pytest.raises(Exception, match=rf"Option 'path': table '{tmp_path}' has no data files"):
        read(spark, tmp_path).collect()


@pytest.mark.parametrize(("path", "message"), [
    ("   ", "Option 'path' is required"),
    ("nosuchprotocol://bucket/table", r"Option 'path' = 'nosuchprotocol://bucket/table' cannot be opened"),
])
def test_unusable_path_values_name_the_option(spark, path, message):
    with pytest.raises(Exception, match=message):
        spark.read.format("dynsource").option("path", path).load().collect()


@pytest.fixture(scope="module")
def unpartitioned(tmp_path_factory) -> Path:
    return write_files(tmp_path_factory.mktemp("flat"), ["part-0.parquet", "sub/part-1.parquet"])


def test_an_unpartitioned_table_reads_like_spark(spark, unpartitioned):
    ours = read(spark, unpartitioned)
    assert ours.columns == ["v"]
    assert rows(ours) == rows(spark.read.option("recursiveFileLookup", "true").parquet(str(unpartitioned)))


def test_a_filter_on_a_column_the_table_lacks_fails_or_reads_everything(spark, unpartitioned):
    handle = publish([("k", "int")], [(1,)])
    message = (rf"Dynamic filter field\(s\) \['k'\] are neither partition columns nor data columns of "
               rf"'{unpartitioned}'; its partition columns are \[\] and its data columns are \['v'\]")
    with pytest.raises(Exception, match=message):
        read(spark, unpartitioned, dynamicFilter=handle, dynamicFilterOnError="fail").collect()
    assert rows(read(spark, unpartitioned, dynamicFilter=handle)) == rows(read(spark, unpartitioned))
    report = dynsource.scan_report(handle)
    assert not report.filtering and report.fallback_reason.startswith("Dynamic filter field(s) ['k'] are neither")


def test_an_unknown_field_beside_known_fields_reads_every_row(spark, table):
    # Neither the partition field k nor the data field v prunes or filters: the filter is set aside whole.
    handle = publish([("k", "int"), ("v", "bigint"), ("nope", "int")], [(1, 0, 1)])
    assert rows(read(spark, table, dynamicFilter=handle)) == rows(spark.read.parquet(str(table)))
    report = dynsource.scan_report(handle)
    assert (report.partitions_kept, report.partitions_total, report.filtering) == (3, 3, False)
    assert report.data_columns == () and not report.row_filtering
    assert "['nope'] are neither partition columns nor data columns" in report.fallback_reason


def test_an_unknown_field_is_logged_in_the_planning_process(spark, table, caplog):
    handle = publish([("nope", "int")], [(1,)])
    options = ScanOptions.parse({"path": str(table), "dynamicFilter": handle})
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        planned = plan_scan(options, read(spark, table).schema)
    assert sum(len(p.splits) for p in planned) == 3
    assert "['nope'] are neither partition columns nor data columns" in caplog.text
    assert "reading every partition" in caplog.text


# --- layouts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("names", "stray", "beside"), [
    (["k=1/a.parquet", "stray.parquet"], "stray.parquet", "k=1"),
    (["k=1/a.parquet", "notkv/a.parquet"], "notkv", "k=1"),
    (["k=1/j=1/a.parquet", "k=1/stray.parquet"], "k=1/stray.parquet", "k=1/j=1"),
], ids=["stray-file", "plain-directory", "stray-file-one-level-down"])
def test_a_partition_directory_beside_other_entries_is_a_conflict(spark, tmp_path, names, stray, beside):
    write_files(tmp_path, names)
    message = (rf"Conflicting directory structures detected under '{tmp_path}[^']*': '{tmp_path}/{stray}' sits "
               rf"beside partition directories like '{tmp_path}/{beside}'")
    with pytest.raises(Exception, match=message):
        read(spark, tmp_path).collect()


def test_a_directory_with_data_beside_deeper_partitions_is_a_conflict(spark, tmp_path):
    write_files(tmp_path, ["a=1/f.parquet", "a=2/b=1/f.parquet"])
    with pytest.raises(Exception, match=rf"Conflicting directory structures detected: '{tmp_path}/a=1' holds data "
                                        r"directly while other branches are partitioned by 'b'"):
        read(spark, tmp_path).collect()


def test_hidden_entries_beside_partitions_are_skipped_like_spark(spark, tmp_path):
    # (Not a junk '.a.parquet.crc': Hadoop's local filesystem would check a.parquet against it.)
    write_files(tmp_path, ["k=1/a.parquet", "k=2/a.parquet", "_SUCCESS", "_temporary/0/a.parquet",
                           ".hidden/a.parquet", "k=1/.part-0.parquet.tmp", "k=2/_committed_1"])
    assert rows(read(spark, tmp_path)) == rows(spark.read.parquet(str(tmp_path)))


@pytest.mark.parametrize(("names", "first", "second"), [
    (["a=1/b=2/f.parquet", "a=1/c=2/f.parquet"], ("['a', 'b']", "a=1/b=2"), ("['a', 'c']", "a=1/c=2")),
    (["a=1/b=2/f.parquet", "a=2/c=2/f.parquet"], ("['a', 'b']", "a=1/b=2"), ("['a', 'c']", "a=2/c=2")),
    (["a=1/f.parquet", "b=1/f.parquet"], ("['a']", "a=1"), ("['b']", "b=1")),
], ids=["same-parent", "different-parents", "top-level"])
def test_inconsistent_partition_column_names_name_both_lists_and_paths(spark, tmp_path, names, first, second):
    write_files(tmp_path, names)
    with pytest.raises(Exception) as raised:
        read(spark, tmp_path).collect()
    message = str(raised.value)
    assert "Conflicting partition column names detected" in message
    for columns, path in (first, second):
        assert f"{columns} in '{tmp_path}/{path}'" in message


# --- corrupt data files -----------------------------------------------------------------------------


@pytest.fixture(params=["garbage", "truncated"])
def corrupt_table(request, tmp_path) -> tuple[Path, Path]:
    """``k`` = 1, 2 where the file of ``k=2`` is not readable Parquet; returns the table and that file."""
    write_files(tmp_path, ["k=1/part-0.parquet", "k=2/part-0.parquet"])
    bad = tmp_path / "k=2" / "part-0.parquet"
    bad.write_bytes(b"not parquet at all" if request.param == "garbage" else bad.read_bytes()[:-10])
    return tmp_path, bad


def test_a_corrupt_file_in_a_read_partition_is_named_by_the_read_task(spark, corrupt_table):
    root, bad = corrupt_table
    with pytest.raises(Exception, match=rf"Cannot read data file '{bad}' as parquet"):
        read(spark, root).collect()


def test_a_corrupt_file_in_a_kept_partition_is_named_at_planning(spark, corrupt_table):
    root, bad = corrupt_table
    with pytest.raises(Exception, match=rf"Cannot read the schema of data file '{bad}' as parquet"):
        read(spark, root, dynamicFilter=publish([("k", "int")], [(2,)])).collect()


# --- the collector's key columns --------------------------------------------------------------------


@pytest.fixture(scope="module")
def dim(spark):
    return spark.range(3).selectExpr("CAST(id AS INT) AS d_key", "array(id) AS tags")


@pytest.mark.parametrize("wait", [True, False])
def test_a_key_column_absent_from_the_dimension_names_it_and_lists_the_columns(dim, wait):
    message = r"Key column 'nope' \(for fact field 'k'\) is not a column of the dimension: \['d_key', 'tags'\]"
    with pytest.raises(ValueError, match=message):
        dynsource.collect(dim, {"k": "nope"}, wait=wait)


@pytest.mark.parametrize("keys", [["d_key"], "d_key", [("k", "d_key", "x")], {"k": 1}, 7])
def test_keys_that_are_not_field_to_column_pairs_say_what_is_expected(dim, keys):
    expected = ("keys must map fact fields to dimension columns: {'ss_sold_date_sk': 'd_date_sk'} or "
                f"[('ss_sold_date_sk', 'd_date_sk')]; got {keys!r}.")
    with pytest.raises(ValueError, match=re.escape(expected)):
        dynsource.collect(dim, keys)


def test_keys_may_be_pairs_as_dynamic_join_takes_them(dim):
    assert dynsource.collect_data(dim, [("k", "d_key")]) == dynsource.collect_data(dim, {"k": "d_key"})


def test_a_key_column_is_found_ignoring_case_like_spark(dim):
    data = dynsource.collect_data(dim, {"k": "D_KEY"})
    assert data.fields == (("k", "int"),) and sorted(data.table.column("k").to_pylist()) == [0, 1, 2]


def test_a_key_column_of_a_non_atomic_type_names_the_column(dim):
    with pytest.raises(ValueError, match=r"Key column 'tags' \(for fact field 'k'\) has type array<bigint>, which "
                                         r"a dynamic filter cannot hold"):
        dynsource.collect(dim, {"k": "tags"})


# --- types that cannot be compared -------------------------------------------------------------------


@pytest.fixture(scope="module")
def typed_table(tmp_path_factory) -> Path:
    """Partition columns ``b`` (true/false) and ``n`` (1/2), declared boolean and int by the tests."""
    root = tmp_path_factory.mktemp("typed")
    write_files(root, [f"b={b}/n={n}/part-0.parquet" for b in ("true", "false") for n in (1, 2)])
    return root


TYPED = {"partitionColumns": "b BOOLEAN, n INT"}


INCOMPARABLE = [
    (("b", "date"), datetime.date(2024, 1, 1), "boolean"),
    (("n", "binary"), b"1", "int"),
    (("n", "timestamp"), datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), "int"),
]


@pytest.mark.parametrize(("field", "key", "column_type"), INCOMPARABLE,
                         ids=["date-vs-boolean", "binary-vs-int", "timestamp-vs-int"])
def test_incomparable_types_fail_naming_column_and_types_or_read_everything_logged(typed_table, field, key,
                                                                                   column_type, caplog):
    fs, root = files.open_table(str(typed_table))
    name, field_type = field

    def enumerator(on_error):
        dynamic = DynamicPartitionEnumerator(PartitionEnumerator(fs, root), {"b": "boolean", "n": "int"},
                                             on_error=on_error)
        dynamic.set_dynamic_filtering_data(DynamicFilteringData([field], [(key,)]))
        return dynamic

    message = (f"Column '{name}' of type {column_type} cannot be compared with filter field '{name}' "
               f"of type {field_type}")
    with pytest.raises(TypeError, match=re.escape(message)):
        enumerator("fail").enumerate()
    fallback = enumerator("fallback")
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        listing = fallback.enumerate()
    assert len(listing.partitions) == 4 and message in listing.filter_set_aside
    assert f"cannot apply the dynamic filter to column '{name}': {message}" in caplog.text
    assert "reading every partition below this level" in caplog.text


def test_incomparable_types_through_spark(spark, typed_table):
    handle = publish([("b", "date")], [(datetime.date(2024, 1, 1),)])
    with pytest.raises(Exception, match="Column 'b' of type boolean cannot be compared with filter field 'b' "
                                        "of type date"):
        read(spark, typed_table, dynamicFilter=handle, dynamicFilterOnError="fail", **TYPED).collect()
    assert read(spark, typed_table, dynamicFilter=handle, **TYPED).count() == 8
    report = dynsource.scan_report(handle)
    assert not report.filtering and report.partitions_kept == 4
    assert "cannot apply the dynamic filter to column 'b'" in report.fallback_reason


def test_string_keys_against_an_int_column_compare_as_spark_casts_them(spark, typed_table):
    # Spark compares string = int as int: '01' matches n=1; a key that is no int cannot prune anything.
    parsed = publish([("n", "string")], [("01",)])
    assert {r.n for r in read(spark, typed_table, dynamicFilter=parsed, **TYPED).collect()} == {1}
    unparsable = publish([("n", "string")], [("x",)])
    got = read(spark, typed_table, dynamicFilter=unparsable, dynamicFilterOnError="fail", **TYPED)
    assert got.count() == 8


# --- a million keys ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def million_keys(spark):
    """A million distinct keys 0, 2, 4, ...: of the table's k = 1, 2, 3 only 2 joins."""
    return spark.range(0, 1_000_000, 1, 2).selectExpr("CAST(id * 2 AS INT) AS d_key")


@pytest.mark.parametrize(("options", "kind", "filtering"), [
    ({}, "bloom", True),  # past max_rows: a Bloom filter of 1.2 MB
    ({"kinds": ("exact",)}, "exact", False),  # past max_rows, no other grade: exceeded
    ({"max_rows": 2_000_000}, "exact", True),  # 4 MB of keys, within max_bytes
    ({"max_rows": 2_000_000, "max_bytes": 1 << 20}, "range", True),  # neither keys nor Bloom fit 1 MiB
], ids=["default-limits", "exact-only", "raised-max-rows", "raised-max-rows-small-max-bytes"])
def test_a_million_keys_never_crash_and_read_the_joining_rows(spark, table, million_keys, options, kind, filtering):
    handle = dynsource.collect(million_keys, {"k": "d_key"}, **options)
    data = dynsource.resolve(handle)
    assert (data.kind, data.is_filtering, len(data)) == (kind, filtering, 1_000_000 if filtering else 0)
    assert data.size_bytes <= options.get("max_bytes", collector.DEFAULT_MAX_BYTES)
    kept = {r.k for r in read(spark, table, dynamicFilter=handle).collect()}
    assert 2 in kept  # the only even k, so the only one that joins
    if kind == "exact":  # the keys prune 1 and 3; exceeded keeps all
        assert kept == ({2} if filtering else {1, 2, 3})
    if kind == "range":  # 1 and 3 lie within [0, 1999998]; a Bloom filter may keep either
        assert kept == {1, 2, 3}
    report = dynsource.scan_report(handle)
    assert report.filtering == filtering
    if filtering:
        assert report.keys == 1_000_000 and report.payload_kind == kind
    else:
        assert report.partitions_kept == 3 and "exceeded" in report.fallback_reason


def test_an_exceeded_filter_is_one_logged_full_read_and_its_report_says_exceeded(table, tmp_path, caplog):
    filter_store = str(tmp_path)
    handle = dynsource.publish(DynamicFilteringData([("k", "int")], exceed_threshold=True), filter_store)
    options = ScanOptions.parse({"path": str(table), "dynamicFilter": handle, "filterStore": filter_store})
    schema = StructType([StructField("v", LongType()), StructField("k", IntegerType())])
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        planned = plan_scan(options, schema)
    assert sum(len(p.splits) for p in planned) == 3
    assert [record.getMessage() for record in caplog.records] == [
        f"dynsource: dynamic filter '{handle}' exceeded the collector's threshold and holds no key, so the scan of "
        f"{table} reads every partition; to prune, collect it with a larger max_rows or max_bytes, or with kinds "
        "that allow 'bloom' or 'range'."]
    assert str(dynsource.scan_report(handle, filter_store)).splitlines()[1] == (
        "  payload: exceeded the collector's threshold, so it holds no key and prunes nothing: every partition is "
        "read")


# --- filter stores that cannot be reached -----------------------------------------------------------


@pytest.fixture
def unreachable_stores(tmp_path) -> list[str]:
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("a file where the store's directory should be")
    return ["nosuchprotocol://filters", str(not_a_directory)]


def test_an_unreachable_store_fails_naming_store_and_handle(spark, table, unreachable_stores):
    handle = publish([("k", "int")], [(1,)])
    for filter_store in unreachable_stores:
        with pytest.raises(Exception, match=rf"Filter store '{filter_store}' cannot be read[^\n]*{handle}"):
            read(spark, table, dynamicFilter=handle, filterStore=filter_store, dynamicFilterOnError="fail").collect()
    # Under 'fallback' (the logged reason: the next test, in this process) the scan reads every row.
    got = read(spark, table, dynamicFilter=handle, filterStore=unreachable_stores[-1])
    assert rows(got) == rows(spark.read.parquet(str(table)))


def test_an_unreachable_store_is_a_logged_full_read(spark, table, unreachable_stores, caplog):
    handle = publish([("k", "int")], [(1,)])
    schema = read(spark, table).schema
    for filter_store in unreachable_stores:
        options = ScanOptions.parse({"path": str(table), "dynamicFilter": handle, "filterStore": filter_store})
        with caplog.at_level(logging.WARNING, logger="dynsource"):
            planned = plan_scan(options, schema)
        assert sum(len(p.splits) for p in planned) == 3
        assert f"dynamic filter '{handle}' is not usable, reading every partition: Filter store '{filter_store}'" \
            in caplog.text


def test_publishing_to_an_unreachable_store_names_it(spark, dim, unreachable_stores):
    for filter_store in unreachable_stores:
        with pytest.raises(filterstore.FilterStoreError, match=rf"Filter store '{filter_store}' cannot be written"):
            dynsource.collect(dim, {"k": "d_key"}, store=filter_store)


def test_overriding_options_are_validated_as_parsed_ones():
    stored = ScanOptions.parse({"path": "/t", "format": "orc", "batchSize": "10"})
    merged = stored.with_options({"BATCHSIZE": "20", "timezone": "UTC"})
    assert (merged.path, merged.format, merged.batch_size, merged.time_zone) == ("/t", "orc", 20, "UTC")
    assert stored.batch_size == 10 and stored.with_options({}) is stored
    with pytest.raises(ValueError, match=r"Option 'batchSize' = '0' is not valid"):
        stored.with_options({"batchSize": "0"})
    with pytest.raises(ValueError, match=r"Unknown option\(s\) 'colour' for data source 'dynsource'; valid options"):
        stored.with_options({"colour": "red"})
    with pytest.raises(ValueError, match="Option 'path' is required"):
        stored.with_options({"path": " "})


@pytest.mark.parametrize("statement", [
    "CREATE TABLE {name} USING dynsource OPTIONS (path '{path}')",
    "CREATE TABLE {name} USING dynsource LOCATION '{path}'",
    "CREATE TABLE {name} (v INT, k INT) USING dynsource OPTIONS (path '{path}', format 'parquet')",
])
def test_create_table_using_dynsource_points_to_register_table(spark, tmp_path, statement):
    # Spark hands a Python source its catalog properties (location, owner, provider), or nothing, not the OPTIONS.
    pq.write_to_dataset(pa.table({"v": [1, 2], "k": [1, 2]}), tmp_path, partition_cols=["k"])
    name = f"created_{abs(hash(statement)) % 10_000}"
    try:
        with pytest.raises(Exception, match=r"dynsource.register_table\(spark, name, path=\.\.\.\) or `dynsource "
                                            r"table create NAME --path URL` instead: Spark drops the OPTIONS"):
            spark.sql(statement.format(name=name, path=tmp_path))
            spark.table(name).count()  # with a schema, Spark creates the table: reading it fails
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_one_letter_protocol_is_unknown_not_a_local_directory(tmp_path, monkeypatch):
    # fsspec alone reads 'x://t' as a Windows drive: a local path that does not exist, or an empty store.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^Option 'path' = 'x://t' cannot be opened: Protocol not known: x\. "):
        files.open_table("x://t")
    with pytest.raises(filterstore.FilterStoreError,
                       match=r"^Filter store 'x://f' cannot be written .*Protocol not known"):
        dynsource.publish(DynamicFilteringData([("k", "int")], [(1,)]), "x://f")
    assert list(tmp_path.iterdir()) == []


def test_a_mistyped_option_is_named_with_the_option_it_is_closest_to_after_one_frame(spark, tmp_path):
    pq.write_to_dataset(pa.table({"v": [1], "k": [1]}), tmp_path, partition_cols=["k"])
    with pytest.raises(Exception) as raised:  # Spark hands the option lower-cased
        spark.read.format("dynsource").option("path", str(tmp_path)).option("partitonFilter", "k = 1").load()
    message = str(raised.value)
    assert "Unknown option(s) 'partitonfilter' (did you mean 'partitionFilter'?) for data source 'dynsource'" in message
    # Spark shows the worker's traceback before the sentence: one frame, dynsource's entry point, precedes it.
    before = message[:message.index("ValueError: Unknown option")]
    assert before.count('File "') == 1 and "source.py" in before, message


def test_an_object_store_that_does_not_answer_is_an_error_naming_the_path_and_the_store_error(spark, tmp_path):
    unreachable = {"key": "k", "secret": "s", "config_kwargs": {"retries": {"max_attempts": 1}},
                   "client_kwargs": {"endpoint_url": "http://127.0.0.1:1", "region_name": "us-east-1"}}
    expected = (r"Option 'path': 'bucket/sales' cannot be reached: EndpointConnectionError: Could not connect to the "
                r"endpoint URL.*Check the store's address and credentials \(option storageOptions\)")
    with pytest.raises(OSError, match=expected):
        dynsource.register_table(spark, "unreachable", path="s3://bucket/sales", storageOptions=unreachable,
                                 definitions=str(tmp_path))
    dim = spark.createDataFrame([(1,)], "d INT")
    with pytest.raises(OSError, match=expected):
        dynsource.dynamic_join("s3://bucket/sales", dim, {"k": "d"},
                               options={"storageOptions": json.dumps(unreachable)})
