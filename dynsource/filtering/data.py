"""The payload class: :class:`DynamicFilteringData`, its kinds, flags, matching and wire round trip."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from pybloom_live import BloomFilter

from dynsource import types
from dynsource.filtering import bloomkeys, bounds, compare, exact, keyrows, wire


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
        checked = keyrows.check_fields(fields)
        self._start(checked, "exact", exceed_threshold, null_safe)
        self._set_rows(keyrows.empty_table(checked) if exceed_threshold else keyrows.table_from_rows(checked, rows))

    @classmethod
    def from_table(
        cls,
        fields: Sequence[tuple[str, str]],
        table: pa.Table,
        *,
        kind: str = "exact",
        fpp: float = bloomkeys.DEFAULT_FPP,
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
        checked = keyrows.check_fields(fields)
        if kind not in keyrows.KINDS:
            raise ValueError(f"Filter kind '{kind}' is not supported; supported kinds: {list(keyrows.KINDS)}.")
        if exceed_threshold:
            return cls(checked, exceed_threshold=True, null_safe=null_safe)
        typed = keyrows.cast_table(checked, table)
        if kind == "exact":
            data = cls._blank(checked, "exact", null_safe)
            data._set_rows(typed)
            return data
        keys = keyrows.distinct(keyrows.normalize_floats(typed if null_safe else typed.drop_null()))
        if kind == "bloom":
            bloom = BloomFilter(max(keys.num_rows, 1), bloomkeys.check_fpp(fpp))
            bloomkeys.add_to_bloom(bloom, checked, keys)
            return cls.from_bloom(checked, bloom, key_count=keys.num_rows, null_safe=null_safe)
        lower, upper = zip(*(keyrows.column_bounds(column) for column in keys.columns), strict=True)
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
        checked = keyrows.check_fields(fields)
        bloomkeys.check_bloom(bloom_filter, keyrows.check_count(key_count))
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
        checked = keyrows.check_fields(fields)
        limits = keyrows.normalize_floats(keyrows.table_from_rows(checked, [lower, upper]))
        keyrows.check_bounds(limits, keyrows.check_count(key_count), null_safe)
        data = cls._blank(checked, "range", null_safe)
        data._bounds = limits
        data._key_count = key_count
        return data

    @classmethod
    def _blank(cls, fields: keyrows.Fields, kind: str, null_safe: bool) -> DynamicFilteringData:
        data = cls.__new__(cls)
        data._start(fields, kind, False, null_safe)
        return data

    def _start(self, fields: keyrows.Fields, kind: str, exceed: bool, null_safe: bool) -> None:
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
        self._table = keyrows.distinct(keyrows.normalize_floats(table))
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
        lower, upper = keyrows.row_tuples(self._bounds)
        return lower, upper

    @property
    def size_bytes(self) -> int:
        if self._bloom is not None:
            return bloomkeys.bits_bytes(self._bloom.num_bits)
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
        values = keyrows.row_values(row, self._fields)
        if not self.is_filtering:
            return True
        typed = [
            keyrows.column(name, type_name, [value])
            for (name, type_name), value in zip(self._fields, values, strict=True)
        ]
        if self.kind != "exact":
            return self.matching_mask(pa.Table.from_arrays(typed, schema=keyrows.schema(self._fields)))[0].as_py()
        canonical = tuple(keyrows.canonical(column[0].as_py()) for column in typed)
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
            return keyrows.constant(True, count)
        columns = self._candidate_fields(candidates)
        if self.kind == "exact":
            return exact.mask(self._matchable_rows(), self.null_safe, candidates, columns)
        targets = [
            compare.comparison_target(column, candidates.column(column).type, field) for column, field in columns
        ]
        if len(self) == 0:
            return keyrows.constant(False, count)
        if self.kind == "bloom":
            return bloomkeys.mask(self._bloom, self._fields, self.null_safe, candidates, columns, targets)
        return bounds.mask(self._bounds, self.null_safe, candidates, columns, targets)

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
        interval = compare.interval(low, high, value_type or types.arrow_type(field_type))
        source = types.type_name(interval.type)
        target = compare.comparison_target(column, interval.type, (name, field_type))
        if interval.null_count or (source == "string" and target != "string"):
            return True  # unknown, or strings bounding their values in string order ('10' < '9')
        if len(self) == 0:
            return False
        if self.kind == "exact":
            keys = keyrows.plain(self._matchable_rows().column(name))
            return exact.overlaps(keys, self.null_safe, field_type, interval, source, target)
        if self.null_safe:
            return True
        if self.kind == "bloom":
            return bloomkeys.overlaps(self._bloom, self._fields, field_type, interval, source)
        return bounds.overlaps(self._bounds, name, field_type, interval, source, target)

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
            header["bloom"] = {"capacity": self._bloom.capacity, "fpp": self._bloom.error_rate}
            return wire.encode(header, bloomkeys.bloom_body(self._bloom))
        return wire.encode(header, wire.ipc_bytes(self._table if self._bounds is None else self._bounds))

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
        return cls._from_body(*wire.decode(blob))

    @classmethod
    def _from_body(cls, header: dict[str, Any], body: bytes) -> DynamicFilteringData:
        fields, count, null_safe = header["fields"], header["row_count"], header["null_safe"]
        if header["kind"] == "bloom":
            capacity, fpp = header["bloom"]["capacity"], header["bloom"]["fpp"]
            bloom = bloomkeys.bloom_from_bits(capacity, fpp, body)
            return cls.from_bloom(fields, bloom, key_count=count, null_safe=null_safe)
        if header["kind"] == "range":
            table = wire.read_body(body, fields, 2, "range bounds are 2 rows")
            if table.num_rows != 2:
                raise ValueError(f"Filter payload body holds {table.num_rows} rows, but range bounds are 2 rows.")
            lower, upper = keyrows.row_tuples(table)
            return cls.from_bounds(fields, lower, upper, key_count=count, null_safe=null_safe)
        table = wire.read_body(body, fields, count, f"its header declares {count} rows")
        wire.check_rows(header, table)
        return cls.from_table(fields, table, exceed_threshold=header["exceed_threshold"], null_safe=null_safe)

    # --- exact ---------------------------------------------------------------------------------------

    def _rows(self) -> frozenset[tuple[Any, ...]]:
        # Python tuples compare by value: rows whose hashes collide stay apart.
        if self._row_set is None:
            self._row_set = frozenset(keyrows.row_tuples(self._table))
        return self._row_set

    def _matchable_rows(self) -> pa.Table:
        # With `=`, a row holding a null matches no full partition, so neither does any prefix of one.
        if self._matchable is None:
            self._matchable = self._table if self.null_safe else self._table.drop_null()
        return self._matchable

    # --- shared --------------------------------------------------------------------------------------

    def _payload_identity(self) -> Any:
        if self._bloom is not None:
            return self._bloom.capacity, self._bloom.error_rate, bloomkeys.bloom_body(self._bloom)
        if self._bounds is not None:
            return keyrows.row_tuples(self._bounds)
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
