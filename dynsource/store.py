"""Filter handles: publish a DynamicFilteringData under a handle, resolve it elsewhere.

The reader plans in a Python worker, not in the process that collected the
filter (DESIGN fact 2), so a handle names a file in a shared fsspec directory.
Publishing writes a temporary file and renames it, so a reader sees either no
payload or a whole one.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import fsspec

from dynsource.filtering import DynamicFilteringData

STORE_ENV = "DYNSOURCE_FILTER_STORE"
_HANDLE = re.compile(r"^dynf-[0-9a-f]{32}$")
_SUFFIX = ".dynf"


def default_store() -> str:
    """The store used when none is given: ``$DYNSOURCE_FILTER_STORE``, else a per-user cache directory."""
    configured = os.environ.get(STORE_ENV)
    if configured:
        return configured
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(cache) / "dynsource" / "filters")


def publish(data: DynamicFilteringData, store: str | None = None) -> str:
    """Write ``data`` to the store atomically and return its new handle."""
    handle = f"dynf-{uuid.uuid4().hex}"
    put(f"{handle}{_SUFFIX}", data.to_bytes(), store)
    return handle


def resolve(handle: str, store: str | None = None) -> DynamicFilteringData:
    """Load the payload published under ``handle``.

    Raises ``LookupError`` when nothing was published under it and
    ``ValueError`` when the handle or the payload is malformed.
    """
    validate_handle(handle)
    try:
        blob = get(f"{handle}{_SUFFIX}", store)
    except FileNotFoundError:
        raise LookupError(
            f"Dynamic filter handle '{handle}' was never published in filter store '{store or default_store()}'."
        ) from None
    return DynamicFilteringData.from_bytes(blob)


def validate_handle(handle: str) -> None:
    """Reject anything but a handle made by :func:`publish` (no paths, no '..')."""
    if not isinstance(handle, str) or not _HANDLE.match(handle):
        raise ValueError(
            f"Option 'dynamicFilter' = {handle!r} is not a dynsource filter handle; "
            "expected the string returned by dynsource.publish() or dynsource.collect() ('dynf-' + 32 hex digits)."
        )


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


def _open(store: str | None) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root = fsspec.core.url_to_fs(store or default_store())
    return fs, root.rstrip("/")
