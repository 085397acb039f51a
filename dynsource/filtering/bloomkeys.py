"""Bloom payloads: the canonical key of a row, and building, sizing and probing pybloom-live filters."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import bitarray
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pybloom_live import BloomFilter

from dynsource import types
from dynsource.filtering import compare, keyrows
from dynsource.filtering.keyrows import Candidate

# Most keys a Bloom filter may be sized for: 2**40 keys at any useful fpp is already terabytes of bits.
MAX_BLOOM_CAPACITY = 1 << 40


DEFAULT_FPP = 0.01


# A Bloom filter answers may_overlap for an integral interval by probing each of its values, up to this many.
_MAX_OVERLAP_PROBES = 1024


class BloomKeys(keyrows.Keys):
    """A Bloom filter over the :func:`bloom_key` of each distinct row, as openLooKeng sends for many rows."""

    kind = "bloom"

    def __init__(self, fields: keyrows.Fields, bloom: BloomFilter, key_count: int, null_safe: bool) -> None:
        """``bloom`` is taken over, not copied."""
        check_bloom(bloom, keyrows.check_count(key_count))
        self.bloom = bloom
        super().__init__(fields, key_count, null_safe)

    @classmethod
    def from_keys(cls, fields: keyrows.Fields, keys: pa.Table, fpp: float, null_safe: bool) -> BloomKeys:
        """A filter sized for ``keys`` (field-typed, distinct) at false-positive rate ``fpp``, holding them."""
        bloom = BloomFilter(max(keys.num_rows, 1), check_fpp(fpp))
        add_to_bloom(bloom, fields, keys)
        return cls(fields, bloom, keys.num_rows, null_safe)

    @classmethod
    def from_body(cls, fields: keyrows.Fields, header: dict[str, Any], body: bytes) -> BloomKeys:
        sizing = header["bloom"]
        bloom = bloom_from_bits(sizing["capacity"], sizing["fpp"], body)
        return cls(fields, bloom, header["row_count"], header["null_safe"])

    @property
    def size_bytes(self) -> int:
        return bits_bytes(self.bloom.num_bits)

    def mask(self, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
        targets = compare.targets(candidates, columns)
        if self.key_count == 0:
            return keyrows.constant(False, candidates.num_rows)
        return mask(self.bloom, self.fields, self.null_safe, candidates, columns, targets)

    def overlaps(self, field: tuple[str, str], interval: pa.Array, source: str, target: str) -> bool:
        if self.null_safe:
            return True  # statistics leave nulls out
        return overlaps(self.bloom, self.fields, field[1], interval, source)

    def identity(self) -> Any:
        return self.bloom.capacity, self.bloom.error_rate, self.body()

    def header(self) -> dict[str, Any]:
        return {"bloom": {"capacity": self.bloom.capacity, "fpp": self.bloom.error_rate}}

    def body(self) -> bytes:
        return bloom_body(self.bloom)


def bloom_key(fields: Sequence[tuple[str, str]], table: pa.Table) -> list[str]:
    """The canonical Bloom-filter key of each row of ``table``, as Bloom data probes it.

    Columns are matched to the fields by name (ignoring case) and cast safely
    to their types, so a Spark Arrow batch (any time zone, large strings) and a
    partition value converted to the field type give the same key. Each value
    becomes its length and its text (integers and floats in decimal, dates and
    timestamps as day and microsecond numbers, -0.0 as 0.0, one NaN), a null
    becomes ``-``; the key is their concatenation, as a string of code points 0-255.
    """
    return _key_strings(_encode(keyrows.normalize_floats(keyrows.cast_table(keyrows.check_fields(fields), table))))


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
    return bits_bytes(num_slices * bits_per_slice)


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
    check_fpp(fpp)
    num_slices = math.ceil(math.log(1.0 / fpp, 2))
    bits_per_slice = math.ceil((capacity * abs(math.log(fpp))) / (num_slices * (math.log(2) ** 2)))
    return num_slices, bits_per_slice


def check_fpp(fpp: float) -> float:
    if isinstance(fpp, bool) or not isinstance(fpp, (int, float)) or not 0 < fpp < 1:
        raise ValueError(f"A Bloom filter false-positive rate (fpp) is a number in (0, 1), not {fpp!r}.")
    return float(fpp)


def check_bloom(bloom: BloomFilter, key_count: int) -> None:
    if type(bloom) is not BloomFilter:
        raise TypeError(f"Bloom data needs a pybloom_live.BloomFilter, not {type(bloom).__name__}.")
    if not bloom.num_bits == math.prod(_bloom_geometry(bloom.capacity, bloom.error_rate)) == len(bloom.bitarray):
        raise ValueError("The Bloom filter's bit array does not match its capacity and fpp.")
    if key_count == 0 and bloom.bitarray.any():
        raise ValueError("A Bloom filter of no keys must have no bit set.")


def bits_bytes(num_bits: int) -> int:
    return (num_bits + 7) // 8


def bloom_body(bloom: BloomFilter) -> bytes:
    # pybloom makes little-endian arrays; the copy pins the byte order whatever the array's.
    return bitarray.bitarray(bloom.bitarray, endian="little").tobytes()


def _encode(table: pa.Table) -> pa.Array:
    """Binary keys: per value its byte length, ':' and its text, or '-' for null; self-delimiting, so unique."""
    parts = [_encode_column(keyrows.plain(column)) for column in table.columns]
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


def mask(
    bloom: BloomFilter, fields: keyrows.Fields, null_safe: bool, candidates: pa.Table, columns: list[Candidate],
    targets: list[str],
) -> pa.BooleanArray:
    """Which candidates may be keys: each is converted to its field's type and probed (every field needed)."""
    count = candidates.num_rows
    if len(columns) < len(fields):
        return keyrows.constant(True, count)  # a key's encoding needs every field
    by_field = {field: (column, target) for (column, field), target in zip(columns, targets, strict=True)}
    converted, failed, nulls = [], [], []
    for field in fields:
        column, target = by_field[field]
        values = keyrows.plain(candidates.column(column))
        typed = compare.to_field_type(values, field[1], target)
        if typed is None:
            return keyrows.constant(True, count)
        converted.append(typed[0])
        failed.append(typed[1])
        nulls.append(pc.is_null(values))
    rows = pa.Table.from_arrays(converted, schema=keyrows.schema(fields))
    probed = pa.array(_probe(bloom, rows))
    if not null_safe:
        probed = pc.and_(probed, pc.invert(functools.reduce(pc.or_, nulls)))
    return pc.or_(probed, functools.reduce(pc.or_, failed))


def overlaps(bloom: BloomFilter, fields: keyrows.Fields, field_type: str, bounds: pa.Array, source: str) -> bool:
    """Whether some value of a small integral interval may be a key of a one-field filter."""
    if len(fields) > 1 or field_type not in keyrows.INTEGRAL or source not in keyrows.INTEGRAL:
        return True
    limits = np.iinfo(types.arrow_type(field_type).to_pandas_dtype())
    low, high = max(bounds[0].as_py(), int(limits.min)), min(bounds[1].as_py(), int(limits.max))
    if high - low >= _MAX_OVERLAP_PROBES:
        return True
    values = pa.array(range(low, high + 1), types.arrow_type(field_type))  # empty when no key fits
    rows = pa.Table.from_arrays([values], schema=keyrows.schema(fields))
    return bool(_probe(bloom, rows).any())
