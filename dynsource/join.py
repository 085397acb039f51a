"""The one-call dynamic join: collect from the dimension, read the fact side with the filter, join.

Which joins may prune follows Spark's DPP rule (PartitionPruning): the fact side
can be filtered by the dimension's keys only when fact rows without a match are
not part of the result: inner, left semi, and right outer (the fact is on the
left). Full outer, left outer and left anti joins keep unmatched fact rows, so
they run as the plain join and the report says why.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame

from dynsource import benefit, catalog, collector, report
from dynsource import store as filter_store
from dynsource.benefit import DEFAULT_FALLBACK_FILTER_RATIO
from dynsource.options import ScanOptions
from dynsource.storage import FilterStore

_JOIN_TYPES = {
    "inner": "inner",
    "cross": "cross",
    "outer": "full", "full": "full", "fullouter": "full", "full_outer": "full",
    "left": "left", "leftouter": "left", "left_outer": "left",
    "right": "right", "rightouter": "right", "right_outer": "right",
    "semi": "left_semi", "leftsemi": "left_semi", "left_semi": "left_semi",
    "anti": "left_anti", "leftanti": "left_anti", "left_anti": "left_anti",
}
_PRUNING = ("inner", "left_semi", "right")


def dynamic_join(
    fact: str,
    dim: DataFrame,
    on: Mapping[str, str] | Sequence[tuple[str, str]],
    how: str = "inner",
    *,
    options: Mapping[str, str] | None = None,
    fallback_filter_ratio: float = DEFAULT_FALLBACK_FILTER_RATIO,
    **collect_options,
) -> DataFrame:
    """Join the dynsource fact table ``fact`` with ``dim``, pruning the fact side with ``dim``'s keys.

    Parameters
    ----------
    fact : str
        The fact table: an fsspec URL or path of a Hive-partitioned table, or the
        name of a table registered with :func:`dynsource.register_table`.
    dim : DataFrame
        The dimension side (usually filtered). It is cached, so the keys are
        collected from and joined with the same computed rows.
    on : mapping or sequence of (fact column, dim column)
        The equi-join keys, e.g. ``{"ss_sold_date_sk": "d_date_sk"}``.
    how : str, default "inner"
        A Spark join type with the fact table on the left. ``inner``,
        ``left_semi`` and ``right`` prune; ``full``, ``left`` and ``left_anti``
        (which keep fact rows without a match) and ``cross`` run unpruned.
    options : mapping, optional
        More reader options for the fact table (see ``DynsourceDataSource``).
    fallback_filter_ratio : float, default 0.5
        Benefit check, as Spark's ``fallbackFilterRatio``: when the keys keep
        more than this share of the fact's top-level partitions, the scan is
        not filtered (the filter would cost more than it saves).
    **collect_options
        Passed to :func:`dynsource.collect` (``max_rows``, ``max_bytes``, ``store``...).

    Returns
    -------
    DataFrame
        The join; ``dynsource.scan_report(joined)`` tells what was pruned (once
        a query ran) or why it was not.
    """
    pairs = list(on.items()) if isinstance(on, Mapping) else [tuple(pair) for pair in on]
    if not pairs:
        raise ValueError("dynamic_join() needs at least one (fact column, dim column) pair in 'on'.")
    join_type = _JOIN_TYPES.get(how.lower().replace(" ", ""))
    if join_type is None:
        raise ValueError(f"Join type '{how}' is not supported; expected one of {sorted(_JOIN_TYPES)}.")
    spark = dim.sparkSession
    base_options = dict(options or {})
    if _is_path(fact):
        fact_options = ScanOptions.parse({**base_options, "path": fact})
    else:
        fact_options = catalog.load_definition(spark, fact).scan_options.with_options(base_options)
    fact_df = _read(spark, fact, base_options)
    handle, reason, store = None, None, None
    if join_type not in _PRUNING:
        reason = f"a {join_type} join keeps fact rows that match no dimension row, so the fact side is not pruned"
    else:
        dim = dim if dim.is_cached else dim.cache()
        types = {field: fact_df.schema[field].dataType.simpleString() for field, _ in pairs}
        # Named explicitly: Spark's Python workers keep the environment the session started with, so a
        # $DYNSOURCE_FILTER_STORE set since then would send the planner to another store.
        store = FilterStore.of(collect_options.pop("store", None), collect_options.pop("storage_options", None))
        data = collector.collect_data(dim, dict(pairs), types=types, **collect_options)
        handle = filter_store.publish(data, store)
        reason = benefit.no_benefit(data, benefit.top_level(fact_options, types), fallback_filter_ratio)
        if reason is None:
            filtered = {**base_options, "dynamicFilter": handle, "filterStore": store.url,
                        **({"filterStoreOptions": store.options.to_json()} if store.options else {})}
            fact_df = _read(spark, fact, filtered, schema=fact_df.schema)
    condition = functools.reduce(lambda a, b: a & b, [fact_df[f] == dim[d] for f, d in pairs])
    joined = fact_df.join(dim, condition, join_type)
    report.record_join(joined, fact=fact, handle=handle if reason is None else None, reason=reason, store=store)
    return joined


def _read(spark, fact: str, options: Mapping[str, str], schema=None) -> DataFrame:
    if not _is_path(fact):
        return catalog.read_table(spark, fact, options)
    reader = spark.read.format("dynsource").options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.option("path", fact).load()


def _is_path(fact: str) -> bool:
    return "/" in fact or "://" in fact or "\\" in fact
