"""The collector (FLIP-248's DynamicFilteringDataCollector): a filtered dimension DataFrame -> a filter handle.

The collector grades its payload by what fits the limits (see :func:`collect`):
the exact distinct keys, else a Bloom filter over them, else their per-field
min/max, else nothing (exceeded). Every grade is computed by Spark; the driver
receives at most ``max_rows + 1`` keys as Arrow, one Bloom filter's bits or one
row of bounds, so its memory is bounded by the limits, not by the dimension's size.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pybloom_live import BloomFilter
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dynsource import filtering
from dynsource.filtering import DEFAULT_FPP, KINDS, DynamicFilteringData, handles
from dynsource.filtering.filterstore import FilterStore
from dynsource.runtime import deployment
from dynsource.types import INTEGRAL, arrow_type, normalize_type

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024  # Flink's collector threshold
# Partial Bloom filters travel to their merge in pieces of this size; all-zero pieces are not sent at all.
_CHUNK_BYTES = 1 << 20
_CHUNKS_SCHEMA = "chunk int, bits binary"
_FITS = "__dynsource_key_fits"


Keys = Mapping[str, str] | Sequence[tuple[str, str]]


def collect(
    df: DataFrame,
    keys: Keys,
    *,
    types: Mapping[str, str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    null_safe: bool = False,
    fpp: float = DEFAULT_FPP,
    kinds: Collection[str] = KINDS,
    store: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    wait: bool = True,
) -> str:
    """Collect the distinct join keys of ``df`` and publish them; return the filter handle.

    The payload is the first of these grades that ``kinds`` allows and that fits:

    1. ``"exact"``: the distinct keys, when there are at most ``max_rows`` of
       them and their Arrow size is at most ``max_bytes``;
    2. ``"bloom"``: a Bloom filter sized for the distinct key count with
       false-positive rate ``fpp``, when its bit array is at most ``max_bytes``;
       built in Spark, one partial filter per partition, OR-ed in Spark;
    3. ``"range"``: each field's least and greatest key (Spark's ``min``/``max``),
       when their Arrow size is at most ``max_bytes``;
    4. otherwise exceeded: the filter reads everything.

    Parameters
    ----------
    df : DataFrame
        The (filtered) dimension side of the join.
    keys : mapping of str to str, or sequence of (str, str)
        Fact-side filter field (a partition column of the fact table) -> column of ``df``,
        e.g. ``{"ss_sold_date_sk": "d_date_sk"}`` or ``[("ss_sold_date_sk", "d_date_sk")]``.
    types : mapping of str to str, optional
        Spark SQL types of fact fields; the keys are cast to them in Spark. By
        default a field has its dimension column's type.
    max_rows : int, default 100000
        Most distinct keys of an exact payload.
    max_bytes : int, default 33554432 (32 MiB)
        Most bytes of any payload: the keys' Arrow size, the Bloom filter's bits, the bounds' Arrow size.
    null_safe : bool, default False
        Keep null keys so that they match null partitions (for ``<=>`` joins).
    fpp : float, default 0.01
        False-positive rate of a Bloom payload: about this share of the
        partitions without a key are kept.
    kinds : collection of str, default ("exact", "bloom", "range")
        The grades allowed; leave one out to skip it (an empty collection always exceeds).
    store : str, optional
        Filter store URL; default ``$DYNSOURCE_FILTER_STORE`` or the local cache.
    storage_options : mapping, optional
        fsspec options of the store (credentials, endpoint...), e.g. for ``s3://``
        ``{"key": ..., "secret": ..., "client_kwargs": {"endpoint_url": ...}}``;
        readers pass the same as ``filterStoreOptions`` (or ``storageOptions``).
    wait : bool, default True
        False returns the handle at once and collects in a background thread of
        the driver (FLIP-248 orders the dimension before the scan; this lets them
        overlap). Readers wait for the filter up to their ``dynamicFilterWaitMs``;
        if collecting fails, the failure is published and readers report it.

    Notes
    -----
    Each grade tried runs a Spark job over the dimension: the exact one, then
    (when it does not fit) a count of the distinct keys, then the Bloom filter or
    the bounds over those keys, which are persisted meanwhile.
    """
    keys = key_pairs(keys)

    def compute() -> DynamicFilteringData:
        return collect_data(
            df, keys, types=types, max_rows=max_rows, max_bytes=max_bytes, null_safe=null_safe, fpp=fpp, kinds=kinds
        )

    location = FilterStore.of(store, storage_options)
    if wait:
        return handles.publish(compute(), location)
    _check_arguments(keys, max_rows, max_bytes, fpp, kinds)
    _project(df, keys, types)  # bad key columns fail here, not in the background
    handle = handles.reserve(location)
    threading.Thread(target=_publish_later, args=(handle, compute, location), name=f"dynsource-{handle}",
                     daemon=True).start()
    return handle


def _publish_later(handle: str, compute, location: FilterStore) -> None:
    try:
        data = compute()
    except Exception as error:  # whatever went wrong, readers must learn it instead of waiting in vain
        log.warning("dynsource: collecting dynamic filter %s failed: %s", handle, error)
        location.publish_failure(handle, f"{type(error).__name__}: {error}")
        return
    location.publish(data, handle)


def collect_data(
    df: DataFrame,
    keys: Keys,
    *,
    types: Mapping[str, str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    null_safe: bool = False,
    fpp: float = DEFAULT_FPP,
    kinds: Collection[str] = KINDS,
) -> DynamicFilteringData:
    """:func:`collect` without publishing: the DynamicFilteringData itself."""
    keys = key_pairs(keys)
    _check_arguments(keys, max_rows, max_bytes, fpp, kinds)
    projected, fields = _project(df, keys, types)
    if not null_safe:
        # An equi-join never matches a null key. Not dropna(): it drops NaN too, which joins NaN in Spark.
        present = [F.col(f"`{field}`").isNotNull() for field in keys]
        projected = projected.where(functools.reduce(operator.and_, present))
    distinct = projected.distinct()
    known_count = None
    if "exact" in kinds:
        table = _distinct_keys(projected, distinct, fields, max_rows)
        if table.num_rows <= max_rows and table.nbytes <= max_bytes:
            return DynamicFilteringData.from_table(fields, table, null_safe=null_safe)
        known_count = table.num_rows if table.num_rows <= max_rows else None
    if "bloom" in kinds or "range" in kinds:
        return _summarise(distinct, fields, known_count, max_bytes, null_safe, fpp, kinds)
    return DynamicFilteringData(fields, exceed_threshold=True, null_safe=null_safe)


def _distinct_keys(projected: DataFrame, distinct: DataFrame, fields: list[tuple[str, str]], max_rows: int) -> pa.Table:
    """At most ``max_rows + 1`` distinct keys.

    A dimension side of at most ``max_rows`` rows (the usual filtered dimension)
    is deduplicated by Arrow in the driver: one Spark job without the shuffle of
    ``distinct()``. Floats are left to Spark, which groups -0.0 with 0.0.
    """
    if not any(type_name in ("float", "double") for _, type_name in fields):
        rows = projected.limit(max_rows + 1).toArrow()
        if rows.num_rows <= max_rows:
            return _arrow_distinct(rows)
    return distinct.limit(max_rows + 1).toArrow()


def _arrow_distinct(rows: pa.Table) -> pa.Table:
    return rows.group_by(rows.column_names, use_threads=False).aggregate([])


def exact_in_driver(rows: pa.Table, column_types: Mapping[str, str], keys: Keys, types: Mapping[str, str], *,
                    null_safe: bool = False, max_rows: int = DEFAULT_MAX_ROWS,
                    max_bytes: int = DEFAULT_MAX_BYTES) -> DynamicFilteringData | None:
    """:func:`collect_data`'s exact payload of dimension ``rows`` already in the driver, without a Spark job.

    ``column_types`` are the rows' Spark SQL types by column. Only where Spark's
    answer cannot differ: each key column is the fact field's type already, or
    both are integral (a key outside the fact type's range is dropped, as
    Spark's ``try_cast`` makes it null), not a float (Spark groups -0.0 with
    0.0), and the keys fit the limits. Otherwise None: collect with :func:`collect_data`.
    """
    keys = key_pairs(keys)
    fields, fits = [], []
    for field, column in keys.items():
        try:
            fact_type, column_type = normalize_type(types[field]), normalize_type(column_types[column])
        except (KeyError, ValueError):  # not a column of the rows, or no atomic type
            return None
        if fact_type != column_type:
            if fact_type not in INTEGRAL or column_type not in INTEGRAL:
                return None
            bounds, values = np.iinfo(arrow_type(fact_type).to_pandas_dtype()), rows[column]
            inside = pc.and_(pc.greater_equal(values, int(bounds.min)), pc.less_equal(values, int(bounds.max)))
            fits.append(pc.fill_null(inside, True))  # a null key fits: it stays null
        elif fact_type in ("float", "double"):
            return None
        fields.append((field, fact_type))
    if not null_safe:
        fits += [pc.is_valid(rows[column]) for column in keys.values()]
    table = rows.select(list(keys.values())).rename_columns(list(keys))
    if fits:
        table = table.filter(functools.reduce(pc.and_, fits))
    table = _arrow_distinct(table)
    if table.num_rows > max_rows or table.nbytes > max_bytes:
        return None
    return DynamicFilteringData.from_table(fields, table, null_safe=null_safe)


def key_pairs(keys: Keys) -> dict[str, str]:
    """``{fact field: dimension column}`` from a mapping or from (fact field, dimension column) pairs."""
    pairs = None
    if isinstance(keys, Mapping):
        pairs = list(keys.items())
    elif isinstance(keys, Iterable) and not isinstance(keys, str):
        pairs = list(keys)
    if pairs is None or not all(isinstance(pair, (tuple, list)) and len(pair) == 2
                                and all(isinstance(name, str) for name in pair) for pair in pairs):
        raise ValueError(f"keys must map fact fields to dimension columns: {{'ss_sold_date_sk': 'd_date_sk'}} or "
                         f"[('ss_sold_date_sk', 'd_date_sk')]; got {keys!r}.")
    return dict(pairs)


def _check_arguments(
    keys: Mapping[str, str], max_rows: int, max_bytes: int, fpp: float, kinds: Collection[str]
) -> None:
    if not keys:
        raise ValueError("collect() needs at least one key: {fact field: dimension column}.")
    if max_rows < 0 or max_bytes < 0:
        raise ValueError(f"max_rows ({max_rows}) and max_bytes ({max_bytes}) must not be negative.")
    unknown = sorted(set(kinds) - set(KINDS))
    if isinstance(kinds, str) or unknown:
        raise ValueError(f"kinds must be a collection of {list(KINDS)}, got {kinds!r}.")
    if "bloom" in kinds:
        filtering.bloom_size_bytes(1, fpp)  # raises for an fpp outside (0, 1)


def _project(
    df: DataFrame, keys: Mapping[str, str], types: Mapping[str, str] | None
) -> tuple[DataFrame, list[tuple[str, str]]]:
    """The key columns of ``df`` named and cast as the fact fields, and the fields' Spark SQL types (no Spark job).

    A key that the fact field's type cannot hold (a bigint beyond an int column's
    range, a string that is no number, a decimal too wide) can equal no fact value,
    so its row is dropped rather than cast: Spark's ANSI cast would fail the
    collection where the plain join returns its rows.
    """
    columns = [_key_column(df, field, column, (types or {}).get(field)) for field, column in keys.items()]
    fits = [fit for _, fit in columns if fit is not None]
    if fits:
        projected = df.select(*[key for key, _ in columns], functools.reduce(operator.and_, fits).alias(_FITS))
        projected = projected.where(F.col(_FITS)).drop(_FITS)
    else:
        projected = df.select(*[key for key, _ in columns])
    return projected, [_field_type(f.name, keys[f.name], f.dataType.simpleString()) for f in projected.schema]


def _field_type(field: str, column: str, type_name: str) -> tuple[str, str]:
    try:
        return field, normalize_type(type_name)
    except ValueError:
        raise ValueError(
            f"Key column '{column}' (for fact field '{field}') has type {type_name}, which a dynamic filter cannot "
            "hold; expected an atomic type (numeric, string, binary, boolean, date, timestamp), or a cast in types=."
        ) from None


def _key_column(df: DataFrame, field: str, column: str, fact_type: str | None) -> tuple[Column, Column | None]:
    """The key as the fact field, and (when cast) whether the fact's type holds it: null keys always fit."""
    # Spark resolves column names ignoring case (spark.sql.caseSensitive=false); with it true, select() says so.
    if column.lower() not in {name.lower() for name in df.columns}:
        raise ValueError(
            f"Key column '{column}' (for fact field '{field}') is not a column of the dimension: {df.columns}."
        )
    key = F.col(f"`{column}`")
    if not fact_type:
        return key.alias(field), None
    cast = key.try_cast(normalize_type(fact_type))
    return cast.alias(field), key.isNull() | cast.isNotNull()


def _summarise(
    distinct: DataFrame,
    fields: list[tuple[str, str]],
    known_count: int | None,
    max_bytes: int,
    null_safe: bool,
    fpp: float,
    kinds: Collection[str],
) -> DynamicFilteringData:
    """A Bloom filter or bounds over the distinct keys, or exceeded data when neither fits ``max_bytes``."""
    # The count and the filter must see the same keys (a partial filter holds at most its capacity),
    # and the dimension should run once for both.
    distinct = distinct.persist()
    try:
        count = distinct.count() if known_count is None else known_count
        capacity = max(count, 1)  # pybloom needs room for one key
        if "bloom" in kinds and filtering.bloom_size_bytes(capacity, fpp) <= max_bytes:
            bloom = _bloom(distinct, fields, capacity, fpp)
            return DynamicFilteringData.from_bloom(fields, bloom, key_count=count, null_safe=null_safe)
        if "range" in kinds:
            data = _range(distinct, fields, count, null_safe)
            if data.size_bytes <= max_bytes:
                return data
    finally:
        distinct.unpersist()
    return DynamicFilteringData(fields, exceed_threshold=True, null_safe=null_safe)


def _bloom(distinct: DataFrame, fields: list[tuple[str, str]], capacity: int, fpp: float) -> BloomFilter:
    """One Bloom filter over the distinct keys: partial filters built per partition, OR-ed chunk by chunk in Spark.

    OR-ing in Spark rather than in the driver keeps the work parallel and the
    driver's share to one filter's bits, however many partitions there are.
    """
    deployment.workers_checked(distinct.sparkSession)  # the partial filters are built in Spark's Python workers
    chunk_bytes = _CHUNK_BYTES  # read once: the workers get it with the function, not from their module
    build = functools.partial(_partial_bloom_chunks, fields=fields, capacity=capacity, fpp=fpp, chunk_bytes=chunk_bytes)
    chunks = distinct.mapInArrow(build, _CHUNKS_SCHEMA)
    merged = chunks.groupBy("chunk").applyInArrow(_or_chunks, _CHUNKS_SCHEMA).toArrow()
    bits = bytearray(filtering.bloom_size_bytes(capacity, fpp))
    for chunk, piece in zip(merged.column("chunk").to_pylist(), merged.column("bits").to_pylist(), strict=True):
        bits[chunk * chunk_bytes : chunk * chunk_bytes + len(piece)] = piece
    return filtering.bloom_from_bits(capacity, fpp, bytes(bits))


def _partial_bloom_chunks(
    batches: Iterator[pa.RecordBatch], *, fields: list[tuple[str, str]], capacity: int, fpp: float, chunk_bytes: int
) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark Python worker: this partition's keys in a Bloom filter, as its non-zero chunks."""
    bloom = None
    for batch in batches:
        if bloom is None:
            bloom = BloomFilter(capacity, fpp)
        filtering.add_to_bloom(bloom, fields, pa.Table.from_batches([batch]))
    if bloom is None:
        return  # an empty partition adds no bits
    bits = bloom.bitarray.tobytes()
    starts = range(0, len(bits), chunk_bytes)
    pieces = {index: bits[start : start + chunk_bytes] for index, start in enumerate(starts)}
    pieces = {index: piece for index, piece in pieces.items() if piece.count(0) < len(piece)}
    yield pa.record_batch(
        [pa.array(list(pieces), pa.int32()), pa.array(list(pieces.values()), pa.binary())], names=["chunk", "bits"]
    )


def _or_chunks(table: pa.Table) -> pa.Table:
    """Runs in a Spark Python worker: the OR of one chunk's pieces from every partial filter."""
    pieces = [np.frombuffer(piece, dtype=np.uint8) for piece in table.column("bits").to_pylist()]
    merged = functools.reduce(np.bitwise_or, pieces)
    return pa.table({"chunk": pa.array([table.column("chunk")[0].as_py()], pa.int32()), "bits": [merged.tobytes()]})


def _range(distinct: DataFrame, fields: list[tuple[str, str]], count: int, null_safe: bool) -> DynamicFilteringData:
    """Each field's least and greatest key, by Spark's ``min`` and ``max`` (nulls ignored, NaN the greatest)."""
    names = [name for name, _ in fields]
    extremes = [F.min(f"`{name}`").alias(f"lower{i}") for i, name in enumerate(names)]
    extremes += [F.max(f"`{name}`").alias(f"upper{i}") for i, name in enumerate(names)]
    row = distinct.agg(*extremes).toArrow().to_pylist()[0]
    lower = tuple(row[f"lower{i}"] for i in range(len(names)))
    upper = tuple(row[f"upper{i}"] for i in range(len(names)))
    return DynamicFilteringData.from_bounds(fields, lower, upper, key_count=count, null_safe=null_safe)
