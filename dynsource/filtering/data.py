"""The payload facade :class:`DynamicFilteringData`: fields and flags; its kind's ``Keys`` matches and encodes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from pybloom_live import BloomFilter

from dynsource import types
from dynsource.filtering import bloomkeys, bounds, compare, conjunction, exact, fieldview, keyrows, wire


class DynamicFilteringData:
    """A summary of the fact-side filter rows (exact, Bloom or min/max) plus an exceed-threshold flag (FLIP-248).

    The constructor builds ``"exact"`` data from rows; :meth:`from_table`
    builds any kind from an Arrow table, :meth:`from_bloom` and
    :meth:`from_bounds` wrap a Bloom filter or per-field bounds computed
    elsewhere (the collector builds both inside Spark). :meth:`unfiltered` is
    data that filters nothing; :meth:`field_filter` is the view of one field a
    data source pushes into its backend.

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
    kind : {"exact", "bloom", "range", "all"}
        The payload: the rows themselves, a Bloom filter over them, per-field bounds, or
        a conjunction of such parts (:meth:`all_of`). Exceeded data is ``"exact"`` with no rows.
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
    parts : tuple of DynamicFilteringData
        What a row must match, each part on its own fields (:meth:`all_of`); ``(data,)`` for one part.

    ``len(data)`` is the number of distinct rows the payload summarises (for
    exact data, the rows it holds; for a conjunction, the sum of its parts').

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
    >>> both = DynamicFilteringData.all_of([span, DynamicFilteringData([("store", "int")], [7])])
    >>> both.kind, len(both), both.matching_mask(pa.table({"day": [12, 12], "store": [7, 8]})).to_pylist()
    ('all', 12, [True, False])
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
        table = keyrows.empty_table(checked) if exceed_threshold else keyrows.table_from_rows(checked, rows)
        self._keys: keyrows.Keys = exact.ExactKeys(checked, table, null_safe)
        self._exceed_threshold = bool(exceed_threshold)

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
            return cls._of(exact.ExactKeys(checked, typed, null_safe))
        keys = keyrows.summarised(typed, null_safe)
        if kind == "bloom":
            return cls._of(bloomkeys.BloomKeys.from_keys(checked, keys, fpp, null_safe))
        return cls._of(bounds.RangeKeys.from_keys(checked, keys, null_safe))

    @classmethod
    def from_bloom(cls, fields: Sequence[tuple[str, str]], bloom_filter: BloomFilter, *, key_count: int,
                   null_safe: bool = False) -> DynamicFilteringData:
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
        return cls._of(bloomkeys.BloomKeys(keyrows.check_fields(fields), bloom_filter, key_count, null_safe))

    @classmethod
    def from_bounds(cls, fields: Sequence[tuple[str, str]], lower: Sequence[Any], upper: Sequence[Any], *,
                    key_count: int, null_safe: bool = False) -> DynamicFilteringData:
        """Range data: every row lies field by field within [``lower``, ``upper``] (Spark's ``min`` and ``max``).

        Parameters
        ----------
        fields : sequence of (str, str)
            As for the constructor.
        lower, upper : sequence
            One value per field, converted to the field types; ``None`` in both: the field holds no
            non-null value. Float NaN is the greatest value, as in Spark (such bounds do not prune).
        key_count : int
            How many distinct rows the bounds summarise (``len()`` of the data).
        null_safe : bool, default False
            The rows may hold nulls, which match null candidates (``<=>``): a null candidate is
            then always kept, the bounds not telling whether some row holds one.
        """
        return cls._of(bounds.RangeKeys(keyrows.check_fields(fields), lower, upper, key_count, null_safe))

    @classmethod
    def all_of(cls, parts: Sequence[DynamicFilteringData]) -> DynamicFilteringData:
        """The filter keeping a row when every part keeps it (kind ``"all"``), for parts over distinct fields.

        Exceeded parts keep every row and are left out; one part left is itself.
        Raises ``ValueError`` when two parts share a field (ignoring case).
        """
        filtering = [each._keys for part in parts if part.is_filtering for each in part.parts]
        if len(filtering) < 2:
            return parts[0] if not filtering else cls._of(filtering[0])
        return cls._of(conjunction.AllKeys(filtering))

    @classmethod
    def unfiltered(cls) -> DynamicFilteringData:
        """Data of no field that filters nothing (``is_filtering`` false): what a reader gets where no filter was
        named or the one named cannot be trusted. It cannot be published."""
        return cls._of(exact.ExactKeys((), keyrows.empty_table(()), False), exceed_threshold=True)

    def field_filter(self, name: str) -> fieldview.FieldFilter:
        """What this filter says of field ``name`` (ignoring case), for a source pushing it into its backend: a
        :class:`~dynsource.filtering.fieldview.FieldFilter` of kind exact, range, bloom or none."""
        return fieldview.field_filter(self, name)

    @property
    def parts(self) -> tuple[DynamicFilteringData, ...]:
        if isinstance(self._keys, conjunction.AllKeys):
            return tuple(DynamicFilteringData._of(part) for part in self._keys.parts)
        return (self,)

    @classmethod
    def _of(cls, keys: keyrows.Keys, exceed_threshold: bool = False) -> DynamicFilteringData:
        data = cls.__new__(cls)
        data._keys, data._exceed_threshold = keys, bool(exceed_threshold)
        return data

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        return self._keys.fields

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    @property
    def kind(self) -> str:
        return self._keys.kind

    @property
    def table(self) -> pa.Table:
        if self._keys.table is None:
            # An empty table here would read as "no keys" and lose every row.
            raise TypeError(f"{self.kind.capitalize()} filter data holds no rows; use matching_mask() or contains().")
        return self._keys.table

    @property
    def bloom_filter(self) -> BloomFilter | None:
        return self._keys.bloom

    @property
    def fpp(self) -> float | None:
        return None if self._keys.bloom is None else self._keys.bloom.error_rate

    @property
    def bounds(self) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        return self._keys.bounds if isinstance(self._keys, bounds.RangeKeys) else None

    @property
    def size_bytes(self) -> int:
        return self._keys.size_bytes

    @property
    def exceed_threshold(self) -> bool:
        return self._exceed_threshold

    @property
    def null_safe(self) -> bool:
        return self._keys.null_safe

    @property
    def is_filtering(self) -> bool:
        return not self._exceed_threshold

    def __len__(self) -> int:
        return self._keys.key_count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DynamicFilteringData):
            return NotImplemented
        shape = (self.fields, self.kind, self.exceed_threshold, self.null_safe, len(self))
        other_shape = (other.fields, other.kind, other.exceed_threshold, other.null_safe, len(other))
        return shape == other_shape and self._keys.identity() == other._keys.identity()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {type_name}" for name, type_name in self.fields)
        count = "rows" if self.kind == "exact" else "keys"
        fpp = "" if self.fpp is None else f", fpp={self.fpp}"
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
        values = keyrows.row_values(row, self.fields)
        if not self.is_filtering:
            return True
        return self._keys.contains(keyrows.table_from_rows(self.fields, [values]))

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
            matches. Exact and range data compare both sides in Spark's comparison
            type; a candidate value that cannot be converted to it is kept.
            Comparisons that depend on the session time zone (a date or a local
            timestamp against a timestamp) are made per day with a day of slack.
            A column whose string keys do not all parse into its type does not
            prune, nor do range bounds of a string field against another type
            (string order is not value order), nor float bounds holding NaN; a
            null-safe range keeps null candidates. Bloom data prunes only when
            every field is a candidate column: each candidate is converted to its
            field's type and its distinct rows are probed. It cannot prune what
            Spark compares in a wider, lossy type (a bigint or decimal field
            against a double column), nor a string field against another type,
            nor a time-zone-dependent comparison.

        Raises
        ------
        ValueError
            A column is not a field.
        TypeError
            A column's type cannot be compared with its field's type.
        """
        if not self.is_filtering:
            return keyrows.constant(True, candidates.num_rows)
        return self._keys.mask(candidates, keyrows.candidate_fields(self.fields, candidates))

    def may_overlap(self, column: str, low: Any, high: Any, value_type: pa.DataType | None = None) -> bool:
        """Whether some filter row may have a ``column`` value within [``low``, ``high``]: false means no row whose
        ``column`` value lies there can match (row-group skipping with Parquet statistics).

        ``column`` is a filter field (ignoring case; another raises ``ValueError``). ``low`` and ``high`` are
        scalars (``pyarrow.Scalar``) or Python values of ``value_type`` (the Parquet column's Arrow type; by default the
        field's); a bound of a type that cannot be compared with the field's raises ``TypeError``. An unknown
        (None) bound gives true, as do string bounds compared as another type (their order is not the values').

        Exact data checks its keys, range data the overlap of the intervals, both in Spark's comparison type (a
        day of slack for time-zone-dependent comparisons); float keys holding NaN always overlap, statistics
        leaving NaN out. Bloom data of a single integral field probes each value of an integral interval of at
        most 1024 values; otherwise true (each probe is a false positive with probability ``fpp``, so the wider
        the interval, the less often a row group is skipped). Null-safe data whose rows may hold a null in
        ``column`` always overlaps, statistics leaving nulls out.
        """
        if not self.is_filtering:
            return True
        field = keyrows.field(self.fields, column)
        interval = compare.interval(low, high, value_type or types.arrow_type(field[1]))
        source = types.type_name(interval.type)
        target = compare.comparison_target(column, interval.type, field)
        if interval.null_count or (source == "string" and target != "string"):
            return True  # unknown, or strings bounding their values in string order ('10' < '9')
        return len(self) > 0 and self._keys.overlaps(field, interval, source, target)

    def to_bytes(self) -> bytes:
        """The payload as versioned, checksummed bytes (the format is :mod:`dynsource.filtering.wire`'s)."""
        if not self.fields:
            raise ValueError("Filter data of no field (DynamicFilteringData.unfiltered()) cannot be published; "
                             "publish DynamicFilteringData(fields, exceed_threshold=True) to say a filter filters "
                             "nothing.")
        return wire.encode_keys(self._keys, self.exceed_threshold)

    @classmethod
    def from_bytes(cls, blob: bytes) -> DynamicFilteringData:
        """Load :meth:`to_bytes` output; any damage or foreign input raises ``ValueError``.

        Only JSON, Arrow IPC and a bit array are parsed: nothing in the blob is
        imported or run, and every size is checked before it is allocated.
        """
        header, body = wire.decode(blob)
        keys = _KINDS[header["kind"]].from_body(header["fields"], header, body)
        return cls._of(keys, header["exceed_threshold"])


_KINDS: dict[str, type[keyrows.Keys]] = {**conjunction.PART_KINDS, conjunction.AllKeys.kind: conjunction.AllKeys}
