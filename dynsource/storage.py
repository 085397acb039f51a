"""Storage: fsspec filesystems by URL and their options (credentials, endpoint, region...), of tables and filter stores.

They are what fsspec calls ``storage_options``, e.g. for s3fs
``{"key": ..., "secret": ..., "client_kwargs": {"endpoint_url": ...}}``. Reader
options are strings, so the reader takes them as a JSON object. They often hold
secrets: :class:`StorageOptions` never shows the values of secret-looking keys
in its ``repr``, and nothing here puts an option's text in an error message.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

STORE_ENV = "DYNSOURCE_FILTER_STORE"
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")
_MASK = "***"
_LIST_THREADS = 16  # listings of a remote store waited on at once


class StorageOptions(Mapping[str, Any]):
    """An immutable, hashable mapping of fsspec storage options whose ``repr`` masks secrets.

    Hashable so that a worker can cache what it resolved per (store, options).
    """

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self._options = dict(options or {})
        self._json = json.dumps(self._options, sort_keys=True, default=str)

    @classmethod
    def parse(cls, name: str, text: str | Mapping[str, Any] | None) -> StorageOptions:
        """Options from a JSON object (as reader options are strings) or a mapping; errors name option ``name``."""
        if text is None or isinstance(text, Mapping):
            return cls(text)
        if not str(text).strip():
            return cls()
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            # The position only: the text may hold credentials.
            raise ValueError(
                f"Option '{name}' is not valid JSON ({error.msg} at character {error.pos}); expected a JSON object "
                'of fsspec storage options, e.g. {"key": "...", "secret": "...", '
                '"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}.'
            ) from None
        if not isinstance(value, dict):
            raise ValueError(
                f"Option '{name}' is a JSON {type(value).__name__}, not an object; expected a JSON object of fsspec "
                "storage options (keyword arguments of the filesystem)."
            )
        return cls(value)

    def to_json(self) -> str:
        return self._json

    def __getitem__(self, key: str) -> Any:
        return self._options[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __hash__(self) -> int:
        return hash(self._json)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __repr__(self) -> str:
        return f"StorageOptions({masked(self._options)!r})"


NO_OPTIONS = StorageOptions()


def default_store() -> str:
    """The filter store used when none is given: ``$DYNSOURCE_FILTER_STORE``, else a per-user cache directory.

    Read in the process that asks: Spark's Python workers see the environment the driver started with.
    """
    configured = os.environ.get(STORE_ENV)
    if configured:
        return configured
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(cache) / "dynsource" / "filters")


def masked(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the values of secret-looking keys (key, secret, token, password...) replaced by ``***``."""
    return {
        name: _MASK if _is_secret(name) else masked(value) if isinstance(value, Mapping) else value
        for name, value in options.items()
    }


def filesystem(url: str, options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of ``url`` opened with ``options``, and the path inside it.

    ``ValueError`` for a protocol fsspec does not know, including a one-letter
    one: fsspec reads ``x://y`` as a Windows drive, the local path ``x://y``.
    """
    scheme, separator, _ = url.partition("://")
    if separator and fsspec.core.split_protocol(url)[0] is None:  # fsspec reads a one-letter scheme as a drive
        raise ValueError(f"Protocol not known: {scheme}")
    return fsspec.core.url_to_fs(url, **dict(options or {}))


@contextlib.contextmanager
def listing_map(fs: fsspec.AbstractFileSystem) -> Iterator[Callable]:
    """The ``map`` a walk lists directories with: threads where each listing waits on a store, plain calls where
    it is a system call (handing 1,800 local directories to a pool costs four times their listing)."""
    if isinstance(fs, (LocalFileSystem, MemoryFileSystem)):
        yield map
        return
    with ThreadPoolExecutor(_LIST_THREADS) as pool:
        yield pool.map


@contextlib.contextmanager
def failing_as(action: str) -> Iterator[None]:
    """Raise a store's error inside as an ``OSError`` saying what failed (``action``, e.g. "list directory 'b/t'")
    and the store's error: botocore's are no ``OSError``, and s3fs's name no path. A missing file stays
    ``FileNotFoundError``."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError):
        raise
    except Exception as error:
        raise OSError(f"Cannot {action}: {type(error).__name__}: {error}") from error


def root_info(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, Any]:
    """``fs.info(root)`` of a table's root; the store's own errors (an endpoint that does not answer, a refused
    credential: botocore's are no ``OSError``) as an ``OSError`` naming option ``path`` and the error."""
    try:
        return fs.info(root)
    except FileNotFoundError:
        raise FileNotFoundError(f"Option 'path': '{root}' does not exist.") from None
    except Exception as error:
        raise OSError(f"Option 'path': '{root}' cannot be reached: {type(error).__name__}: {error}. Check the "
                      "store's address and credentials (option storageOptions).") from error


def same_protocol(url: str, other: str) -> bool:
    """Whether two URLs (or local paths) are on the same kind of filesystem, e.g. both ``s3://``."""
    return _protocol(url) == _protocol(other)


def is_local(url: str) -> bool:
    """Whether ``url`` (or a path) is on this machine's disk."""
    return _protocol(url) == "file"


def _protocol(url: str) -> str:
    protocol, _ = fsspec.core.split_protocol(url)
    return "file" if protocol in (None, "file", "local") else protocol


def _is_secret(name: str) -> bool:
    lowered = str(name).lower()
    return any(word in lowered for word in _SECRET_WORDS)
