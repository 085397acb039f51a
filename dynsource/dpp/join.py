"""The one-call dynamic join: collect from the dimension, read the fact side with the filter, join.

Which joins may prune follows Spark's DPP rule (PartitionPruning): the fact side
can be filtered by the dimension's keys only when fact rows without a match are
not part of the result: inner, left semi, and right outer (the fact is on the
left). Full outer, left outer and left anti joins keep unmatched fact rows, so
they run as the plain join and the report says why.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dynsource.dpp import benefit, queryreport
from dynsource.dpp.benefit import DEFAULT_FALLBACK_FILTER_RATIO
from dynsource.dpp.facttables import not_accepted
from dynsource.filtering import collector, handles
from dynsource.filtering.filterstore import FilterStore
from dynsource.scan.options import ScanOptions, filter_options, session_options
from dynsource.spark import catalog, filereader, metastore, pythonsources
from dynsource.spark.source import DynsourceDataSource

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
    fact: str | DataFrame | None,
    dim: DataFrame | Sequence[tuple[DataFrame, Mapping[str, str] | Sequence[tuple[str, str]]]],
    on: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    how: str = "inner",
    *,
    options: Mapping[str, str] | None = None,
    format: str | None = None,
    fallback_filter_ratio: float = DEFAULT_FALLBACK_FILTER_RATIO,
    **collect_options,
) -> DataFrame:
    """Join the dynsource fact table ``fact`` with ``dim``, pruning the fact side with ``dim``'s keys.

    Parameters
    ----------
    fact : str or DataFrame or None
        The fact table: an fsspec URL or path of a Hive-partitioned table, the
        name of a table registered with :func:`dynsource.register_table` or of a
        catalog table of a Python data source implementing
        :class:`dynsource.SupportsDynamicFiltering`, or a DataFrame
        :func:`dynsource.table` returned (its table, options and columns); None
        with ``format``.
    dim : DataFrame, or sequence of (DataFrame, on)
        The dimension side (usually filtered), or several dimensions with their
        keys (a star, e.g. ``[(dates, {"ss_sold_date_sk": "d_date_sk"}), (stores,
        {"ss_store_sk": "s_store_sk"})]``), joined in that order. Each is read
        once into a snapshot (a local checkpoint) that the keys are collected
        from and that every action on the result joins, so rows written to a
        dimension's tables later change neither; call ``dynamic_join`` again to
        see them. Spark frees a snapshot once no DataFrame uses it.
        Of a star, every dimension whose filter passes the benefit check prunes
        the one fact scan, each filter a part of the scan's one filter (a row
        must match every part; their sizes add up). A filter that exceeded the
        collector's threshold, or one on a fact column another part already
        filters, is left out (those on the fact's first partition column are
        kept first), and the report says so.
    on : mapping or sequence of (fact column, dim column), or column name(s)
        The equi-join keys of a single ``dim``, e.g. ``{"ss_sold_date_sk": "d_date_sk"}``:
        the result has both columns, as Spark's ``fact.join(dim, fact.k == dim.k)``.
        Names the fact and the dimension share (``"region"`` or ``["region",
        "day"]``) join as Spark's ``fact.join(dim, on=["region"])``: the result
        has one column of each (a star takes either form per dimension).
    how : str, default "inner"
        A Spark join type with the fact table on the left. ``inner``,
        ``left_semi`` and ``right`` prune; ``full``, ``left`` and ``left_anti``
        (which keep fact rows without a match) and ``cross`` run unpruned.
    options : mapping, optional
        More reader options for the fact table (see ``DynsourceDataSource``, or
        the Python data source's own).
    format : str, optional
        The fact is ``spark.read.format(format).options(**options).load()``: the
        name a Python data source implementing :class:`dynsource.SupportsDynamicFiltering`
        is registered under (``fact`` is then None). Such a fact, by name or
        format, is pruned on the fields it accepts; its reads have no partitions
        to judge the benefit on, so every filter not exceeded is applied.
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
        a query ran) or why it was not: a ``ScanReport`` for one dimension, a
        ``QueryReport`` for a star.
    """
    dims, shared = _dimensions(dim, on)
    join_type = _JOIN_TYPES.get(how.lower().replace(" ", ""))
    if join_type is None:
        raise ValueError(f"Join type '{how}' is not supported; expected one of {sorted(_JOIN_TYPES)}.")
    spark = dims[0][0].sparkSession
    source = _python_fact(spark, fact, format, options)
    if source is None:
        fact, options, columns = _fact(fact, options)
    base_options = dict(options or {})
    if source is not None:
        columns, fact_options = None, None
        fact_schema = _source_read(spark, fact, format, base_options).schema
        source_table, fact = fact, fact or f"format '{format}'"  # the fact's name in the reports
    elif _is_path(fact):  # a registered table's definition carries the session's settings; a path is given them here
        base_options = {**session_options(spark, base_options), **base_options}
        fact_options = ScanOptions.parse({**base_options, "path": fact})
        fact_schema = DynsourceDataSource({**base_options, "path": fact}).table_schema()
    else:
        definition = catalog.load_definition(spark, fact)
        fact_options, fact_schema = definition.scan_options.with_options(base_options), definition.schema
    _check_fact_columns(fact, fact_schema.names, dims)
    read_options = base_options
    if join_type in _PRUNING:  # the join reads the very rows whose keys were collected, and each dimension runs once
        dims = [(d.localCheckpoint(), pairs) for d, pairs in dims]
    store, applied, notes = None, None, []
    if join_type not in _PRUNING:
        notes.append(f"a {join_type} join keeps fact rows that match no dimension row, so the fact side is not pruned")
    else:
        # Named explicitly: Spark's Python workers keep the environment the session started with, so a
        # $DYNSOURCE_FILTER_STORE set since then would send the planner to another store.
        store = FilterStore.of(collect_options.pop("store", None), collect_options.pop("storage_options", None))
        types = {f.name: f.dataType.simpleString() for f in fact_schema.fields}
        survey = None if source is not None else benefit.survey(fact_options, types)
        applied, notes = _worth_applying(fact, survey, source, dims, types, store, fallback_filter_ratio,
                                         collect_options)
        if applied is not None:
            read_options = {**base_options, **filter_options(applied.handle, store)}
    if source is not None:
        fact_df = _source_read(spark, source_table, format, read_options)
    else:
        fact_df = _read(spark, fact, read_options, fact_schema, columns)
    joined = fact_df
    for (d, pairs), named in zip(dims, shared, strict=True):
        condition = [f for f, _ in pairs] if named else functools.reduce(
            lambda a, b: a & b, [fact_df[f] == d[c] for f, c in pairs])
        joined = joined.join(d, condition, join_type)
    if len(dims) == 1:
        queryreport.record_join(joined, fact=fact, handle=applied.handle if applied else None,
                           reason=None if applied else "; ".join(notes), store=store)
    else:
        assignment = applied or queryreport.Assignment(fact, reason="; ".join(notes))
        query_report = queryreport.QueryReport((assignment,), tuple(notes) if applied else (), store)
        queryreport.record_query(joined, query_report)
    return joined


def _dimensions(dim, on) -> tuple[list[tuple[DataFrame, list[tuple[str, str]]]], list[bool]]:
    """``[(dimension, [(fact column, dim column), ...]), ...]`` of a single ``dim`` and ``on``, or of a star; and
    for each, whether its keys are names the fact and the dimension share (one column each in the result)."""
    if isinstance(dim, DataFrame):
        if on is None:
            raise ValueError("dynamic_join() needs 'on', the (fact column, dim column) pairs, for a single dim.")
        dims = [(dim, on)]
    elif on is not None:
        raise ValueError("dynamic_join() takes 'on' with a single dim; a star gives each dimension its own keys: "
                         "dim=[(dates, {'ss_sold_date_sk': 'd_date_sk'}), ...].")
    else:
        dims = list(dim)
    normalized, shared = [], []
    for frame, keys in dims:
        named = _shared_names(keys)
        pairs = [(name, name) for name in _names(keys)] if named else list(collector.key_pairs(keys).items())
        if not pairs:
            raise ValueError("dynamic_join() needs at least one (fact column, dim column) pair in 'on'.")
        normalized.append((frame, pairs))
        shared.append(named)
    if not normalized:
        raise ValueError("dynamic_join() needs at least one dimension.")
    return normalized, shared


def _shared_names(keys: object) -> bool:
    """Whether ``keys`` are column names the fact and the dimension share (``"k"`` or ``["k", ...]``)."""
    return isinstance(keys, str) or (isinstance(keys, (list, tuple)) and bool(keys)
                                     and all(isinstance(key, str) for key in keys))


def _names(keys: str | Sequence[str]) -> list[str]:
    return [keys] if isinstance(keys, str) else list(keys)


def _check_fact_columns(fact: str, columns: list[str], dims) -> None:
    known = {name.lower() for name in columns}
    missing = [f for _, pairs in dims for f, _ in pairs if f.lower() not in known]
    if missing:
        raise ValueError(f"dynamic_join(): fact column(s) {missing} of 'on' are not columns of the fact table "
                         f"'{fact}': {columns}.")


def _worth_applying(fact, survey, source, dims, types, store, ratio, collect_options):
    """The assignment of the dimensions whose filters pay (judged on the fact's ``survey``; None for a Python data
    ``source``, which has no partitions to judge on), the parts of one filter on the scan, and notes."""
    def candidate(index: int, d: DataFrame, pairs: list[tuple[str, str]]) -> benefit.Candidate:
        def collect():
            refused = None if source is None else not_accepted(source, [f for f, _ in pairs])
            if refused:
                return None, refused
            return collector.collect_data(d, pairs, types={f: types[f] for f, _ in pairs}, **collect_options), None

        described = f"{fact} ({', '.join(f for f, _ in pairs)}) <- dimension {index} ({', '.join(c for _, c in pairs)})"
        return benefit.Candidate(described, [f for f, _ in pairs], collect)

    started = time.perf_counter()
    choice = benefit.worth_applying([candidate(index, d, pairs) for index, (d, pairs) in enumerate(dims)], survey,
                                    ratio)
    notes = [reason if len(dims) == 1 else f"{label}: {reason}" for label, reason in choice.declined]
    if choice.data is None:
        return None, notes
    collection_ms = round((time.perf_counter() - started) * 1000, 1)  # the dimensions' collect jobs and combining
    handle = handles.publish(choice.data, store)
    return (queryreport.Assignment(fact, " AND ".join(choice.applied), handle, choice.kind, len(choice.data),
                              collection_ms), notes + choice.left_out)


def _fact(fact: str | DataFrame, options: Mapping[str, str] | None) -> tuple[str, dict[str, str], list[str] | None]:
    """The fact's path or table name, its reader options and the columns read (None: all)."""
    if isinstance(fact, str):
        return fact, dict(options or {}), None
    read = catalog.table_read(fact) if isinstance(fact, DataFrame) else None
    if read is None:
        raise ValueError("dynamic_join() takes as its fact a table's path, a registered table's name, or a DataFrame "
                         "of dynsource.table(spark, name); this DataFrame is none of them.")
    return read.table, {**dict(read.options), **dict(options or {})}, None if read.columns is None else list(
        read.columns)


def _python_fact(spark: SparkSession, fact: str | DataFrame | None, format: str | None,
                 options: Mapping[str, str] | None) -> pythonsources.FilteringSource | None:
    """The Python data source taking a dynamic filter that reads the fact (by ``format``, or a catalog table of
    one); None for a dynsource fact."""
    if format is not None:
        if fact is not None:
            raise ValueError("dynamic_join() takes either a fact table or format=..., not both.")
        found = pythonsources.python_source(spark, format, options)
        if found is None or not found.filters:
            raise ValueError(f"dynamic_join(format={format!r}): no Python data source implementing "
                             "dynsource.SupportsDynamicFiltering is registered under that name in this session "
                             "(register it with spark.dataSource.register; over Spark Connect with "
                             "dynsource.register_filtering_source).")
        return found
    if not isinstance(fact, str) or _is_path(fact):
        return None
    found = pythonsources.python_source(spark, metastore.provider(spark, catalog.qualified_name(spark, fact)))
    return found if found is not None and found.filters else None


def _source_read(spark: SparkSession, table: str | None, format: str | None,
                 options: Mapping[str, str]) -> DataFrame:
    """A Python data source's fact: its catalog ``table``, or ``format`` read with ``options``."""
    reader = spark.read.options(**options)
    return reader.table(table) if table is not None else reader.format(format).load()


def _read(spark, fact: str, options: Mapping[str, str], schema: StructType,
          columns: Sequence[str] | None = None) -> DataFrame:
    """The fact side, read by the reader its option ``reader`` chooses (see :mod:`dynsource.spark.filereader`)."""
    if not _is_path(fact):
        return catalog.read_table(spark, fact, options, columns)
    options = {**options, "path": fact}
    return filereader.read_by_choice(spark, "dynsource", options, ScanOptions.parse(options), schema, columns)


def _is_path(fact: str) -> bool:
    return "/" in fact or "://" in fact or "\\" in fact
