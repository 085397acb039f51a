"""Payload safety (issue 6 item 3): hostile and malformed blobs in a real store are data, never code.

Hostile blobs are pickles that would create a marker file or import a module when
unpickled; a control run in a subprocess proves they do exactly that under
``pickle.loads``. Loading them through the store must raise and leave no marker.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import pickle
import struct
import subprocess
import sys
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dynsource
from dynsource.filtering import MAGIC, MAX_HEADER_BYTES, DynamicFilteringData, bloom_size_bytes, handles
from tests.helpers import read, rows

HANDLE = "dynf-" + "ab" * 16
DATA = DynamicFilteringData([("k", "int")], [(1,), (2,)])


def frame(header: dict, body: bytes, *, magic: bytes = MAGIC, version: int = 1, header_length: int | None = None,
          ) -> bytes:
    """The documented wire format around any header and body, with a correct SHA-256."""
    raw = json.dumps(header).encode()
    prefix = struct.pack(">8sHI", magic, version, len(raw) if header_length is None else header_length)
    payload = prefix + raw + body
    return payload + hashlib.sha256(payload).digest()


def exact_header(row_count: int, body: bytes, **extra) -> dict:
    return {"kind": "exact", "fields": [["k", "int"]], "exceed_threshold": False, "null_safe": False,
            "row_count": row_count, "body_length": len(body), **extra}


def ipc(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def keys(*values: int) -> pa.Table:
    return pa.table({"k": pa.array(values, pa.int32())})


def plant(root, blob: bytes, handle: str = HANDLE) -> str:
    """Place ``blob`` in the store as the payload of ``handle``, as a foreign writer could."""
    pathlib.Path(root).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(root) / f"{handle}.dynf").write_bytes(blob)
    return handle


# --- hostile blobs -------------------------------------------------------------------------------------


class _Touch:
    """Unpickling this object creates the file at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


@pytest.fixture
def hostile(tmp_path):
    """name -> (blob, marker): blobs whose unpickling creates ``marker``, directly or by importing a module."""
    modules = tmp_path / "modules"
    modules.mkdir()
    module_marker = tmp_path / "imported.marker"
    (modules / "dynsource_hostile_module.py").write_text(
        f"import pathlib\npathlib.Path({str(module_marker)!r}).touch()\ndef run():\n    return 1\n"
    )
    importing = b"cdynsource_hostile_module\nrun\n(tR."  # protocol 0: import the module, call run()
    touch_marker = tmp_path / "touched.marker"
    touching = pickle.dumps(_Touch(str(touch_marker)), protocol=5)
    framed_marker = tmp_path / "framed.marker"
    framed = pickle.dumps(_Touch(str(framed_marker)))
    extension_marker = tmp_path / "extension.marker"
    extension_type = pa.field("k", pa.int32(), metadata={
        "ARROW:extension:name": "arrow.py_extension_type",
        "ARROW:extension:metadata": pickle.dumps(_Touch(str(extension_marker))),
    })
    extension_body = ipc(pa.table({"k": pa.array([1], pa.int32())}, schema=pa.schema([extension_type])))
    blobs = {
        "pickle": (touching, touch_marker, None),
        "pickle importing a module": (importing, module_marker, modules),
        "pickle body in a checksummed frame": (frame(exact_header(1, framed), framed), framed_marker, None),
        "pickled Arrow extension type": (frame(exact_header(1, extension_body), extension_body), extension_marker,
                                         None),
    }
    return blobs, modules


def test_the_hostile_blobs_do_run_code_when_unpickled(hostile, tmp_path):
    # Control: each pickle blob creates its marker under pickle.loads (in a subprocess, to keep this one clean).
    blobs, modules = hostile
    for name in ("pickle", "pickle importing a module"):
        blob, marker, path = blobs[name]
        (tmp_path / "blob").write_bytes(blob)
        code = (f"import pickle, sys; sys.path[:0] = [{str(path or modules)!r}, {str(pathlib.Path.cwd())!r}]; "
                f"pickle.loads(open({str(tmp_path / 'blob')!r}, 'rb').read())")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        assert marker.exists(), name
        marker.unlink()


@pytest.mark.parametrize("name", ["pickle", "pickle importing a module", "pickle body in a checksummed frame",
                                  "pickled Arrow extension type"])
def test_resolving_a_hostile_blob_raises_and_runs_nothing(hostile, tmp_path, monkeypatch, name):
    blobs, modules = hostile
    blob, marker, _ = blobs[name]
    monkeypatch.syspath_prepend(str(modules))  # the module would be importable: loading must not import it
    root = tmp_path / "store"
    plant(root, blob)
    expected = {
        "pickle": "not a dynsource filter payload",
        "pickle importing a module": "not a dynsource filter payload",
        "pickle body in a checksummed frame": "not a readable Arrow IPC stream",
        "pickled Arrow extension type": "schema carries metadata",
    }[name]
    with pytest.raises(ValueError, match=expected):
        handles.resolve(HANDLE, str(root))
    assert not marker.exists()
    assert "dynsource_hostile_module" not in sys.modules


# --- malformed blobs: each defect its own error, sizes checked before allocation ------------------------


def truncated(at: int) -> bytes:
    return DATA.to_bytes()[:at]


def flipped(position: int) -> bytes:
    blob = bytearray(DATA.to_bytes())
    blob[position] ^= 0x01
    return bytes(blob)


_BLOOM_CAPACITY = 9_000_000_000
_BLOOM_BYTES = bloom_size_bytes(_BLOOM_CAPACITY, 0.01)
_BLOOM_HEADER = {"kind": "bloom", "fields": [["k", "int"]], "exceed_threshold": False, "null_safe": False,
                 "row_count": 5, "bloom": {"capacity": _BLOOM_CAPACITY, "fpp": 0.01}}
_THREE = ipc(keys(1, 2, 3))
# 32 MB of zeros in a few KB.
_BOMB = ipc(pa.table({"k": pa.repeat(pa.scalar(0, pa.int32()), 8_000_000)}), compression="zstd")

MALFORMED = {
    "wrong magic (a Parquet file)": (b"PAR1" + bytes(60), "not a dynsource filter payload"),
    "newer version": (frame(exact_header(3, _THREE), _THREE, version=3), "version 3 is not supported"),
    "checksum mismatch": (flipped(-40), "checksum mismatch"),
    "truncated inside the prefix": (truncated(10), r"truncated: expected at least 46 bytes"),
    "truncated inside the header": (truncated(60), r"truncated: expected at least \d+ bytes for a \d+-byte header"),
    "truncated inside the body": (truncated(len(DATA.to_bytes()) - 40), "truncated: its header declares"),
    "trailing bytes": (DATA.to_bytes() + b"\0", "unexpected trailing bytes"),
    "header claims fewer rows than the body": (frame(exact_header(2, _THREE), _THREE),
                                               "body holds 3 rows, but its header declares 2 rows"),
    "header claims more rows than the body": (frame(exact_header(5, _THREE), _THREE),
                                              "header declares 5 rows but the body holds 3"),
    "header claims 10^12 rows": (frame(exact_header(10**12, _THREE), _THREE), "more than its .*-byte body can hold"),
    "header claims a 4 GiB header": (frame(exact_header(1, _THREE), _THREE, header_length=2**32 - 1),
                                     f"exceeds the limit of {MAX_HEADER_BYTES} bytes"),
    "10 GB Bloom filter, body length to match": (frame({**_BLOOM_HEADER, "body_length": _BLOOM_BYTES}, b"\0" * 64),
                                                 f"declares a {_BLOOM_BYTES}-byte body"),
    "10 GB Bloom filter, small body": (frame({**_BLOOM_HEADER, "body_length": 64}, b"\0" * 64),
                                       f"which has {_BLOOM_BYTES} bytes of bits, but a 64-byte body"),
    "compressed Arrow body (decompression bomb)": (frame(exact_header(1, _BOMB), _BOMB), "body is compressed"),
}


def test_the_malformed_blobs_are_what_they_claim():
    assert _BLOOM_BYTES > 10**10  # the header asks for more than 10 GB of bits
    assert len(_BOMB) < 100_000
    with pa.ipc.open_stream(_BOMB) as reader:  # what a naive reader would inflate the bomb to
        assert reader.read_all().nbytes == 32_000_000


@pytest.mark.parametrize("name", list(MALFORMED))
def test_each_defect_has_its_own_clear_error_raised_before_allocating(name, tmp_path):
    blob, message = MALFORMED[name]
    root = str(tmp_path)
    plant(root, blob)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            handles.resolve(HANDLE, root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000 + 4 * len(blob)  # nothing was allocated for the sizes the blob claims


# --- through Spark: fallback reads everything, fail names the defect -------------------------------------


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("safety-table")
    pq.write_to_dataset(pa.table({"v": list(range(6)), "k": [1, 1, 2, 2, 3, 3]}), path, partition_cols=["k"])
    return path


def test_a_hostile_payload_under_fallback_reads_every_row_and_reports_why(spark, hostile, table, tmp_path):
    blobs, _ = hostile
    blob, marker, _ = blobs["pickle"]
    root = str(tmp_path / "store")
    handle = plant(root, blob)
    got = read(spark, table, dynamicFilter=handle, filterStore=root)
    assert rows(got) == rows(spark.read.parquet(str(table)).select("v", "k"))
    scan = dynsource.scan_report(handle, root)
    assert not scan.filtering and "not a dynsource filter payload" in scan.fallback_reason
    assert (scan.partitions_kept, scan.partitions_total) == (3, 3)
    with pytest.raises(Exception, match="not a dynsource filter payload"):
        read(spark, table, dynamicFilter=handle, filterStore=root, dynamicFilterOnError="fail").count()
    assert not marker.exists()


def test_a_lying_payload_under_fallback_reads_every_row(spark, table, tmp_path):
    blob, _ = MALFORMED["header claims fewer rows than the body"]
    root = str(tmp_path / "store")
    handle = plant(root, blob)
    assert read(spark, table, dynamicFilter=handle, filterStore=root).count() == 6
    assert "its header declares 2 rows" in dynsource.scan_report(handle, root).fallback_reason


def test_a_path_as_handle_fails_and_writes_nothing_outside_the_store(spark, table, tmp_path):
    root = tmp_path / "a" / "store"
    escaping = "../../escaped"
    with pytest.raises(Exception, match="is not a dynsource filter handle"):
        read(spark, table, dynamicFilter=escaping, filterStore=str(root)).count()
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == []
