"""Dynamic filtering for any Python data source: FLIP-248's ``SupportsDynamicFiltering`` for PySpark.

A ``pyspark.sql.datasource.DataSource`` that mixes in :class:`SupportsDynamicFiltering` names the fields on which
it accepts a dynamic filter (:meth:`~SupportsDynamicFiltering.accepted_filter_fields`, FLIP-248's
``listAcceptedFilterFields``). Its reader, in ``partitions()`` (planning, in a Spark Python worker on the driver's
host), calls :func:`dynamic_filter` with the source's options: it gets the :class:`DynamicFilteringData` that
option ``dynamicFilter`` names, resolved as dynsource's own reader resolves it, before it decides what to read.
Per field (:meth:`DynamicFilteringData.field_filter`) it can push the exact keys into its backend as ``IN
(...)``, a range as ``BETWEEN``, and test the rows it fetched against a Bloom filter.

What ``partitions()`` decides must travel in its ``InputPartition``\\ s to ``read()``, which runs on executors:
resolve the filter once there and put the keys (or the filter's bytes) into the partitions; executors need not
reach the filter store.

dynsource's own ``dynsource`` source implements this interface: its planner resolves its filter by the same rules
(:mod:`dynsource.scan.resolution`).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence

from dynsource.filtering import DynamicFilteringData, fieldview
from dynsource.runtime import logs
from dynsource.scan import resolution

log = logging.getLogger(__name__)


class SupportsDynamicFiltering(abc.ABC):
    """A ``DataSource`` that accepts a dynamic filter on some of its fields (FLIP-248's interface of that name).

    Mix it into the source's class (``class MySource(SupportsDynamicFiltering, DataSource)``) and implement
    :meth:`accepted_filter_fields`; the source's reader calls :func:`dynamic_filter` in ``partitions()``.
    Declaring the fields is what lets a planner (``dynsource.sql``, in a later release) pick the filter fields
    of a join for this source.
    """

    @abc.abstractmethod
    def accepted_filter_fields(self) -> list[str]:
        """The columns on which a dynamic filter can prune this source's reads (names matched ignoring case)."""


def dynamic_filter(options: Mapping[str, str],
                   accepted_fields: Sequence[str] | None = None) -> DynamicFilteringData:
    """The dynamic filter a read's ``options`` name, resolved; filtering nothing where there is none to trust.

    Reads the options ``dynamicFilter`` (the handle), ``filterStore`` and ``filterStoreOptions`` (where it was
    published: by default ``$DYNSOURCE_FILTER_STORE``, else ``~/.cache/dynsource/filters``),
    ``dynamicFilterWaitMs`` (how long to wait for a filter still being collected, 10,000 by default),
    ``dynamicFilteringEnabled``, ``dynamicFilterOnError`` (``fallback`` or ``fail``) and ``logLevel`` (of
    dynsource's lines in this worker), matched ignoring case; the source's own options are left alone.

    Parameters
    ----------
    options : mapping of str to str
        The source's options (``DataSource.options``), as Spark passes them.
    accepted_fields : sequence of str, optional
        The fields the source applies (its :meth:`SupportsDynamicFiltering.accepted_filter_fields`). A filter
        field not among them filters nothing, and a WARNING names it; an exact or range filter still filters by
        the accepted fields, a Bloom filter over an unaccepted field not at all. By default every field is given.

    Returns
    -------
    DynamicFilteringData
        The published filter; ``is_filtering`` false (it keeps every row) when no handle was given, filtering is
        disabled, the filter exceeded its collector's limits, or it cannot be used: never published or removed
        since, its collector failed, still being collected after ``dynamicFilterWaitMs``, its store unreachable,
        its payload damaged (with ``dynamicFilterOnError=fallback``; each logs a WARNING saying why).

    Raises
    ------
    TypeError
        ``accepted_fields`` is a string rather than a sequence of names.
    ValueError
        An option's value is not valid (a ``dynamicFilter`` that is no handle at all, whatever
        ``dynamicFilterOnError`` says), naming the option.
    LookupError, OSError, RuntimeError, ValueError
        Under ``dynamicFilterOnError=fail``: why the filter cannot be used (never published, store unreachable or
        still being collected, its collector failed, its payload damaged).
    """
    if isinstance(accepted_fields, str):
        raise TypeError(f"accepted_fields is a sequence of field names, not the string {accepted_fields!r}; "
                        f"pass [{accepted_fields!r}].")
    parsed = resolution.FilterOptions.parse(options)
    logs.configure_worker(parsed.log_level)
    data, _ = resolution.resolve(parsed, unfiltered="this read filters nothing by it", reading="filtering nothing")
    if data is None:
        return DynamicFilteringData.unfiltered()
    if accepted_fields is None:
        return data
    left_out = fieldview.left_out(data, accepted_fields)
    if left_out:
        log.warning("dynsource: dynamic filter '%s' has field(s) %s that this data source does not accept (it "
                    "accepts %s): they filter nothing here.", parsed.handle, left_out, list(accepted_fields))
    return fieldview.on_fields(data, accepted_fields)
