"""Concurrency (issue 6 item 4): many publishers and resolvers, concurrent queries, stale handles, expiry."""

from __future__ import annotations

import multiprocessing
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.filtering import DynamicFilteringData, handles
from tests.helpers import read, rows

PROCESSES, THREADS, OWN_HANDLES, SHARED_HANDLES, VARIANTS = 8, 4, 3, 4, 4


def payload_for(handle: str, variant: int = 0) -> DynamicFilteringData:
    """A payload derived from the handle alone, so that any resolver can check what it got."""
    seed = int(handle[5:], 16) + variant
    size = 20 + seed % 200  # payloads of different lengths: a torn or mixed read cannot pass the checksum
    keys = pa.table({"k": pa.array([(seed + i * 7) % 100_000 for i in range(size)], pa.int64())})
    kind = ("exact", "bloom", "range")[seed % 3]
    return DynamicFilteringData.from_table([("k", "bigint")], keys, kind=kind)


def client(root: str, own: list[str], everyone: list[str], shared: list[str], seed: int) -> tuple[int, int]:
    """Publish ``own`` and re-publish ``shared`` while resolving the others' handles; returns (published, resolved).

    ``everyone`` lists the handles round by round (each client's first, then each one's second...): in round r
    a client waits only for handles of rounds up to r, which every client publishes before its own waits.
    """
    chosen = random.Random(seed)
    per_round = len(everyone) // len(own)
    published = resolved = 0
    for number, handle in enumerate(own):
        handles.publish(payload_for(handle), root, handle=handle)
        published += 1
        others = [other for other in everyone[:(number + 1) * per_round] if other not in own]
        for other in chosen.sample(others, 6):
            # A handle its publisher has not reached yet is pending: wait for it.
            assert handles.resolve(other, root, wait_ms=120_000) == payload_for(other), other
            resolved += 1
        for handle_of_all in shared:
            variant = chosen.randrange(VARIANTS)
            handles.publish(payload_for(handle_of_all, variant), root, handle=handle_of_all)
            published += 1
            got = handles.resolve(handle_of_all, root, wait_ms=120_000)
            assert any(got == payload_for(handle_of_all, v) for v in range(VARIANTS)), handle_of_all
            resolved += 1
    return published, resolved


def process_client(root: str, assignments: list[list[str]], everyone: list[str], shared: list[str],
                   number: int) -> tuple[int, int]:
    """One process: a thread per assignment, all running :func:`client` at once."""
    with ThreadPoolExecutor(len(assignments)) as pool:
        futures = [
            pool.submit(client, root, own, everyone, shared, number * 100 + index)
            for index, own in enumerate(assignments)
        ]
        results = [future.result() for future in futures]
    return sum(r[0] for r in results), sum(r[1] for r in results)


def test_processes_and_threads_never_see_a_torn_or_mixed_payload(tmp_path):
    root = str(tmp_path / "store")
    everyone = [handles.reserve(root) for _ in range(PROCESSES * THREADS * OWN_HANDLES)]
    shared = [handles.reserve(root) for _ in range(SHARED_HANDLES)]
    per_thread = [everyone[i::PROCESSES * THREADS] for i in range(PROCESSES * THREADS)]
    jobs = [(root, per_thread[p * THREADS:(p + 1) * THREADS], everyone, shared, p) for p in range(PROCESSES)]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        results = pool.starmap(process_client, jobs)
    published, resolved = sum(r[0] for r in results), sum(r[1] for r in results)
    clients = PROCESSES * THREADS
    assert published == clients * OWN_HANDLES * (1 + SHARED_HANDLES)
    assert resolved == clients * OWN_HANDLES * (6 + SHARED_HANDLES)
    for handle in everyone:
        assert handles.resolve(handle, root) == payload_for(handle)
    assert not list((tmp_path / "store").glob("*.tmp"))


def test_threads_on_an_in_memory_store(tmp_path):
    root = f"memory://concurrency-{tmp_path.name}"
    everyone = [handles.reserve(root) for _ in range(8 * OWN_HANDLES)]
    shared = [handles.reserve(root) for _ in range(2)]
    assert process_client(root, [everyone[i::8] for i in range(8)], everyone, shared, 0) == (8 * 3 * 3, 8 * 3 * 8)


def test_expire_running_beside_readers_removes_only_what_is_not_leased(tmp_path):
    root = str(tmp_path)
    data = DynamicFilteringData([("k", "int")], [(1,)])
    leased = [handles.publish(data, root) for _ in range(6)]
    for handle in leased:
        handles.resolve(handle, root)
    unused = [handles.publish(data, root) for _ in range(6)]
    stop, failures, removed = threading.Event(), [], []

    def reader(handle: str) -> None:
        while not stop.is_set():
            try:
                assert handles.resolve(handle, root) == data
            except Exception as error:  # collected, and reported by the test
                failures.append(error)
                return

    threads = [threading.Thread(target=reader, args=(handle,)) for handle in leased]
    for thread in threads:
        thread.start()
    try:
        for _ in range(10):
            removed.extend(handles.expire(0, root))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert sorted(removed) == sorted(unused)


# --- Spark: concurrent queries stay independent, handles never leak into other queries ----------------


@pytest.fixture(scope="module")
def fact(tmp_path_factory):
    """Partitions p=0..3, each with keys k=0..19 in two row groups."""
    path = tmp_path_factory.mktemp("concurrent-fact")
    for p in range(4):
        directory = path / f"p={p}"
        directory.mkdir()
        table = pa.table({"v": pa.array([p * 100 + k for k in range(20)], pa.int64()),
                          "k": pa.array(list(range(20)), pa.int64())})
        pq.write_table(table, directory / "part-0.parquet", row_group_size=10)
    return path


def expected(fact_rows, ps=None, ks=None):
    return sorted((r for r in fact_rows if (ps is None or r.p in ps) and (ks is None or r.k in ks)), key=repr)


@pytest.fixture(scope="module")
def fact_rows(spark, fact):
    return rows(spark.read.parquet(str(fact)).select("v", "k", "p"))


def filter_on(**columns) -> DynamicFilteringData:
    types = {"p": "int", "k": "bigint"}
    return DynamicFilteringData([(name, types[name]) for name in columns], list(zip(*columns.values(), strict=True)))


def test_two_queries_with_different_filters_run_concurrently_and_stay_independent(spark, fact, fact_rows):
    # One filter prunes partitions, the other filters rows by a data column in the read tasks.
    by_partition = dynsource.publish(filter_on(p=[0, 2]))
    by_key = dynsource.publish(filter_on(k=[3, 15]))
    wanted = {by_partition: expected(fact_rows, ps={0, 2}), by_key: expected(fact_rows, ks={3, 15})}

    def query(handle: str) -> list:
        return [rows(read(spark, fact, dynamicFilter=handle).select("v", "k", "p")) for _ in range(2)]

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(wanted, pool.map(query, wanted), strict=True))
    for handle, runs in results.items():
        assert runs == [wanted[handle]] * 2
    assert dynsource.scan_report(by_partition).partitions_kept == 2
    scan = dynsource.scan_report(by_key)
    assert scan.partitions_kept == 4 and scan.rows_filtered == 80 - 8


def test_a_handle_applies_only_to_the_queries_that_name_it(spark, fact, fact_rows):
    first = dynsource.publish(filter_on(k=[1]))
    second = dynsource.publish(filter_on(k=[2, 19]))
    assert rows(read(spark, fact, dynamicFilter=first).select("v", "k", "p")) == expected(fact_rows, ks={1})
    assert rows(read(spark, fact).select("v", "k", "p")) == fact_rows
    assert rows(read(spark, fact, dynamicFilter=second).select("v", "k", "p")) == expected(fact_rows, ks={2, 19})
    assert dynsource.scan_report(first).rows_filtered == 36  # the later queries did not touch its report


def test_a_handle_published_again_is_applied_as_published(spark, fact, fact_rows):
    # Workers cache resolved payloads: the second read must not reuse the first payload of the same handle.
    handle = handles.reserve()
    handles.publish(filter_on(k=[4]), handle=handle)
    assert rows(read(spark, fact, dynamicFilter=handle).select("v", "k", "p")) == expected(fact_rows, ks={4})
    handles.publish(filter_on(k=[12]), handle=handle)
    assert rows(read(spark, fact, dynamicFilter=handle).select("v", "k", "p")) == expected(fact_rows, ks={12})


def test_expire_keeps_the_handle_of_a_query_and_removes_an_unused_one(spark, fact, fact_rows, tmp_path):
    root = str(tmp_path / "store")
    in_use = dynsource.publish(filter_on(k=[7]), root)
    unused = dynsource.publish(filter_on(k=[8]), root)
    df = read(spark, fact, dynamicFilter=in_use, filterStore=root).select("v", "k", "p")
    assert rows(df) == expected(fact_rows, ks={7})  # planning and the read tasks resolved it: leased
    assert dynsource.expire(0, store=root) == [unused]
    assert rows(df) == expected(fact_rows, ks={7})
    assert dynsource.scan_report(in_use, root).rows_filtered == 36
