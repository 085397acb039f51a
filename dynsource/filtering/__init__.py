"""DynamicFilteringData: what a collector sends to the fact-side enumerator (FLIP-248), in three grades.

A filter summarises the distinct rows of the fact-side filter fields in one of
three kinds of payload, from the most to the least precise:

* ``"exact"``: the rows themselves;
* ``"bloom"``: a Bloom filter (pybloom-live) over a canonical encoding of the
  rows, as openLooKeng sends when the rows are too many;
* ``"range"``: the least and greatest value of each field, Trino's min/max
  collapse.

Or nothing at all when the collector gave up (``exceed_threshold``): such data
filters nothing. The enumerator asks it, level by level, which partition values
some row may match (:meth:`DynamicFilteringData.matching_mask`); a Parquet
reader asks whether a row group's statistics may hold a key
(:meth:`DynamicFilteringData.may_overlap`). Pruning too little only costs I/O;
pruning too much loses rows, so every doubtful case keeps the candidate.

The filter travels between processes as versioned, checksummed bytes (a JSON
header and an Arrow IPC or bit-array body, never pickle), see :meth:`~DynamicFilteringData.to_bytes`.

A data source that pushes the filter into its own backend sees it one field at a time
(:meth:`DynamicFilteringData.field_filter`, ``fieldview``): the exact keys, a range's bounds, a Bloom filter's
probe, or nothing.

Beside the payload: the filter store that publishes it under a handle (``filterstore``), the handles API
(``handles``) and the collector that makes it from a Spark DataFrame (``collector``, driver only).

Imports: the root vocabulary only. Spark's Python workers load the payload and the store, never the collector.
"""

from dynsource.filtering.bloomkeys import (
    DEFAULT_FPP,
    MAX_BLOOM_CAPACITY,
    add_to_bloom,
    bloom_from_bits,
    bloom_key,
    bloom_size_bytes,
)
from dynsource.filtering.data import DynamicFilteringData
from dynsource.filtering.keyrows import KINDS
from dynsource.filtering.wire import MAGIC, MAX_HEADER_BYTES, SUPPORTED_VERSIONS, VERSION

__all__ = [
    "DEFAULT_FPP",
    "KINDS",
    "MAGIC",
    "MAX_BLOOM_CAPACITY",
    "MAX_HEADER_BYTES",
    "SUPPORTED_VERSIONS",
    "VERSION",
    "DynamicFilteringData",
    "add_to_bloom",
    "bloom_from_bits",
    "bloom_key",
    "bloom_size_bytes",
]
