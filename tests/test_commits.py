"""Commit records: dynsource's readers see a write whole or not at all (real local, memory and S3 filesystems, the last
a moto S3 API server on loopback; no Spark)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import boto3
import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from moto.server import ThreadedMotoServer

from dynsource.layout import abandoned, commits
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.scan import files
from dynsource.spark.writeplan import WriteTarget
from dynsource.spark.writer import DynsourceWriter


@dataclass(frozen=True)
class At:
    """A table's URL and the storage options that open it."""

    url: str
    options: dict = field(default_factory=dict)

    def open(self) -> tuple:
        return files.open_table(self.url, self.options)


def load(at: At, values: dict[int, int], overwrite: bool = False, mode: str = "static") -> DynsourceWriter:
    """A job writing ``values[p]`` rows into each partition ``p`` of the table ``at``, in two task attempts,
    its files staged but not committed."""
    # The writer's own filesystem instance, as in another process: s3fs keeps no cache of the reader's up to date.
    options = {**at.options, "skip_instance_cache": True}
    job = DynsourceWriter(WriteTarget(at.url, options, "parquet", ("p",), mode), overwrite=overwrite)
    job.messages = []
    for task in range(2):
        rows = [(v, p) for p, count in values.items() for v in range(count) if v % 2 == task]
        batch = pa.record_batch({"v": [v for v, _ in rows], "p": pa.array([p for _, p in rows], pa.int32())})
        job.messages.append(job.write(iter([batch])))
    return job


def counted(at: At) -> dict[int, int]:
    """Rows per partition, as dynsource's walk lists the table."""
    fs, root = at.open()
    listing = PartitionEnumerator(fs, root).enumerate()
    arrow_fs = files.arrow_filesystem(fs)
    return {int(p.raw_values[0]): ds.dataset([f.path for f in p.files], filesystem=arrow_fs).count_rows()
            for p in listing.partitions}


@pytest.fixture(scope="module")
def s3_options():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = {"endpoint_url": f"http://{host}:{port}", "region_name": "us-east-1"}
    boto3.client("s3", aws_access_key_id="testing", aws_secret_access_key="testing", **client) \
        .create_bucket(Bucket="commits")
    yield {"key": "testing", "secret": "testing", "client_kwargs": client}
    server.stop()


@pytest.fixture(params=["local", "memory", "s3"])
def table(request, tmp_path) -> At:
    if request.param == "local":
        return At(str(tmp_path / "t"))
    if request.param == "memory":
        return At(f"memory://commits-{uuid.uuid4().hex}/t")
    # s3fs caches listings in its filesystem instance: the records must be read from the server each time.
    return At(f"s3://commits/{uuid.uuid4().hex}/t", request.getfixturevalue("s3_options"))


def test_a_pending_write_is_hidden_and_its_commit_shows_it_whole(table):
    first = load(table, {1: 4, 2: 4})
    first.commit(first.messages)
    second = load(table, {1: 2, 2: 2, 3: 2})
    fs, root = table.open()
    commits.write(fs, root, second.job, "pending")
    for message in second.messages:  # what commit() does under its pending record: move every file in
        for written in message.files:
            fs.makedirs(f"{root}/{written.directory}", exist_ok=True)
            fs.mv(f"{root}/.dynsource-staging-{second.job}/{message.attempt}/{written.path}",
                  f"{root}/{written.path}")
    assert counted(table) == {1: 4, 2: 4}  # every file is in place, none of them listed
    commits.write(fs, root, second.job, "committed")
    assert counted(table) == {1: 6, 2: 6, 3: 2}


def test_an_overwrite_replaces_the_files_in_one_step_and_deletes_them(table):
    first = load(table, {1: 4, 2: 4, 3: 4})
    first.commit(first.messages)
    dynamic = load(table, {2: 1, 4: 1}, overwrite=True, mode="dynamic")
    dynamic.commit(dynamic.messages)
    assert counted(table) == {1: 4, 2: 1, 3: 4, 4: 1}
    static = load(table, {5: 3}, overwrite=True)
    static.commit(static.messages)
    assert counted(table) == {5: 3}
    fs, root = table.open()
    # Other readers see the same table: the replaced files are gone, not only hidden.
    assert ds.dataset(f"{root}", filesystem=files.arrow_filesystem(fs), partitioning="hive").count_rows() == 3
    assert commits.read(fs, root).replaced  # kept, harmless, until a later commit expires the record
    abandoned.vacuum(fs, root, older_than_s=3600, now=time.time() + commits.KEPT_SECONDS + 1)
    assert commits.read(fs, root) == commits.NONE


def test_a_write_committed_while_the_table_is_walked_makes_the_walk_start_again(table):
    first = load(table, {1: 4, 2: 4})
    first.commit(first.messages)
    second = load(table, {1: 2, 2: 2, 3: 2})
    fs, root = table.open()
    commits_seen = []

    def commit_once(level):  # runs between the walk's listing of the root and of the partitions
        if not commits_seen:
            second.commit(second.messages)
        commits_seen.append(level.columns)

    listing = PartitionEnumerator(fs, root).enumerate(commit_once)
    rows = {int(p.raw_values[0]): len(p.files) for p in listing.partitions}
    # The first walk listed p=1 and p=2 after the commit but not p=3: it was walked again, and saw all of it.
    assert len(commits_seen) == 2 and rows == {1: 4, 2: 4, 3: 2}


def test_a_failed_commit_is_undone_by_abort(table):
    first = load(table, {1: 4})
    first.commit(first.messages)
    broken = load(table, {1: 2, 2: 2})
    fs, root = table.open()
    last = broken.messages[-1]
    fs.rm(f"{root}/.dynsource-staging-{broken.job}/{last.attempt}/{last.files[-1].path}")
    with pytest.raises(FileNotFoundError):
        broken.commit(broken.messages)
    assert commits.record(fs, root, broken.job)["state"] == "pending" and counted(table) == {1: 4}
    broken.abort(broken.messages)
    assert commits.record(fs, root, broken.job) is None and counted(table) == {1: 4}
    assert ds.dataset(root, filesystem=files.arrow_filesystem(fs), partitioning="hive").count_rows() == 4
    assert not fs.exists(f"{root}/.dynsource-staging-{broken.job}")


def test_a_record_dynsource_did_not_write_is_an_error_naming_it(table):
    first = load(table, {1: 1})
    first.commit(first.messages)
    fs, root = table.open()
    fs.pipe_file(f"{root}/{commits.DIRECTORY}/x.json", json.dumps({"job": "x", "state": "done"}).encode())
    with pytest.raises(ValueError, match=r"Commit record '.*_dynsource_commits/x.json' is not one dynsource writes"):
        PartitionEnumerator(fs, root).enumerate()


def test_records_hide_by_job_token_and_replaced_path():
    job = uuid.uuid4().hex
    name = commits.file_name("00001", job, uuid.uuid4().hex, "parquet")
    records = commits.Records(frozenset({(job, "pending"), ("b" * 32, "committed")}), frozenset({"p=1/old.parquet"}))
    assert records.hides(f"p=2/{name}") and records.hides("p=1/old.parquet")
    assert not records.hides("p=1/part-00001-other.parquet") and not commits.NONE.hides(f"p=2/{name}")
    assert commits.read(fsspec.filesystem("memory"), f"/{job}") == commits.NONE  # a table never written to


def test_an_overwrite_committed_while_an_append_is_pending_leaves_the_appends_files(table, monkeypatch, tmp_path):
    """The append commits after the overwrite: its rows stand beside the overwrite's, as in that serial order (an
    overwrite that listed the pending append's moved files as replaced would delete them)."""
    import threading

    from dynsource.spark import writer

    first = load(table, {1: 4})
    first.commit(first.messages)
    append, overwrite = load(table, {2: 2}), load(table, {3: 6}, overwrite=True)
    monkeypatch.setenv(writer.PAUSE_ENV, f"moved:{tmp_path}")
    (tmp_path / "moved.hold").touch()
    paused = threading.Thread(target=append.commit, args=(append.messages,))
    paused.start()
    while not (tmp_path / "moved.reached").exists():
        time.sleep(0.02)
    monkeypatch.delenv(writer.PAUSE_ENV)
    overwrite.commit(overwrite.messages)
    assert counted(table) == {3: 6}
    (tmp_path / "moved.hold").unlink()
    paused.join()
    assert counted(table) == {2: 2, 3: 6}
