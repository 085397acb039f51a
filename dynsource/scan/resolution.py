"""Resolving a scan's dynamic filter: the one set of rules every reader follows, dynsource's own and any other.

A reader's options name the filter (``dynamicFilter``) and say how to resolve it: where its store is
(``filterStore``, ``filterStoreOptions``), how long to wait for one still being collected
(``dynamicFilterWaitMs``), whether to use it at all (``dynamicFilteringEnabled``) and what a handle that cannot
be used does (``dynamicFilterOnError``). The rules:

- no handle, or filtering disabled: no filter;
- a handle reserved but not yet published is waited for up to ``dynamicFilterWaitMs``, then given up on;
- a handle never published (or removed since), a collector that failed, a store that cannot be reached, a
  payload that fails its checks: under ``fallback`` (the default) no filter and a WARNING saying why, under
  ``fail`` the error;
- an exceeded payload is returned (it filters nothing) with a WARNING saying how to make one that prunes.

Payloads are data: the store parses JSON, Arrow IPC and a bit array, nothing in them is imported or run.
The options are parsed by the definitions of :class:`~dynsource.scan.options.ScanOptions`, the same parsers, so
a bad value is the same error naming the same option.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynsource import storage
from dynsource.filtering import DynamicFilteringData, filterstore
from dynsource.filtering.filterstore import FilterStore
from dynsource.scan.options import ScanOptions

log = logging.getLogger(__name__)
# What turns an exceeded filter (no key, prunes nothing) into one that prunes: the collector's own arguments.
EXCEEDED_FIX = "collect it with a larger max_rows or max_bytes, or with kinds that allow 'bloom' or 'range'"
_RESOLVE_ERRORS = (LookupError, ValueError, OSError, filterstore.FilterFailedError)

# The ScanOptions attributes that name and resolve a filter: the options any source's reader may be given.
_ATTRIBUTES = ("dynamic_filter", "dynamic_filtering_enabled", "dynamic_filter_on_error", "dynamic_filter_wait_ms",
               "filter_store_url", "filter_store_options", "log_level")
_FIELDS = {field.metadata["option"].lower(): field for field in dataclasses.fields(ScanOptions)
           if field.name in _ATTRIBUTES}
OPTION_NAMES = tuple(field.metadata["option"] for field in _FIELDS.values())


@dataclass(frozen=True)
class FilterOptions:
    """The options of one read that name its dynamic filter and say how it is resolved."""

    handle: str | None
    enabled: bool
    on_error: str
    wait_ms: int
    store: FilterStore
    log_level: str | None = None

    @classmethod
    def of_scan(cls, options: ScanOptions) -> FilterOptions:
        """A ``dynsource`` scan's: its store also takes the table's ``storageOptions`` where it is of its kind."""
        return cls(options.dynamic_filter, options.dynamic_filtering_enabled, options.dynamic_filter_on_error,
                   options.dynamic_filter_wait_ms, options.filter_store, options.log_level)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FilterOptions:
        """Those of any source's ``options`` (names matched ignoring case, the source's own ignored), validated as
        a ``dynsource`` read validates them; the store is ``filterStore`` (default: this process's) opened with
        ``filterStoreOptions``."""
        given: dict[str, Any] = {field.name: field.default for field in _FIELDS.values()}
        for key, value in options.items():
            field = _FIELDS.get(str(key).lower())
            if field is not None:
                given[field.name] = field.metadata["parse"](field.metadata["option"], value)
        store = FilterStore(given["filter_store_url"] or storage.default_store(),
                            given["filter_store_options"] or storage.NO_OPTIONS)
        return cls(given["dynamic_filter"], given["dynamic_filtering_enabled"], given["dynamic_filter_on_error"],
                   given["dynamic_filter_wait_ms"], store, given["log_level"])


def resolve(options: FilterOptions, *, unfiltered: str, reading: str) -> tuple[DynamicFilteringData | None, str | None]:
    """The filter ``options`` name, or None (none named, disabled, or unusable) and why it cannot be used.

    ``unfiltered`` and ``reading`` finish the WARNINGs: what an exceeded filter leaves the read doing (``"the scan
    of /t reads every partition"``), and what the read does instead of a filter it cannot use (``"reading every
    partition"``). Under ``dynamicFilterOnError=fail`` an unusable filter raises its error.
    """
    if not options.handle or not options.enabled:
        return None, None
    try:
        data = options.store.resolve(options.handle, options.wait_ms)
    except _RESOLVE_ERRORS as error:
        if options.on_error == "fail":
            raise
        log.warning("dynsource: dynamic filter '%s' is not usable, %s: %s", options.handle, reading, error)
        return None, str(error)
    if data.exceed_threshold:
        log.warning("dynsource: dynamic filter '%s' exceeded the collector's threshold and holds no key, so %s; to "
                    "prune, %s.", options.handle, unfiltered, EXCEEDED_FIX)
    return data, None
