"""The filter store: where DynamicFilteringData payloads are published under handles and resolved elsewhere.

The reader plans in a Spark Python worker, not in the process that collected
the filter, so a handle names a file in a shared fsspec directory.
Publishing writes a temporary file and renames it, so a reader sees either no
payload or a whole one.

A handle can be reserved before its filter exists (``collect(..., wait=False)``):
the store then holds a *pending* marker, and readers wait for the payload up to
a timeout. A collector that fails leaves a *failed* marker with the reason, so
readers stop waiting at once and report why.

Every successful :meth:`FilterStore.resolve` (the query planner's; read tasks
never resolve, their filter travels in the plan) renews a *lease*: it rewrites
``<handle>.lease``. :meth:`FilterStore.expire` removes a handle only when
nothing of it (payload, markers, lease, scan report) changed for ``older_than``
and its lease is older than ``LEASE_SECONDS``, so a handle a query is planning
or reading with stays. A reader that starts in the instant ``expire`` deletes a
handle finds it missing and reads unfiltered (WARNING).

The store is a value (its URL and fsspec options) that opens its filesystem once
and pickles without it. This module does not import pyspark: read planning in
Spark's Python workers resolves handles with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from dynsource import storage
from dynsource.filtering import DynamicFilteringData
from dynsource.storage import STORE_ENV, StorageOptions

_HANDLE = re.compile(r"dynf-[0-9a-f]{32}")  # fullmatch: "$" would also allow a final newline
_PAYLOAD, _PENDING, _FAILED, _LEASE = ".dynf", ".pending", ".failed", ".lease"
# dynsource.scan.report saves the reports of a handle's scans under reports/<handle>/.
REPORTS = "reports"
# A resolve protects its handle from expire() this long: longer than planning plus the read tasks of a query.
LEASE_SECONDS = 3600.0
_STORED = re.compile(r"^(dynf-[0-9a-f]{32})(\.|$)")  # an entry of a handle: '<handle>.<suffix>', or its report dir
_POLL_SECONDS = (0.02, 0.5)  # first and longest pause between looks at a pending handle

log = logging.getLogger(__name__)


class FilterFailedError(RuntimeError):
    """The collector of a reserved handle failed; the message carries its reason."""


class FilterNotReadyError(TimeoutError):
    """A reserved handle was not published within the reader's wait."""


class FilterStoreError(OSError):
    """The filter store cannot be reached: an unknown protocol, a file where its directory should be, no access."""


@dataclass(frozen=True)
class FilterStore:
    """Where filter handles live: an fsspec directory URL and the storage options that open it.

    Its filesystem is opened once, at first use, and not pickled: a copy in a
    Python worker opens its own.
    """

    url: str
    options: StorageOptions = storage.NO_OPTIONS

    @classmethod
    def of(cls, store: str | FilterStore | None = None, options: Mapping[str, Any] | None = None) -> FilterStore:
        """``store`` itself, or the store at URL ``store`` (default: :func:`~dynsource.storage.default_store`)
        opened with ``options``; what the public functions taking a store convert it with, once."""
        if isinstance(store, FilterStore):
            return store
        parsed = options if isinstance(options, StorageOptions) else StorageOptions(options)
        return cls(store or storage.default_store(), parsed)

    def __reduce__(self) -> tuple:
        return FilterStore, (self.url, self.options)

    def __str__(self) -> str:
        return self.url

    @functools.cached_property
    def _opened(self) -> tuple[fsspec.AbstractFileSystem, str]:
        fs, root = storage.filesystem(self.url, self.options)
        return fs, root.rstrip("/")

    def open(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """The store's filesystem and its root directory inside it (no trailing slash)."""
        return self._opened

    def reserve(self) -> str:
        """A new handle whose filter will be published later; readers wait for it."""
        handle = _new_handle()
        self.put(f"{handle}{_PENDING}", b"")
        return handle

    def publish(self, data: DynamicFilteringData, handle: str | None = None) -> str:
        """Write ``data`` atomically and return its handle (new, or the reserved ``handle``)."""
        handle = _new_handle() if handle is None else _checked(handle)
        self.put(f"{handle}{_PAYLOAD}", data.to_bytes())
        return handle

    def publish_failure(self, handle: str, reason: str) -> None:
        """Record that the filter of reserved ``handle`` will never come, and why."""
        self.put(f"{_checked(handle)}{_FAILED}", json.dumps({"reason": reason}).encode())

    def resolve(self, handle: str, wait_ms: int = 0) -> DynamicFilteringData:
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
                data = DynamicFilteringData.from_bytes(self.get(f"{handle}{_PAYLOAD}"))
            except FileNotFoundError:
                pass
            else:
                self._renew_lease(handle)
                return data
            self._raise_if_failed(handle)
            if not self.exists(f"{handle}{_PENDING}"):
                # expire() leaves nothing of a handle behind, so a removed one cannot be told from one never published.
                raise LookupError(
                    f"Dynamic filter handle '{handle}' is not in filter store '{self}': it was never published "
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

    def expire(self, older_than: dt.timedelta | float, dry_run: bool = False) -> list[str]:
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
        fs, root = self.open()
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

    def put(self, name: str, blob: bytes) -> None:
        """Write ``blob`` as ``name`` in the store: a temporary file renamed into place."""
        _check_name(name)
        with self._reaching("written", name):
            fs, root = self.open()
            final = f"{root}/{name}"
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            temporary = f"{final}.{uuid.uuid4().hex}.tmp"
            with fs.open(temporary, "wb") as out:
                out.write(blob)
            fs.mv(temporary, final)

    def get(self, name: str) -> bytes:
        """The bytes stored as ``name``; ``FileNotFoundError`` when there are none."""
        _check_name(name)
        with self._reaching("read", name):
            fs, root = self.open()
            with fs.open(f"{root}/{name}", "rb") as stored:
                return stored.read()

    def names(self, directory: str) -> list[str]:
        """The names of the entries of ``directory`` in the store, sorted; empty when it does not exist."""
        _check_name(directory)
        with self._reaching("listed", directory):
            fs, root = self.open()
            try:
                listed = fs.ls(f"{root}/{directory}", detail=False)
            except FileNotFoundError:
                return []
            return sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in listed)

    def remove(self, name: str) -> None:
        """Delete the entry ``name`` (no error if it is gone: a concurrent remover got there first)."""
        _check_name(name)
        with self._reaching("written", name), contextlib.suppress(FileNotFoundError):
            fs, root = self.open()
            fs.rm(f"{root}/{name}")

    def exists(self, name: str) -> bool:
        _check_name(name)
        fs, root = self.open()
        return fs.exists(f"{root}/{name}")

    @contextlib.contextmanager
    def _reaching(self, verb: str, name: str) -> Iterator[None]:
        """Errors of a store that cannot be reached, as one naming the store and the entry; a missing entry stays."""
        try:
            yield
        except (FileNotFoundError, FilterStoreError):
            raise
        except (OSError, ValueError, ImportError) as error:  # ValueError, ImportError: unknown protocol, missing driver
            raise FilterStoreError(
                f"Filter store '{self}' cannot be {verb} ('{name}'): {error}. Expected a directory "
                f"on an installed fsspec filesystem (option 'filterStore', argument store= or ${STORE_ENV})."
            ) from error

    def _raise_if_failed(self, handle: str) -> None:
        try:
            failure = json.loads(self.get(f"{handle}{_FAILED}"))
        except FileNotFoundError:
            return
        raise FilterFailedError(f"The collector of dynamic filter handle '{handle}' failed: {failure.get('reason')}")

    def _renew_lease(self, handle: str) -> None:
        try:
            self.put(f"{handle}{_LEASE}", json.dumps({"resolved_at": time.time()}).encode())
        except OSError as error:  # a read-only store still serves payloads; only expire() could cut this reader short
            log.warning("dynsource: could not renew the lease of dynamic filter '%s': %s", handle, error)


def validate_handle(handle: str) -> None:
    """Reject anything but a handle made by :meth:`FilterStore.publish` or :meth:`FilterStore.reserve`
    (no paths, no '..')."""
    _checked(handle)


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
