"""Filter handles: publish a DynamicFilteringData under a handle, resolve it elsewhere.

The reader plans in a Python worker, not in the process that collected the
filter (DESIGN fact 2), so a handle names a file in a shared fsspec directory.
Publishing writes a temporary file and renames it, so a reader sees either no
payload or a whole one.

A handle can be reserved before its filter exists (``collect(..., wait=False)``):
the store then holds a *pending* marker, and readers wait for the payload up to
a timeout. A collector that fails leaves a *failed* marker with the reason, so
readers stop waiting at once and report why.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import fsspec

from dynsource.filtering import DynamicFilteringData

STORE_ENV = "DYNSOURCE_FILTER_STORE"
_HANDLE = re.compile(r"^dynf-[0-9a-f]{32}$")
_PAYLOAD, _PENDING, _FAILED = ".dynf", ".pending", ".failed"
_POLL_SECONDS = (0.02, 0.5)  # first and longest pause between looks at a pending handle


class FilterFailedError(RuntimeError):
    """The collector of a reserved handle failed; the message carries its reason."""


class FilterNotReadyError(TimeoutError):
    """A reserved handle was not published within the reader's wait."""


def default_store() -> str:
    """The store used when none is given: ``$DYNSOURCE_FILTER_STORE``, else a per-user cache directory."""
    configured = os.environ.get(STORE_ENV)
    if configured:
        return configured
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(cache) / "dynsource" / "filters")


def reserve(store: str | None = None) -> str:
    """A new handle whose filter will be published later; readers wait for it."""
    handle = _new_handle()
    put(f"{handle}{_PENDING}", b"", store)
    return handle


def publish(data: DynamicFilteringData, store: str | None = None, *, handle: str | None = None) -> str:
    """Write ``data`` to the store atomically and return its handle (new, or the reserved ``handle``)."""
    handle = _new_handle() if handle is None else _checked(handle)
    put(f"{handle}{_PAYLOAD}", data.to_bytes(), store)
    return handle


def publish_failure(handle: str, reason: str, store: str | None = None) -> None:
    """Record that the filter of reserved ``handle`` will never come, and why."""
    put(f"{_checked(handle)}{_FAILED}", json.dumps({"reason": reason}).encode(), store)


def resolve(handle: str, store: str | None = None, *, wait_ms: int = 0) -> DynamicFilteringData:
    """Load the payload published under ``handle``, waiting up to ``wait_ms`` for a reserved one.

    Raises
    ------
    LookupError
        Nothing was published or reserved under the handle.
    FilterNotReadyError
        The handle is reserved but its filter did not arrive within ``wait_ms``.
    FilterFailedError
        The collector of the handle failed.
    ValueError
        The handle or the payload is malformed.
    """
    _checked(handle)
    deadline = time.monotonic() + wait_ms / 1000
    pause = _POLL_SECONDS[0]
    while True:
        try:
            return DynamicFilteringData.from_bytes(get(f"{handle}{_PAYLOAD}", store))
        except FileNotFoundError:
            pass
        _raise_if_failed(handle, store)
        if not exists(f"{handle}{_PENDING}", store):
            raise LookupError(
                f"Dynamic filter handle '{handle}' was never published in filter store '{store or default_store()}'."
            )
        if time.monotonic() >= deadline:
            raise FilterNotReadyError(
                f"Dynamic filter handle '{handle}' is still being collected after {wait_ms} ms "
                "(option 'dynamicFilterWaitMs')."
            )
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, _POLL_SECONDS[1])


def validate_handle(handle: str) -> None:
    """Reject anything but a handle made by :func:`publish` or :func:`reserve` (no paths, no '..')."""
    _checked(handle)


def put(name: str, blob: bytes, store: str | None = None) -> None:
    """Write ``blob`` as ``name`` in the store: a temporary file renamed into place."""
    fs, root = _open(store)
    final = f"{root}/{name}"
    fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
    temporary = f"{final}.{uuid.uuid4().hex}.tmp"
    with fs.open(temporary, "wb") as out:
        out.write(blob)
    fs.mv(temporary, final)


def get(name: str, store: str | None = None) -> bytes:
    """The bytes stored as ``name``; ``FileNotFoundError`` when there are none."""
    fs, root = _open(store)
    with fs.open(f"{root}/{name}", "rb") as stored:
        return stored.read()


def exists(name: str, store: str | None = None) -> bool:
    fs, root = _open(store)
    return fs.exists(f"{root}/{name}")


def _raise_if_failed(handle: str, store: str | None) -> None:
    try:
        failure = json.loads(get(f"{handle}{_FAILED}", store))
    except FileNotFoundError:
        return
    raise FilterFailedError(f"The collector of dynamic filter handle '{handle}' failed: {failure.get('reason')}")


def _new_handle() -> str:
    return f"dynf-{uuid.uuid4().hex}"


def _checked(handle: str) -> str:
    if not isinstance(handle, str) or not _HANDLE.match(handle):
        raise ValueError(
            f"Option 'dynamicFilter' = {handle!r} is not a dynsource filter handle; "
            "expected the string returned by dynsource.publish() or dynsource.collect() ('dynf-' + 32 hex digits)."
        )
    return handle


def _open(store: str | None) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root = fsspec.core.url_to_fs(store or default_store())
    return fs, root.rstrip("/")
