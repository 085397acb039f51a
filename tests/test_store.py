"""Publishing and resolving handles on real filesystems, with late, missing and failed filters (no Spark)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from dynsource import store
from dynsource.filtering import DynamicFilteringData

DATA = DynamicFilteringData([("k", "int")], [(1,), (2,)])


@pytest.fixture(params=["local", "memory"])
def location(request, tmp_path):
    return str(tmp_path / "store") if request.param == "local" else f"memory://store-{uuid.uuid4().hex}"


def test_publish_then_resolve_round_trips(location):
    handle = store.publish(DATA, location)
    assert store.resolve(handle, location) == DATA


def test_publish_leaves_no_temporary_files(tmp_path):
    store.publish(DATA, str(tmp_path))
    assert [p.suffix for p in tmp_path.iterdir()] == [".dynf"]


def test_default_store_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(store.STORE_ENV, str(tmp_path))
    handle = store.publish(DATA)
    assert (tmp_path / f"{handle}.dynf").exists()


def test_unpublished_handle_fails_at_once_even_with_a_wait(location):
    started = time.monotonic()
    with pytest.raises(LookupError, match="never published"):
        store.resolve("dynf-" + "1" * 32, location, wait_ms=5_000)
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("handle", ["../../etc/passwd", "/abs/path", "dynf-XYZ", "", "dynf-" + "0" * 31])
def test_malformed_handles_are_rejected(handle, location):
    with pytest.raises(ValueError, match="not a dynsource filter handle"):
        store.resolve(handle, location)


def test_corrupt_payload_is_a_value_error(tmp_path):
    handle = store.publish(DATA, str(tmp_path))
    payload = tmp_path / f"{handle}.dynf"
    payload.write_bytes(payload.read_bytes()[:-5])
    with pytest.raises(ValueError):
        store.resolve(handle, str(tmp_path))


def test_slow_publisher_is_waited_for(location):
    handle = store.reserve(location)
    threading.Timer(0.3, lambda: store.publish(DATA, location, handle=handle)).start()
    assert store.resolve(handle, location, wait_ms=10_000) == DATA


def test_publisher_that_never_publishes_times_out(location):
    handle = store.reserve(location)
    started = time.monotonic()
    with pytest.raises(store.FilterNotReadyError, match="dynamicFilterWaitMs"):
        store.resolve(handle, location, wait_ms=300)
    assert 0.3 <= time.monotonic() - started < 3


def test_failed_publisher_stops_the_wait_with_its_reason(location):
    handle = store.reserve(location)
    threading.Timer(0.2, lambda: store.publish_failure(handle, "dimension job failed: boom", location)).start()
    started = time.monotonic()
    with pytest.raises(store.FilterFailedError, match="boom"):
        store.resolve(handle, location, wait_ms=30_000)
    assert time.monotonic() - started < 10
