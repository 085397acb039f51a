"""The collector (FLIP-248's DynamicFilteringDataCollector): a filtered dimension DataFrame -> a filter handle.

The distinct keys are computed by Spark and only ``max_rows + 1`` of them are
ever brought to the driver, as Arrow, so driver memory is bounded by the
limits, not by the dimension's size.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dynsource import store as filter_store
from dynsource.filtering import DynamicFilteringData
from dynsource.types import normalize_type, type_name

DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024  # Flink's collector threshold


def collect(
    df: DataFrame,
    keys: Mapping[str, str],
    *,
    types: Mapping[str, str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    null_safe: bool = False,
    store: str | None = None,
) -> str:
    """Collect the distinct join keys of ``df`` and publish them; return the filter handle.

    Parameters
    ----------
    df : DataFrame
        The (filtered) dimension side of the join.
    keys : mapping of str to str
        Fact-side filter field (a partition column of the fact table) -> column of ``df``,
        e.g. ``{"ss_sold_date_sk": "d_date_sk"}``.
    types : mapping of str to str, optional
        Spark SQL types of fact fields; the keys are cast to them in Spark. By
        default a field has its dimension column's type.
    max_rows : int, default 100000
        Most distinct keys; past it the filter is published as exceeded (reads everything).
    max_bytes : int, default 33554432 (32 MiB)
        Most bytes of collected keys (Arrow size); past it, exceeded as well.
    null_safe : bool, default False
        Keep null keys so that they match null partitions (for ``<=>`` joins).
    store : str, optional
        Filter store URL; default ``$DYNSOURCE_FILTER_STORE`` or the local cache.
    """
    data = collect_data(df, keys, types=types, max_rows=max_rows, max_bytes=max_bytes, null_safe=null_safe)
    return filter_store.publish(data, store)


def collect_data(
    df: DataFrame,
    keys: Mapping[str, str],
    *,
    types: Mapping[str, str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    null_safe: bool = False,
) -> DynamicFilteringData:
    """:func:`collect` without publishing: the DynamicFilteringData itself."""
    if not keys:
        raise ValueError("collect() needs at least one key: {fact field: dimension column}.")
    if max_rows < 0 or max_bytes < 0:
        raise ValueError(f"max_rows ({max_rows}) and max_bytes ({max_bytes}) must not be negative.")
    projected = df.select(*[_key_column(df, field, column, (types or {}).get(field)) for field, column in keys.items()])
    if not null_safe:
        projected = projected.dropna()  # an equi-join never matches a null key
    table = projected.distinct().limit(max_rows + 1).toArrow()
    fields = [(f.name, type_name(f.type)) for f in table.schema]
    if table.num_rows > max_rows or table.nbytes > max_bytes:
        return DynamicFilteringData(fields, exceed_threshold=True, null_safe=null_safe)
    return DynamicFilteringData.from_table(fields, table, null_safe=null_safe)


def _key_column(df: DataFrame, field: str, column: str, fact_type: str | None):
    if column not in df.columns:
        raise ValueError(
            f"Key column '{column}' (for fact field '{field}') is not a column of the dimension: {df.columns}."
        )
    key = F.col(f"`{column}`")
    if fact_type:
        key = key.cast(normalize_type(fact_type))
    return key.alias(field)

