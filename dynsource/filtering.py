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
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import struct
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

import bitarray
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pybloom_live import BloomFilter

from dynsource import partitions, types

# PNG-style magic: the high-bit byte and the newline reveal 7-bit or line-ending-mangling transports.
MAGIC = b"\x89DYNFLT\n"
VERSION = 1
SUPPORTED_VERSIONS = (1,)
MAX_HEADER_BYTES = 1 << 20
# Most keys a Bloom filter may be sized for: 2**40 keys at any useful fpp is already terabytes of bits.
MAX_BLOOM_CAPACITY = 1 << 40
DEFAULT_FPP = 0.01
KINDS = ("exact", "bloom", "range")
_PREFIX = struct.Struct(">8sHI")  # magic, version, header length
_DIGEST_BYTES = hashlib.sha256().digest_size
_HEADER_KEYS: dict[str, tuple[type, str]] = {
    "kind": (str, "a string"),
    "fields": (list, "a list"),
    "exceed_threshold": (bool, "a boolean"),
    "null_safe": (bool, "a boolean"),
    "row_count": (int, "a non-negative integer"),
    "body_length": (int, "a non-negative integer"),
}
# Keys only some kinds have: a Bloom filter's sizing, from which its bit-array length follows.
_KIND_HEADER_KEYS: dict[str, dict[str, tuple[type, str]]] = {"bloom": {"bloom": (dict, "an object")}}

_Fields = tuple[tuple[str, str], ...]
_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
# Extreme dates have no microsecond timestamp (int64 microseconds span about +-106751991 days).
_TIMESTAMP_DAYS = 106_751_991
# One shared NaN object: set membership checks identity first, so NaN finds NaN as in Spark's joins.
_NAN = float("nan")
# A Bloom filter answers may_overlap for an integral interval by probing each of its values, up to this many.
_MAX_OVERLAP_PROBES = 1024


class DynamicFilteringData:
    """A summary of the fact-side filter rows (exact, Bloom or min/max) plus an exceed-threshold flag (FLIP-248).

    The constructor builds ``"exact"`` data from rows; :meth:`from_table`
    builds any kind from an Arrow table, :meth:`from_bloom` and
    :meth:`from_bounds` wrap a Bloom filter or per-field bounds computed
    elsewhere (the collector builds both inside Spark).

    Parameters
    ----------
    fields : sequence of (str, str)
        Filter field names and their Spark SQL types, e.g. ``[("day", "int")]``.
        Names must be non-empty and unique ignoring case.
    rows : iterable of sequences, optional
        The filter rows, one value per field (a single-field row may be a bare
        value or a 1-tuple). Values are converted to the field types and
        duplicates dropped. Ignored when ``exceed_threshold`` is true.
    exceed_threshold : bool, default False
        The collector stopped before seeing every key: the data filters nothing.
    null_safe : bool, default False
        Built for a ``<=>`` join: a null matches a null. By default (``=``) a
        null matches nothing.

    Attributes
    ----------
    fields : tuple of (str, str)
        Names and canonical Spark SQL types (:func:`dynsource.types.normalize_type`).
    field_names : tuple of str
    kind : {"exact", "bloom", "range"}
        The payload: the rows themselves, a Bloom filter over them, or per-field bounds.
        Exceeded data is ``"exact"`` with no rows.
    table : pyarrow.Table
        Exact data only: the distinct rows, typed with :func:`dynsource.types.arrow_type`;
        empty when exceeded.
    bloom_filter : pybloom_live.BloomFilter or None
        Bloom data only: the filter, over :func:`bloom_key` encodings of the rows.
    fpp : float or None
        Bloom data only: the false-positive rate the filter was sized for.
    bounds : tuple of (tuple, tuple) or None
        Range data only: the least and the greatest value of each field (None
        for a field with no non-null value).
    size_bytes : int
        Payload size: the rows' Arrow size, the Bloom filter's bit array, or the bounds' Arrow size.
    exceed_threshold, null_safe : bool
    is_filtering : bool
        False when exceeded: such data contains every row.

    Notes
    -----
    ``len(data)`` is the number of distinct rows the payload summarises (for
    exact data, the rows it holds).

    Examples
    --------
    >>> data = DynamicFilteringData([("day", "int"), ("region", "string")], [(1, "eu"), (2, "us")])
    >>> data.contains((1, "eu")), data.contains((1, "us"))
    (True, False)
    >>> data.matching_mask(pa.table({"day": pa.array(["01", "3"])})).to_pylist()
    [True, False]
    >>> DynamicFilteringData.from_bytes(data.to_bytes()) == data
    True
    >>> days = pa.table({"day": pa.array(range(1000), pa.int32())})
    >>> bloom = DynamicFilteringData.from_table([("day", "int")], days, kind="bloom")
    >>> bloom.kind, len(bloom), bloom.size_bytes
    ('bloom', 1000, 1199)
    >>> bloom.matching_mask(pa.table({"day": pa.array([5, 999])})).to_pylist()
    [True, True]
    >>> span = DynamicFilteringData.from_bounds([("day", "int")], (10,), (20,), key_count=11)
    >>> span.matching_mask(pa.table({"day": pa.array([9, 10, 20, 21])})).to_pylist()
    [False, True, True, False]
    >>> span.may_overlap("day", 15, 30), span.may_overlap("day", 21, 30)
    (True, False)
    """

    def __init__(
        self,
        fields: Sequence[tuple[str, str]],
        rows: Iterable[Sequence[Any]] = (),
        exceed_threshold: bool = False,
        *,
        null_safe: bool = False,
    ) -> None:
        checked = _check_fields(fields)
        self._start(checked, "exact", exceed_threshold, null_safe)
        self._set_rows(_empty_table(checked) if exceed_threshold else _table_from_rows(checked, rows))

    @classmethod
    def from_table(
        cls,
        fields: Sequence[tuple[str, str]],
        table: pa.Table,
        *,
        kind: str = "exact",
        fpp: float = DEFAULT_FPP,
        exceed_threshold: bool = False,
        null_safe: bool = False,
    ) -> DynamicFilteringData:
        """Build from Arrow columns matched to the fields by name (ignoring case), cast safely to their types.

        Extra columns are ignored; a missing column or a value the field type
        cannot hold raises ``ValueError``.

        Parameters
        ----------
        fields : sequence of (str, str)
            As for the constructor.
        table : pyarrow.Table
            The rows; duplicates are dropped.
        kind : {"exact", "bloom", "range"}, default "exact"
            Keep the rows, or summarise them in a Bloom filter sized for the
            distinct rows, or in per-field bounds. Unless ``null_safe``, a
            Bloom filter or bounds leave out rows holding a null (they match nothing).
        fpp : float, default 0.01
            The Bloom filter's false-positive rate (``kind="bloom"`` only).
        exceed_threshold, null_safe : bool
            As for the constructor; exceeded data is always exact and empty.
        """
        checked = _check_fields(fields)
        if kind not in KINDS:
            raise ValueError(f"Filter kind '{kind}' is not supported; supported kinds: {list(KINDS)}.")
        if exceed_threshold:
            return cls(checked, exceed_threshold=True, null_safe=null_safe)
        typed = _cast_table(checked, table)
        if kind == "exact":
            data = cls._blank(checked, "exact", null_safe)
            data._set_rows(typed)
            return data
        keys = _distinct(_normalize_floats(typed if null_safe else typed.drop_null()))
        if kind == "bloom":
            bloom = BloomFilter(max(keys.num_rows, 1), _check_fpp(fpp))
            add_to_bloom(bloom, checked, keys)
            return cls.from_bloom(checked, bloom, key_count=keys.num_rows, null_safe=null_safe)
        lower, upper = zip(*(_column_bounds(column) for column in keys.columns), strict=True)
        return cls.from_bounds(checked, lower, upper, key_count=keys.num_rows, null_safe=null_safe)

    @classmethod
    def from_bloom(
        cls,
        fields: Sequence[tuple[str, str]],
        bloom_filter: BloomFilter,
        *,
        key_count: int,
        null_safe: bool = False,
    ) -> DynamicFilteringData:
        """Bloom data: ``bloom_filter`` holds the :func:`bloom_key` of each distinct row (see :func:`add_to_bloom`).

        Parameters
        ----------
        fields : sequence of (str, str)
            As for the constructor.
        bloom_filter : pybloom_live.BloomFilter
            Taken over, not copied. Its capacity must be at most
            ``MAX_BLOOM_CAPACITY``; a filter holding more keys than its capacity
            only has more false positives.
        key_count : int
            How many distinct rows were added (``len()`` of the data); a filter of no keys must be empty.
        null_safe : bool, default False
            Rows with a null were added and match null candidates (``<=>``).
        """
        checked = _check_fields(fields)
        _check_bloom(bloom_filter, _check_count(key_count))
        data = cls._blank(checked, "bloom", null_safe)
        data._bloom = bloom_filter
        data._key_count = key_count
        return data

    @classmethod
    def from_bounds(
        cls,
        fields: Sequence[tuple[str, str]],
        lower: Sequence[Any],
        upper: Sequence[Any],
        *,
        key_count: int,
        null_safe: bool = False,
    ) -> DynamicFilteringData:
        """Range data: every row lies field by field within [``lower``, ``upper``] (Spark's ``min`` and ``max``).

        Parameters
        ----------
        fields : sequence of (str, str)
            As for the constructor.
        lower, upper : sequence
            One value per field, converted to the field types. ``None`` in both
            means the field holds no non-null value. Float NaN is the greatest
            value, as in Spark's ordering (such bounds do not prune their field).
        key_count : int
            How many distinct rows the bounds summarise (``len()`` of the data).
        null_safe : bool, default False
            The rows may hold nulls, which match null candidates (``<=>``): a
            null candidate is then always kept, the bounds not telling whether
            some row holds one.
        """
        checked = _check_fields(fields)
        bounds = _normalize_floats(_table_from_rows(checked, [lower, upper]))
        _check_bounds(bounds, _check_count(key_count), null_safe)
        data = cls._blank(checked, "range", null_safe)
        data._bounds = bounds
        data._key_count = key_count
        return data

    @classmethod
    def _blank(cls, fields: _Fields, kind: str, null_safe: bool) -> DynamicFilteringData:
        data = cls.__new__(cls)
        data._start(fields, kind, False, null_safe)
        return data

    def _start(self, fields: _Fields, kind: str, exceed: bool, null_safe: bool) -> None:
        self._fields = fields
        self._kind = kind
        self._exceed_threshold = bool(exceed)
        self._null_safe = bool(null_safe)
        self._table: pa.Table | None = None
        self._bloom: BloomFilter | None = None
        self._bounds: pa.Table | None = None
        self._key_count = 0
        self._row_set: frozenset[tuple[Any, ...]] | None = None
        self._matchable: pa.Table | None = None

    def _set_rows(self, table: pa.Table) -> None:
        self._table = _distinct(_normalize_floats(table))
        self._key_count = self._table.num_rows

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        return self._fields

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._fields)

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def table(self) -> pa.Table:
        if self._table is None:
            # An empty table here would read as "no keys" and lose every row.
            raise TypeError(f"{self._kind.capitalize()} filter data holds no rows; use matching_mask() or contains().")
        return self._table

    @property
    def bloom_filter(self) -> BloomFilter | None:
        return self._bloom

    @property
    def fpp(self) -> float | None:
        return None if self._bloom is None else self._bloom.error_rate

    @property
    def bounds(self) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        if self._bounds is None:
            return None
        lower, upper = _row_tuples(self._bounds)
        return lower, upper

    @property
    def size_bytes(self) -> int:
        if self._bloom is not None:
            return _bits_bytes(self._bloom.num_bits)
        return (self._table if self._bounds is None else self._bounds).nbytes

    @property
    def exceed_threshold(self) -> bool:
        return self._exceed_threshold

    @property
    def null_safe(self) -> bool:
        return self._null_safe

    @property
    def is_filtering(self) -> bool:
        return not self._exceed_threshold

    def __len__(self) -> int:
        return self._key_count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DynamicFilteringData):
            return NotImplemented
        return (
            self.fields == other.fields
            and self.kind == other.kind
            and self.exceed_threshold == other.exceed_threshold
            and self.null_safe == other.null_safe
            and len(self) == len(other)
            and self._payload_identity() == other._payload_identity()
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {type_name}" for name, type_name in self._fields)
        count = "rows" if self.kind == "exact" else "keys"
        fpp = "" if self._bloom is None else f", fpp={self.fpp}"
        return (
            f"DynamicFilteringData(fields=[{fields}], kind={self.kind}, {count}={len(self)}, "
            f"size_bytes={self.size_bytes}{fpp}, exceed_threshold={self.exceed_threshold}, null_safe={self.null_safe})"
        )

    def contains(self, row: Sequence[Any]) -> bool:
        """Whether ``row`` (one value per field, converted to the field types) may be one of the rows.

        Exact data answers exactly; Bloom data may say true for a row it does
        not hold (about ``fpp`` of them), range data for any row within its
        bounds; neither ever says false for a row it summarises. A row with a
        null matches nothing unless the data is null-safe; non-filtering data
        contains every row.
        """
        values = _row_values(row, self._fields)
        if not self.is_filtering:
            return True
        typed = [
            _column(name, type_name, [value]) for (name, type_name), value in zip(self._fields, values, strict=True)
        ]
        if self.kind != "exact":
            return self.matching_mask(pa.Table.from_arrays(typed, schema=_schema(self._fields)))[0].as_py()
        canonical = tuple(_canonical(column[0].as_py()) for column in typed)
        if not self.null_safe and any(value is None for value in canonical):
            return False
        return canonical in self._rows()

    def matching_mask(self, candidates: pa.Table) -> pa.BooleanArray:
        """For each candidate row, whether some filter row may match it on the candidate's columns.

        Parameters
        ----------
        candidates : pyarrow.Table
            Columns named after some of the fields (ignoring case), of any Spark
            SQL Arrow type comparable to the field's type. The enumerator passes
            the partition columns known so far: a prefix of the fields.

        Returns
        -------
        pyarrow.BooleanArray
            May be true for a candidate no row matches, never false for one a row
            matches. Exact and range data compare both sides in Spark's
            comparison type; a candidate value that cannot be converted to it is
            kept. Comparisons that depend on the session time zone (a date or a
            local timestamp against a timestamp) are made per day with a day of
            slack. A column whose string keys do not all parse into its type
            does not prune, nor do range bounds of a string field against
            another type (the order of the strings is not the order of their
            values), nor float bounds holding NaN; a null-safe range keeps null
            candidates. Bloom data prunes only when every field is a candidate column: each
            candidate is converted to its field's type and its distinct rows are
            probed. It cannot prune what Spark compares in a wider, lossy type
            (a bigint or decimal field against a double column), nor a string
            field against another type, nor a time-zone-dependent comparison.

        Raises
        ------
        ValueError
            A column is not a field.
        TypeError
            A column's type cannot be compared with its field's type.
        """
        count = candidates.num_rows
        if not self.is_filtering:
            return _constant(True, count)
        columns = self._candidate_fields(candidates)
        if self.kind == "exact":
            return self._exact_mask(candidates, columns)
        targets = [_comparison_target(column, candidates.column(column).type, field) for column, field in columns]
        if len(self) == 0:
            return _constant(False, count)
        if self.kind == "bloom":
            return self._bloom_mask(candidates, columns, targets)
        return self._range_mask(candidates, columns, targets)

    def may_overlap(self, column: str, low: Any, high: Any, value_type: pa.DataType | None = None) -> bool:
        """Whether some filter row may have a ``column`` value within [``low``, ``high``].

        Meant for row-group skipping with Parquet statistics: false means no row
        whose ``column`` value lies in the interval can match the filter.

        Parameters
        ----------
        column : str
            A filter field (ignoring case).
        low, high : Any
            The interval, as ``pyarrow.Scalar`` or as Python values of
            ``value_type``. ``None`` (an unknown bound) gives true, as do
            string bounds compared as another type (their order is not the values').
        value_type : pyarrow.DataType, optional
            The type of Python bounds (the Parquet column's Arrow type); by
            default the field's type.

        Returns
        -------
        bool
            Exact data checks its keys, range data the overlap of the intervals,
            both in Spark's comparison type (a day of slack for time-zone-dependent
            comparisons); float keys holding NaN always overlap, statistics
            leaving NaN out. Bloom data of a single integral field probes each
            value of an integral interval of at most 1024 values; otherwise
            true (each probe is a false positive with probability ``fpp``, so the
            wider the interval, the less often a row group is skipped). Null-safe
            data whose rows may hold a null in ``column`` always
            overlaps, statistics leaving nulls out.

        Raises
        ------
        ValueError
            ``column`` is not a field.
        TypeError
            The bounds' type cannot be compared with the field's type.
        """
        if not self.is_filtering:
            return True
        name, field_type = self._field(column)
        bounds = _interval(low, high, value_type or types.arrow_type(field_type))
        source = types.type_name(bounds.type)
        target = _comparison_target(column, bounds.type, (name, field_type))
        if bounds.null_count or (source == "string" and target != "string"):
            return True  # unknown, or strings bounding their values in string order ('10' < '9')
        if len(self) == 0:
            return False
        if self.kind == "exact":
            return self._exact_overlaps(name, field_type, bounds, source, target)
        if self.null_safe:
            return True
        if self.kind == "bloom":
            return self._bloom_overlaps(field_type, bounds, source)
        return self._range_overlaps(name, field_type, bounds, source, target)

    def to_bytes(self) -> bytes:
        """The wire format: magic, version, header length, JSON header, body, SHA-256.

        The body is an Arrow IPC stream of the rows (exact) or of two rows, the
        lower and the upper bounds (range), or the Bloom filter's bit array,
        little-endian bit order, whose length follows from the ``capacity`` and
        ``fpp`` in the header (bloom).
        """
        header: dict[str, Any] = {
            "kind": self.kind,
            "fields": [list(field) for field in self._fields],
            "exceed_threshold": self.exceed_threshold,
            "null_safe": self.null_safe,
            "row_count": len(self),
        }
        if self._bloom is not None:
            body = _bloom_body(self._bloom)
            header["bloom"] = {"capacity": self._bloom.capacity, "fpp": self._bloom.error_rate}
        else:
            body = _ipc_bytes(self._table if self._bounds is None else self._bounds)
        header["body_length"] = len(body)
        raw = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        payload = _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw + body
        return payload + hashlib.sha256(payload).digest()

    @classmethod
    def from_bytes(cls, blob: bytes) -> DynamicFilteringData:
        """Load :meth:`to_bytes` output; any damage or foreign input raises ``ValueError``.

        Only JSON, Arrow IPC and a bit array are parsed: nothing in the blob is
        imported or run. Sizes are checked before anything is allocated for
        them: a Bloom filter's sizing against its body's length, an exact
        filter's row count against what its body can hold, and each Arrow record
        batch's row count against the header's before it is decoded (compressed
        Arrow bodies, which could inflate far beyond the blob, are refused).
        """
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise TypeError(f"A dynsource filter payload is bytes, not {type(blob).__name__}.")
        blob = bytes(blob)
        header_length = _check_prefix(blob)
        header = _parse_header(blob[_PREFIX.size : _PREFIX.size + header_length])
        body_start = _PREFIX.size + header_length
        _check_length(blob, body_start, header["body_length"])
        _check_digest(blob)
        body = blob[body_start : body_start + header["body_length"]]
        return cls._from_body(header, body)

    @classmethod
    def _from_body(cls, header: dict[str, Any], body: bytes) -> DynamicFilteringData:
        fields, count, null_safe = header["fields"], header["row_count"], header["null_safe"]
        if header["kind"] == "bloom":
            capacity, fpp = header["bloom"]["capacity"], header["bloom"]["fpp"]
            return cls.from_bloom(fields, bloom_from_bits(capacity, fpp, body), key_count=count, null_safe=null_safe)
        if header["kind"] == "range":
            table = _read_body(body, fields, 2, "range bounds are 2 rows")
            if table.num_rows != 2:
                raise ValueError(f"Filter payload body holds {table.num_rows} rows, but range bounds are 2 rows.")
            lower, upper = _row_tuples(table)
            return cls.from_bounds(fields, lower, upper, key_count=count, null_safe=null_safe)
        table = _read_body(body, fields, count, f"its header declares {count} rows")
        _check_rows(header, table)
        return cls.from_table(fields, table, exceed_threshold=header["exceed_threshold"], null_safe=null_safe)

    # --- exact ---------------------------------------------------------------------------------------

    def _rows(self) -> frozenset[tuple[Any, ...]]:
        # Python tuples compare by value: rows whose hashes collide stay apart.
        if self._row_set is None:
            self._row_set = frozenset(_row_tuples(self._table))
        return self._row_set

    def _matchable_rows(self) -> pa.Table:
        # With `=`, a row holding a null matches no full partition, so neither does any prefix of one.
        if self._matchable is None:
            self._matchable = self._table if self.null_safe else self._table.drop_null()
        return self._matchable

    def _exact_mask(self, candidates: pa.Table, columns: list[tuple[str, tuple[str, str]]]) -> pa.BooleanArray:
        count = candidates.num_rows
        keys = self._matchable_rows()
        if not columns:
            return _constant(keys.num_rows > 0, count)
        # A key string that partitions.to_arrow rejects may still be one Spark's CAST accepts (it
        # trims, and outside ANSI mode reads '1.0' as 1): such a column cannot prune.
        compared = [_compare(resolved, candidates, keys) for resolved in columns]
        compared = [side for side in compared if side.prunes]
        if not compared:
            return _constant(keys.num_rows > 0, count)
        failed = functools.reduce(pc.or_, [side.failed for side in compared])
        # A key with no value in the comparison type equals nothing (Spark's cast gives null).
        key_failed = functools.reduce(pc.or_, [side.keys_failed for side in compared])
        key_table = pa.table([side.keys for side in compared], names=[f"k{i}" for i in range(len(compared))])
        day_columns = [position for position, side in enumerate(compared) if side.by_day]
        key_table = _with_day_slack(key_table.filter(pc.invert(key_failed)), day_columns)
        matched = _members([side.values for side in compared], key_table, self.null_safe)
        return pc.or_(matched, failed)

    def _exact_overlaps(self, name: str, field_type: str, bounds: pa.Array, source: str, target: str) -> bool:
        keys = _plain(self._matchable_rows().column(name))
        if self.null_safe and keys.null_count:
            return True
        by_day = _depends_on_time_zone(source, field_type, target)
        key_values, keys_failed = _comparable(keys.drop_null(), field_type, target, by_day)
        if field_type == "string" and source != "string" and pc.any(keys_failed).as_py():
            return True  # Spark's CAST may read a key partitions.to_arrow rejects
        interval = _comparable_interval(bounds, source, target, by_day)
        if interval is None or _has_nan(key_values):
            return True
        low, high = _with_slack(interval, by_day)
        inside = pc.and_(pc.greater_equal(key_values, low), pc.less_equal(key_values, high))
        return bool(pc.any(inside).as_py())

    # --- bloom ---------------------------------------------------------------------------------------

    def _bloom_mask(
        self, candidates: pa.Table, columns: list[tuple[str, tuple[str, str]]], targets: list[str]
    ) -> pa.BooleanArray:
        count = candidates.num_rows
        if len(columns) < len(self._fields):
            return _constant(True, count)  # a key's encoding needs every field
        by_field = {field: (column, target) for (column, field), target in zip(columns, targets, strict=True)}
        converted, failed, nulls = [], [], []
        for field in self._fields:
            column, target = by_field[field]
            values = _plain(candidates.column(column))
            typed = _to_field_type(values, field[1], target)
            if typed is None:
                return _constant(True, count)
            converted.append(typed[0])
            failed.append(typed[1])
            nulls.append(pc.is_null(values))
        probed = pa.array(_probe(self._bloom, pa.Table.from_arrays(converted, schema=_schema(self._fields))))
        if not self.null_safe:
            probed = pc.and_(probed, pc.invert(functools.reduce(pc.or_, nulls)))
        return pc.or_(probed, functools.reduce(pc.or_, failed))

    def _bloom_overlaps(self, field_type: str, bounds: pa.Array, source: str) -> bool:
        if len(self._fields) > 1 or field_type not in _INTEGRAL or source not in _INTEGRAL:
            return True
        limits = np.iinfo(types.arrow_type(field_type).to_pandas_dtype())
        low, high = max(bounds[0].as_py(), int(limits.min)), min(bounds[1].as_py(), int(limits.max))
        if high - low >= _MAX_OVERLAP_PROBES:
            return True
        values = pa.array(range(low, high + 1), types.arrow_type(field_type))  # empty when no key fits
        return bool(_probe(self._bloom, pa.Table.from_arrays([values], schema=_schema(self._fields))).any())

    # --- range ---------------------------------------------------------------------------------------

    def _range_mask(
        self, candidates: pa.Table, columns: list[tuple[str, tuple[str, str]]], targets: list[str]
    ) -> pa.BooleanArray:
        keep = _constant(True, candidates.num_rows)
        for (column, (name, field_type)), target in zip(columns, targets, strict=True):
            values = _plain(candidates.column(column))
            source = types.type_name(values.type)
            interval = self._key_interval(name, field_type, source, target)
            if interval is None:
                continue
            by_day = _depends_on_time_zone(source, field_type, target)
            converted, failed = _comparable(values, source, target, by_day)
            inside = _within(converted, interval) if interval else _constant(False, len(values))
            column_keep = pc.or_(pc.fill_null(inside, False), failed)
            if self.null_safe:
                column_keep = pc.or_(column_keep, pc.is_null(values))
            keep = pc.and_(keep, column_keep)
        return keep

    def _range_overlaps(self, name: str, field_type: str, bounds: pa.Array, source: str, target: str) -> bool:
        keys = self._key_interval(name, field_type, source, target)
        interval = _comparable_interval(bounds, source, target, _depends_on_time_zone(source, field_type, target))
        if keys is None or interval is None:
            return True
        if not keys:
            return False
        low, high = interval
        return bool(pc.less_equal(keys[0], high).as_py() and pc.less_equal(low, keys[1]).as_py())

    def _key_interval(
        self, name: str, field_type: str, source: str, target: str
    ) -> tuple[pa.Scalar, pa.Scalar] | tuple[()] | None:
        """The field's bounds in the comparison type, with a day of slack when compared by day.

        ``()`` when the field holds no non-null value; ``None`` when the bounds cannot prune.
        """
        if field_type == "string" and source != "string":
            return None  # Spark casts the keys: their string order is not their order as values
        by_day = _depends_on_time_zone(source, field_type, target)
        bounds = _plain(self._bounds.column(name))
        if bounds.null_count:
            return ()
        interval = _comparable_interval(bounds, field_type, target, by_day)
        return None if interval is None else _with_slack(interval, by_day)

    # --- shared --------------------------------------------------------------------------------------

    def _payload_identity(self) -> Any:
        if self._bloom is not None:
            return self._bloom.capacity, self._bloom.error_rate, _bloom_body(self._bloom)
        if self._bounds is not None:
            return _row_tuples(self._bounds)
        return self._rows()

    def _field(self, column: str) -> tuple[str, str]:
        for field in self._fields:
            if field[0].lower() == column.lower():
                return field
        raise ValueError(f"Column '{column}' is not a filter field; the fields are {list(self.field_names)}.")

    def _candidate_fields(self, candidates: pa.Table) -> list[tuple[str, tuple[str, str]]]:
        resolved, seen = [], set()
        for column in candidates.column_names:
            field = self._field(column)
            if field[0] in seen:
                raise ValueError(f"Column '{column}' names filter field '{field[0]}' twice.")
            seen.add(field[0])
            resolved.append((column, field))
        return resolved


# --- Bloom keys ------------------------------------------------------------------------------------


def bloom_key(fields: Sequence[tuple[str, str]], table: pa.Table) -> list[str]:
    """The canonical Bloom-filter key of each row of ``table``, as Bloom data probes it.

    Columns are matched to the fields by name (ignoring case) and cast safely
    to their types, so a Spark Arrow batch (any time zone, large strings) and a
    partition value converted to the field type give the same key. Each value
    becomes its length and its text (integers and floats in decimal, dates and
    timestamps as day and microsecond numbers, -0.0 as 0.0, one NaN), a null
    becomes ``-``; the key is their concatenation, as a string of code points 0-255.
    """
    return _key_strings(_encode(_normalize_floats(_cast_table(_check_fields(fields), table))))


def add_to_bloom(bloom: BloomFilter, fields: Sequence[tuple[str, str]], table: pa.Table) -> None:
    """Add the :func:`bloom_key` of each row of ``table`` to ``bloom`` (it may be a partial filter, see ``union``)."""
    for key in bloom_key(fields, table):
        # skip_check: a membership test first would only cost a second hashing.
        bloom.add(key, skip_check=True)


def bloom_size_bytes(capacity: int, fpp: float) -> int:
    """Bytes of the bit array of a pybloom-live ``BloomFilter(capacity, fpp)``, without allocating it.

    Raises ``ValueError`` for a capacity outside [1, ``MAX_BLOOM_CAPACITY``] or an fpp outside (0, 1).
    """
    num_slices, bits_per_slice = _bloom_geometry(capacity, fpp)
    return _bits_bytes(num_slices * bits_per_slice)


def bloom_from_bits(capacity: int, fpp: float, bits: bytes) -> BloomFilter:
    """A ``BloomFilter(capacity, fpp)`` holding ``bits`` (little-endian bit order, zero padding).

    ``bits`` must be exactly :func:`bloom_size_bytes` long, which is checked
    before the filter is allocated; it may be the OR of partial filters' bits.
    """
    expected = bloom_size_bytes(capacity, fpp)
    if len(bits) != expected:
        raise ValueError(
            f"A Bloom filter of capacity {capacity} and fpp {fpp} has {expected} bytes of bits, got {len(bits)}."
        )
    bloom = BloomFilter(capacity, fpp)
    array = bitarray.bitarray(endian="little")
    array.frombytes(bytes(bits))
    if array[bloom.num_bits :].any():
        raise ValueError("Bloom filter bits have padding bits set past its last bit.")
    del array[bloom.num_bits :]
    bloom.bitarray = array  # as pybloom's own copy() and union() do
    return bloom


def _bloom_geometry(capacity: int, fpp: float) -> tuple[int, int]:
    """pybloom-live's ``(num_slices, bits_per_slice)``, computed by its own formulas."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity <= MAX_BLOOM_CAPACITY:
        raise ValueError(f"A Bloom filter capacity is an integer in [1, {MAX_BLOOM_CAPACITY}], not {capacity!r}.")
    _check_fpp(fpp)
    num_slices = math.ceil(math.log(1.0 / fpp, 2))
    bits_per_slice = math.ceil((capacity * abs(math.log(fpp))) / (num_slices * (math.log(2) ** 2)))
    return num_slices, bits_per_slice


def _check_fpp(fpp: float) -> float:
    if isinstance(fpp, bool) or not isinstance(fpp, (int, float)) or not 0 < fpp < 1:
        raise ValueError(f"A Bloom filter false-positive rate (fpp) is a number in (0, 1), not {fpp!r}.")
    return float(fpp)


def _check_bloom(bloom: BloomFilter, key_count: int) -> None:
    if type(bloom) is not BloomFilter:
        raise TypeError(f"Bloom data needs a pybloom_live.BloomFilter, not {type(bloom).__name__}.")
    if not bloom.num_bits == math.prod(_bloom_geometry(bloom.capacity, bloom.error_rate)) == len(bloom.bitarray):
        raise ValueError("The Bloom filter's bit array does not match its capacity and fpp.")
    if key_count == 0 and bloom.bitarray.any():
        raise ValueError("A Bloom filter of no keys must have no bit set.")


def _check_count(key_count: int) -> int:
    if isinstance(key_count, bool) or not isinstance(key_count, int) or key_count < 0:
        raise ValueError(f"key_count is a non-negative integer, not {key_count!r}.")
    return key_count


def _bits_bytes(num_bits: int) -> int:
    return (num_bits + 7) // 8


def _bloom_body(bloom: BloomFilter) -> bytes:
    # pybloom makes little-endian arrays; the copy pins the byte order whatever the array's.
    return bitarray.bitarray(bloom.bitarray, endian="little").tobytes()


def _encode(table: pa.Table) -> pa.Array:
    """Binary keys: per value its byte length, ':' and its text, or '-' for null; self-delimiting, so unique."""
    parts = [_encode_column(_plain(column)) for column in table.columns]
    return pc.binary_join_element_wise(*parts, b"")


def _encode_column(values: pa.Array) -> pa.Array:
    if pa.types.is_binary(values.type):
        text = values
    elif pa.types.is_string(values.type):
        text = values.cast(pa.binary())
    else:
        if pa.types.is_date32(values.type) or pa.types.is_timestamp(values.type):
            # Epoch numbers: a timestamp's text would depend on its zone and unit.
            values = pc.cast(values, pa.int32() if pa.types.is_date32(values.type) else pa.int64())
        text = pc.cast(pc.cast(values, pa.string()), pa.binary())
    length = pc.cast(pc.cast(pc.binary_length(text), pa.string()), pa.binary())
    return pc.fill_null(pc.binary_join_element_wise(length, text, b":"), b"-")


def _key_strings(keys: pa.Array) -> list[str]:
    # Latin-1 maps each byte to one code point: pybloom hashes the string's UTF-8, still one-to-one.
    return [key.decode("latin-1") for key in keys.to_pylist()]


def _probe(bloom: BloomFilter, table: pa.Table) -> np.ndarray:
    """Whether the Bloom filter may hold each row of ``table`` (field-typed), probing each distinct row once."""
    encoded = pc.dictionary_encode(_encode(table))
    hits = np.array([key in bloom for key in _key_strings(encoded.dictionary)], dtype=bool)
    return hits[encoded.indices.to_numpy(zero_copy_only=False)]


def _to_field_type(values: pa.Array, field_type: str, target: str) -> tuple[pa.Array, pa.Array] | None:
    """Candidates as field values, with where one has none (kept); ``None`` when a Bloom filter cannot judge."""
    source = types.type_name(values.type)
    if source == field_type:
        return _comparable(values, source, source, False)
    lossy = target == "double" and (field_type == "bigint" or field_type.startswith("decimal"))
    # A string field's keys are cast to the candidate's type by Spark, a bigint or decimal meets a double as
    # a double, a timestamp meets a date in the session's zone: many keys may equal one candidate.
    if field_type == "string" or lossy or _depends_on_time_zone(source, field_type, target):
        return None
    try:
        converted, failed = _comparable(values, source, target, False)
        if target == field_type:
            return converted, failed
        # Only the comparison-type values that some field value maps to can equal a key.
        narrowed = pc.cast(converted, types.arrow_type(field_type), safe=False)
        exact = pc.fill_null(pc.equal(pc.cast(narrowed, converted.type), converted), False)
    except _CONVERSION_ERRORS:
        return None
    failed = pc.or_(failed, pc.and_(pc.is_valid(converted), pc.invert(exact)))
    return pc.if_else(exact, narrowed, pa.scalar(None, narrowed.type)), failed


# --- range bounds ----------------------------------------------------------------------------------


def _column_bounds(column: pa.ChunkedArray) -> tuple[Any, Any]:
    """Spark's ``min`` and ``max`` of a column: nulls ignored, NaN the greatest float."""
    values = column.drop_null()
    has_nan = pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py()
    if has_nan:
        values = values.filter(pc.invert(pc.is_nan(values)))
    extremes = pc.min_max(values)
    lower, upper = extremes["min"].as_py(), extremes["max"].as_py()
    if has_nan:
        return (_NAN if lower is None else lower), _NAN
    return lower, upper


def _check_bounds(bounds: pa.Table, key_count: int, null_safe: bool) -> None:
    lower, upper = _row_tuples(bounds)
    for name, low, high in zip(bounds.column_names, lower, upper, strict=True):
        if (low is None) != (high is None):
            raise ValueError(f"Range bounds of field '{name}' must both be set or both be null, got {low!r}, {high!r}.")
        if low is not None and key_count == 0:
            raise ValueError(f"Range data of no keys has no bounds, but field '{name}' has [{low!r}, {high!r}].")
        if low is None and key_count and not null_safe:
            raise ValueError(f"Range bounds of field '{name}' are null, but {key_count} keys without nulls have some.")
        if low is not None and _order_key(low) > _order_key(high):
            raise ValueError(f"Range bounds of field '{name}' are reversed: {low!r} > {high!r}.")


def _order_key(value: Any) -> tuple[bool, Any]:
    # Spark orders NaN above every float.
    nan = isinstance(value, float) and math.isnan(value)
    return nan, (0.0 if nan else value)


def _interval(low: Any, high: Any, value_type: pa.DataType) -> pa.Array:
    """``[low, high]`` as a two-value array (a scalar's own type wins); null for an unknown bound."""
    scalars = [bound for bound in (low, high) if isinstance(bound, pa.Scalar)]
    arrow = scalars[0].type if scalars else value_type
    values = [bound.as_py() if isinstance(bound, pa.Scalar) else bound for bound in (low, high)]
    return pa.array(values, arrow)


def _comparable_interval(
    bounds: pa.Array, source: str, target: str, by_day: bool
) -> tuple[pa.Scalar, pa.Scalar] | None:
    """Two non-null bounds in the comparison type (day numbers when compared by day); None if not there."""
    converted, failed = _comparable(bounds, source, target, by_day)
    if pc.any(failed).as_py() or _has_nan(converted):
        return None
    return converted[0], converted[1]


def _with_slack(interval: tuple[pa.Scalar, pa.Scalar], by_day: bool) -> tuple[pa.Scalar, pa.Scalar]:
    # As in _with_day_slack: a day number stands for its neighbours too.
    low, high = interval
    return (pc.subtract(low, 1), pc.add(high, 1)) if by_day else interval


def _within(values: pa.Array, interval: tuple[pa.Scalar, pa.Scalar]) -> pa.BooleanArray:
    low, high = interval
    return pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))


def _has_nan(values: pa.Array) -> bool:
    return pa.types.is_floating(values.type) and bool(pc.any(pc.is_nan(values)).as_py())


# --- fields and rows -------------------------------------------------------------------------------


def _check_fields(fields: Sequence[tuple[str, str]]) -> _Fields:
    checked, seen = [], set()
    for field in fields:
        if not isinstance(field, (tuple, list)) or len(field) != 2:
            raise ValueError(f"A filter field is a (name, type) pair, not {field!r}.")
        name, type_name = field
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"A filter field name must be a non-empty string, not {name!r}.")
        if not isinstance(type_name, str):
            raise ValueError(f"Filter field '{name}' needs a Spark SQL type name, not {type_name!r}.")
        if name.lower() in seen:
            raise ValueError(f"Filter field '{name}' is declared twice (names are case-insensitive).")
        seen.add(name.lower())
        checked.append((name, types.normalize_type(type_name)))
    if not checked:
        raise ValueError("A filter needs at least one field.")
    return tuple(checked)


def _schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, types.arrow_type(type_name)) for name, type_name in fields])


def _empty_table(fields: Sequence[tuple[str, str]]) -> pa.Table:
    return _schema(fields).empty_table()


def _row_values(row: Sequence[Any], fields: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    values = tuple(row) if isinstance(row, (tuple, list)) else (row,)
    if len(values) != len(fields):
        raise ValueError(
            f"row has {len(values)} values but the filter has {len(fields)} field(s): "
            f"{[name for name, _ in fields]}"
        )
    return values


def _table_from_rows(fields: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]]) -> pa.Table:
    values = [_row_values(row, fields) for row in rows]
    arrays = [
        _column(name, type_name, [row[i] for row in values]) for i, (name, type_name) in enumerate(fields)
    ]
    return pa.Table.from_arrays(arrays, schema=_schema(fields))


def _column(name: str, type_name: str, values: list[Any]) -> pa.Array:
    arrow = types.arrow_type(type_name)
    try:
        array = pa.array(values, type=arrow)
    except _CONVERSION_ERRORS as error:
        culprit = next((value for value in values if not _storable(value, arrow)), values)
        raise _unstorable(name, type_name, culprit, error) from error
    if type_name in _INTEGRAL:
        # pyarrow truncates floats into integer columns; 1.5 is not a key of an int field.
        for value, stored in zip(values, array.to_pylist(), strict=True):
            if value != stored:
                raise _unstorable(name, type_name, value, "it is not an integer")
    return array


def _storable(value: Any, arrow: pa.DataType) -> bool:
    try:
        pa.scalar(value, type=arrow)
    except _CONVERSION_ERRORS:
        return False
    return True


def _unstorable(name: str, type_name: str, value: Any, reason: object) -> ValueError:
    return ValueError(f"Filter field '{name}' of type {type_name} cannot hold the value {value!r}: {reason}")


def _cast_table(fields: Sequence[tuple[str, str]], table: pa.Table) -> pa.Table:
    by_name: dict[str, list[str]] = {}
    for column in table.column_names:
        by_name.setdefault(column.lower(), []).append(column)
    arrays = []
    for name, type_name in fields:
        matches = by_name.get(name.lower(), [])
        if len(matches) != 1:
            problem = "is missing from" if not matches else f"matches several columns {matches} of"
            raise ValueError(f"Filter field '{name}' {problem} the table with columns {table.column_names}.")
        column = table.column(matches[0])
        try:
            arrays.append(column.cast(types.arrow_type(type_name), safe=True))
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise ValueError(
                f"Column '{matches[0]}' of type {column.type} cannot be cast to filter field '{name}' "
                f"of type {type_name}: {error}"
            ) from error
    return pa.Table.from_arrays(arrays, schema=_schema(fields))


def _normalize_floats(table: pa.Table) -> pa.Table:
    # Spark's joins treat -0.0 as 0.0 and all NaNs as one value; so do dedup, equality and matching.
    for index, field in enumerate(table.schema):
        if pa.types.is_floating(field.type):
            table = table.set_column(index, field, _normalize_float(table.column(index)))
    return table


def _normalize_float(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    zero_fixed = pc.if_else(pc.equal(values, 0), pa.scalar(0.0, values.type), values)
    return pc.if_else(pc.is_nan(values), pa.scalar(math.nan, values.type), zero_fixed)


def _distinct(table: pa.Table) -> pa.Table:
    # use_threads=False keeps first-seen order, so the same rows always give the same bytes.
    return table.group_by(table.column_names, use_threads=False).aggregate([])


def _canonical(value: Any) -> Any:
    return _NAN if isinstance(value, float) and math.isnan(value) else value


def _row_tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [[_canonical(value) for value in column.to_pylist()] for column in table.columns]
    return list(zip(*columns, strict=True))


# --- matching --------------------------------------------------------------------------------------


def _constant(value: bool, count: int) -> pa.BooleanArray:
    return pa.repeat(pa.scalar(value, pa.bool_()), count)


def _plain(values: pa.ChunkedArray) -> pa.Array:
    array = values.combine_chunks()
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


class _Compared(NamedTuple):
    """One candidate column and its field's keys, both in the comparison domain."""

    values: pa.Array
    failed: pa.BooleanArray  # candidate values that could not be converted: always kept
    keys: pa.Array
    keys_failed: pa.BooleanArray  # keys that could not be converted: they match nothing
    by_day: bool  # compared as day numbers, see _depends_on_time_zone
    prunes: bool  # false when a key string failed to parse: Spark's CAST might still read it


def _comparison_target(column: str, arrow: pa.DataType, field: tuple[str, str]) -> str:
    """The Spark SQL type a ``column`` of Arrow type ``arrow`` and ``field`` are compared in."""
    name, field_type = field
    source = types.type_name(arrow.value_type if pa.types.is_dictionary(arrow) else arrow)
    target = types.comparison_type(source, field_type)
    if target is None:
        raise TypeError(
            f"Column '{column}' of type {source} cannot be compared with filter field '{name}' "
            f"of type {field_type}."
        )
    return target


def _compare(resolved: tuple[str, tuple[str, str]], candidates: pa.Table, keys: pa.Table) -> _Compared:
    column, (name, field_type) = resolved
    values = _plain(candidates.column(column))
    source = types.type_name(values.type)
    target = _comparison_target(column, values.type, (name, field_type))
    by_day = _depends_on_time_zone(source, field_type, target)
    converted, failed = _comparable(values, source, target, by_day)
    key_values, keys_failed = _comparable(_plain(keys.column(name)), field_type, target, by_day)
    prunes = field_type == source or field_type != "string" or not pc.any(keys_failed).as_py()
    return _Compared(converted, failed, key_values, keys_failed, by_day, prunes)


def _depends_on_time_zone(source: str, field_type: str, target: str) -> bool:
    # Spark turns a date or a local time into an instant with the session time zone, which a
    # filter does not know: such comparisons are made on days, allowing for any offset.
    return target == "timestamp" and source != field_type


def _comparable(values: pa.Array, source: str, target: str, by_day: bool) -> tuple[pa.Array, pa.Array]:
    """``values`` in the comparison domain, and where a non-null value has no image there."""
    # Same Spark type, maybe another Arrow layout (a zone other than UTC, nanoseconds, large_string).
    values = values.cast(types.arrow_type(source), safe=False)
    if by_day:
        converted = _days(values, source)
    elif source == target:
        converted = values
    elif source == "string":
        converted = _parse(values, target)
    elif target in ("float", "double"):
        converted = _to_floating(values, source, target)
    else:
        converted = pc.cast(_representable(values, source, target), types.arrow_type(target))
    if pa.types.is_floating(converted.type):
        converted = _normalize_float(converted)
    return converted, pc.and_(pc.is_valid(values), pc.is_null(converted))


def _to_floating(values: pa.Array, source: str, target: str) -> pa.Array:
    """Spark's cast to double (which rounds, as does this one) of integral or decimal values."""
    if source.startswith("decimal"):
        # Arrow scales the unscaled integer by a power of ten in floating point (19.99 becomes
        # 19.990000000000002); Spark's conversion, like Arrow's parsing of the decimal text, is correctly rounded.
        values = pc.cast(values, pa.string())
    return pc.cast(values, types.arrow_type(target), safe=False)


def _parse(values: pa.Array, target: str) -> pa.Array:
    """Strings cast with Spark's semantics; a string Spark cannot cast becomes null."""
    present = pc.is_valid(values)
    # UTC: a string without an offset then keeps its wall-clock day, within a day of any session's instant.
    parsed = partitions.to_arrow(values.drop_null().to_pylist(), target, time_zone="UTC", strict=False)
    parsed = parsed.cast(types.arrow_type(target))
    if values.null_count == 0:
        return parsed
    return pc.replace_with_mask(pa.nulls(len(values), parsed.type), present, parsed)


def _representable(values: pa.Array, source: str, target: str) -> pa.Array:
    """``values`` with null where the (safe) cast to ``target`` would overflow."""
    if target == "timestamp_ntz" and source == "date":
        days = pc.cast(values, pa.int32())
        fits = pc.and_(pc.greater_equal(days, -_TIMESTAMP_DAYS), pc.less_equal(days, _TIMESTAMP_DAYS))
        return pc.if_else(fits, values, pa.scalar(None, values.type))
    if not target.startswith("decimal"):
        return values  # integral widening and same-kind casts are exact
    scale = values.type.scale if pa.types.is_decimal(values.type) else 0
    wide = pc.cast(values, pa.decimal128(38, scale))
    integer_digits = types.arrow_type(target).precision - types.arrow_type(target).scale
    if integer_digits >= 38 - scale:
        return wide
    bound = pa.scalar(Decimal(10) ** integer_digits, pa.decimal128(38, scale))
    fits = pc.and_(pc.less(wide, bound), pc.greater(wide, pc.negate(bound)))
    return pc.if_else(fits, wide, pa.scalar(None, wide.type))


def _days(values: pa.Array, source: str) -> pa.Array:
    """Day numbers (UTC days for instants, local days for dates and local times)."""
    if source == "string":
        values = _parse(values, "timestamp")
    return pc.cast(pc.cast(pc.cast(values, pa.date32()), pa.int32()), pa.int64())


def _with_day_slack(keys: pa.Table, day_columns: list[int]) -> pa.Table:
    # A time-zone offset is under a day, so an instant and a local time Spark finds equal are at
    # most one day apart: each key day also stands for its neighbours.
    for position in day_columns:
        days = keys.column(position)
        keys = pa.concat_tables(
            [keys.set_column(position, keys.field(position), pc.add(days, shift)) for shift in (-1, 0, 1)]
        )
    return keys


def _members(columns: list[pa.Array], keys: pa.Table, null_safe: bool) -> pa.BooleanArray:
    """Whether each candidate row (``columns``) equals some row of ``keys``, vectorized."""
    skip_nulls = not null_safe
    if len(columns) == 1:
        return pc.is_in(columns[0], value_set=_plain(keys.column(0)), skip_nulls=skip_nulls)
    # pc.is_in has no kernel for structs, and a hash join never matches null keys: join on
    # per-column codes instead, where a null that matches is an ordinary code.
    names = [f"k{i}" for i in range(len(columns))]
    candidate_codes, key_codes = [], []
    for values, key in zip(columns, keys.columns, strict=True):
        value_set = pc.unique(_plain(key))
        candidate_codes.append(pc.index_in(values, value_set=value_set, skip_nulls=skip_nulls))
        key_codes.append(pc.index_in(_plain(key), value_set=value_set, skip_nulls=skip_nulls))
    count = len(columns[0])
    left = pa.table([*candidate_codes, pa.array(np.arange(count, dtype=np.int64))], names=[*names, "row"])
    matched = left.drop_null().join(pa.table(key_codes, names=names), keys=names, join_type="left semi")
    mask = np.zeros(count, dtype=bool)
    mask[matched.column("row").to_numpy()] = True
    return pa.array(mask)


# --- wire format -----------------------------------------------------------------------------------


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _check_prefix(blob: bytes) -> int:
    minimum = _PREFIX.size + _DIGEST_BYTES
    if blob[: len(MAGIC)] != MAGIC[: len(blob)]:  # foreign data, however short, is not a truncated payload
        raise ValueError(f"Data is not a dynsource filter payload (it starts with {blob[: len(MAGIC)]!r}).")
    if len(blob) < minimum:
        raise ValueError(f"Filter payload is truncated: expected at least {minimum} bytes, got {len(blob)}.")
    _, version, header_length = _PREFIX.unpack_from(blob)
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"Filter payload version {version} is not supported; "
            f"supported versions: {list(SUPPORTED_VERSIONS)}."
        )
    if header_length > MAX_HEADER_BYTES:
        raise ValueError(
            f"Filter payload header length {header_length} exceeds the limit of {MAX_HEADER_BYTES} bytes."
        )
    if len(blob) < minimum + header_length:
        raise ValueError(
            f"Filter payload is truncated: expected at least {minimum + header_length} bytes "
            f"for a {header_length}-byte header, got {len(blob)}."
        )
    return header_length


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise ValueError(f"Filter payload header is not valid UTF-8 JSON: {error}") from error
    kind = header.get("kind") if isinstance(header, dict) else None
    if isinstance(kind, str) and kind not in KINDS:
        raise ValueError(f"Filter payload kind '{kind}' is not supported; supported kinds: {list(KINDS)}.")
    expected_keys = {**_HEADER_KEYS, **(_KIND_HEADER_KEYS.get(kind, {}) if isinstance(kind, str) else {})}
    if not isinstance(header, dict) or set(header) != set(expected_keys):
        keys = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise ValueError(
            f"Filter payload header must have exactly the keys {sorted(expected_keys)}, got {keys}."
        )
    for key, (expected, description) in expected_keys.items():
        value = header[key]
        # bool is an int in Python; a count must not be true or false.
        if not isinstance(value, expected) or (expected is int and (isinstance(value, bool) or value < 0)):
            raise ValueError(f"Filter payload header key '{key}' must be {description}, got {value!r}.")
    if header["exceed_threshold"] and header["kind"] != "exact":
        raise ValueError(f"Filter payload of kind '{header['kind']}' cannot be marked exceeded.")
    if header["kind"] == "exact" and header["row_count"] > 8 * header["body_length"]:
        # Every row takes at least one bit of an uncompressed Arrow body.
        raise ValueError(
            f"Filter payload header declares {header['row_count']} rows, more than its "
            f"{header['body_length']}-byte body can hold (at most {8 * header['body_length']})."
        )
    try:
        header["fields"] = _check_fields(header["fields"])
    except ValueError as error:
        raise ValueError(f"Filter payload header declares invalid fields: {error}") from error
    if header["kind"] == "bloom":
        _check_bloom_header(header["bloom"], header["body_length"])
    return header


def _check_bloom_header(bloom: dict[str, Any], body_length: int) -> None:
    """The Bloom sizing must be sane and give the body's length: then allocating it costs no more than the blob."""
    if set(bloom) != {"capacity", "fpp"}:
        raise ValueError(
            f"Filter payload header key 'bloom' must have exactly the keys capacity and fpp, got {sorted(bloom)}."
        )
    if not isinstance(bloom["fpp"], float):
        raise ValueError(f"Filter payload Bloom fpp must be a number in (0, 1), got {bloom['fpp']!r}.")
    try:
        expected = bloom_size_bytes(bloom["capacity"], bloom["fpp"])
    except ValueError as error:
        raise ValueError(f"Filter payload header declares an invalid Bloom filter: {error}") from error
    if expected != body_length:
        raise ValueError(
            f"Filter payload declares a Bloom filter of capacity {bloom['capacity']} and fpp {bloom['fpp']}, "
            f"which has {expected} bytes of bits, but a {body_length}-byte body."
        )


def _check_length(blob: bytes, body_start: int, body_length: int) -> None:
    expected = body_start + body_length + _DIGEST_BYTES
    if len(blob) < expected:
        raise ValueError(
            f"Filter payload is truncated: its header declares a {body_length}-byte body, "
            f"so expected {expected} bytes, got {len(blob)}."
        )
    if len(blob) > expected:
        raise ValueError(
            f"Filter payload has {len(blob) - expected} unexpected trailing bytes: its header declares a "
            f"{body_length}-byte body, so expected {expected} bytes, got {len(blob)}."
        )


def _check_digest(blob: bytes) -> None:
    payload, digest = blob[:-_DIGEST_BYTES], blob[-_DIGEST_BYTES:]
    if not hmac.compare_digest(hashlib.sha256(payload).digest(), digest):
        raise ValueError("Filter payload checksum mismatch: the payload is corrupted or was modified.")


def _read_body(body: bytes, fields: Sequence[tuple[str, str]], max_rows: int, limit: str) -> pa.Table:
    """The body's rows, read message by message: each batch's size is checked (``max_rows``) before it is decoded."""
    expected = _schema(fields)
    try:
        messages = pa.ipc.MessageReader.open_stream(pa.py_buffer(body))
        schema = pa.ipc.read_schema(messages.read_next_message())
        _check_body_schema(schema, expected)
        batches, rows = [], 0
        for message in messages:
            if message.type != "record batch":
                raise ValueError(f"Filter payload body holds a '{message.type}' message; a filter writes none.")
            length, compressed = _batch_shape(message.metadata.to_pybytes())
            if compressed:
                raise ValueError("Filter payload body is compressed; a filter writes uncompressed Arrow data.")
            rows += length
            if rows > max_rows:
                raise ValueError(f"Filter payload body holds {rows} rows, but {limit}.")
            batches.append(pa.ipc.read_record_batch(message, schema))
        table = pa.Table.from_batches(batches, schema)
        # Full validation: offsets pointing outside the buffers would otherwise crash later kernels.
        table.validate(full=True)
    except (pa.ArrowException, OSError, StopIteration) as error:
        raise ValueError(f"Filter payload body is not a readable Arrow IPC stream: {error!r}") from error
    return table


def _check_body_schema(schema: pa.Schema, expected: pa.Schema) -> None:
    if schema.equals(expected) and not schema.equals(expected, check_metadata=True):
        # Extension types travel as field metadata; a filter never writes any.
        raise ValueError("Filter payload body schema carries metadata (such as an extension type).")
    if not schema.equals(expected):
        raise ValueError(
            f"Filter payload body schema ({_describe(schema)}) does not match the declared fields "
            f"({_describe(expected)})."
        )


def _batch_shape(metadata: bytes) -> tuple[int, bool]:
    """Row count of an Arrow IPC record batch message, and whether its body is compressed, from its flatbuffer.

    pyarrow decodes (and decompresses) a batch before telling its length, so the
    few fields needed are read here: Message.header (field 2) is the RecordBatch
    table, whose field 0 is ``length`` and field 3 ``compression``.
    """
    root = _flatbuffer_int(metadata, "<I", 0)
    header = _flatbuffer_field(metadata, root, 2)
    if header is None:
        raise ValueError("Filter payload body has a record batch message without a header.")
    batch = header + _flatbuffer_int(metadata, "<I", header)
    length = _flatbuffer_field(metadata, batch, 0)
    rows = 0 if length is None else _flatbuffer_int(metadata, "<q", length)
    if rows < 0:
        raise ValueError(f"Filter payload body has a record batch of {rows} rows.")
    return rows, _flatbuffer_field(metadata, batch, 3) is not None


def _flatbuffer_field(buffer: bytes, table: int, index: int) -> int | None:
    """Where field ``index`` of the flatbuffer table at ``table`` lies, or None when the field is absent."""
    vtable = table - _flatbuffer_int(buffer, "<i", table)
    slot = 4 + 2 * index
    if slot + 2 > _flatbuffer_int(buffer, "<H", vtable):
        return None
    offset = _flatbuffer_int(buffer, "<H", vtable + slot)
    return table + offset if offset else None


def _flatbuffer_int(buffer: bytes, layout: str, position: int) -> int:
    size = struct.calcsize(layout)
    if not 0 <= position <= len(buffer) - size:
        raise ValueError("Filter payload body has a malformed Arrow message header (an offset out of bounds).")
    return struct.unpack_from(layout, buffer, position)[0]


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def _check_rows(header: dict[str, Any], table: pa.Table) -> None:
    if header["row_count"] != table.num_rows:
        raise ValueError(
            f"Filter payload header declares {header['row_count']} rows but the body holds {table.num_rows}."
        )
    if header["exceed_threshold"] and table.num_rows:
        raise ValueError(f"Filter payload is marked exceeded but carries {table.num_rows} rows.")
