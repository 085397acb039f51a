"""Hive/Spark partition directory values: names, escapes, type inference and typed values.

This module is the one place that knows how Spark reads ``k=v`` directory names. It follows
Spark 4.3 (``PartitioningUtils``, ``ExternalCatalogUtils``, ``SparkDateTimeUtils`` and the JDK parsers
they call) under Spark's defaults: ANSI mode on, ``spark.sql.timestampType=TIMESTAMP_LTZ``,
partition type inference on, legacy time parser off. It was checked value by value against those
JVM functions, and ``tests/test_partition_inference.py`` checks it against ``spark.read.parquet``.

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
import os
import re
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from dynsource.types import arrow_type, normalize_type

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"

# ---------------------------------------------------------------------------------------------
# Directory names
# ---------------------------------------------------------------------------------------------

# ExternalCatalogUtils.charToEscape (the extra Windows-only characters are left out).
_CHARS_TO_ESCAPE = frozenset([chr(c) for c in range(1, 32)] + list("\"#%'*/:=?\\\x7f{[]^"))
_ESCAPE = re.compile(r"%([0-9a-fA-F]{2})")


def parse_directory_name(name: str) -> tuple[str, str] | None:
    """``'k=v'`` -> (unescaped column name, raw value as in the path, still escaped).

    ``None`` when the name has no ``=`` or an empty column name. Splits at the first ``=``.
    """
    column, sep, value = name.partition("=")
    if not sep:
        return None
    column = unescape_path_name(column)
    return (column, value) if column else None


def escape_path_name(text: str) -> str:
    """Spark's ``ExternalCatalogUtils.escapePathName``: ``'a/b'`` -> ``'a%2Fb'``."""
    if not any(c in _CHARS_TO_ESCAPE for c in text):
        return text
    return "".join(f"%{ord(c):02X}" if c in _CHARS_TO_ESCAPE else c for c in text)


def unescape_path_name(text: str) -> str:
    """Spark's ``ExternalCatalogUtils.unescapePathName``: ``'a%2Fb'`` -> ``'a/b'``.

    Only ``%`` and two ASCII hex digits is an escape; any other ``%`` is kept as is.
    """
    return _ESCAPE.sub(lambda match: chr(int(match[1], 16)), text) if "%" in text else text


def is_hidden(name: str) -> bool:
    """Whether Spark skips this file or directory name when it lists a table.

    Spark's ``shouldFilterOutPathName``, except that ``_metadata`` and ``_common_metadata`` are
    hidden too: Spark keeps them only for Parquet's summary files, and we want data files.
    """
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


# ---------------------------------------------------------------------------------------------
# JDK number parsers: Integer.parseInt, Long.parseLong, new BigDecimal(String), Double.parseDouble
# ---------------------------------------------------------------------------------------------

# Python's \d is Unicode Nd, like Java's Character.digit; Java reads UTF-16 units, so only BMP digits.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
_JAVA_BIG_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_JAVA_DOUBLE = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<special>NaN|Infinity)"
    r"|(?P<decimal>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_JAVA_TRIM = "".join(chr(c) for c in range(33))  # String.trim(): every char <= ' '
_INT_RANGE = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


def _bmp(text: str) -> bool:
    return text.isascii() or max(text) <= "\uffff"


def _java_integer(text: str, bits: int) -> int | None:
    if not (_JAVA_INTEGER.fullmatch(text) and _bmp(text)):
        return None
    value = int(text)
    low, high = _INT_RANGE[bits]
    return value if low <= value <= high else None


def _java_big_decimal(text: str) -> Decimal | None:
    if not (_JAVA_BIG_DECIMAL.fullmatch(text) and _bmp(text)):
        return None
    value = Decimal(text)
    # BigDecimal keeps its scale in an int.
    return value if -(2**31) <= value.as_tuple().exponent < 2**31 else None


def _java_double(text: str) -> float | None:
    match = _JAVA_DOUBLE.fullmatch(text.strip(_JAVA_TRIM))
    if match is None:
        return None
    sign = match["sign"]
    if match["special"]:
        return float(sign + ("nan" if match["special"] == "NaN" else "inf"))
    if match["decimal"]:
        return float(sign + match["decimal"])
    try:
        return float.fromhex(sign + match["hex"])
    except OverflowError:  # Java rounds an overflowing hex literal to infinity
        return float(sign + "inf")


def _spark_decimal_shape(value: Decimal) -> tuple[int, int]:
    """(precision, scale) of Spark's ``Decimal(bigDecimal)`` (negative scales are folded into 0)."""
    _, digits, exponent = value.as_tuple()
    scale = -int(exponent)
    if scale < 0:
        return len(digits) - scale, 0
    return max(len(digits), scale), scale


# ---------------------------------------------------------------------------------------------
# Dates, timestamps and zone IDs (SparkDateTimeUtils, java.time)
# ---------------------------------------------------------------------------------------------

_SPARK_TRIM = _JAVA_TRIM + "\x7f"  # UTF8String.isWhitespaceOrISOControl, applied to UTF-8 bytes
_MICROS_PER_DAY = 86_400_000_000
_DAYS_PER_400_YEARS = 146_097
_INT64_MIN, _INT64_MAX = _INT_RANGE[64]

# java.time.ZoneId.SHORT_IDS, which Spark's getZoneId passes to ZoneId.of.
_SHORT_IDS = {
    "ACT": "Australia/Darwin", "AET": "Australia/Sydney", "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo", "AST": "America/Anchorage", "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare", "CNT": "America/St_Johns", "CST": "America/Chicago", "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa", "ECT": "Europe/Paris", "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata", "JST": "Asia/Tokyo", "MIT": "Pacific/Apia", "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland", "PLT": "Asia/Karachi", "PNT": "America/Phoenix", "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal", "VST": "Asia/Ho_Chi_Minh",
    "EST": "-05:00", "MST": "-07:00", "HST": "-10:00",
}
_ZONE_OFFSET = re.compile(r"[+-](?:[0-9]{1,2}|[0-9]{4}|[0-9]{6}|[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)")
_ZONE_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")
# The timestamp partition pattern 'yyyy-MM-dd HH:mm:ss[.S]' as java.time parses it strictly: an
# unsigned year has exactly 4 digits, '+' needs more than 4, '-' any (but not minus zero).
_PARTITION_YEAR = r"(?P<year>[0-9]{4}|\+[0-9]{5,}|-[0-9]{4,})"
_TIMESTAMP_PARTITION = re.compile(
    _PARTITION_YEAR + r"-[0-9]{2}-[0-9]{2} [0-9]{2}(?::[0-9]{2}){2}(?:\.[0-9])?"
)
# The date partition pattern 'yyyy-MM-dd', parsed the same way.
_DATE_PARTITION = re.compile(_PARTITION_YEAR + r"-[0-9]{2}-[0-9]{2}")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _valid_date(year: int, month: int, day: int) -> bool:
    if not 1 <= month <= 12:
        return False
    return 1 <= day <= (29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1])


def _epoch_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01, proleptic Gregorian, for any year (Howard Hinnant's days_from_civil)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * _DAYS_PER_400_YEARS + day_of_era - 719_468


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> dt.tzinfo | None:
    """Spark's ``getZoneId`` (``ZoneId.of`` with ``SHORT_IDS``); ``None`` when Java rejects the ID."""
    name = re.sub(r"([+-])([0-9]):", r"\g<1>0\2:", name, count=1)  # '+1:00' -> '+01:00'
    name = re.sub(r"([+-])([0-9]{2}):([0-9])$", r"\1\2:0\3", name, count=1)  # '+01:0' -> '+01:00'
    name = _SHORT_IDS.get(name, name)
    if len(name) <= 1 or name[0] in "+-":
        return dt.UTC if name == "Z" else _zone_offset(name)
    for prefix in ("UTC", "GMT", "UT"):
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            if not rest:
                return dt.UTC
            if rest[0] in "+-":
                return _zone_offset(rest)
            break
    if not _ZONE_REGION.fullmatch(name):
        return None
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return None


def _zone_offset(text: str) -> dt.timezone | None:
    """``java.time.ZoneOffset.of``: +h, +hh, +hhmm, +hh:mm, +hhmmss, +hh:mm:ss, at most 18 hours."""
    if not _ZONE_OFFSET.fullmatch(text):
        return None
    digits = text[1:].replace(":", "")
    hours = int(digits[:2] if len(digits) > 1 else digits)
    minutes, seconds = int(digits[2:4] or 0), int(digits[4:6] or 0)
    total = hours * 3600 + minutes * 60 + seconds
    if hours > 18 or minutes > 59 or seconds > 59 or total > 18 * 3600:
        return None
    return dt.timezone((-1 if text[0] == "-" else 1) * dt.timedelta(seconds=total))


@functools.lru_cache(maxsize=1)
def _local_zone() -> dt.tzinfo:
    """The JVM's default zone, found as the JDK does on Linux: $TZ, /etc/timezone, /etc/localtime."""
    name = os.environ.get("TZ", "").lstrip(":")
    if not name and os.path.isfile("/etc/timezone"):
        with open("/etc/timezone", encoding="utf-8") as handle:
            name = handle.read().strip()
    if not name and os.path.islink("/etc/localtime"):
        name = os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]
    return (_zone(name) if name else None) or dt.UTC


def _resolve_zone(time_zone: str | None) -> dt.tzinfo:
    if time_zone is None:
        return _local_zone()
    zone = _zone(time_zone)
    if zone is None:
        raise ValueError(f"Time zone '{time_zone}' is not a valid zone ID; expected e.g. 'Europe/Paris'.")
    return zone


def _offset_seconds(zone: dt.tzinfo, year: int, month: int, day: int, seconds_of_day: int) -> int:
    """UTC offset of a wall-clock time, resolved like ``ZonedDateTime.of``.

    In a gap or an overlap both java.time and ``fold=0`` use the offset before the transition.
    Years outside Python's 1..9999 are moved by whole 400-year cycles, which repeat the calendar.
    """
    if isinstance(zone, dt.timezone):
        return int(zone.utcoffset(None).total_seconds())
    cycles = 0
    if year < 1:
        cycles = (400 - year) // 400
    elif year > 9999:
        cycles = -((year - 9999 + 399) // 400)
    hour, rest = divmod(seconds_of_day, 3600)
    local = dt.datetime(year + 400 * cycles, month, day, hour, rest // 60, rest % 60, tzinfo=zone)
    return int(local.utcoffset().total_seconds())


def _string_to_date(text: str) -> int | None:
    """``SparkDateTimeUtils.stringToDate`` (CAST string AS DATE) -> days since the epoch."""
    text = text.strip(_SPARK_TRIM)
    sign = -1 if text[:1] == "-" else 1
    if text[:1] in ("-", "+"):
        text = text[1:]
    cut = min((i for i in (text.find(" "), text.find("T")) if i >= 0), default=len(text))
    parts = text[:cut].split("-")
    if len(parts) > 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    if not 4 <= len(parts[0]) <= 7 or any(not 1 <= len(p) <= 2 for p in parts[1:]):
        return None
    if cut < len(text) and len(parts) < 3:  # 'yyyy' and 'yyyy-[m]m' must be the whole text
        return None
    year, month, day = (int(p) for p in [*parts, "1", "1"][:3])
    if not _valid_date(sign * year, month, day):
        return None
    days = _epoch_days(sign * year, month, day)
    return days if _INT_RANGE[32][0] <= days <= _INT_RANGE[32][1] else None  # Spark's dates are ints


def _timestamp_digits_ok(segment: int, digits: int) -> bool:
    if segment == 0:
        return 4 <= digits <= 6
    if segment == 6:
        return True
    if segment == 7:
        return digits <= 2
    return 1 <= digits <= 2


def _parse_timestamp(text: str) -> tuple[list[int], str | None, bool] | None:
    """``SparkDateTimeUtils.parseTimestampString``: (segments, zone text, time only) or ``None``.

    The segments are year, month, day, hour, minute, second and microsecond.
    """
    start = len(text) - len(text.lstrip(_SPARK_TRIM))
    end = len(text.rstrip(_SPARK_TRIM))
    if start >= end:
        return None
    segments = [1, 1, 1, 0, 0, 0, 0, 0]
    i = value = digits = fraction_digits = 0
    zone = None
    just_time = False
    year_sign = None
    j = start
    if text[j] in "+-":
        year_sign = -1 if text[j] == "-" else 1
        j += 1

    def close(segment: int) -> bool:
        nonlocal value, digits
        if not _timestamp_digits_ok(segment, digits):
            return False
        segments[segment] = value
        value = digits = 0
        return True

    while j < end:
        char = text[j]
        if "0" <= char <= "9":
            fraction_digits += i == 6
            if i != 6 or digits < 6:  # digits past microseconds are dropped
                value = value * 10 + ord(char) - 48
            digits += 1
        elif j == 0 and char == "T":
            just_time = True
            i += 3
        elif i < 2 and char == "-":
            if not close(i):
                return None
            i += 1
        elif i == 0 and char == ":" and year_sign is None:
            just_time = True
            if not close(3):
                return None
            i = 4
        elif (i == 2 and char in " T") or (i in (3, 4) and char == ":") or (i == 5 and char == "."):
            if not close(i):
                return None
            i += 1
        elif i in (5, 6):
            if not close(i):
                return None
            i = 7
            zone = text[j:end]
            break
        else:
            return None
        j += 1
    if not close(i):
        return None
    segments[6] *= 10 ** (6 - min(fraction_digits, 6))
    segments[0] *= year_sign or 1
    return segments[:7], zone, just_time


def _string_to_timestamp(text: str, zone: dt.tzinfo) -> int | None:
    """``SparkDateTimeUtils.stringToTimestamp`` (CAST string AS TIMESTAMP) -> epoch microseconds."""
    parsed = _parse_timestamp(text)
    if parsed is None:
        return None
    (year, month, day, hour, minute, second, micros), zone_text, just_time = parsed
    if zone_text is not None:
        zone = _zone(zone_text.strip(_JAVA_TRIM))
        if zone is None:
            return None
    if just_time:  # Spark takes today's date in the zone
        today = dt.datetime.now(zone).date()
        year, month, day = today.year, today.month, today.day
    if not (_valid_date(year, month, day) and hour < 24 and minute < 60 and second < 60):
        return None
    seconds_of_day = hour * 3600 + minute * 60 + second
    seconds = _epoch_days(year, month, day) * 86_400 + seconds_of_day
    result = (seconds - _offset_seconds(zone, year, month, day, seconds_of_day)) * 1_000_000 + micros
    return result if _INT64_MIN <= result <= _INT64_MAX else None


def _string_to_timestamp_ntz(text: str) -> int | None:
    """``stringToTimestampWithoutTimeZone(allowTimeZone = true)``: a zone is checked, then ignored."""
    parsed = _parse_timestamp(text)
    if parsed is None or parsed[2] or (parsed[1] is not None and _zone(parsed[1].strip(_JAVA_TRIM)) is None):
        return None
    year, month, day, hour, minute, second, micros = parsed[0]
    if not (_valid_date(year, month, day) and hour < 24 and minute < 60 and second < 60):
        return None
    seconds = _epoch_days(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
    result = seconds * 1_000_000 + micros
    return result if _INT64_MIN <= result <= _INT64_MAX else None


# ---------------------------------------------------------------------------------------------
# Type inference (PartitioningUtils.inferPartitionColumnValue / resolveTypeConflicts)
# ---------------------------------------------------------------------------------------------

_DECIMAL_DIGITS = {"int": 10, "bigint": 20}  # DecimalType.forType
_COLON = r"%3[aA]"  # an escaped ':', as timestamps' directory names have them


def infer_type(raw_values: Iterable[str]) -> str:
    """Spark SQL type name ``spark.read.parquet`` infers for a partition column with these raw values.

    Values are the raw (escaped) directory values; ``__HIVE_DEFAULT_PARTITION__`` (null) is ignored
    and a column without any other value is ``string``.
    """
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
    low, high = _INT_RANGE[32]
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
    if _java_integer(raw, 32) is not None:
        return "int"
    if _java_integer(raw, 64) is not None:
        return "bigint"
    decimal = _java_big_decimal(raw)
    if decimal is not None and decimal.as_tuple().exponent >= 0:  # Spark requires BigDecimal scale <= 0
        precision, _ = _spark_decimal_shape(decimal)
        if precision <= 38:
            return f"decimal({precision},0)"
    if _java_double(raw) is not None:
        return "double"
    if _is_partition_timestamp(unescape_path_name(raw)):
        return "timestamp"
    if _is_partition_date(raw):
        return "date"
    return "string"


def _is_partition_timestamp(text: str) -> bool:
    """Parses with the partition timestamp pattern and (the zone only matters at the range's ends) CASTs."""
    match = _TIMESTAMP_PARTITION.fullmatch(text)
    return bool(match and _parsable_year(match["year"])) and _string_to_timestamp(text, dt.UTC) is not None


def _is_partition_date(raw: str) -> bool:
    match = _DATE_PARTITION.fullmatch(raw)
    return bool(match and _parsable_year(match["year"])) and _string_to_date(raw) is not None


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
    times in ``time_zone`` (``None``: this process's zone, Spark's default session zone) returned as
    UTC instants. A value Spark cannot convert raises ``ValueError`` (``strict``) or becomes null.
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
            raise ValueError(f"Partition value '{raw}' cannot be converted to type {type_name}.")
    replacements = pa.array([parsed[raw] for raw in slow_values], conversion.parse_type)
    return pc.replace_with_mask(result, slow, replacements)


def _conversion(type_name: str, time_zone: str | None) -> _Conversion:
    if type_name.startswith("decimal"):
        return _decimal_conversion(type_name)
    if type_name == "timestamp":
        return _timestamp_conversion(_resolve_zone(time_zone))
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
    micros = _string_to_timestamp_ntz(unescape_path_name(raw))
    if micros is None:
        days = _string_to_date(raw)
        micros = None if days is None else days * _MICROS_PER_DAY
    return micros if micros is None or _INT64_MIN <= micros <= _INT64_MAX else None


_CONVERSIONS = {
    "string": _Conversion(pa.string(), unescape_path_name, r"^[^%]*$", lambda values: values),
    "binary": _Conversion(pa.binary(), lambda raw: raw.encode("utf-8"), r"^"),
    "boolean": _Conversion(pa.bool_(), _parse_boolean, r"^(?i:true|false)$", _is_true),
    # tinyint and smallint are Integer.parseInt(value).toByte/.toShort: they wrap around.
    "tinyint": _Conversion(pa.int32(), lambda raw: _java_integer(raw, 32), _INT_FAST),
    "smallint": _Conversion(pa.int32(), lambda raw: _java_integer(raw, 32), _INT_FAST),
    "int": _Conversion(pa.int32(), lambda raw: _java_integer(raw, 32), _INT_FAST),
    "bigint": _Conversion(pa.int64(), lambda raw: _java_integer(raw, 64), r"^-?[0-9]{1,18}$"),
    # float is Double.parseDouble(value).toFloat: parsed as a double, then rounded.
    "float": _Conversion(pa.float64(), _java_double, _DOUBLE_FAST),
    "double": _Conversion(pa.float64(), _java_double, _DOUBLE_FAST),
    "date": _Conversion(pa.date32(), _string_to_date, r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
    # A value that is no timestamp falls back to CAST(CAST(raw AS DATE) AS TIMESTAMP_NTZ).
    "timestamp_ntz": _Conversion(pa.timestamp("us"), _parse_timestamp_ntz, _DATETIME_FAST, _local_timestamps),
}


def _timestamp_conversion(zone: dt.tzinfo) -> _Conversion:
    # Spark's fallback through DATE always fails for TIMESTAMP (its outer CAST has no zone), so only
    # the direct CAST counts.
    def parse(raw: str) -> int | None:
        return _string_to_timestamp(unescape_path_name(raw), zone)

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
        value = _java_big_decimal(raw)
        if value is None or _spark_decimal_shape(value)[0] > 38:  # Spark's Literal(BigDecimal) fails
            return None
        rounded = value.quantize(quantum, rounding=ROUND_HALF_UP, context=context)
        return rounded if len(rounded.as_tuple().digits) <= precision else None

    integer_digits = precision - scale
    fast = None
    if integer_digits > 0:
        fraction = rf"(?:\.[0-9]{{0,{scale}}})?" if scale else r"\.?"
        fast = rf"^-?[0-9]{{1,{integer_digits}}}{fraction}$"
    return _Conversion(target, parse, fast)


# ---------------------------------------------------------------------------------------------
# Declared partition columns
# ---------------------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")


def parse_ddl(ddl: str) -> list[tuple[str, str]]:
    """``'a BIGINT, `b c` string'`` -> ``[('a', 'bigint'), ('b c', 'string')]`` (types normalized).

    Raises ``ValueError`` naming the bad piece and what was expected.
    """
    if not ddl.strip():
        raise ValueError("The partition column list is empty; expected 'name type, ...', e.g. 'year int'.")
    columns: list[tuple[str, str]] = []
    seen: set[str] = set()
    for piece in _split_columns(ddl):
        name, type_text = _column(piece)
        if name.lower() in seen:  # Spark resolves column names case-insensitively
            raise ValueError(f"Column '{name}' is declared twice in '{ddl}'; expected each column once.")
        seen.add(name.lower())
        try:
            columns.append((name, normalize_type(type_text)))
        except ValueError as error:
            raise ValueError(f"Column '{name}' in '{ddl}': {error}") from None
    return columns


def _split_columns(ddl: str) -> list[str]:
    """Split at commas outside backticks and parentheses."""
    pieces, current, depth, quoted = [], [], 0, False
    for char in ddl:
        if char == "`":
            quoted = not quoted  # a doubled backtick inside a name toggles twice
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
        elif not quoted and depth == 0 and char == ",":
            pieces.append("".join(current))
            current = []
            continue
        current.append(char)
    if quoted:
        raise ValueError(f"Unclosed backtick in '{ddl}'; expected `name` with ` doubled inside.")
    pieces.append("".join(current))
    return pieces


def _column(piece: str) -> tuple[str, str]:
    text = piece.strip()
    if not text:
        raise ValueError(f"Empty column definition {piece!r}; expected 'name type' between commas.")
    if text.startswith("`"):
        match = re.match(r"`((?:[^`]|``)*)`", text)
        name, rest = match[1].replace("``", "`"), text[match.end() :]
    else:
        match = _IDENTIFIER.match(text)
        name, rest = (match[0], text[match.end() :]) if match else ("", text)
    if not name:
        raise ValueError(f"No column name in '{text}'; expected 'name type' (`quote` other names).")
    if rest and not rest[0].isspace():
        raise ValueError(f"Bad column name in '{text}'; expected 'name type' (`quote` other names).")
    if not rest.strip():
        raise ValueError(f"Column '{name}' has no type; expected 'name type', e.g. '{name} int'.")
    return name, rest.strip()
