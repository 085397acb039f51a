"""The benchmark: its data generator, and a smoke run of the real runner at scale 0.01 so that it cannot rot."""

from __future__ import annotations

import collections
import datetime
import io
import itertools
import json
import os
from decimal import Decimal

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import dynsource
from benchmarks import curves, own_source, run, star, throughput, tpcds, writes


@pytest.fixture(scope="module")
def small_star(tmp_path_factory):
    return star.generate(0.01, seed=7, data_dir=tmp_path_factory.mktemp("bench"))


def test_date_dim_is_tpcds_like():
    table = star.date_dim_table()
    assert table.num_rows == 1826
    first, last = table.slice(0, 1).to_pylist()[0], table.slice(1825).to_pylist()[0]
    assert (first["d_date_sk"], first["d_date"]) == (2450815, datetime.date(1998, 1, 1))
    assert (last["d_date_sk"], last["d_date"]) == (2450815 + 1825, datetime.date(2002, 12, 31))
    holidays_2000 = table.filter(pc.and_(pc.equal(table["d_year"], 2000), pc.equal(table["d_holiday"], "Y")))
    assert holidays_2000.column("d_date").to_pylist() == [
        datetime.date(2000, 1, 1), datetime.date(2000, 5, 29), datetime.date(2000, 7, 4),
        datetime.date(2000, 9, 4), datetime.date(2000, 11, 23), datetime.date(2000, 12, 25),
    ]
    following = table.filter(pc.equal(table["d_following_holiday"], "Y")).column("d_date").to_pylist()
    assert datetime.date(2000, 12, 26) in following and len(following) == 6 * 5
    weekend = table.filter(pc.equal(table["d_weekend"], "Y")).column("d_date").to_pylist()
    assert {d.weekday() for d in weekend} == {5, 6}


def test_prices_are_exact_decimals_of_cents():
    assert star._cents(np.array([0, 1, 12345, -1, -10_000, 20_000])).to_pylist() == [
        Decimal("0.00"), Decimal("0.01"), Decimal("123.45"), Decimal("-0.01"), Decimal("-100.00"), Decimal("200.00"),
    ]


def test_store_sales_is_partitioned_with_null_keys_and_cached(small_star):
    sales = ds.dataset(small_star.store_sales, partitioning="hive").to_table()
    assert sales.num_rows == small_star.rows == 100_000
    nulls = sales.column(star.KEY).null_count
    assert 50 <= nulls <= 150  # about 0.1%
    assert (small_star.store_sales / f"{star.KEY}={star.NULL_PARTITION}").is_dir()
    sizes = star.partition_sizes(small_star.store_sales)
    assert len(sizes) == 1827 and {files for files, _ in sizes.values()} == {1}
    # The key lives in the directory names only, as Spark writes a partitioned table.
    assert star.KEY not in pq.read_schema(next(small_star.store_sales.glob("*/part-0.parquet"))).names
    marker = small_star.root / "manifest.json"
    written = marker.stat().st_mtime_ns
    assert star.generate(0.01, seed=7, data_dir=small_star.root.parent) == small_star
    assert marker.stat().st_mtime_ns == written


def test_generation_is_deterministic_per_seed():
    assert star.store_sales_table(1000, seed=3).equals(star.store_sales_table(1000, seed=3))
    assert not star.store_sales_table(1000, seed=3).equals(star.store_sales_table(1000, seed=4))


def test_planning_curve_point_lists_only_kept_partitions(tmp_path):
    url = curves.make_table("memory://dynsource-bench-test/p40", 40)
    handle = dynsource.publish(dynsource.DynamicFilteringData([("k", "int")], [(3,), (7,), (99,)]), str(tmp_path))
    _, input_partitions, listings = curves.time_planning(url, handle, str(tmp_path))
    assert listings == 1 + 2  # the root, then only k=3 and k=7
    report = dynsource.scan_report(handle, str(tmp_path))
    assert (report.partitions_total, report.partitions_kept, report.files_kept) == (40, 2, 2)
    assert 1 <= input_partitions <= 2
    assert curves.time_planning(url, None, str(tmp_path))[1] >= input_partitions  # every file, unpruned


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_over_a_cycle_of_rounds_each_mode_runs_right_after_each_other_mode_equally_often(count):
    modes = [f"mode {index}" for index in range(count)]
    cycle = count * (2 if count % 2 else 1)
    followers = collections.Counter()
    for round_ in range(cycle):
        order = run.ordered(modes, round_)
        assert sorted(order) == modes
        followers.update(itertools.pairwise(order))
    pairs = {(a, b) for a in modes for b in modes if a != b}
    assert set(followers) == pairs
    assert len(set(followers.values())) <= 1


def test_a_result_differing_between_modes_fails_the_run():
    seen: dict[str, tuple] = {}
    query = run.QUERIES[0]
    run.check_result(query, "native DPP cold", (1708, Decimal("1.00")), seen)
    run.check_result(query, "dynsource DPP", (1708, Decimal("1.00")), seen)
    with pytest.raises(run.ResultMismatch, match="'dynsource no filter' returned \\(1707"):
        run.check_result(query, "dynsource no filter", (1707, Decimal("1.00")), seen)


def test_paired_rounds_give_the_median_difference_of_each_phase_and_the_rounds_faster():
    def runs(*splits):
        return [run.Measurement((), call + action, None, None, None, "", {"call_s": call, "run_s": action})
                for call, action in splits]

    paired = run.paired_by_round(runs((0.010, 0.100), (0.012, 0.300), (0.011, 0.150)),
                         runs((0.007, 0.110), (0.008, 0.290), (0.006, 0.170)))
    # Rounds differ by -7, +14 and -15 ms in all; by +3, +4 and +5 ms in the call.
    assert paired == {"median_ms": -7.0, "call_median_ms": 4.0, "run_median_ms": -10.0, "rounds_faster": 2,
                      "rounds": 3}


def test_smoke_run_all_modes_agree_and_dpp_reads_only_matching_partitions(spark, small_star):
    # One query keeps the test short: each full-table mode reads 1,827 files.
    report = run.run_benchmark(spark, small_star, queries=run.QUERIES[:1], repeat=1, warmup=False)

    assert set(report["queries"]) == {"month"}
    for name, query in report["queries"].items():
        modes = query["modes"]
        assert set(modes) == set(run.MODES)
        assert len({tuple(m["result"]) for m in modes.values()}) == 1, name
        assert modes["dynsource DPP"]["result"][0] > 0
        matching = query["matching"]
        assert matching["partitions"] == query["keys"] == 31
        for mode in ("dynsource DPP", "dynsource.sql", "dynsource static keys", "native DPP cold", "native DPP warm"):
            figures = (modes[mode]["partitions"], modes[mode]["files"], modes[mode]["bytes"])
            assert figures == (matching["partitions"], matching["files"], matching["bytes"]), (name, mode)
        assert query["ratios"]["dpp_bytes_over_matching"] == 1.0
        # Without pruning both readers read the whole table (Spark skips the null partition: the join drops it).
        table = report["table"]
        assert modes["dynsource no filter"]["bytes"] == table["bytes"]
        _, null_bytes = star.partition_sizes(small_star.store_sales)[None]
        assert modes["native no DPP cold"]["bytes"] == table["bytes"] - null_bytes
    paired = report["queries"]["month"]["paired"]
    assert set(paired) == {f"{mode} - native DPP warm" for mode in run.MODES if mode.startswith("dynsource.sql")}
    assert all(p["rounds"] == 1 and {"call_median_ms", "run_median_ms"} <= set(p) for p in paired.values())
    printed = io.StringIO()
    run.print_table(json.loads(json.dumps(report)), out=printed)
    assert "dynsource DPP" in printed.getvalue() and "native no DPP warm" in printed.getvalue()
    assert "paired by round, dynsource.sql - native DPP warm: median" in printed.getvalue()
    assert spark.conf.get(run.DPP_CONF) == "true"


def test_the_star_query_prunes_by_date_and_store_at_once_and_agrees_with_spark(spark, small_star):
    (query,) = [q for q in run.QUERIES if q.stores]
    report = run.run_benchmark(spark, small_star, queries=[query],
                               modes=["native DPP warm", "dynsource.sql collect", "dynsource.sql"], repeat=1,
                               warmup=False)
    modes = report["queries"][query.name]["modes"]
    for mode in ("dynsource.sql collect", "dynsource.sql"):
        assert modes[mode]["result"] == modes["native DPP warm"]["result"]
        assert modes[mode]["result"][0] > 0 and modes[mode]["partitions"] == 31, mode
    (assignment,) = dynsource.explain_sql(spark, query.sql(f"store_sales_bench_{os.getpid()}")).assignments
    # Two parts: the 31 days and the 3 stores of TN; the dynsource.sql mode records what its scan's report says.
    assert "s_store_sk" in assignment.filter and assignment.keys == 31 + 3
    assert assignment.payload_kind == "all of 2 parts" and modes["dynsource.sql collect"]["filtering"]["keys"] == 34
    # With the default, Spark's DPP keeps the 31 days of the local table (read from its scan's metrics).
    assert modes["dynsource.sql"]["figures_from"] == "Spark SQL metrics of the scan Spark's DPP pruned"


def test_the_throughput_modes_agree_and_are_timed(spark, tmp_path):
    root = throughput.generate(2, 1000, tmp_path)
    results = throughput.run(spark, root, repeat=1)
    assert set(results) == set(throughput.QUERIES)
    for result in results.values():
        assert set(result["seconds"]) == set(throughput.MODES) and result["ratio_to_spark"]["spark.read.parquet"] == 1
    assert not [table for table in throughput.TABLES if spark.catalog.tableExists(table)]


def test_the_own_source_benchmark_fetches_only_the_kept_rows_as_the_table_of_them_alone_does(spark, tmp_path):
    report = own_source.run(spark, 20_000, 1, tmp_path)
    for label, groups in own_source.QUERIES.items():
        fetched = report["queries"][label]["fetched"]
        kept = 20_000 // groups  # the modes' rows are equal, or run() raises
        assert fetched["spark.sql"]["rows"] == 20_000
        assert fetched["dynsource.sql"]["rows"] == fetched[own_source.KEPT_ONLY]["rows"] == kept
        assert report["queries"][label]["result"][0] == kept
    left = ("own_sales", "own_keys", *(own_source.kept_table(groups) for groups in own_source.QUERIES.values()))
    assert not [t for t in left if spark.catalog.tableExists(t)]


def test_the_write_benchmark_checks_both_tables_and_times_both_writers(spark):
    result = writes.run(spark, 2000, 5, repeat=1)
    assert set(result["seconds"]) == set(writes.MODES) and result["ratio_to_spark"][writes.MODES[0]] == 1


def test_tpcds_double_quoted_names_become_spark_identifiers():
    text = """SELECT count(*) AS "order count", sum(x) ">120 days", 'a "b"' FROM t"""
    assert tpcds.spark_dialect(text) == """SELECT count(*) AS `order count`, sum(x) `>120 days`, 'a "b"' FROM t"""


def test_tpcds_summary_gives_the_median_and_the_best_runs_ratios_apart():
    def result(ratio, best_ratio):
        return {"ratio": ratio, "best_ratio": best_ratio, "spark_s": 1.0, "dynsource_s": ratio, "equal": True,
                "spark_best_s": 1.0, "dynsource_best_s": best_ratio, "pruned": [], "spark_error": None,
                "dynsource_error": None}

    summary = tpcds.summarize({93: result(16.0, 1.2), 42: result(1.0, 1.0), 7: result(0.25, 1.6)})
    assert summary["over_1_5"] == [93] and summary["best_over_1_5"] == [7]
    assert summary["geomean_ratio"] == 1.587 and summary["geomean_best_ratio"] == 1.243
    assert [q for q, *_ in summary["worst_ten"]] == ["q93", "q42", "q7"]
    assert [q for q, *_ in summary["best_worst_ten"]] == ["q7", "q93", "q42"]
    assert summary["best_worst_ten"][0] == ("q7", 1.6, 1.0, 1.6)  # the best runs' times beside their ratio
