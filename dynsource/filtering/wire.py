"""The wire format of a filter payload: magic, version, header length, JSON header, body, SHA-256.

The body is an Arrow IPC stream of the rows (exact) or of two rows, the lower
and the upper bounds (range), or the Bloom filter's bit array, little-endian bit
order, whose length follows from the ``capacity`` and ``fpp`` in the header
(bloom), or the payloads of a conjunction's parts one after the other, their
lengths in the header (all).

Version 2 added the conjunction; a version 1 payload (one exact, Bloom or range
filter, the same header and body) still decodes.

Only JSON, Arrow IPC and a bit array are parsed: nothing in a blob is imported
or run. Sizes are checked before anything is allocated for them: a Bloom
filter's sizing against its body's length, an exact filter's row count against
what its body can hold, and each Arrow record batch's row count against the
header's before it is decoded (compressed Arrow bodies, which could inflate far
beyond the blob, are refused).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from dynsource.filtering import bloomkeys, keyrows

# PNG-style magic: the high-bit byte and the newline reveal 7-bit or line-ending-mangling transports.
MAGIC = b"\x89DYNFLT\n"


VERSION = 2


SUPPORTED_VERSIONS = (1, 2)


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


# Keys only some kinds have: a Bloom filter's sizing, from which its bit-array length follows.
_KIND_HEADER_KEYS: dict[str, dict[str, tuple[type, str]]] = {
    "bloom": {"bloom": (dict, "an object")}, "all": {"parts": (list, "a list")},
}


def ipc_bytes(table: pa.Table) -> bytes:
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
    if isinstance(kind, str) and kind not in keyrows.PAYLOAD_KINDS:
        raise ValueError(
            f"Filter payload kind '{kind}' is not supported; supported kinds: {list(keyrows.PAYLOAD_KINDS)}.")
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
        header["fields"] = keyrows.check_fields(header["fields"])
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
        expected = bloomkeys.bloom_size_bytes(bloom["capacity"], bloom["fpp"])
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


def read_body(body: bytes, fields: Sequence[tuple[str, str]], max_rows: int, limit: str) -> pa.Table:
    """The body's rows, read message by message: each batch's size is checked (``max_rows``) before it is decoded."""
    expected = keyrows.schema(fields)
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


def check_rows(header: dict[str, Any], table: pa.Table) -> None:
    if header["row_count"] != table.num_rows:
        raise ValueError(
            f"Filter payload header declares {header['row_count']} rows but the body holds {table.num_rows}."
        )
    if header["exceed_threshold"] and table.num_rows:
        raise ValueError(f"Filter payload is marked exceeded but carries {table.num_rows} rows.")


def encode_keys(keys: keyrows.Keys, exceed_threshold: bool = False) -> bytes:
    """The payload of ``keys``: the header every kind has, the kind's own entries, its body."""
    header = {
        "kind": keys.kind, "fields": [list(field) for field in keys.fields], "exceed_threshold": exceed_threshold,
        "null_safe": keys.null_safe, "row_count": keys.key_count, **keys.header(),
    }
    return encode(header, keys.body())


def encode(header: dict[str, Any], body: bytes) -> bytes:
    """Magic, version, header length, ``header`` as JSON (with ``body_length``), ``body``, SHA-256."""
    raw = json.dumps({**header, "body_length": len(body)}, sort_keys=True, separators=(",", ":"),
                     ensure_ascii=False).encode("utf-8")
    payload = _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw + body
    return payload + hashlib.sha256(payload).digest()


def decode(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The checked header and the body of an :func:`encode` blob; any damage raises ``ValueError``."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"A dynsource filter payload is bytes, not {type(blob).__name__}.")
    blob = bytes(blob)
    header_length = _check_prefix(blob)
    header = _parse_header(blob[_PREFIX.size : _PREFIX.size + header_length])
    body_start = _PREFIX.size + header_length
    _check_length(blob, body_start, header["body_length"])
    _check_digest(blob)
    return header, blob[body_start : body_start + header["body_length"]]
