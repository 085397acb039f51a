"""DynamicFilteringData: the typed filter rows a collector sends to the fact-side enumerator (FLIP-248).

A filter holds the distinct rows of the fact-side filter fields, or nothing at
all when the collector gave up (``exceed_threshold``): such data filters
nothing. The enumerator asks it, level by level, which partition values some
row may match (:meth:`DynamicFilteringData.matching_mask`). Pruning too little
only costs I/O; pruning too much loses rows, so every doubtful case keeps the
candidate.

The filter travels between processes as versioned, checksummed bytes (a JSON
header and an Arrow IPC body, never pickle), see :meth:`~DynamicFilteringData.to_bytes`.
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dynsource import partitions, types

# PNG-style magic: the high-bit byte and the newline reveal 7-bit or line-ending-mangling transports.
MAGIC = b"\x89DYNFLT\n"
VERSION = 1
SUPPORTED_VERSIONS = (1,)
MAX_HEADER_BYTES = 1 << 20
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
_KINDS = ("exact",)

_Fields = tuple[tuple[str, str], ...]
_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
# Extreme dates have no microsecond timestamp (int64 microseconds span about +-106751991 days).
_TIMESTAMP_DAYS = 106_751_991
# One shared NaN object: set membership checks identity first, so NaN finds NaN as in Spark's joins.
_NAN = float("nan")


class DynamicFilteringData:
    """Typed rows of the fact-side filter fields plus an exceed-threshold flag (FLIP-248).

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
    table : pyarrow.Table
        The distinct rows, typed with :func:`dynsource.types.arrow_type`; empty when exceeded.
    exceed_threshold, null_safe : bool
    is_filtering : bool
        False when exceeded: such data contains every row.
    kind : str
        ``"exact"``: the rows themselves.

    Examples
    --------
    >>> data = DynamicFilteringData([("day", "int"), ("region", "string")], [(1, "eu"), (2, "us")])
    >>> data.contains((1, "eu")), data.contains((1, "us"))
    (True, False)
    >>> data.matching_mask(pa.table({"day": pa.array(["01", "3"])})).to_pylist()
    [True, False]
    >>> DynamicFilteringData.from_bytes(data.to_bytes()) == data
    True
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
        table = _empty_table(checked) if exceed_threshold else _table_from_rows(checked, rows)
        self._set(checked, table, exceed_threshold, null_safe)

    @classmethod
    def from_table(
        cls,
        fields: Sequence[tuple[str, str]],
        table: pa.Table,
        *,
        exceed_threshold: bool = False,
        null_safe: bool = False,
    ) -> DynamicFilteringData:
        """Build from Arrow columns matched to the fields by name (ignoring case), cast safely to their types.

        Extra columns are ignored; a missing column or a value the field type
        cannot hold raises ``ValueError``.
        """
        checked = _check_fields(fields)
        typed = _empty_table(checked) if exceed_threshold else _cast_table(checked, table)
        data = cls.__new__(cls)
        data._set(checked, typed, exceed_threshold, null_safe)
        return data

    def _set(self, fields: _Fields, table: pa.Table, exceed: bool, null_safe: bool) -> None:
        self._fields = fields
        self._table = _distinct(_normalize_floats(table))
        self._exceed_threshold = bool(exceed)
        self._null_safe = bool(null_safe)
        self._row_set: frozenset[tuple[Any, ...]] | None = None
        self._matchable: pa.Table | None = None

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        return self._fields

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._fields)

    @property
    def table(self) -> pa.Table:
        return self._table

    @property
    def exceed_threshold(self) -> bool:
        return self._exceed_threshold

    @property
    def null_safe(self) -> bool:
        return self._null_safe

    @property
    def is_filtering(self) -> bool:
        return not self._exceed_threshold

    @property
    def kind(self) -> str:
        return "exact"

    def __len__(self) -> int:
        return self._table.num_rows

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DynamicFilteringData):
            return NotImplemented
        return (
            self.fields == other.fields
            and self.kind == other.kind
            and self.exceed_threshold == other.exceed_threshold
            and self.null_safe == other.null_safe
            and self._rows() == other._rows()
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {type_name}" for name, type_name in self._fields)
        return (
            f"DynamicFilteringData(fields=[{fields}], kind={self.kind}, rows={len(self)}, "
            f"exceed_threshold={self.exceed_threshold}, null_safe={self.null_safe})"
        )

    def contains(self, row: Sequence[Any]) -> bool:
        """Whether ``row`` (one value per field, converted to the field types) is one of the rows.

        A row with a null matches nothing unless the data is null-safe;
        non-filtering data contains every row.
        """
        values = _row_values(row, self._fields)
        if not self.is_filtering:
            return True
        typed = tuple(
            _canonical(_column(name, type_name, [value])[0].as_py())
            for (name, type_name), value in zip(self._fields, values, strict=True)
        )
        if not self.null_safe and any(value is None for value in typed):
            return False
        return typed in self._rows()

    def matching_mask(self, candidates: pa.Table) -> pa.BooleanArray:
        """For each candidate row, whether some filter row may match it on the candidate's columns.

        Parameters
        ----------
        candidates : pyarrow.Table
            Columns named after some of the fields (ignoring case), of any Spark
            SQL Arrow type comparable to the field's type.

        Returns
        -------
        pyarrow.BooleanArray
            May be true for a candidate no row matches, never false for one a row
            matches: both sides are compared in Spark's comparison type, and a
            candidate value that cannot be converted to it is kept. Comparisons
            that depend on the session time zone (a date or a local timestamp
            against a timestamp) are made per day with a day of slack. A column
            whose string keys do not all parse into its type does not prune.

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

    def to_bytes(self) -> bytes:
        """The wire format: magic, version, header length, JSON header, Arrow IPC stream, SHA-256."""
        body = _ipc_bytes(self._table)
        header = json.dumps(
            {
                "kind": self.kind,
                "fields": [list(field) for field in self._fields],
                "exceed_threshold": self.exceed_threshold,
                "null_safe": self.null_safe,
                "row_count": len(self),
                "body_length": len(body),
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        payload = _PREFIX.pack(MAGIC, VERSION, len(header)) + header + body
        return payload + hashlib.sha256(payload).digest()

    @classmethod
    def from_bytes(cls, blob: bytes) -> DynamicFilteringData:
        """Load :meth:`to_bytes` output; any damage or foreign input raises ``ValueError``.

        Only JSON and Arrow IPC are parsed: nothing in the blob is imported or run.
        """
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise TypeError(f"A dynsource filter payload is bytes, not {type(blob).__name__}.")
        blob = bytes(blob)
        header_length = _check_prefix(blob)
        header = _parse_header(blob[_PREFIX.size : _PREFIX.size + header_length])
        body_start = _PREFIX.size + header_length
        _check_length(blob, body_start, header["body_length"])
        _check_digest(blob)
        table = _read_body(blob[body_start : body_start + header["body_length"]], header["fields"])
        _check_rows(header, table)
        exceeded, null_safe = header["exceed_threshold"], header["null_safe"]
        return cls.from_table(header["fields"], table, exceed_threshold=exceeded, null_safe=null_safe)

    def _rows(self) -> frozenset[tuple[Any, ...]]:
        # Python tuples compare by value: rows whose hashes collide stay apart.
        if self._row_set is None:
            columns = [[_canonical(value) for value in column.to_pylist()] for column in self._table.columns]
            self._row_set = frozenset(zip(*columns, strict=True))
        return self._row_set

    def _matchable_rows(self) -> pa.Table:
        # With `=`, a row holding a null matches no full partition, so neither does any prefix of one.
        if self._matchable is None:
            self._matchable = self._table if self.null_safe else self._table.drop_null()
        return self._matchable

    def _candidate_fields(self, candidates: pa.Table) -> list[tuple[str, tuple[str, str]]]:
        by_name = {name.lower(): (name, type_name) for name, type_name in self._fields}
        resolved, seen = [], set()
        for column in candidates.column_names:
            field = by_name.get(column.lower())
            if field is None:
                raise ValueError(
                    f"Column '{column}' is not a filter field; the fields are {list(self.field_names)}."
                )
            if field[0] in seen:
                raise ValueError(f"Column '{column}' names filter field '{field[0]}' twice.")
            seen.add(field[0])
            resolved.append((column, field))
        return resolved


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


def _compare(resolved: tuple[str, tuple[str, str]], candidates: pa.Table, keys: pa.Table) -> _Compared:
    column, (name, field_type) = resolved
    values = _plain(candidates.column(column))
    source = types.type_name(values.type)
    target = types.comparison_type(source, field_type)
    if target is None:
        raise TypeError(
            f"Column '{column}' of type {source} cannot be compared with filter field '{name}' "
            f"of type {field_type}."
        )
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
        converted = pc.cast(values, types.arrow_type(target), safe=False)  # Spark's cast to double rounds too
    else:
        converted = pc.cast(_representable(values, source, target), types.arrow_type(target))
    if pa.types.is_floating(converted.type):
        converted = _normalize_float(converted)
    return converted, pc.and_(pc.is_valid(values), pc.is_null(converted))


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
    if len(blob) < minimum:
        raise ValueError(f"Filter payload is truncated: expected at least {minimum} bytes, got {len(blob)}.")
    magic, version, header_length = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise ValueError(f"Data is not a dynsource filter payload (it starts with {blob[: len(MAGIC)]!r}).")
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
    if not isinstance(header, dict) or set(header) != set(_HEADER_KEYS):
        keys = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise ValueError(
            f"Filter payload header must have exactly the keys {sorted(_HEADER_KEYS)}, got {keys}."
        )
    for key, (expected, description) in _HEADER_KEYS.items():
        value = header[key]
        # bool is an int in Python; a count must not be true or false.
        if not isinstance(value, expected) or (expected is int and (isinstance(value, bool) or value < 0)):
            raise ValueError(f"Filter payload header key '{key}' must be {description}, got {value!r}.")
    if header["kind"] not in _KINDS:
        raise ValueError(
            f"Filter payload kind '{header['kind']}' is not supported; supported kinds: {list(_KINDS)}."
        )
    try:
        header["fields"] = _check_fields(header["fields"])
    except ValueError as error:
        raise ValueError(f"Filter payload header declares invalid fields: {error}") from error
    return header


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


def _read_body(body: bytes, fields: Sequence[tuple[str, str]]) -> pa.Table:
    try:
        with pa.ipc.open_stream(pa.py_buffer(body)) as reader:
            table = reader.read_all()
        # Full validation: offsets pointing outside the buffers would otherwise crash later kernels.
        table.validate(full=True)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"Filter payload body is not a readable Arrow IPC stream: {error}") from error
    expected = _schema(fields)
    if table.schema.equals(expected) and not table.schema.equals(expected, check_metadata=True):
        # Extension types travel as field metadata; a filter never writes any.
        raise ValueError("Filter payload body schema carries metadata (such as an extension type).")
    if not table.schema.equals(expected):
        raise ValueError(
            f"Filter payload body schema ({_describe(table.schema)}) does not match the declared fields "
            f"({_describe(expected)})."
        )
    return table


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def _check_rows(header: dict[str, Any], table: pa.Table) -> None:
    if header["row_count"] != table.num_rows:
        raise ValueError(
            f"Filter payload header declares {header['row_count']} rows but the body holds {table.num_rows}."
        )
    if header["exceed_threshold"] and table.num_rows:
        raise ValueError(f"Filter payload is marked exceeded but carries {table.num_rows} rows.")
