"""Random Hive-partitioned tables and dynamic filters for the equivalence tests (hypothesis strategies).

A generated :class:`Case` is a table model (partition columns, one raw directory value per column and
partition, the rows of each data file) and a filter model (fields, key rows, payload kind, ``=`` or
``<=>``). Partition values are typed the way ``spark.read.parquet`` types them (declared type, else
``partitions.infer_type``) by :func:`typed_values`; keys are drawn from those values, converted to a
wider or narrower field type, and mixed with near misses and nulls.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynsource import directorynames, partitions
from dynsource.filtering import DynamicFilteringData
from dynsource.types import arrow_type

NULL = directorynames.DEFAULT_PARTITION_NAME
COLUMN_NAMES = ("p", "q", "r")
DATA_COLUMN = "v"
KINDS = ("int", "bigint", "string", "date", "timestamp", "boolean", "decimal")
# The partitionColumns declarations a column of each kind may get (None: inferred like Spark).
DECLARED = {
    "int": (None, None, "int", "bigint", "string", "decimal(12,2)"),
    "bigint": (None, None, "decimal(20,0)", "string"),
    "string": (None, None, "string"),
    "date": (None, None, "date", "string", "timestamp", "timestamp_ntz"),
    "timestamp": (None, None, "timestamp", "string", "timestamp_ntz"),
    "boolean": (None, "boolean", "string"),
    "decimal": (None, "decimal(10,2)", "decimal(10,2)", "string", "double"),
}
_INTEGRAL = {"smallint": 16, "int": 32, "bigint": 64}
_STRING_KEY = "string"


def key_types(column_type: str, kind: str) -> tuple[str, ...]:
    """Filter field types tried against a partition column of ``column_type`` holding ``kind`` values.

    The same type, wider and narrower ones, strings; and for a string column of typed texts, that type.
    """
    if column_type in _INTEGRAL:
        return (column_type, column_type, "int", "bigint", "smallint", "decimal(12,2)", _STRING_KEY)
    if column_type.startswith("decimal"):
        return (column_type, column_type, "decimal(6,1)", "decimal(20,4)", "int", "double", _STRING_KEY)
    if column_type == "double":
        return ("double", "double", "decimal(10,2)", "int", _STRING_KEY)
    if column_type == "date":
        return ("date", "date", "timestamp", _STRING_KEY)
    if column_type == "timestamp":
        return ("timestamp", "timestamp", "date", "timestamp_ntz", _STRING_KEY)
    if column_type == "timestamp_ntz":
        return ("timestamp_ntz", "timestamp_ntz", "date", "timestamp", _STRING_KEY)
    if column_type == "boolean":
        return ("boolean", "boolean", _STRING_KEY)
    return (_STRING_KEY, _STRING_KEY, *_TEXT_KEY_TYPES.get(kind, ()))


# What the texts of a string column of each kind of value parse into (Spark casts a string column to the key's type).
_TEXT_KEY_TYPES = {
    "int": ("int", "bigint"), "bigint": ("bigint",), "date": ("date",), "timestamp": ("timestamp", "timestamp_ntz"),
    "boolean": ("boolean",), "decimal": ("decimal(10,2)", "double"),
}


# ---------------------------------------------------------------------------------------------
# Raw directory values
# ---------------------------------------------------------------------------------------------

# Characters Spark escapes in directory names, a space, and non-ASCII text.
_TEXT = st.text(alphabet="ab/=% #é日1", min_size=1, max_size=4)


def _int_text(value: int, padded: bool) -> str:
    return f"{value:02d}" if padded and value >= 0 else str(value)


def _timestamp_text(stamp: dt.datetime) -> str:
    text = stamp.strftime("%Y-%m-%d %H:%M:%S")
    return text + (".5" if stamp.microsecond else "")


# Few distinct values, so that keys and partitions collide; the dates and times straddle the DST changes of
# America/Los_Angeles in 2020: 02:00-03:00 on March 8 does not exist there, 01:00-02:00 on November 1 happens twice.
_DATES = st.dates(dt.date(2020, 3, 6), dt.date(2020, 3, 10))
_TIMESTAMPS = st.builds(
    dt.datetime.combine,
    st.sampled_from([dt.date(2020, 3, 7), dt.date(2020, 3, 8), dt.date(2020, 3, 9), dt.date(2020, 11, 1)]),
    st.builds(dt.time, st.sampled_from([0, 2, 10, 1, 23]), st.sampled_from([0, 30]), st.just(0),
              st.sampled_from([0, 0, 0, 500_000])),
)
RAW_VALUES: dict[str, st.SearchStrategy[str]] = {
    "int": st.builds(_int_text, st.integers(-3, 12), st.booleans()),
    # Past an int, at the ends of a bigint, and past a bigint (Spark infers decimal(20,0)).
    "bigint": st.one_of(
        st.integers(-3, 12), st.integers(2**31, 2**31 + 3), st.integers(-(2**40) - 3, -(2**40)),
        st.sampled_from([2**63 - 1, -(2**63)]), st.integers(10**19, 10**19 + 2),
    ).map(str),
    "string": _TEXT.map(directorynames.escape_path_name),
    "date": _DATES.map(str),
    "timestamp": _TIMESTAMPS.map(lambda stamp: directorynames.escape_path_name(_timestamp_text(stamp))),
    "boolean": st.sampled_from(["true", "false"]),
    "decimal": st.decimals(-20, 20, places=2, allow_nan=False, allow_infinity=False).map(str),
}


_RAW_OR_NULL = {kind: st.one_of(values, values, values, st.just(NULL)) for kind, values in RAW_VALUES.items()}


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """Partition columns (name, generated kind, declared type or None) and partitions.

    Each partition is its raw values and its data files, each file the ``v`` values of its rows
    (no file: an empty directory; a file of no rows: an empty partition).
    """

    columns: tuple[tuple[str, str, str | None], ...]
    partitions: tuple[tuple[tuple[str, ...], tuple[tuple[int | None, ...], ...]], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.columns)

    @property
    def declared(self) -> dict[str, str]:
        return {name: declared for name, _, declared in self.columns if declared}

    def with_files(self) -> list[tuple[str, ...]]:
        """Raw values of the partitions Spark sees: the directories holding a data file."""
        return [raw for raw, files in self.partitions if files]

    def column_types(self, settings: partitions.PartitionSettings = partitions.DEFAULT_SETTINGS) -> dict[str, str]:
        """Each partition column's Spark type, as dynsource's schema gives it (under the session ``settings``)."""
        seen = self.with_files()
        return {
            name: declared or partitions.infer_type((raw[index] for raw in seen), settings)
            for index, (name, _, declared) in enumerate(self.columns)
        }


@dataclass(frozen=True)
class Filter:
    fields: tuple[tuple[str, str], ...]  # (name, Spark type); a name may differ in case from its column
    rows: tuple[tuple[Any, ...], ...]
    kind: str  # exact, bloom, range or exceeded
    null_safe: bool

    def data(self) -> DynamicFilteringData:
        """The payload, through its wire format as a reader gets it."""
        if self.kind == "exceeded":
            data = DynamicFilteringData(self.fields, exceed_threshold=True, null_safe=self.null_safe)
        else:
            data = DynamicFilteringData.from_table(self.fields, self.table(), kind=self.kind, null_safe=self.null_safe)
        return DynamicFilteringData.from_bytes(data.to_bytes())

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [() for _ in self.fields]
        return pa.table(
            [pa.array(list(values), arrow_type(type_name)) for (_, type_name), values in zip(self.fields, columns,
                                                                                            strict=True)],
            names=[name for name, _ in self.fields],
        )


@dataclass(frozen=True)
class Case:
    table: Table
    filter: Filter
    time_zone: str


def typed_values(table: Table, time_zone: str) -> list[tuple[Any, ...]]:
    """Each partition's values as Python objects of its column's Spark type (null partitions: None)."""
    types = table.column_types()
    raws = [raw for raw, _ in table.partitions]
    columns = [
        partitions.to_arrow([raw[index] for raw in raws], types[name], time_zone=time_zone, strict=False).to_pylist()
        for index, name in enumerate(table.names)
    ]
    return list(zip(*columns, strict=True))


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

_V = st.one_of(st.integers(0, 4), st.none())


@functools.cache
def _index(count: int) -> st.SearchStrategy[int]:
    return st.integers(0, count - 1)


def pick(draw, choices: Sequence[Any]) -> Any:
    """One of ``choices``; like sampled_from, hypothesis favours the first ones, so the usual ones come first."""
    return choices[draw(_index(len(choices)))]


@st.composite
def _files(draw) -> tuple[tuple[int | None, ...], ...]:
    # Mostly one to three files; sometimes an empty directory (no partition for Spark) or an empty file.
    return tuple(tuple(draw(_V) for _ in range(pick(draw, (2, 1, 3, 0)))) for _ in range(pick(draw, (1, 2, 3, 0))))


_FILES = _files()
ZONES = ("UTC", "Europe/Paris", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Kiritimati")


@st.composite
def tables(draw, max_columns: int = 3, max_partitions: int = 10, files=_FILES, names=COLUMN_NAMES) -> Table:
    count = draw(st.integers(1, max_columns))
    kinds = [pick(draw, KINDS) for _ in range(count)]
    columns = tuple((names[i], kind, pick(draw, DECLARED[kind])) for i, kind in enumerate(kinds))
    wanted = pick(draw, sorted(range(1, max_partitions + 1), key=lambda n: abs(n - 6)))
    # Drawn one by one: a unique list of this size may not exist (one boolean column has three values).
    raws = dict.fromkeys(tuple(draw(_RAW_OR_NULL[kind]) for kind in kinds) for _ in range(wanted))
    return Table(columns, tuple((raw, draw(files)) for raw in raws))


@st.composite
def filters(draw, table: Table, time_zone: str, kinds=("exact", "exact", "bloom", "range", "exceeded")) -> Filter:
    """Fields: partition columns in any order and case, maybe the data column ``v``; keys mostly from the table."""
    types = table.column_types()
    # Sometimes only the data column: the filter then prunes no partition.
    least = pick(draw, [1] * 9 + [0])
    chosen = draw(st.permutations(range(len(table.names))))[: draw(st.integers(least, len(table.names)))]
    with_data_column = draw(st.booleans()) if chosen else True
    fields = []
    values = typed_values(table, time_zone)
    extra = [tuple(draw(RAW_VALUES[kind]) for _, kind, _ in table.columns) for _ in range(draw(_index(4)))]
    extra_values = [
        partitions.to_arrow([raw[i] for raw in extra], types[name], time_zone=time_zone, strict=False).to_pylist()
        for i, name in enumerate(table.names)
    ]
    converters, pools = [], []
    for index in chosen:
        name = table.names[index]
        key_type = pick(draw, key_types(types[name], table.columns[index][1]))
        fields.append((pick(draw, (name, name.upper())), key_type))
        converters.append((index, types[name], key_type, draw(st.booleans())))
        keys = [to_key(row[index], *converters[-1][1:3], time_zone) for row in values]
        keys += [to_key(value, *converters[-1][1:3], time_zone) for value in extra_values[index]]
        pools.append([key for key in keys if key is not _SKIP and key is not None])
    if with_data_column:
        fields.append((DATA_COLUMN, pick(draw, ("int", "bigint"))))
    seen = [typed for (_, files), typed in zip(table.partitions, values, strict=True) if files] or values
    count = pick(draw, (3, 4, 2, 6, 1, 8, 0))
    rows = [_key_row(draw, seen, converters, pools, time_zone, with_data_column) for _ in range(count)]
    kind = pick(draw, kinds)
    return Filter(tuple(fields), tuple(rows), kind, draw(st.booleans()))


def _key_row(draw, seen, converters, pools, time_zone: str, with_data_column: bool) -> tuple:
    """A key row: mostly a partition's values (a likely match), else values picked per field (near misses)."""
    partition = pick(draw, seen) if pick(draw, (True, True, False)) else None
    row = []
    for (index, column_type, key_type, padded), pool in zip(converters, pools, strict=True):
        if pick(draw, [False] * 9 + [True]):
            row.append(None)
            continue
        key = _SKIP if partition is None else to_key(partition[index], column_type, key_type, time_zone, padded=padded)
        if key is _SKIP:
            key = pick(draw, pool) if pool else None
        row.append(key)
    if with_data_column:
        row.append(draw(_V))
    return tuple(row)


@st.composite
def cases(draw, max_columns: int = 3, max_partitions: int = 10, zones=ZONES, files=_FILES,
          kinds=("exact", "exact", "bloom", "range", "exceeded"), names=COLUMN_NAMES) -> Case:
    table = draw(tables(max_columns, max_partitions, files, names))
    zone = pick(draw, zones)
    return Case(table, draw(filters(table, zone, kinds)), zone)


# ---------------------------------------------------------------------------------------------
# Keys of another type
# ---------------------------------------------------------------------------------------------

_SKIP = object()


def to_key(value: Any, column_type: str, key_type: str, time_zone: str, *, padded: bool = False) -> Any:
    """``value`` (of ``column_type``) as a key of ``key_type``; a value the key type cannot hold is skipped."""
    if value is None or key_type == column_type:
        return value
    zone = ZoneInfo(time_zone)
    if key_type == "string":
        return _as_text(value, zone, padded)
    if isinstance(value, str):
        parsed = parse_text(value, key_type, time_zone)
        if parsed is None:
            return _SKIP
        return _decimal(parsed, arrow_type(key_type)) if key_type.startswith("decimal") else parsed
    if key_type in _INTEGRAL:
        return _integral(value, _INTEGRAL[key_type])
    if key_type.startswith("decimal"):
        return _decimal(value, arrow_type(key_type))
    if key_type == "double":
        return float(value)
    return moment(value, key_type, zone)


def moment(value: dt.date, key_type: str, zone: ZoneInfo) -> Any:
    """A date, an instant (aware, UTC) or a local time (naive) as a key of another of these types, as Spark casts:
    an instant is a local time in the session's ``zone``, a date is midnight."""
    local = value.astimezone(zone).replace(tzinfo=None) if _is_instant(value) else value
    if not isinstance(local, dt.datetime):
        local = dt.datetime.combine(local, dt.time())
    if key_type == "date":
        return local.date()
    if key_type == "timestamp_ntz":
        return local
    if key_type == "timestamp":
        return local.replace(tzinfo=zone).astimezone(dt.UTC)
    return _SKIP


def _is_instant(value: Any) -> bool:
    return isinstance(value, dt.datetime) and value.tzinfo is not None


def _as_text(value: Any, zone: ZoneInfo, padded: bool) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:03d}" if padded and value >= 0 else str(value)
    if isinstance(value, dt.datetime):
        return _timestamp_text(value.astimezone(zone) if _is_instant(value) else value)
    return str(value)


def _integral(value: Any, bits: int) -> Any:
    if isinstance(value, float) and not value.is_integer():
        return _SKIP
    if isinstance(value, Decimal) and value != value.to_integral_value():
        return _SKIP
    number = int(value)
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else _SKIP


def _decimal(value: Any, decimal_type: pa.Decimal128Type) -> Any:
    try:
        exact = Decimal(str(value))
        scaled = exact.quantize(Decimal(1).scaleb(-decimal_type.scale))
    except InvalidOperation:
        return _SKIP
    if scaled != exact or len(scaled.as_tuple().digits) > decimal_type.precision:
        return _SKIP
    return scaled


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


FILE_NAME = r"part-([0-9]{3})-[0-9]{2}\.parquet$"  # a data file's name; its group is the partition's index


def for_each_case(strategy: st.SearchStrategy[Case], count: int, check: Callable[[Case], None]) -> None:
    """``check`` each of the first ``count`` cases ``strategy`` generates: the very same cases wherever it is called
    with the same strategy (one derandomized function generates them), so that a plain-Python check and Spark's
    check of them see one sequence."""

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=strategy)
    def run(case: Case) -> None:
        check(case)

    run()


def write_table(fs: fsspec.AbstractFileSystem, root: str, table: Table) -> dict[tuple[str, ...], list[str]]:
    """Write ``table`` under ``root`` of ``fs``; the data file paths of each partition.

    A file's name holds its partition's index in ``table.partitions`` (:data:`FILE_NAME`): whatever a reader does
    with the escaped directory names, the name tells which partition a row came from.
    """
    written = {}
    for index, (raw, files) in enumerate(table.partitions):
        names = [directorynames.escape_path_name(name) for name in table.names]
        directory = "/".join([root, *(f"{name}={value}" for name, value in zip(names, raw, strict=True))])
        fs.makedirs(directory, exist_ok=True)
        paths = [f"{directory}/part-{index:03d}-{number:02d}.parquet" for number in range(len(files))]
        for path, rows in zip(paths, files, strict=True):
            fs.pipe(path, _parquet(rows))
        if files:
            fs.pipe(f"{directory}/_SUCCESS", b"")  # Spark's commit marker is not data
        written[raw] = paths
    return written


@functools.lru_cache(maxsize=512)
def _parquet(rows: tuple[int | None, ...]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({DATA_COLUMN: pa.array(rows, pa.int32())}), sink)
    return sink.getvalue().to_pybytes()


def parse_text(text: str, type_name: str, time_zone: str) -> Any:
    """A plain-Python reading of Spark's CAST of the string ``text`` to ``type_name`` (None: no value).

    Only the shapes the strategies make are recognised; anything else is None.
    """
    text = text.strip()
    if type_name in _INTEGRAL:
        number = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
        return None if number is None else _none_if_skipped(_integral(number, _INTEGRAL[type_name]))
    if type_name.startswith("decimal") or type_name == "double":
        if not re.fullmatch(r"[+-]?[0-9]+(\.[0-9]+)?", text):
            return None
        return float(text) if type_name == "double" else Decimal(text)
    if type_name == "boolean":
        return {"true": True, "false": False}.get(text.lower())
    if type_name == "date":
        match = re.fullmatch(r"([0-9]{4}-[0-9]{2}-[0-9]{2})(?:[ T].*)?", text)
        return dt.date.fromisoformat(match[1]) if match else None
    if type_name in ("timestamp", "timestamp_ntz"):
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?: [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)?", text):
            return None
        stamp = dt.datetime.fromisoformat(text)
        return stamp if type_name == "timestamp_ntz" else stamp.replace(tzinfo=ZoneInfo(time_zone)).astimezone(dt.UTC)
    return text


def _none_if_skipped(value: Any) -> Any:
    return None if value is _SKIP else value
