"""Filter handles: publish a DynamicFilteringData under a handle, resolve it elsewhere.

The reader plans in a Spark Python worker, not in the process that collected
the filter, so a handle names a file in a shared fsspec directory.
Publishing writes a temporary file and renames it, so a reader sees either no
payload or a whole one.

A handle can be reserved before its filter exists (``collect(..., wait=False)``):
the store then holds a *pending* marker, and readers wait for the payload up to
a timeout. A collector that fails leaves a *failed* marker with the reason, so
readers stop waiting at once and report why.

Every successful :func:`resolve` (the query planner's; read tasks never
resolve, their filter travels in the plan) renews a *lease*: it rewrites ``<handle>.lease``. :func:`expire` removes a
handle only when nothing of it (payload, markers, lease, scan report) changed
for ``older_than`` and its lease is older than ``LEASE_SECONDS``, so a handle a
query is planning or reading with stays. A reader that starts in the instant
``expire`` deletes a handle finds it missing and reads unfiltered (WARNING).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from pyspark.sql import SparkSession

from dynsource import deployment
from dynsource.filtering import DynamicFilteringData
from dynsource.storage import STORE_ENV, FilterStore

_HANDLE = re.compile(r"dynf-[0-9a-f]{32}")  # fullmatch: "$" would also allow a final newline
_PAYLOAD, _PENDING, _FAILED, _LEASE = ".dynf", ".pending", ".failed", ".lease"
# dynsource.report saves the reports of a handle's scans under reports/<handle>/.
REPORTS = "reports"
# A resolve protects its handle from expire() this long: longer than planning plus the read tasks of a query.
LEASE_SECONDS = 3600.0
_STORED = re.compile(r"^(dynf-[0-9a-f]{32})(\.|$)")  # an entry of a handle: '<handle>.<suffix>', or its report dir
_POLL_SECONDS = (0.02, 0.5)  # first and longest pause between looks at a pending handle
Options = Mapping[str, Any] | None  # fsspec storage options of the store
Store = str | FilterStore | None  # a FilterStore, or its URL (None: the default store) opened with `Options`

log = logging.getLogger(__name__)


class FilterFailedError(RuntimeError):
    """The collector of a reserved handle failed; the message carries its reason."""


class FilterNotReadyError(TimeoutError):
    """A reserved handle was not published within the reader's wait."""


class FilterStoreError(OSError):
    """The filter store cannot be reached: an unknown protocol, a file where its directory should be, no access."""


def reserve(store: Store = None, *, storage_options: Options = None) -> str:
    """A new handle whose filter will be published later; readers wait for it."""
    location = FilterStore.of(store, storage_options)
    deployment.warn_if_local_store(SparkSession.getActiveSession(), location.url)
    handle = _new_handle()
    put(f"{handle}{_PENDING}", b"", location)
    return handle


def publish(
    data: DynamicFilteringData, store: Store = None, *, handle: str | None = None, storage_options: Options = None
) -> str:
    """Write ``data`` to the store atomically and return its handle (new, or the reserved ``handle``).

    ``storage_options`` are the fsspec options of the store (credentials, endpoint), as ``filterStoreOptions``.
    """
    handle = _new_handle() if handle is None else _checked(handle)
    location = FilterStore.of(store, storage_options)
    deployment.warn_if_local_store(SparkSession.getActiveSession(), location.url)
    put(f"{handle}{_PAYLOAD}", data.to_bytes(), location)
    return handle


def publish_failure(handle: str, reason: str, store: Store = None, *, storage_options: Options = None) -> None:
    """Record that the filter of reserved ``handle`` will never come, and why."""
    put(f"{_checked(handle)}{_FAILED}", json.dumps({"reason": reason}).encode(), FilterStore.of(store, storage_options))


def resolve(
    handle: str, store: Store = None, *, wait_ms: int = 0, storage_options: Options = None
) -> DynamicFilteringData:
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
    location = FilterStore.of(store, storage_options)
    deadline = time.monotonic() + wait_ms / 1000
    pause = _POLL_SECONDS[0]
    while True:
        try:
            data = DynamicFilteringData.from_bytes(get(f"{handle}{_PAYLOAD}", location))
        except FileNotFoundError:
            pass
        else:
            _renew_lease(handle, location)
            return data
        _raise_if_failed(handle, location)
        if not exists(f"{handle}{_PENDING}", location):
            # expire() leaves nothing of a handle behind, so a removed one cannot be told from one never published.
            raise LookupError(
                f"Dynamic filter handle '{handle}' is not in filter store '{location}': it was never published "
                "(or reserved) there, or it has been removed since (dynsource.expire() and `dynsource expire` "
                "remove the handles unused for their older_than). Collect or publish the filter again for a new "
                "handle, or name the store it was published in (option 'filterStore')."
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


def expire(
    older_than: dt.timedelta | float, store: Store = None, *, storage_options: Options = None, dry_run: bool = False
) -> list[str]:
    """Remove the handles unused for ``older_than`` (a timedelta or seconds); return the removed handles.

    A handle goes with everything stored under it: payload, pending and failed
    markers, lease, leftover temporary files and saved scan reports. It is kept
    while anything of it is younger than ``older_than``, and while it is leased:
    resolved within the last ``LEASE_SECONDS`` by a query's planning or read tasks.
    Entries whose names are not handles are never touched.

    With ``dry_run=True`` it removes nothing and returns the handles it would remove.

    Raises
    ------
    ValueError
        ``older_than`` is not a non-negative timedelta or number of seconds.
    """
    now = time.time()
    cutoff, lease_cutoff = now - _seconds(older_than), now - LEASE_SECONDS
    fs, root = FilterStore.of(store, storage_options).open()
    fs.invalidate_cache()  # a listing cached by this process (s3fs) would hide new handles and leases
    removed = []
    for handle, paths in sorted(_stored_handles(fs, root).items()):
        times = {path: stamp for path in paths if (stamp := _modified(fs, path)) is not None}
        lease = times.get(f"{root}/{handle}{_LEASE}")
        if (lease is not None and lease > lease_cutoff) or any(stamp > cutoff for stamp in times.values()):
            continue
        removed.append(handle)
        if dry_run:
            continue
        # The lease goes last: until the payload is gone, a concurrent expire() still finds the handle.
        for path in sorted(paths, key=lambda path: path.endswith(_LEASE)):
            with contextlib.suppress(FileNotFoundError):  # a concurrent expire() got there first
                fs.rm(path, recursive=True)
    return removed


def put(name: str, blob: bytes, store: Store = None, *, storage_options: Options = None) -> None:
    """Write ``blob`` as ``name`` in the store: a temporary file renamed into place."""
    _check_name(name)
    location = FilterStore.of(store, storage_options)
    with _reaching(location, "written", name):
        fs, root = location.open()
        final = f"{root}/{name}"
        fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        temporary = f"{final}.{uuid.uuid4().hex}.tmp"
        with fs.open(temporary, "wb") as out:
            out.write(blob)
        fs.mv(temporary, final)


def get(name: str, store: Store = None, *, storage_options: Options = None) -> bytes:
    """The bytes stored as ``name``; ``FileNotFoundError`` when there are none."""
    _check_name(name)
    location = FilterStore.of(store, storage_options)
    with _reaching(location, "read", name):
        fs, root = location.open()
        with fs.open(f"{root}/{name}", "rb") as stored:
            return stored.read()


@contextlib.contextmanager
def _reaching(location: FilterStore, verb: str, name: str) -> Iterator[None]:
    """Errors of a store that cannot be reached, as one naming the store and the entry; a missing entry stays as is."""
    try:
        yield
    except (FileNotFoundError, FilterStoreError):
        raise
    except (OSError, ValueError, ImportError) as error:  # ValueError, ImportError: unknown protocol, missing driver
        raise FilterStoreError(
            f"Filter store '{location}' cannot be {verb} ('{name}'): {error}. Expected a directory "
            f"on an installed fsspec filesystem (option 'filterStore', argument store= or ${STORE_ENV})."
        ) from error


def names(directory: str, store: Store = None, *, storage_options: Options = None) -> list[str]:
    """The names of the entries of ``directory`` in the store, sorted; empty when it does not exist."""
    _check_name(directory)
    location = FilterStore.of(store, storage_options)
    with _reaching(location, "listed", directory):
        fs, root = location.open()
        try:
            return sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(f"{root}/{directory}", detail=False))
        except FileNotFoundError:
            return []


def remove(name: str, store: Store = None, *, storage_options: Options = None) -> None:
    """Delete the entry ``name`` of the store (no error if it is gone: a concurrent remover got there first)."""
    _check_name(name)
    location = FilterStore.of(store, storage_options)
    with _reaching(location, "written", name), contextlib.suppress(FileNotFoundError):
        fs, root = location.open()
        fs.rm(f"{root}/{name}")


def exists(name: str, store: Store = None, *, storage_options: Options = None) -> bool:
    _check_name(name)
    fs, root = FilterStore.of(store, storage_options).open()
    return fs.exists(f"{root}/{name}")


def _raise_if_failed(handle: str, location: FilterStore) -> None:
    try:
        failure = json.loads(get(f"{handle}{_FAILED}", location))
    except FileNotFoundError:
        return
    raise FilterFailedError(f"The collector of dynamic filter handle '{handle}' failed: {failure.get('reason')}")


def _renew_lease(handle: str, location: FilterStore) -> None:
    try:
        put(f"{handle}{_LEASE}", json.dumps({"resolved_at": time.time()}).encode(), location)
    except OSError as error:  # a read-only store still serves payloads; only expire() could cut this reader short
        log.warning("dynsource: could not renew the lease of dynamic filter '%s': %s", handle, error)


def _stored_handles(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, list[str]]:
    """The store's entries by the handle they belong to: its top-level files and its scan reports."""
    stored: dict[str, list[str]] = {}
    for directory in (root, f"{root}/{REPORTS}"):
        try:
            paths = fs.ls(directory, detail=False)
        except FileNotFoundError:
            continue
        for path in paths:
            match = _STORED.match(path.rstrip("/").rsplit("/", 1)[-1])
            if match:
                entries = _with_contents(fs, path.rstrip("/")) if directory != root else [path.rstrip("/")]
                stored.setdefault(match.group(1), []).extend(entries)
    return stored


def _with_contents(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    # A handle's report directory is as young as its newest scan report: the files inside it count.
    try:
        return [*fs.ls(path, detail=False), path] if fs.isdir(path) else [path]
    except FileNotFoundError:
        return [path]


def _modified(fs: fsspec.AbstractFileSystem, path: str) -> float | None:
    """When the file ``path`` last changed; None for a directory.

    An entry gone since it was listed was a writer's temporary file renamed into
    place: its handle is in use, so it counts as changed now.
    """
    try:
        if fs.isfile(path):
            stamp = fs.modified(path)
            return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)).timestamp()
    except FileNotFoundError:
        pass
    return None if fs.isdir(path) else time.time()


def _seconds(older_than: dt.timedelta | float) -> float:
    seconds = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        raise ValueError(
            f"older_than = {older_than!r} is not valid; "
            "expected a non-negative datetime.timedelta or number of seconds."
        )
    return float(seconds)


def _check_name(name: str) -> None:
    # Names come from handles and table names: none may climb out of the store's root or start at another one.
    if name.startswith("/") or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(
            f"Filter store entry {name!r} is not a relative name inside the store; expected a name such as "
            "'<handle>.dynf' or 'reports/<handle>.json' (no '..', '.' or empty segment, no absolute path)."
        )


def _new_handle() -> str:
    return f"dynf-{uuid.uuid4().hex}"


def _checked(handle: str) -> str:
    if not isinstance(handle, str) or not _HANDLE.fullmatch(handle):
        raise ValueError(
            f"Dynamic filter handle {handle!r} (option 'dynamicFilter' or a handle argument) is not a dynsource "
            "filter handle; expected 'dynf-' followed by 32 lowercase hex digits, as returned by "
            "dynsource.collect(), publish() or reserve()."
        )
    return handle
