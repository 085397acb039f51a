"""Several dynamic filters on one scan: a conjunction of independent parts, as Trino's TupleDomain.

A fact joined to several filtered dimensions (a star: dates, items, stores) is
pruned by all of them at once. Each dimension's filter stays a part of its own,
over its own field or fields (a multi-column join key stays one part: its
columns are correlated); a row matches when it matches every part. The size is
the sum of the parts', not the product of their rows, and a Bloom filter or
bounds combines with exact key sets.

Each question is put to the parts that know the columns asked about: the
enumerator's levels to the parts on the partition columns known so far, a row
group's statistics to the part owning the column, the read tasks' rows to each
part on its own columns, the answers ANDed. A part with none of the columns
asked about still answers whether it holds any key at all: an empty dimension
matches nothing.

On the wire a conjunction's body is its parts' own payloads, one after the
other, their lengths in the header.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dynsource.filtering import bloomkeys, bounds, exact, keyrows, wire
from dynsource.filtering.keyrows import Candidate

# The kinds a part (or a payload of one part) can be; a part never holds parts.
PART_KINDS: dict[str, type[keyrows.Keys]] = {
    kind.kind: kind for kind in (exact.ExactKeys, bloomkeys.BloomKeys, bounds.RangeKeys)
}


class AllKeys(keyrows.Keys):
    """Keys matching a row when every part matches it; the fields are the parts' disjoint fields."""

    kind = "all"

    def __init__(self, parts: Sequence[keyrows.Keys]) -> None:
        if len(parts) < 2 or any(part.kind not in PART_KINDS for part in parts):
            raise ValueError(f"A conjunction holds two or more parts of kinds {list(PART_KINDS)}, "
                             f"not {[part.kind for part in parts]}.")
        self.parts = tuple(parts)
        try:
            fields = keyrows.check_fields([field for part in parts for field in part.fields])
        except ValueError as error:
            raise ValueError(f"The parts of a conjunction filter distinct fields: {error}") from error
        super().__init__(fields, sum(part.key_count for part in parts), any(part.null_safe for part in parts))

    @classmethod
    def from_body(cls, fields: keyrows.Fields, header: dict[str, Any], body: bytes) -> AllKeys:
        lengths = header["parts"]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths) or sum(lengths) != len(
                body):
            raise ValueError(f"Filter payload header declares parts of {lengths} bytes for a {len(body)}-byte body.")
        parts, start = [], 0
        for length in lengths:
            part_header, part_body = wire.decode(body[start:start + length])
            start += length
            if part_header["kind"] not in PART_KINDS or part_header["exceed_threshold"]:
                raise ValueError(f"A filter payload part is of kind '{part_header['kind']}'"
                                 f"{' and exceeded' if part_header['exceed_threshold'] else ''}; a part is "
                                 f"one of {list(PART_KINDS)} and holds keys.")
            parts.append(PART_KINDS[part_header["kind"]].from_body(part_header["fields"], part_header, part_body))
        keys = cls(parts)
        if keys.fields != fields or keys.key_count != header["row_count"] or keys.null_safe != header["null_safe"]:
            raise ValueError("Filter payload header does not describe its parts (fields, key count or null safety).")
        return keys

    @property
    def size_bytes(self) -> int:
        return sum(part.size_bytes for part in self.parts)

    def mask(self, candidates: pa.Table, columns: list[Candidate]) -> pa.BooleanArray:
        masks = [part.mask(candidates, [c for c in columns if c[1] in part.fields]) for part in self.parts]
        return functools.reduce(pc.and_kleene, masks)

    def contains(self, row: pa.Table) -> bool:
        return all(part.contains(row.select([name for name, _ in part.fields])) for part in self.parts)

    def overlaps(self, field: tuple[str, str], interval: pa.Array, source: str, target: str) -> bool:
        # Another part with no key at all rules out every row group, as it rules out every row.
        return all(part.key_count for part in self.parts) and self.owner(field[0]).overlaps(
            field, interval, source, target)

    def owner(self, name: str) -> keyrows.Keys:
        """The part filtering field ``name`` (ignoring case)."""
        return next(part for part in self.parts if name.lower() in {n.lower() for n, _ in part.fields})

    def identity(self) -> Any:
        return tuple((part.kind, part.fields, part.null_safe, part.key_count, part.identity()) for part in self.parts)

    def header(self) -> dict[str, Any]:
        return {"parts": [len(blob) for blob in self._blobs]}

    def body(self) -> bytes:
        return b"".join(self._blobs)

    @functools.cached_property
    def _blobs(self) -> list[bytes]:
        return [wire.encode_keys(part) for part in self.parts]
