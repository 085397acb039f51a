"""Where a scan comes from: the reader (a registered table or a path, with its options) that planned it.

A scan is planned in a Python worker, which has no way to hand anything back to the DataFrame whose action planned
it; it saves its report under its table. The DataFrame's analysed plan names the same reader: each Python data
source relation in it carries the source's name (``dynsource``, or ``dynsource.<db>.<table>`` for a registered
table) and the reader options, the very ones the planner's source was made with. Their digest (:class:`Reader`)
picks the DataFrame's own scans among the other readers' of the table (:mod:`dynsource.explain`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

SOURCE = "dynsource"  # the source's name; a registered table's is SOURCE + ".<db>.<table>"


@dataclass(frozen=True)
class Reader:
    """The reader that planned a scan, as the planner and a DataFrame's plan both know it.

    ``table`` is the registered table (None for a read by path); ``options_digest``
    a digest of the reader options as Spark hands them to the source, never the
    options themselves, which may hold credentials.
    """

    table: str | None
    options_digest: str

    @classmethod
    def of(cls, source_name: str, options: Mapping[str, str]) -> Reader:
        """The reader of source ``source_name`` (``dynsource``, or ``dynsource.<db>.<table>``) with ``options``."""
        # The plan keeps the option names lower-cased, the source may get them as typed: compare them lower-cased.
        canonical = json.dumps(sorted((str(name).lower(), str(value)) for name, value in options.items()))
        return cls(source_name.partition(".")[2] or None, hashlib.sha256(canonical.encode()).hexdigest()[:32])
