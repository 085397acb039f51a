"""A dynamic filter seen one field at a time: what a data source pushes into its own backend.

A source that reads a database or a service cannot hand it a :class:`DynamicFilteringData`; it hands it a
predicate per column: the exact keys as ``IN (...)``, a range as ``BETWEEN``, or, for a Bloom filter, nothing
the backend understands, so it tests the rows it fetched. :class:`FieldFilter` is that view of one field, and
:func:`on_fields` the filter reduced to the fields a source accepts.

A filter over several fields declares a join on all of them, so any row that joins matches each field's view
alone: a view is always a superset of what the whole filter keeps, never a subset. A Bloom filter over several
fields cannot be asked about one of them, so its per-field view filters nothing.

Imports: the root vocabulary and ``keyrows``; the payload class is the instance's own (``data.py`` imports this).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from dynsource.filtering import keyrows

if TYPE_CHECKING:
    from dynsource.filtering.data import DynamicFilteringData

@dataclass(frozen=True, eq=False)
class FieldFilter:
    """What a dynamic filter says of one field (:meth:`DynamicFilteringData.field_filter`).

    Attributes
    ----------
    name : str
        The field as it was asked for.
    type_name : str or None
        The filter field's Spark SQL type (the type of :attr:`values`, :attr:`min` and :attr:`max`); None when the
        filter has no such field.
    kind : {"exact", "range", "bloom", "none"}
        ``exact``: :attr:`values` are the keys (push ``IN (...)``); ``range``: every key lies within
        [:attr:`min`, :attr:`max`] (push ``BETWEEN``); ``bloom``: a single-field Bloom filter, ask
        :meth:`contains` or :meth:`mask` of the fetched rows; ``none``: the field filters nothing (no usable
        filter, a field the filter does not have, bounds holding NaN, a Bloom filter over several fields).
    matches_null : bool
        Whether a row whose value is null may match: only for a filter collected null-safe (``<=>``) that may
        hold a null key, and for ``none``.
    null_safe : bool
        The filter was collected for a ``<=>`` join.
    """

    name: str
    type_name: str | None
    kind: str
    matches_null: bool
    null_safe: bool
    _part: DynamicFilteringData | None = None
    _values: pa.Array | None = None
    _bounds: tuple[Any, Any] | None = None

    @property
    def is_filtering(self) -> bool:
        return self.kind != "none"

    @property
    def values(self) -> pa.Array:
        """``exact`` only: the distinct non-null keys, typed as the field (an empty array matches no non-null row).

        Any other kind raises ``TypeError``: an empty list there would read as "no key" and lose every row.
        """
        if self._values is None:
            raise TypeError(f"The {self.kind} filter of field '{self.name}' holds no key values; "
                            "use min/max (range) or contains()/mask().")
        return self._values

    def to_pylist(self) -> list[Any]:
        """``exact`` only: :attr:`values` as Python values (``int``, ``str``, ``datetime.date``...)."""
        return self.values.to_pylist()

    @property
    def min(self) -> Any:
        """``range`` only: the least non-null key (Python value), None when no non-null key matches."""
        return self._bound(0)

    @property
    def max(self) -> Any:
        """``range`` only: the greatest non-null key (Python value), None when no non-null key matches."""
        return self._bound(1)

    def contains(self, value: Any) -> bool:
        """Whether a row whose field holds ``value`` (converted to the field's type) may match; true for ``none``.

        Raises ``ValueError`` when ``value`` cannot be converted to the field's type.
        """
        if self._part is None:
            return True
        return bool(self.mask(keyrows.column(self.name, self.type_name, [value]))[0].as_py())

    def mask(self, values: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
        """For each value (any Arrow type Spark compares with the field's), whether its row may match.

        Compared as Spark compares the join's columns (an ``int`` key matches a ``bigint`` or a ``'01'`` string
        value); a value that cannot be converted is kept. All true for ``none``.
        """
        count = len(values)
        if self._part is None:
            return keyrows.constant(True, count)
        candidates = pa.table({self.name: values})
        return pc.fill_null(self._part.matching_mask(candidates), True)  # an unknown answer keeps the row

    def _bound(self, index: int) -> Any:
        if self._bounds is None:
            raise TypeError(f"The {self.kind} filter of field '{self.name}' has no bounds; "
                            "use values (exact) or contains()/mask().")
        return self._bounds[index]

    def __repr__(self) -> str:
        detail = {"exact": lambda: f", {len(self.values)} value(s)", "range": lambda: f", [{self.min!r}, {self.max!r}]"}
        shown = detail.get(self.kind, lambda: "")()
        return (f"FieldFilter({self.name!r}, kind={self.kind}{shown}, type={self.type_name}, "
                f"matches_null={self.matches_null})")


def field_filter(data: DynamicFilteringData, name: str) -> FieldFilter:
    """The view of field ``name`` (ignoring case) of ``data``: of the part owning it, for a filter of several parts."""
    part = next((part for part in data.parts if name.lower() in _lowered(part.field_names)), None)
    if not data.is_filtering or part is None:
        return FieldFilter(name, None, "none", matches_null=True, null_safe=data.null_safe)
    field = keyrows.field(part.fields, name)
    if part.kind == "exact":
        return _exact(name, field, part)
    if part.kind == "range":
        return _range(name, field, part)
    if len(part.fields) == 1:  # a Bloom filter answers for whole rows only
        matches_null = part.null_safe and part.contains((None,))
        return FieldFilter(name, field[1], "bloom", matches_null, part.null_safe, _part=part)
    return FieldFilter(name, field[1], "none", matches_null=True, null_safe=part.null_safe)


def _exact(name: str, field: tuple[str, str], part: DynamicFilteringData) -> FieldFilter:
    # With `=`, a key row holding a null matches nothing: none of its values is a key of any field.
    rows = part.table if part.null_safe else part.table.drop_null()
    keys = keyrows.plain(rows.column(field[0]))
    distinct = pc.unique(keys)
    return FieldFilter(name, field[1], "exact", distinct.null_count > 0, part.null_safe, _part=part,
                       _values=distinct.drop_null())


def _range(name: str, field: tuple[str, str], part: DynamicFilteringData) -> FieldFilter:
    index = part.field_names.index(field[0])
    lower, upper = (bound[index] for bound in part.bounds)
    if any(isinstance(bound, float) and math.isnan(bound) for bound in (lower, upper)):
        # Spark orders NaN above every float; a backend's BETWEEN does not: such bounds do not prune.
        return FieldFilter(name, field[1], "none", matches_null=True, null_safe=part.null_safe)
    # A null-safe range keeps null candidates: the bounds do not tell whether some key is null.
    return FieldFilter(name, field[1], "range", part.null_safe, part.null_safe, _part=part, _bounds=(lower, upper))


def on_fields(data: DynamicFilteringData, accepted: Iterable[str]) -> DynamicFilteringData:
    """``data`` reduced to the ``accepted`` fields (ignoring case): what a source accepting only those can apply.

    An exact part keeps its rows' values of the accepted fields, a range part their bounds; a Bloom part over a
    field not accepted is left out whole, as is a part of no accepted field. Each reduction keeps a superset of
    what the part kept. With nothing left the result filters nothing (:meth:`DynamicFilteringData.unfiltered`).
    """
    wanted = _lowered(accepted)
    if not data.is_filtering:
        return data
    kept = [reduced for part in data.parts if (reduced := _part_on(part, wanted)) is not None]
    return type(data).all_of(kept) if kept else type(data).unfiltered()


def _part_on(part: DynamicFilteringData, wanted: set[str]) -> DynamicFilteringData | None:
    fields = [field for field in part.fields if field[0].lower() in wanted]
    if len(fields) == len(part.fields):
        return part
    if not fields or part.kind == "bloom":
        return None
    names = [name for name, _ in fields]
    cls = type(part)
    if part.kind == "exact":
        rows = part.table if part.null_safe else part.table.drop_null()
        return cls.from_table(fields, rows.select(names), null_safe=part.null_safe)
    positions = [part.field_names.index(name) for name in names]
    lower, upper = ([bound[position] for position in positions] for bound in part.bounds)
    return cls.from_bounds(fields, lower, upper, key_count=len(part), null_safe=part.null_safe)


def left_out(data: DynamicFilteringData, accepted: Sequence[str]) -> list[str]:
    """The fields of filtering ``data`` that are not among ``accepted`` (ignoring case), in the filter's order."""
    wanted = _lowered(accepted)
    return [name for name in data.field_names if name.lower() not in wanted] if data.is_filtering else []


def _lowered(names: Iterable[str]) -> set[str]:
    return {name.lower() for name in names}

