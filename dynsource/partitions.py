"""Hive/Spark partition directory values: type inference and typed values.

This module is the one place that knows how Spark types the values of ``k=v`` directory names (the names and their
escapes are :mod:`dynsource.directorynames`); the string CASTs it applies to them are :mod:`dynsource.sparkcast`.
It follows Spark 4.3 (``PartitioningUtils``, ``ExternalCatalogUtils``, ``SparkDateTimeUtils`` and the JDK parsers
they call), legacy time parser off. It was checked value by value against those JVM functions, and the
tests check it against ``spark.read.parquet`` under each session setting that changes the result.

Three session settings decide how Spark types a directory value, and Spark does not tell a Python
data source any of them: :class:`PartitionSettings` carries them from the driver.

Deliberate differences from Spark, all because ``dynsource.types`` has no such types or because
Spark's own result is wrong:

* a column whose values all look like ``HH:mm:ss[.SSSSSS]`` (Spark 4.3 infers ``time(6)``) or are
  all ``__HIVE_DEFAULT_PARTITION__`` (Spark infers ``void``) is inferred as ``string``;
* a value for a declared ``decimal(p,s)`` column is rounded half-up to scale ``s`` (Spark's row-based
  reader and CAST); Spark's vectorized Parquet reader instead reinterprets the unscaled digits.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from dynsource import sparkcast
from dynsource.directorynames import DEFAULT_PARTITION_NAME, unescape_path_name
from dynsource.types import arrow_type, normalize_type

TIME_ZONE_SETTING = "spark.sql.session.timeZone"
INFERENCE_SETTING = "spark.sql.sources.partitionColumnTypeInference.enabled"
TIMESTAMP_TYPE_SETTING = "spark.sql.timestampType"


@dataclass(frozen=True)
class PartitionSettings:
    """The session settings under which Spark types partition directory values.

    ``time_zone`` is ``spark.sql.session.timeZone``: a ``timestamp`` value such as ``2024-01-01 05%3A00%3A00``
    is a wall-clock time there (``None``: not known, and such a value is refused rather than guessed);
    ``infer_types`` is ``spark.sql.sources.partitionColumnTypeInference.enabled`` (off: every undeclared
    column is a string); ``timestamp_ntz`` is ``spark.sql.timestampType=TIMESTAMP_NTZ``, the type a
    timestamp-looking column is inferred as.
    """

    time_zone: str | None = None
    infer_types: bool = True
    timestamp_ntz: bool = False

    def timestamp_type(self) -> str:
        """The type Spark infers a column of timestamp-looking values as."""
        return "timestamp_ntz" if self.timestamp_ntz else "timestamp"


DEFAULT_SETTINGS = PartitionSettings()

# ---------------------------------------------------------------------------------------------
# Type inference (PartitioningUtils.inferPartitionColumnValue / resolveTypeConflicts)
# ---------------------------------------------------------------------------------------------

_DECIMAL_DIGITS = {"int": 10, "bigint": 20}  # DecimalType.forType
_COLON = r"%3[aA]"  # an escaped ':', as timestamps' directory names have them
# The timestamp partition pattern 'yyyy-MM-dd HH:mm:ss[.S]' as java.time parses it strictly: an
# unsigned year has exactly 4 digits, '+' needs more than 4, '-' any (but not minus zero).
_PARTITION_YEAR = r"(?P<year>[0-9]{4}|\+[0-9]{5,}|-[0-9]{4,})"
_TIMESTAMP_PARTITION = re.compile(
    _PARTITION_YEAR + r"-[0-9]{2}-[0-9]{2} [0-9]{2}(?::[0-9]{2}){2}(?:\.[0-9])?"
)
# The date partition pattern 'yyyy-MM-dd', parsed the same way.
_DATE_PARTITION = re.compile(_PARTITION_YEAR + r"-[0-9]{2}-[0-9]{2}")


def infer_type(raw_values: Iterable[str], settings: PartitionSettings = DEFAULT_SETTINGS) -> str:
    """Spark SQL type name ``spark.read.parquet`` infers for a partition column with these raw values.

    Values are the raw (escaped) directory values; ``__HIVE_DEFAULT_PARTITION__`` (null) is ignored
    and a column without any other value is ``string``.
    """
    if not settings.infer_types:
        return "string"
    inferred = _infer_type(raw_values)
    return settings.timestamp_type() if inferred == "timestamp" else inferred


def _infer_type(raw_values: Iterable[str]) -> str:
    values = pc.unique(pa.array(list(raw_values), pa.string()))
    values = pc.filter(values, pc.not_equal(values, DEFAULT_PARTITION_NAME))
    # Spark folds the values' types pairwise, but the result only depends on the set of types.
    kinds: set[str] = set()
    for pattern, classify in _FAST_INFERENCE:
        matches = pc.fill_null(pc.match_substring_regex(values, pattern), False)
        if pc.any(matches).as_py():
            kinds |= classify(pc.filter(values, matches))
            values = pc.filter(values, pc.invert(matches))
    for raw in values.to_pylist():
        if "string" in kinds:  # nothing widens a string back
            break
        kinds.add(_infer_value(raw))
    return functools.reduce(_wider, kinds) if kinds else "string"


def _integers(values: pa.Array) -> set[str]:
    low, high = sparkcast.INT_RANGE[32]
    bounds = pc.min_max(pc.cast(values, pa.int64()))
    return {"int" if low <= bounds["min"].as_py() and bounds["max"].as_py() <= high else "bigint"}


def _dates(values: pa.Array) -> set[str]:
    try:
        pc.cast(values, pa.date32())
    except pa.ArrowInvalid:  # some day does not exist: let Spark's rules judge each value
        return {_infer_value(raw) for raw in values.to_pylist()}
    return {"date"}


def _timestamps(values: pa.Array) -> set[str]:
    try:
        pc.cast(pc.replace_substring_regex(values, _COLON, ":"), pa.timestamp("us"))
    except pa.ArrowInvalid:
        return {_infer_value(raw) for raw in values.to_pylist()}
    return {"timestamp"}


# Common shapes whose inferred type Arrow can establish for a whole array at once.
_FAST_INFERENCE: list[tuple[str, Callable[[pa.Array], set[str]]]] = [
    (r"^-?[0-9]{1,18}$", _integers),
    (r"^-?[0-9]*\.[0-9]+$", lambda values: {"double"}),  # a fraction digit: BigDecimal scale > 0
    (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", _dates),
    (r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}(?:(?::|%3[aA])[0-9]{2}){2}(?:\.[0-9])?$", _timestamps),
]


def _infer_value(raw: str) -> str:
    if sparkcast.java_integer(raw, 32) is not None:
        return "int"
    if sparkcast.java_integer(raw, 64) is not None:
        return "bigint"
    decimal = sparkcast.java_big_decimal(raw)
    if decimal is not None and decimal.as_tuple().exponent >= 0:  # Spark requires BigDecimal scale <= 0
        precision, _ = sparkcast.spark_decimal_shape(decimal)
        if precision <= 38:
            return f"decimal({precision},0)"
    if sparkcast.java_double(raw) is not None:
        return "double"
    if _is_partition_timestamp(unescape_path_name(raw)):
        return "timestamp"
    if _is_partition_date(raw):
        return "date"
    return "string"


def _is_partition_timestamp(text: str) -> bool:
    """Parses with the partition timestamp pattern and (the zone only matters at the range's ends) CASTs."""
    match = _TIMESTAMP_PARTITION.fullmatch(text)
    return bool(match and _parsable_year(match["year"])) and sparkcast.string_to_timestamp(text, dt.UTC) is not None


def _is_partition_date(raw: str) -> bool:
    match = _DATE_PARTITION.fullmatch(raw)
    return bool(match and _parsable_year(match["year"])) and sparkcast.string_to_date(raw) is not None


def _parsable_year(year: str) -> bool:
    """java.time refuses a negative zero year ('-0000'); CAST takes at most 6 year digits."""
    return len(year.lstrip("+-")) <= 6 and (not year.startswith("-") or year.strip("-0") != "")


def _wider(left: str, right: str) -> str:
    """``findWiderTypeForPartitionColumn`` for the types inference produces."""
    pair = {left, right}
    if len(pair) == 1:
        return left
    if pair == {"int", "bigint"}:
        return "bigint"
    if pair == {"int", "double"}:
        return "double"
    if pair == {"date", "timestamp"}:
        return "timestamp"
    if all(t in _DECIMAL_DIGITS or t.startswith("decimal") for t in pair):
        return f"decimal({min(38, max(_decimal_digits(t) for t in pair))},0)"
    return "string"


def _decimal_digits(type_name: str) -> int:
    return _DECIMAL_DIGITS.get(type_name) or int(type_name[len("decimal(") :].split(",")[0])


# ---------------------------------------------------------------------------------------------
# Typed values (PartitioningUtils.castPartValueToDesiredType)
# ---------------------------------------------------------------------------------------------


class _Conversion:
    """How raw values of one type become an Arrow array.

    ``fast`` values (those matching ``fast_pattern`` on the raw text) are converted by ``fast_cast``
    with pyarrow.compute, whose semantics agree with Spark's on exactly those texts; the rest go
    through ``parse``, Spark's per-value conversion, which returns ``None`` when Spark fails.
    Both produce ``parse_type``, which is then cast to the target unchecked, as Java narrows.
    """

    def __init__(
        self,
        parse_type: pa.DataType,
        parse: Callable[[str], Any],
        fast_pattern: str | None = None,
        fast_cast: Callable[[pa.Array], pa.Array] | None = None,
    ) -> None:
        self.parse_type = parse_type
        self.parse = parse
        self.fast_pattern = fast_pattern
        self.fast_cast = fast_cast or (lambda values: pc.cast(values, parse_type))


def to_arrow(
    raw_values: Sequence[str], type_name: str, *, time_zone: str | None = None, strict: bool = True
) -> pa.Array:
    """Typed Arrow array (``types.arrow_type(type_name)``) of raw (escaped) partition values.

    Values convert as Spark gives them for a partition column of that type (``'01'`` is int 1, a
    string is unescaped); ``__HIVE_DEFAULT_PARTITION__`` is null. ``timestamp`` values are wall-clock
    times in ``time_zone`` returned as UTC instants; without a zone they raise :class:`ZoneUnknownError`.
    A value Spark cannot convert raises ``ValueError`` (``strict``) or becomes null.
    """
    canonical = normalize_type(type_name)
    target = arrow_type(canonical)
    values = pa.array(raw_values, pa.string())
    values = pc.if_else(pc.equal(values, DEFAULT_PARTITION_NAME), pa.scalar(None, pa.string()), values)
    conversion = _conversion(canonical, time_zone)
    converted = _convert(values, conversion, canonical, strict)
    return converted if converted.type == target else pc.cast(converted, target, safe=False)


def _convert(values: pa.Array, conversion: _Conversion, type_name: str, strict: bool) -> pa.Array:
    result = pa.nulls(len(values), conversion.parse_type)
    slow = pc.is_valid(values)
    if conversion.fast_pattern is not None:
        fast = pc.fill_null(pc.match_substring_regex(values, conversion.fast_pattern), False)
        try:
            result = conversion.fast_cast(pc.if_else(fast, values, pa.scalar(None, pa.string())))
            slow = pc.and_(slow, pc.invert(fast))
        except pa.ArrowException:  # e.g. '2022-02-30' looks like a date but is not: `parse` judges them all
            pass
    if not pc.any(slow).as_py():
        return result
    slow_values = pc.filter(values, slow).to_pylist()
    parsed: dict[str, Any] = {}
    for raw in dict.fromkeys(slow_values):
        parsed[raw] = conversion.parse(raw)
        if parsed[raw] is None and strict:
            raise unconvertible(raw, type_name)
    replacements = pa.array([parsed[raw] for raw in slow_values], conversion.parse_type)
    return pc.replace_with_mask(result, slow, replacements)


class ZoneUnknownError(ValueError):
    """A ``timestamp`` partition value was to be typed without the session's time zone."""


def zone_unknown(column: str) -> ZoneUnknownError:
    """The error for typing timestamp partition column ``column`` without knowing the session's time zone."""
    return ZoneUnknownError(
        f"Partition column '{column}' is a TIMESTAMP: Spark reads its directory values as wall-clock times in the "
        f"session time zone ({TIME_ZONE_SETTING}), which Spark does not pass to a Python data source. Give reader "
        "option 'timeZone' (e.g. .option('timeZone', spark.conf.get('spark.sql.session.timeZone'))), or read the "
        "table through dynsource.sql, dynsource.table or dynamic_join, which pass the session's."
    )


def unconvertible(raw: str, type_name: str) -> ValueError:
    """The error for a partition value Spark cannot convert to its column's type."""
    return ValueError(f"Partition value '{raw}' cannot be converted to type {type_name}.")


def _conversion(type_name: str, time_zone: str | None) -> _Conversion:
    if type_name.startswith("decimal"):
        return _decimal_conversion(type_name)
    if type_name == "timestamp":
        if time_zone is None:
            raise ZoneUnknownError(f"Timestamp partition values need the session time zone ({TIME_ZONE_SETTING}).")
        return _timestamp_conversion(sparkcast.resolve_zone(time_zone))
    return _CONVERSIONS[type_name]


def _parse_boolean(raw: str) -> bool | None:
    """Scala's ``String.toBoolean``: ``equalsIgnoreCase`` with "true" or "false"."""
    for word, value in (("true", True), ("false", False)):
        if len(raw) == len(word) and all(_same_ignoring_case(a, b) for a, b in zip(raw, word, strict=True)):
            return value
    return None


def _is_true(values: pa.Array) -> pa.Array:
    return pc.equal(pc.utf8_lower(values), "true")


def _same_ignoring_case(a: str, b: str) -> bool:
    """``String.regionMatches(ignoreCase=true)`` for one char (so 'ſ' matches 's')."""
    return a == b or a.upper() == b.upper() or a.upper().lower() == b.upper().lower()


_INT_FAST = r"^-?[0-9]{1,9}$"  # never overflows an int, and Arrow reads it like Integer.parseInt
_DOUBLE_FAST = r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"  # Arrow's correctly rounded parser
_DATETIME_FAST = (
    rf"^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}"
    rf"(?:[ T][0-9]{{2}}{_COLON}[0-9]{{2}}(?:{_COLON}[0-9]{{2}}(?:\.[0-9]{{1,6}})?)?)?$"
)


def _local_timestamps(values: pa.Array) -> pa.Array:
    return pc.cast(pc.replace_substring_regex(values, _COLON, ":"), pa.timestamp("us"))


def _parse_timestamp_ntz(raw: str) -> int | None:
    micros = sparkcast.string_to_timestamp_ntz(unescape_path_name(raw))
    if micros is None:
        days = sparkcast.string_to_date(raw)
        micros = None if days is None else days * sparkcast.MICROS_PER_DAY
    return micros if micros is None or sparkcast.INT64_MIN <= micros <= sparkcast.INT64_MAX else None


_CONVERSIONS = {
    "string": _Conversion(pa.string(), unescape_path_name, r"^[^%]*$", lambda values: values),
    "binary": _Conversion(pa.binary(), lambda raw: raw.encode("utf-8"), r"^"),
    "boolean": _Conversion(pa.bool_(), _parse_boolean, r"^(?i:true|false)$", _is_true),
    # tinyint and smallint are Integer.parseInt(value).toByte/.toShort: they wrap around.
    "tinyint": _Conversion(pa.int32(), lambda raw: sparkcast.java_integer(raw, 32), _INT_FAST),
    "smallint": _Conversion(pa.int32(), lambda raw: sparkcast.java_integer(raw, 32), _INT_FAST),
    "int": _Conversion(pa.int32(), lambda raw: sparkcast.java_integer(raw, 32), _INT_FAST),
    "bigint": _Conversion(pa.int64(), lambda raw: sparkcast.java_integer(raw, 64), r"^-?[0-9]{1,18}$"),
    # float is Double.parseDouble(value).toFloat: parsed as a double, then rounded.
    "float": _Conversion(pa.float64(), sparkcast.java_double, _DOUBLE_FAST),
    "double": _Conversion(pa.float64(), sparkcast.java_double, _DOUBLE_FAST),
    "date": _Conversion(pa.date32(), sparkcast.string_to_date, r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
    # A value that is no timestamp falls back to CAST(CAST(raw AS DATE) AS TIMESTAMP_NTZ).
    "timestamp_ntz": _Conversion(pa.timestamp("us"), _parse_timestamp_ntz, _DATETIME_FAST, _local_timestamps),
}


def _timestamp_conversion(zone: dt.tzinfo) -> _Conversion:
    # Spark's fallback through DATE always fails for TIMESTAMP (its outer CAST has no zone), so only
    # the direct CAST counts.
    def parse(raw: str) -> int | None:
        return sparkcast.string_to_timestamp(unescape_path_name(raw), zone)

    arrow_zone = _arrow_zone_name(zone)

    def fast_cast(values: pa.Array) -> pa.Array:
        local = _local_timestamps(values)
        # 'earliest' takes the first of two repeated wall-clock times, as java.time does; a time in a
        # DST gap raises, and `_convert` then hands every value to `parse`.
        zoned = pc.assume_timezone(local, timezone=arrow_zone, ambiguous="earliest", nonexistent="raise")
        return pc.cast(zoned, pa.timestamp("us", tz="UTC"))

    utc = pa.timestamp("us", tz="UTC")
    return _Conversion(utc, parse, _DATETIME_FAST if arrow_zone else None, fast_cast)


def _arrow_zone_name(zone: dt.tzinfo) -> str | None:
    """The zone's name as Arrow knows it, or ``None`` when Arrow cannot use it."""
    if isinstance(zone, ZoneInfo):
        return zone.key
    offset = int(zone.utcoffset(None).total_seconds())
    if offset % 60:
        return None
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"


def _decimal_conversion(type_name: str) -> _Conversion:
    target = arrow_type(type_name)
    precision, scale = target.precision, target.scale
    quantum = Decimal(1).scaleb(-scale)
    # Room for 38 digits on both sides of the point: Python's default 28 digits would refuse wide values.
    context = Context(prec=80)

    def parse(raw: str) -> Decimal | None:
        value = sparkcast.java_big_decimal(raw)
        if value is None or sparkcast.spark_decimal_shape(value)[0] > 38:  # Spark's Literal(BigDecimal) fails
            return None
        rounded = value.quantize(quantum, rounding=ROUND_HALF_UP, context=context)
        return rounded if len(rounded.as_tuple().digits) <= precision else None

    integer_digits = precision - scale
    fast = None
    if integer_digits > 0:
        fraction = rf"(?:\.[0-9]{{0,{scale}}})?" if scale else r"\.?"
        fast = rf"^-?[0-9]{{1,{integer_digits}}}{fraction}$"
    return _Conversion(target, parse, fast)
