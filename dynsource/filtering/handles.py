"""Filter handles, the public functions: publish a filter, resolve a handle, expire unused ones.

Each takes the store as a :class:`~dynsource.filtering.filterstore.FilterStore`, its URL
or None (the default store), with ``storage_options``, converts it once and
calls the store. Publishing warns, once per store and master, when a store on
this machine's disk is used by a session whose planner may run elsewhere.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from dynsource.filtering import DynamicFilteringData
from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime import deployment

Store = str | FilterStore | None  # a FilterStore, or its URL (None: the default store) opened with storage_options
Options = Mapping[str, Any] | None  # fsspec storage options of the store


def publish(data: DynamicFilteringData, store: Store = None, *, handle: str | None = None,
            storage_options: Options = None) -> str:
    """Write ``data`` to the store atomically and return its handle (new, or the reserved ``handle``).

    ``storage_options`` are the fsspec options of the store (credentials, endpoint), as ``filterStoreOptions``.
    """
    return _for_publishing(store, storage_options).publish(data, handle)


def reserve(store: Store = None, *, storage_options: Options = None) -> str:
    """A new handle whose filter will be published later; readers wait for it."""
    return _for_publishing(store, storage_options).reserve()


def resolve(handle: str, store: Store = None, *, wait_ms: int = 0,
            storage_options: Options = None) -> DynamicFilteringData:
    """The payload published under ``handle``, waiting up to ``wait_ms`` for a reserved one
    (see :meth:`FilterStore.resolve` for what it raises)."""
    return FilterStore.of(store, storage_options).resolve(handle, wait_ms)


def expire(older_than: dt.timedelta | float, store: Store = None, *, storage_options: Options = None,
           dry_run: bool = False) -> list[str]:
    """Remove the handles unused for ``older_than`` (a timedelta or seconds) and return them
    (see :meth:`FilterStore.expire`); with ``dry_run=True`` only return them."""
    return FilterStore.of(store, storage_options).expire(older_than, dry_run)


def _for_publishing(store: Store, storage_options: Options) -> FilterStore:
    location = FilterStore.of(store, storage_options)
    deployment.warn_if_local_store(SparkSession.getActiveSession(), location.url)
    return location
