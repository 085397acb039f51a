"""Reads and writes on an object store that throttles, fails, drops connections and stalls.

moto's S3 server behind the fault-injecting proxy of tests/faults.py, seeded random faults at every kind of
request (LIST, HEAD, GET, PUT, COPY, DELETE), each run bounded in count. Every read either returns the rows of the
same read without faults or raises an error naming the path and the fault; every write either commits whole or
leaves the table as it was, a reader polling the table meanwhile sees only whole commits, and no committed row is
ever lost or doubled. Anything else is a defect. The run's figures are printed (CI's output keeps them).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

import dynsource
from dynsource.layout import abandoned
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.scan import files
from dynsource.spark.writer import CommitOutcomeUnknown
from tests.faults import BUCKET, KINDS, Rule

# Per request kind, the chance of each fault; "lost" (served, the answer dropped) only where a retry is harmless.
RATES = {kind: {"503": 0.04, "500": 0.04, "reset": 0.03, "delay": 0.03,
                **({"lost": 0.02} if kind in ("GET", "HEAD", "LIST", "PUT") else {})} for kind in KINDS}
MAX_FAULTS = 25  # per operation: bounded, so every operation ends in seconds
FAULT_WORDS = ("Internal", "SlowDown", "reduce your request rate", "onnection", "reset", "500", "503", "Errno")
FIGURES: Counter = Counter()
REGIONS, DAYS = ("east", "west", "north"), range(1, 9)


def outcome(read, expected, path: str) -> str:
    """``equal``, ``clear error`` (naming ``path`` and the fault), or a defect's description."""
    try:
        found = read()
    except Exception as error:
        text = str(error)
        if path in text and any(word in text for word in FAULT_WORDS):
            return "clear error"
        return f"defect: an error that names no path or fault: {text[:400]}"
    return "equal" if found == expected else f"defect: other rows ({len(found)} against {len(expected)})"


@pytest.fixture(scope="module")
def store(proxied):
    proxy, faulty, direct = proxied
    before = proxy.counts()
    started = time.perf_counter()
    yield proxy, faulty, direct
    after = proxy.counts()
    requests = {k: n - before["requests"].get(k, 0) for k, n in after["requests"].items()}
    faults = {k: n - before["faults"].get(k, 0) for k, n in after["faults"].items() if n - before["faults"].get(k, 0)}
    print(f"\nobject-store faults: requests {requests}, faults injected {faults}, requests retried by the clients "
          f"{after['retried'] - before['retried']}, outcomes {dict(FIGURES)}, {time.perf_counter() - started:.0f} s")


@pytest.fixture(scope="module")
def table(store, spark, tmp_path_factory):
    """A 24-partition table on S3 (written directly, without faults), registered with the faulty endpoint."""
    _, faulty, direct = store
    prefix = f"{BUCKET}/{uuid.uuid4().hex}"
    fs = s3fs.S3FileSystem(**direct)
    count = len(REGIONS) * len(DAYS) * 5
    data = pa.table({"id": pa.array(range(count), pa.int64()), "amount": [i * 0.25 for i in range(count)],
                     "region": [REGIONS[i % 3] for i in range(count)],
                     "day": pa.array([DAYS[i % len(DAYS)] for i in range(count)], pa.int32())})
    pq.write_to_dataset(data, f"{prefix}/sales", partition_cols=["region", "day"], filesystem=fs)
    definitions = str(tmp_path_factory.mktemp("fault-definitions"))
    dynsource.register_table(spark, "faulty_sales", path=f"s3://{prefix}/sales", storageOptions=faulty,
                             definitions=definitions)
    spark.createDataFrame([(d, d % 3 == 0) for d in DAYS], "d_day INT, d_flag BOOLEAN").createOrReplaceTempView(
        "fault_days")
    yield prefix
    dynsource.drop_table(spark, "faulty_sales", definitions=definitions)


def rows_of(df) -> list:
    return sorted(df.collect(), key=repr)


def test_reads_under_random_faults_equal_the_fault_free_rows_or_name_the_path_and_the_fault(spark, store, table):
    proxy, faulty, _ = store
    url = f"s3://{table}/sales"
    filters = {"store": f"s3://{table}/filters", "storage_options": faulty}
    query = ("SELECT region, count(*) AS n, sum(amount) AS total FROM faulty_sales JOIN fault_days ON day = d_day "
             "WHERE d_flag GROUP BY region")
    doors = {
        "dynsource.sql": lambda: rows_of(dynsource.sql(spark, query)),
        'format("dynsource")': lambda: rows_of(spark.read.format("dynsource").option("path", url).option(
            "storageOptions", json.dumps(faulty)).load().where("day > 4")),
        "dynamic_join": lambda: rows_of(dynsource.dynamic_join(
            url, spark.table("fault_days").where("d_flag"), {"day": "d_day"},
            options={"storageOptions": json.dumps(faulty)}, **filters).select("id", "region", "day")),
    }
    expected = {door: read() for door, read in doors.items()}  # without faults
    assert all(expected.values())
    results = Counter()
    for seed in range(2):
        for door, read in doors.items():
            proxy.set_rates(RATES, MAX_FAULTS, seed=seed * 10 + len(door))
            results[outcome(read, expected[door], table)] += 1
            proxy.clear()
    FIGURES.update({f"read {k}": n for k, n in results.items()})
    assert set(results) <= {"equal", "clear error"}, results
    assert results["equal"] >= len(doors)  # the retries carry most reads through


def test_a_filter_the_store_cannot_serve_reads_everything_and_says_so(spark, store, table):
    proxy, faulty, _ = store
    url, location = f"s3://{table}/sales", f"s3://{table}/unreadable-filters"
    handle = dynsource.publish(dynsource.DynamicFilteringData([("day", "int")], [(2,)]), location,
                               storage_options=faulty)
    proxy.arm(Rule("GET", "500", key=r"unreadable-filters/.*\.dynf", times=1000))
    df = spark.read.format("dynsource").options(path=url, storageOptions=json.dumps(faulty), dynamicFilter=handle,
                                                filterStore=location, dynamicFilterWaitMs="0").load()
    try:
        assert df.count() == len(REGIONS) * len(DAYS) * 5  # every partition: the filter could not be read
    finally:
        proxy.clear()
    report = dynsource.scan_report(handle, location, storage_options=faulty)
    assert not report.filtering and report.partitions_kept == len(REGIONS) * len(DAYS)
    assert "not usable" in report.fallback_reason or "cannot be read" in report.fallback_reason, report
    FIGURES["filter unreadable: read everything"] += 1


def table_state(direct: dict, url: str) -> tuple[int, int]:
    """(rows, sum of ids) as dynsource's readers see the table now, without faults."""
    fs, root = files.open_table(url, direct)
    listing = PartitionEnumerator(fs, root).enumerate()
    arrow_fs = files.arrow_filesystem(fs)
    ids = [pq.read_table(f.path, filesystem=arrow_fs, columns=["id"]).column("id").to_pylist() for f in listing.files]
    return sum(len(i) for i in ids), sum(sum(i) for i in ids)


def test_writes_under_random_faults_commit_whole_or_leave_the_table_as_it_was(spark, store, table):
    proxy, faulty, direct = store
    url = f"s3://{table}/written"
    options = {"path": url, "storageOptions": json.dumps(faulty), "partitionColumns": "day INT"}

    def rows(first: int, days: range):
        return spark.createDataFrame([(first + i, i * 0.5, days[i % len(days)]) for i in range(12)],
                                     "id BIGINT, amount DOUBLE, day INT")

    def save(df, mode: str, overwrite_mode: str = "static") -> None:
        df.write.format("dynsource").options(**options, partitionOverwriteMode=overwrite_mode).mode(mode).save()

    save(rows(0, range(1, 4)), "append")
    model = {day: [i for i in range(12) if range(1, 4)[i % 3] == day] for day in range(1, 4)}  # day -> ids
    valid, seen, errors, done = set(), set(), [], threading.Event()

    def state_of(by_day) -> tuple[int, int]:
        return sum(len(ids) for ids in by_day.values()), sum(sum(ids) for ids in by_day.values())

    valid.add(state_of(model))

    def poll():  # what a reader sees meanwhile, through the fault-free endpoint
        # Every 20 ms, not back to back: a reader polling flat out takes the cores the writes and the server run on.
        while not done.wait(0.02):
            try:
                seen.add(table_state(direct, url))
            except FileNotFoundError:
                pass  # a replaced file deleted between the walk and its read, as for any reader of a rewritten table
            except Exception as error:
                errors.append(error)

    poller = threading.Thread(target=poll)
    poller.start()
    results = Counter()
    try:
        for step in range(6):
            mode, overwrite_mode = [("append", "static"), ("overwrite", "dynamic"), ("append", "static"),
                                    ("overwrite", "static")][step % 4]
            days = range(step % 3 + 2, step % 3 + 4)
            first = 1000 * (step + 1)
            after = ({} if (mode, overwrite_mode) == ("overwrite", "static") else
                     {d: list(ids) for d, ids in model.items() if mode == "append" or d not in days})
            for i in range(12):
                after.setdefault(days[i % len(days)], []).append(first + i)
            valid.add(state_of(after))
            proxy.set_rates(RATES, MAX_FAULTS, seed=100 + step)
            try:
                save(rows(first, days), mode, overwrite_mode)
                committed = True
            except Exception as error:
                committed = False
                unknown = isinstance(error, CommitOutcomeUnknown) or "may or may not have committed" in str(error)
            finally:
                proxy.clear()
            state = table_state(direct, url)
            if committed:
                assert state == state_of(after), (step, mode)
                model, results["write committed"] = after, results["write committed"] + 1
            elif unknown and state == state_of(after):
                model, results["write of unknown outcome, committed"] = after, results[
                    "write of unknown outcome, committed"] + 1
            else:
                assert state == state_of(model), (step, mode, "a failed write changed the table")
                results["write failed, table as it was"] += 1
            fs, root = files.open_table(url, direct)
            abandoned.vacuum(fs, root, 0)  # what a failed write's abort could not remove
            assert table_state(direct, url) == state_of(model)
    finally:
        done.set()
        poller.join()
    FIGURES.update(results)
    assert not errors and seen <= valid, (errors, seen - valid)
    assert results["write committed"] >= 2


def test_two_writers_at_once_under_faults_both_commit_or_one_fails_cleanly(spark, store, table):
    proxy, faulty, direct = store
    url = f"s3://{table}/concurrent"
    options = {"path": url, "storageOptions": json.dumps(faulty), "partitionColumns": "day INT"}

    def rows(first: int):
        return spark.createDataFrame([(first + i, i % 4) for i in range(20)], "id BIGINT, day INT")

    rows(0).write.format("dynsource").options(**options).mode("append").save()
    outcomes: dict[int, bool] = {}

    def append(first: int) -> None:
        try:
            rows(first).write.format("dynsource").options(**options).mode("append").save()
            outcomes[first] = True
        except Exception as error:
            outcomes[first] = False
            assert url.removeprefix("s3://") in str(error) or any(word in str(error) for word in FAULT_WORDS)

    proxy.set_rates(RATES, MAX_FAULTS, seed=200)
    writers = [threading.Thread(target=append, args=(first,)) for first in (1000, 5000)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    proxy.clear()
    fs, root = files.open_table(url, direct)
    abandoned.vacuum(fs, root, 0)
    expected_ids = [*range(20), *(first + i for first, ok in outcomes.items() if ok for i in range(20))]
    assert table_state(direct, url) == (len(expected_ids), sum(expected_ids))
    FIGURES.update({"concurrent write committed": sum(outcomes.values()),
                    "concurrent write failed cleanly": len(outcomes) - sum(outcomes.values())})
