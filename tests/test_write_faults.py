"""A write raises only when it did not commit: faults at every step of a commit, before and after its commit point.

On S3 (moto's server behind the fault-injecting proxy of tests/faults.py, reached by s3fs and botocore with their
own retries) and on a local disk, where the faults are real ``OSError``s: a directory made immutable
(``chattr +i``, which binds root too). Before the commit point a fault fails the write and ``abort`` leaves the
table as it was; at it, a fault whose outcome is unknown is settled by reading the record back; after it, a fault
is a WARNING and the write stands.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from dynsource.layout import abandoned, commits
from dynsource.spark import writer
from tests.faults import BUCKET, Rule
from tests.helpers import read, rows
from tests.test_commits import At, counted, load


@pytest.fixture
def s3(proxied):
    proxy, faulty, direct = proxied
    proxy.clear()
    name = f"s3://{BUCKET}/{uuid.uuid4().hex}/t"
    yield proxy, At(name, faulty), At(name, direct)
    proxy.clear()


def paused(step: str, monkeypatch, tmp_path: Path, run) -> tuple[threading.Thread, list, Path]:
    """Start ``run`` on a thread, held at write ``step`` (``writer._pause_at``) until the returned hold is removed."""
    monkeypatch.setenv(writer.PAUSE_ENV, f"{step}:{tmp_path}")
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / f"{step}.hold").touch()
    errors: list = []

    def target():
        try:
            run()
        except Exception as error:
            errors.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    while not (tmp_path / f"{step}.reached").exists():
        assert thread.is_alive(), errors
        time.sleep(0.02)
    return thread, errors, tmp_path / f"{step}.hold"


def committed(job) -> list:
    """Commit ``job`` as Spark does (abort on an error); what was raised, if anything."""
    try:
        job.commit(job.messages)
    except Exception as error:
        job.abort(job.messages)
        return [error]
    return []


# -- S3 -----------------------------------------------------------------------------------------------------------

# Each a fresh rule (a rule counts down as it injects), of faults past every retry.
BEFORE_THE_COMMIT_POINT = {
    "the pending record's PUT": lambda: Rule("PUT", "500", key=r"_dynsource_commits/[0-9a-f]+\.json", times=1000),
    "a move's COPY": lambda: Rule("COPY", "500", key=r"p=2/part-", times=1000),
    "the committed record's PUT, not applied": lambda: Rule(
        "PUT", "500", key=r"_dynsource_commits/", times=1000, after=lambda r: r.kind == "COPY"),
}


@pytest.mark.parametrize("step", sorted(BEFORE_THE_COMMIT_POINT))
def test_on_s3_a_fault_before_the_commit_point_fails_the_write_and_leaves_the_table_as_it_was(s3, step):
    proxy, faulty, direct = s3
    first = load(faulty, {1: 4})
    first.commit(first.messages)
    second = load(faulty, {1: 2, 2: 2})
    proxy.arm(BEFORE_THE_COMMIT_POINT[step]())
    raised = committed(second)
    assert raised and counted(direct) == {1: 4}, proxy.counts()
    fs, root = direct.open()
    assert not [r for r in commits.records(fs, root) if r["job"] == second.job]
    assert not [p for p in fs.find(root) if commits.STAGING_PREFIX in p or commits.job_token(second.job) in p]


def test_on_s3_a_committed_record_whose_answer_is_lost_is_read_back_and_the_write_stands(s3, caplog):
    proxy, faulty, _ = s3
    first = load(faulty, {1: 4})
    first.commit(first.messages)
    second = load(faulty, {1: 2, 2: 2})
    # Every attempt's answer lost: the PUT was applied, the client cannot tell.
    proxy.arm(Rule("PUT", "lost", key=r"_dynsource_commits/[0-9a-f]+\.json", times=1000,
                   after=lambda r: r.kind == "COPY"))
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        raised = committed(second)
    assert not raised and counted(faulty) == {1: 6, 2: 2}, proxy.counts()
    assert "it reads back as committed: the write committed" in caplog.text


AFTER_THE_COMMIT_POINT = {
    # The LISTs of the commit records (expiry, abandoned writes) and of the staging directory answer 500.
    "listing the records and the staging directory": lambda: Rule(
        "LIST", "500", key=r"(_dynsource_commits|dynsource-staging)", times=30,
        after=lambda r: r.kind == "PUT" and b'"committed"' in r.body),
    "deleting the replaced files": lambda: Rule(
        "DELETE", "500", times=30, after=lambda r: r.kind == "PUT" and b'"committed"' in r.body),
}


@pytest.mark.parametrize("step", sorted(AFTER_THE_COMMIT_POINT))
def test_on_s3_a_fault_after_the_commit_point_is_a_warning_and_the_write_stands(s3, step, caplog):
    proxy, faulty, direct = s3
    first = load(faulty, {1: 4, 3: 2})
    first.commit(first.messages)
    second = load(faulty, {1: 2, 2: 2}, overwrite=True)  # a static overwrite: replaces p=1 and p=3
    proxy.arm(AFTER_THE_COMMIT_POINT[step]())
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        raised = committed(second)
    assert not raised and counted(direct) == {1: 2, 2: 2}, (raised, proxy.counts())
    assert "the next commit or `dynsource table vacuum` removes it" in caplog.text, proxy.counts()
    proxy.clear()
    fs, root = direct.open()
    abandoned.vacuum(fs, root, 0, now=time.time() + commits.KEPT_SECONDS + 1)  # what was left behind goes
    assert not [p for p in fs.find(root) if commits.STAGING_PREFIX in p]
    assert counted(direct) == {1: 2, 2: 2} and sum(1 for p in fs.find(root) if p.endswith(".parquet")) == 4


def test_a_save_whose_clean_up_fails_after_its_commit_point_returns_and_is_not_run_twice(spark, s3):
    """The issue's sequence through Spark: an append whose commit record is written, after which the LISTs of the
    records' and the staging directory answer 500, must not raise (a caller would append it again)."""
    import json

    proxy, faulty, direct = s3
    options = {"path": faulty.url, "storageOptions": json.dumps(faulty.options), "partitionColumns": "p INT"}

    def append(count: int, start: int) -> None:
        spark.range(start, start + count).selectExpr("id", "CAST(id % 3 AS INT) AS p").write.format("dynsource") \
            .options(**options).mode("append").save()

    append(40, 0)
    proxy.arm(AFTER_THE_COMMIT_POINT["listing the records and the staging directory"]())
    append(30, 100)
    assert proxy.counts()["faults"], "no fault was injected"
    proxy.clear()
    assert read(spark, direct.url, storageOptions=json.dumps(direct.options)).count() == 70


def test_on_s3_a_data_file_the_store_fails_to_serve_is_an_error_naming_it_and_the_storage_error(spark, s3):
    import json

    proxy, faulty, _ = s3
    job = load(faulty, {1: 4, 2: 4})
    job.commit(job.messages)
    df = read(spark, faulty.url, storageOptions=json.dumps(faulty.options))
    expected = rows(df)
    proxy.arm(Rule("GET", "500", key=r"p=2/part-", times=2))  # fewer than the attempts: retried, rows equal
    assert rows(df) == expected and proxy.counts()["faults"]
    proxy.arm(Rule("GET", "500", key=r"p=2/part-", times=100))
    with pytest.raises(Exception, match=r"Cannot read data file '.*/p=2/part-.*' as parquet: OSError: .*internal "
                                        r"error"):
        df.collect()


# -- local disk ---------------------------------------------------------------------------------------------------


def immutable(path: Path, on: bool = True) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True, capture_output=True)


@pytest.fixture
def local(tmp_path):
    table = tmp_path / "t"
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        immutable(probe)
    except (OSError, subprocess.CalledProcessError) as error:  # no chattr, or no CAP_LINUX_IMMUTABLE
        pytest.skip(f"chattr +i is not permitted here ({error}): no real OSError to inject on a local disk")
    immutable(probe, False)
    frozen: list[Path] = []
    yield At(str(table)), table, frozen
    for path in frozen:
        immutable(path, False)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_locally_a_fault_before_the_commit_point_fails_the_write_and_abort_restores_the_table(local):
    table, root, frozen = local
    first = load(table, {1: 4})
    first.commit(first.messages)
    for blocked in (root / commits.DIRECTORY, root / "p=1"):  # the pending record's write; a move into p=1
        second = load(table, {1: 2, 2: 2})
        immutable(blocked)
        frozen.append(blocked)
        raised = committed(second)
        assert raised and isinstance(raised[0], OSError) and counted(table) == {1: 4}
        immutable(blocked, False)
        frozen.remove(blocked)
        assert not (root / f"{commits.STAGING_PREFIX}{second.job}").exists()


def test_locally_a_committed_record_that_cannot_be_written_leaves_the_write_pending_and_hidden(local, monkeypatch,
                                                                                               tmp_path):
    table, root, frozen = local
    first = load(table, {1: 4})
    first.commit(first.messages)
    second = load(table, {1: 2, 2: 2})
    raised: list = []
    thread, errors, hold = paused("moved", monkeypatch, tmp_path / "pause", lambda: raised.extend(
        committed(second)))
    immutable(root / commits.DIRECTORY)  # the committed record's write (and abort's removal of the pending one)
    frozen.append(root / commits.DIRECTORY)
    hold.unlink()
    thread.join()
    # The commit raised, and so did abort, which deleted the moved files but could not remove the pending record.
    assert not raised and len(errors) == 1 and isinstance(errors[0], PermissionError)
    assert counted(table) == {1: 4}
    immutable(root / commits.DIRECTORY, False)
    frozen.clear()
    fs, root_path = table.open()
    abandoned.vacuum(fs, root_path, 0)
    assert counted(table) == {1: 4} and not commits.records(fs, root_path)[1:]


def test_locally_a_fault_after_the_commit_point_is_a_warning_and_the_write_stands(local, caplog):
    table, root, frozen = local
    first = load(table, {1: 4, 3: 2})
    first.commit(first.messages)
    second = load(table, {1: 2, 2: 2}, overwrite=True)
    for blocked in (root / "p=3", root / f"{commits.STAGING_PREFIX}{second.job}"):  # replaced files; the staging
        immutable(blocked)
        frozen.append(blocked)
    with caplog.at_level(logging.WARNING, logger="dynsource"):
        raised = committed(second)
    assert not raised and counted(table) == {1: 2, 2: 2}
    assert caplog.text.count("the next commit or `dynsource table vacuum` removes it") == 2
