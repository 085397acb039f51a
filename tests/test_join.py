"""dynamic_join: every join type equals the plain join; only the joins that may prune do."""

from __future__ import annotations

import contextlib
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource


@pytest.fixture(scope="module")
def fact(tmp_path_factory):
    root = tmp_path_factory.mktemp("fact")
    keys = [i % 20 for i in range(200)]
    table = pa.table({"amount": [float(i) for i in range(200)],
                      "k": pa.array(keys, mask=[i % 50 == 0 for i in range(200)])})
    pq.write_to_dataset(table, root, partition_cols=["k"])
    return str(root)


def dimension(spark, sql: str):
    return spark.sql(sql)


def plain(spark, fact, dim, how):
    fact_df = spark.read.parquet(fact)
    return fact_df.join(dim, fact_df["k"] == dim["dk"], how)


def same_rows(left, right) -> bool:
    return sorted(left.collect(), key=repr) == sorted(right.collect(), key=repr)


@pytest.mark.parametrize("how", ["inner", "left_semi", "right"])
def test_pruning_joins_equal_the_plain_join_and_prune(spark, fact, how):
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk, id * 10 AS label FROM range(3, 6)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"}, how)
    assert same_rows(joined, plain(spark, fact, dim, how))
    report = dynsource.scan_report(joined)
    assert report.handle is not None and report.filtering and report.fallback_reason is None
    assert report.partitions_kept == 3


def test_dynamic_join_names_the_store_it_published_to(spark, fact, tmp_path, monkeypatch):
    # Spark's Python workers keep the environment the session started with: the planner must be told the store.
    monkeypatch.setenv("DYNSOURCE_FILTER_STORE", str(tmp_path / "set-after-the-session-started"))
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(3, 6)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"})
    assert same_rows(joined, plain(spark, fact, dim, "inner"))
    report = dynsource.scan_report(joined)
    assert report.filtering and report.fallback_reason is None and report.partitions_kept == 3


@pytest.mark.parametrize("how", ["full", "left", "left_anti"])
def test_joins_that_keep_unmatched_fact_rows_do_not_prune(spark, fact, how):
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(3, 6)")
    joined = dynsource.dynamic_join(fact, dim, [("k", "dk")], how)
    assert same_rows(joined, plain(spark, fact, dim, how))
    report = dynsource.scan_report(joined)
    assert report.handle is None and not report.filtering and "keeps fact rows" in report.fallback_reason


@pytest.mark.smoke  # ./test --quick: dynamic_join
def test_keys_named_alike_join_as_sparks_join_on_names_with_one_column_each(spark, fact):
    """``on="k"``: the fact and the dimension share the name, and the result has one ``k`` (``join(on=["k"])``),
    which a later select names without ambiguity; of a star, per dimension."""
    dim = dimension(spark, "SELECT CAST(id AS INT) AS k, id * 10 AS label FROM range(3, 6)")
    fact_df = spark.read.parquet(fact)
    for on in ("k", ["k"]):
        joined = dynsource.dynamic_join(fact, dim, on)
        assert joined.columns == fact_df.join(dim, on=["k"]).columns == ["k", "amount", "label"]
        assert same_rows(joined.select("k", "label"), fact_df.join(dim, on=["k"]).select("k", "label"))
        assert dynsource.scan_report(joined).partitions_kept == 3
    amounts = dimension(spark, "SELECT CAST(id AS DOUBLE) AS amount_key FROM range(0, 200, 7)")
    star = dynsource.dynamic_join(fact, [(dim, "k"), (amounts, {"amount": "amount_key"})])
    expected = fact_df.join(dim, on=["k"]).join(amounts, fact_df["amount"] == amounts["amount_key"])
    assert same_rows(star.select("k", "amount_key"), expected.select("k", "amount_key"))


def test_empty_dimension(spark, fact):
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(0)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"})
    assert joined.count() == 0
    # Spark may drop a join with an empty side before scanning; a scan that did run kept nothing.
    with contextlib.suppress(LookupError):
        assert dynsource.scan_report(joined).partitions_kept == 0


def test_all_null_keys(spark, fact):
    dim = dimension(spark, "SELECT CAST(NULL AS INT) AS dk FROM range(3)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"})
    assert same_rows(joined, plain(spark, fact, dim, "inner"))
    assert joined.count() == 0


def test_dimension_larger_than_every_limit_reads_everything(spark, fact):
    dim = dimension(spark, "SELECT CAST(id % 20 AS INT) AS dk FROM range(100)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"}, max_rows=2, max_bytes=1, fallback_filter_ratio=1.0)
    assert same_rows(joined, plain(spark, fact, dim, "inner"))
    report = dynsource.scan_report(joined)
    # 21 on pyspark 4.0; 20 where Spark pushes the join's IsNotNull(k), which prunes the null partition.
    assert not report.filtering and report.partitions_total == 21 and report.partitions_kept in (20, 21)


def test_benefit_check_skips_a_filter_that_keeps_most_partitions(spark, fact):
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(15)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"})
    assert same_rows(joined, plain(spark, fact, dim, "inner"))
    report = dynsource.scan_report(joined)
    assert report.handle is None and "fallback_filter_ratio" in report.fallback_reason


def test_bad_join_arguments(spark, fact):
    dim = dimension(spark, "SELECT 1 AS dk")
    with pytest.raises(ValueError, match="Join type 'sideways'"):
        dynsource.dynamic_join(fact, dim, {"k": "dk"}, "sideways")
    with pytest.raises(ValueError, match="at least one"):
        dynsource.dynamic_join(fact, dim, {})
    with pytest.raises(ValueError, match=r"fact column\(s\) \['sale_dat'\] of 'on' are not columns of the fact "
                                         rf"table '{re.escape(fact)}': \['amount', 'k'\]"):
        dynsource.dynamic_join(fact, dim, {"sale_dat": "dk"})
    with pytest.raises(ValueError, match=r"Table 'default.salez' is not registered: register it first with "
                                         r"dynsource.register_table\(spark, 'salez', path=...\)"):
        dynsource.dynamic_join("salez", dim, {"k": "dk"})


def test_a_star_in_one_call_prunes_by_every_dimension_at_once_and_equals_the_plain_star(spark, fact):
    amounts = dimension(spark, "SELECT CAST(id AS DOUBLE) AS amount_key FROM range(0, 200, 3)")
    days = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(3, 6)")
    joined = dynsource.dynamic_join(fact, [(amounts, {"amount": "amount_key"}), (days, [("k", "dk")])])
    fact_df = spark.read.parquet(fact)
    expected = fact_df.join(amounts, fact_df["amount"] == amounts["amount_key"]).join(
        days, fact_df["k"] == days["dk"])
    assert same_rows(joined, expected) and joined.count() > 0
    report = dynsource.scan_report(joined)
    (assignment,) = report.assignments
    # The partition dimension first; each key set a part of one filter: 3 days and 67 amounts.
    assert assignment.filter == f"{fact} (k) <- dimension 1 (dk) AND {fact} (amount) <- dimension 0 (amount_key)"
    assert (assignment.keys, report.notes) == (3 + 67, ())
    (scan,) = report.scans()
    assert scan.partitions_kept == 3 and scan.data_columns == ("amount",) and scan.row_filtering
    assert scan.parts[0].startswith("k: exact, 3 key(s), ") and scan.parts[0].endswith("applied to directories")
    assert scan.parts[1].startswith("amount: exact, 67 key(s), ") and scan.parts[1].endswith(
        "a predicate pushed to Spark's file reader" if scan.read_by == "spark" else "row groups and rows")
    assert assignment.collection_ms > 0
    assert str(report).splitlines()[0] == (f"{assignment.filter}: all of 2 parts, 70 keys, collected in "
                                           f"{assignment.collection_ms} ms; reads all columns")


def test_star_arguments_are_checked(spark, fact):
    days = dimension(spark, "SELECT 1 AS dk")
    with pytest.raises(ValueError, match="takes 'on' with a single dim"):
        dynsource.dynamic_join(fact, [(days, {"k": "dk"})], {"k": "dk"})
    with pytest.raises(ValueError, match="needs 'on'"):
        dynsource.dynamic_join(fact, days)
    with pytest.raises(ValueError, match="at least one dimension"):
        dynsource.dynamic_join(fact, [], None)


@pytest.mark.parametrize("kind", ["bloom", "range"])
def test_graded_payloads_prune_and_equal_the_plain_join(spark, fact, kind):
    dim = dimension(spark, "SELECT CAST(id AS INT) AS dk FROM range(3, 7)")
    joined = dynsource.dynamic_join(fact, dim, {"k": "dk"}, max_rows=1, kinds=(kind,))
    assert same_rows(joined, plain(spark, fact, dim, "inner"))
    report = dynsource.scan_report(joined)
    assert report.payload_kind == kind and report.filtering
    assert 4 <= report.partitions_kept < report.partitions_total  # a bloom may keep more, never fewer


@pytest.mark.parametrize(("dim_sql", "null_safe"), [
    # bigint keys beyond the int partition column's range, under Spark's default ANSI casts
    ("SELECT CAST(3000000001 + id AS BIGINT) AS dk FROM range(2) UNION ALL SELECT 4L", False),
    ("SELECT CAST(3000000001 + id AS BIGINT) AS dk FROM range(2) UNION ALL SELECT 4L UNION ALL SELECT NULL", True),
    # numbers as strings beyond the column's range (a string that is no number fails the plain join too), and a
    # decimal too wide for the column
    ("SELECT CAST(s AS STRING) AS dk FROM VALUES ('7'), ('3000000001'), (' 8 '), ('-9999999999') AS v(s)", False),
    ("SELECT CAST(d AS DECIMAL(38, 0)) AS dk FROM VALUES (99999999999999999999999999999999999999), (5) AS v(d)",
     False),
])
def test_keys_the_fact_type_cannot_hold_match_nothing_and_never_fail(spark, fact, dim_sql, null_safe):
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    dim = dimension(spark, dim_sql)
    fact_df = spark.read.parquet(fact)
    if null_safe:
        joined = dynsource.dynamic_join(fact, dim, {"k": "dk"}, null_safe=True)
        expected = fact_df.join(dim, fact_df["k"].eqNullSafe(dim["dk"]))
        # the dynamic join's condition is '=': compare its rows with the plain '=' join, and the payload's null
        assert same_rows(joined, fact_df.join(dim, fact_df["k"] == dim["dk"]))
        assert expected.count() > joined.count()  # the null partition joins only null-safe
    else:
        joined = dynsource.dynamic_join(fact, dim, {"k": "dk"})
        assert same_rows(joined, fact_df.join(dim, fact_df["k"] == dim["dk"]))
    assert dynsource.scan_report(joined).filtering


def test_collect_drops_keys_the_type_cannot_hold_but_keeps_nulls_when_null_safe(spark):
    dim = spark.sql("SELECT CAST(v AS BIGINT) AS dk FROM VALUES (3000000001), (4), (NULL) AS t(v)")
    exact = dynsource.collect_data(dim, {"k": "dk"}, types={"k": "int"})
    assert exact.fields == (("k", "int"),) and len(exact) == 1
    null_safe = dynsource.collect_data(dim, {"k": "dk"}, types={"k": "int"}, null_safe=True)
    assert len(null_safe) == 2  # 4 and the null key; the overflowing key is not cast to null
