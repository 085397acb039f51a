"""Publishing and resolving handles on real filesystems, with late, missing and failed filters (no Spark)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import dynsource
from dynsource import storage
from dynsource.filtering import DynamicFilteringData, filterstore, handles
from dynsource.filtering.filterstore import FilterStore

DATA = DynamicFilteringData([("k", "int")], [(1,), (2,)])


@pytest.fixture(params=["local", "memory"])
def location(request, tmp_path):
    return str(tmp_path / "store") if request.param == "local" else f"memory://store-{uuid.uuid4().hex}"


def test_publish_then_resolve_round_trips(location):
    handle = handles.publish(DATA, location)
    assert handles.resolve(handle, location) == DATA


def test_publish_leaves_no_temporary_files(tmp_path):
    handles.publish(DATA, str(tmp_path))
    assert [p.suffix for p in tmp_path.iterdir()] == [".dynf"]


def test_default_store_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(storage.STORE_ENV, str(tmp_path))
    handle = handles.publish(DATA)
    assert (tmp_path / f"{handle}.dynf").exists()


def test_unpublished_handle_fails_at_once_even_with_a_wait(location):
    started = time.monotonic()
    with pytest.raises(LookupError, match="never published"):
        handles.resolve("dynf-" + "1" * 32, location, wait_ms=5_000)
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("handle", ["../../etc/passwd", "/abs/path", "dynf-XYZ", "", "dynf-" + "0" * 31])
def test_malformed_handles_are_rejected(handle, location):
    with pytest.raises(ValueError, match="not a dynsource filter handle"):
        handles.resolve(handle, location)


def test_corrupt_payload_is_a_value_error(tmp_path):
    handle = handles.publish(DATA, str(tmp_path))
    payload = tmp_path / f"{handle}.dynf"
    payload.write_bytes(payload.read_bytes()[:-5])
    with pytest.raises(ValueError):
        handles.resolve(handle, str(tmp_path))


def test_slow_publisher_is_waited_for(location):
    handle = handles.reserve(location)
    threading.Timer(0.3, lambda: handles.publish(DATA, location, handle=handle)).start()
    assert handles.resolve(handle, location, wait_ms=10_000) == DATA


def test_publisher_that_never_publishes_times_out(location):
    handle = handles.reserve(location)
    started = time.monotonic()
    with pytest.raises(filterstore.FilterNotReadyError, match="dynamicFilterWaitMs"):
        handles.resolve(handle, location, wait_ms=300)
    assert 0.3 <= time.monotonic() - started < 3


def test_failed_publisher_stops_the_wait_with_its_reason(location):
    handle = handles.reserve(location)
    threading.Timer(0.2, lambda: FilterStore.of(location).publish_failure(handle, "dimension job failed: boom")).start()
    started = time.monotonic()
    with pytest.raises(filterstore.FilterFailedError, match="boom"):
        handles.resolve(handle, location, wait_ms=30_000)
    assert time.monotonic() - started < 10


# --- handles and names never leave the store ---------------------------------------------------------


@pytest.mark.parametrize("handle", ["../dynf-" + "0" * 32, "dynf-" + "0" * 32 + "/../../x", "/tmp/dynf-" + "0" * 32,
                                    "DYNF-" + "A" * 32, "dynf-" + "0" * 32 + "\n", 42])
def test_every_entry_point_rejects_a_malformed_handle_naming_it_and_the_expected_form(handle, location):
    entry_points = [
        lambda: handles.resolve(handle, location),
        lambda: handles.publish(DATA, location, handle=handle),
        lambda: FilterStore.of(location).publish_failure(handle, "reason"),
        lambda: dynsource.scan_report(handle, location),
    ]
    for call in entry_points:
        with pytest.raises(ValueError, match="is not a dynsource filter handle") as error:
            call()
        assert repr(handle) in str(error.value) and "'dynf-' followed by 32 lowercase hex digits" in str(error.value)


@pytest.mark.parametrize("name", ["../outside.dynf", "reports/../../outside.json", "/etc/passwd", "a//b", "./x",
                                  "a\\..\\b"])
def test_store_entries_cannot_escape_the_store_root(name, tmp_path):
    inside = tmp_path / "store"
    for call in (lambda: FilterStore.of(str(inside)).put(name, b"x"), lambda: FilterStore.of(str(inside)).get(name),
                 lambda: FilterStore.of(str(inside)).exists(name)):
        with pytest.raises(ValueError, match="not a relative name inside the store"):
            call()
    assert not (tmp_path / "outside.dynf").exists() and not (tmp_path / "outside.json").exists()


# --- leases and expire --------------------------------------------------------------------------------


def age(path, days: float) -> None:
    """Set the modification time of ``path`` ``days`` back."""
    stamp = time.time() - days * 86400
    os.utime(path, (stamp, stamp))


def handle_entries(root, handle) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if handle in str(path))


def test_resolve_renews_the_handles_lease(tmp_path):
    handle = handles.publish(DATA, str(tmp_path))
    assert not (tmp_path / f"{handle}.lease").exists()
    handles.resolve(handle, str(tmp_path))
    lease = tmp_path / f"{handle}.lease"
    age(lease, 1)
    handles.resolve(handle, str(tmp_path))
    assert time.time() - lease.stat().st_mtime < 3600


def test_expire_removes_old_unused_handles_with_everything_stored_under_them(tmp_path):
    root = str(tmp_path)
    old, fresh, leased_long_ago = (handles.publish(DATA, root) for _ in range(3))
    pending_old = handles.reserve(root)
    failed_old = handles.reserve(root)
    FilterStore.of(root).publish_failure(failed_old, "boom")
    handles.resolve(leased_long_ago, root)
    FilterStore.of(root).put(f"reports/{old}/scan1/0.json", b"{}")  # task figures as dynsource 0.1 stored them
    FilterStore.of(root).put(f"reports/{old}.json", b"{}")
    (tmp_path / f"{old}.dynf.{uuid.uuid4().hex}.tmp").write_bytes(b"torn")  # a writer that crashed mid-put
    (tmp_path / "not-a-handle.dynf").write_bytes(b"kept")
    for path in tmp_path.rglob("*"):
        if fresh not in str(path):
            age(path, 8)
    assert len(handle_entries(tmp_path, old)) == 6  # payload, temporary file, report, its directories and task file
    removed = dynsource.expire(older_than=dt.timedelta(days=7), store=root)
    assert removed == sorted([old, pending_old, failed_old, leased_long_ago])
    for handle in removed:
        assert handle_entries(tmp_path, handle) == []
    assert handles.resolve(fresh, root) == DATA
    assert (tmp_path / "not-a-handle.dynf").read_bytes() == b"kept"
    assert dynsource.expire(older_than=7 * 86400, store=root) == []


def test_expire_keeps_a_leased_handle_however_old_its_payload(tmp_path):
    root = str(tmp_path)
    in_use, unused = handles.publish(DATA, root), handles.publish(DATA, root)
    age(tmp_path / f"{unused}.dynf", 30)
    age(tmp_path / f"{in_use}.dynf", 30)
    handles.resolve(in_use, root)  # a reader: planning, or a read task in an executor
    assert handles.expire(0, root) == [unused]
    assert handles.resolve(in_use, root) == DATA
    with pytest.raises(LookupError) as removed:
        handles.resolve(unused, root)
    # Nothing of an expired handle is left to tell it from one never published: the message says both.
    assert str(removed.value).startswith(
        f"Dynamic filter handle '{unused}' is not in filter store '{root}': it was never published (or reserved) "
        "there, or it has been removed since (dynsource.expire() and `dynsource expire` remove")


def test_expire_on_an_in_memory_store(location):
    leased, unused = handles.publish(DATA, location), handles.publish(DATA, location)
    handles.resolve(leased, location)
    assert handles.expire(dt.timedelta(0), location) == [unused]
    assert handles.resolve(leased, location) == DATA


def test_expire_dry_run_returns_the_handles_it_would_remove_and_removes_nothing(tmp_path):
    root = str(tmp_path)
    old, fresh = handles.publish(DATA, root), handles.publish(DATA, root)
    FilterStore.of(root).put(f"reports/{old}.json", b"{}")
    for path in tmp_path.rglob("*"):
        if fresh not in str(path):
            age(path, 8)
    before = sorted(tmp_path.rglob("*"))
    assert handles.expire(dt.timedelta(days=7), root, dry_run=True) == [old]
    assert sorted(tmp_path.rglob("*")) == before
    assert handles.expire(dt.timedelta(days=7), root) == [old]


def test_expire_of_a_store_that_does_not_exist_removes_nothing(tmp_path):
    assert handles.expire(0, str(tmp_path / "missing")) == []


@pytest.mark.parametrize("older_than", [-1, dt.timedelta(seconds=-5), "7d", True, float("nan"), None])
def test_expire_rejects_a_bad_age(older_than, tmp_path):
    with pytest.raises(ValueError, match=r"older_than = .* expected a non-negative datetime\.timedelta or number"):
        handles.expire(older_than, str(tmp_path))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynsource.cli", *args], capture_output=True, text=True, timeout=300)


def test_expire_command_removes_the_old_unused_handles(tmp_path):
    root = str(tmp_path)
    in_use, unused = handles.publish(DATA, root), handles.publish(DATA, root)
    handles.resolve(in_use, root)
    for handle in (in_use, unused):
        age(tmp_path / f"{handle}.dynf", 8)
    kept = handles.publish(DATA, root)
    result = run_cli("expire", "--older-than", "7d", "--store", root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [unused]
    assert f"removed 1 handle(s) unused for 7d from {root}" in result.stderr
    assert handles.resolve(in_use, root) == DATA and handles.resolve(kept, root) == DATA


def test_commands_reject_a_bad_age_or_handle_and_document_the_lease(tmp_path):
    result = run_cli("expire", "--older-than", "7x", "--store", str(tmp_path))
    assert result.returncode == 2 and "'7x' is not a duration; expected a number and its unit" in result.stderr
    assert "lease" in run_cli("expire", "--help").stdout
    explained = run_cli("explain", "../../etc/passwd", "--store", str(tmp_path))
    assert explained.returncode == 1 and "'../../etc/passwd' (option 'dynamicFilter' or a handle argument) is not" \
        in explained.stderr
