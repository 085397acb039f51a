"""Several dynamic filters on one scan, as one: the product of their exact key rows.

A reader applies one :class:`DynamicFilteringData`. A fact joined to several
filtered dimensions (a star: dates and stores) is pruned by all of them at once,
as Trino's dynamic filters intersect on one scan, with the filter whose fields
are all of theirs and whose rows are every combination of their rows: a fact
row matches it exactly when it matches each of them. Its fields are disjoint
unions, so each level of the enumerator, and each row-group check, compares the
columns it knows, as with any multi-column filter.

Only exact filters combine, and only while the product stays within the
collector's limits; a Bloom filter or bounds has no rows to combine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from dynsource.filtering.data import DynamicFilteringData


def conjoin(first: DynamicFilteringData, second: DynamicFilteringData, *, max_rows: int,
            max_bytes: int) -> DynamicFilteringData:
    """The filter that keeps a row exactly when ``first`` and ``second`` both keep it.

    Raises
    ------
    ValueError
        Saying why they do not combine: one is not exact or not filtering, they
        share a field, or the product has more than ``max_rows`` rows or ``max_bytes`` bytes.
    """
    for data in (first, second):
        if not data.is_filtering or data.kind != "exact":
            raise ValueError(f"only exact filters combine, and one is {_describe(data)}")
    shared = {name.lower() for name in first.field_names} & {name.lower() for name in second.field_names}
    if shared:
        raise ValueError(f"both filter field(s) {sorted(shared)}")
    # Under "=" a row holding a null matches nothing; under a null-safe product it would match a null.
    left, right = (data.table if data.null_safe else data.table.drop_null() for data in (first, second))
    rows = len(left) * len(right)
    if rows > max_rows:
        raise ValueError(f"together they would hold {len(left)} x {len(right)} = {rows} keys, more than {max_rows}")
    product = pa.Table.from_arrays(
        [*left.take(np.repeat(np.arange(len(left)), len(right))).columns,
         *right.take(np.tile(np.arange(len(right)), len(left))).columns],
        names=[*left.column_names, *right.column_names])
    if product.nbytes > max_bytes:
        raise ValueError(f"together they would take {product.nbytes} bytes, more than {max_bytes}")
    return DynamicFilteringData.from_table([*first.fields, *second.fields], product,
                                           null_safe=first.null_safe or second.null_safe)


def combine(filters: Sequence[tuple[str, DynamicFilteringData]], *, max_rows: int,
            max_bytes: int) -> tuple[list[str], DynamicFilteringData, list[str]]:
    """Conjoin ``filters`` (labelled, best first) while they combine, exceeded ones last.

    Returns the labels applied, the combined filter, and a note for each filter
    left out saying why.
    """
    # An exceeded filter prunes nothing: it goes last, and is applied (and reported) only when it is alone.
    (label, combined), *rest = sorted(filters, key=lambda item: not item[1].is_filtering)
    applied, notes = [label], []
    for label, data in rest:
        try:
            combined = conjoin(combined, data, max_rows=max_rows, max_bytes=max_bytes)
            applied.append(label)
        except ValueError as reason:
            notes.append(f"{label}: not applied with {' AND '.join(applied)} on one scan: {reason}")
    return applied, combined, notes


def _describe(data: DynamicFilteringData) -> str:
    return "exceeded" if not data.is_filtering else data.kind
