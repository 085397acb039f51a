"""Spark's string CASTs, as ``PartitioningUtils`` applies them to partition directory values.

The JDK parsers Spark calls (``Integer.parseInt``, ``Long.parseLong``, ``new BigDecimal(String)``,
``Double.parseDouble``) and ``SparkDateTimeUtils``' string-to-date and string-to-timestamp
conversions with its zone IDs, reproduced value by value under Spark 4.3's defaults (ANSI on,
legacy time parser off). Each function returns ``None`` where Spark's cast fails.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from decimal import Decimal
from zoneinfo import ZoneInfo

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
INT_RANGE = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


def _bmp(text: str) -> bool:
    return text.isascii() or max(text) <= "\uffff"


def java_integer(text: str, bits: int) -> int | None:
    if not (_JAVA_INTEGER.fullmatch(text) and _bmp(text)):
        return None
    value = int(text)
    low, high = INT_RANGE[bits]
    return value if low <= value <= high else None


def java_big_decimal(text: str) -> Decimal | None:
    if not (_JAVA_BIG_DECIMAL.fullmatch(text) and _bmp(text)):
        return None
    value = Decimal(text)
    # BigDecimal keeps its scale in an int.
    return value if -(2**31) <= value.as_tuple().exponent < 2**31 else None


def java_double(text: str) -> float | None:
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


def spark_decimal_shape(value: Decimal) -> tuple[int, int]:
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
MICROS_PER_DAY = 86_400_000_000
_DAYS_PER_400_YEARS = 146_097
INT64_MIN, INT64_MAX = INT_RANGE[64]

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


def resolve_zone(time_zone: str) -> dt.tzinfo:
    """Spark's zone of ID ``time_zone`` (a region, an offset, UTC+h...)."""
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


def string_to_date(text: str) -> int | None:
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
    return days if INT_RANGE[32][0] <= days <= INT_RANGE[32][1] else None  # Spark's dates are ints


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


def string_to_timestamp(text: str, zone: dt.tzinfo) -> int | None:
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
    return result if INT64_MIN <= result <= INT64_MAX else None


def string_to_timestamp_ntz(text: str) -> int | None:
    """``stringToTimestampWithoutTimeZone(allowTimeZone = true)``: a zone is checked, then ignored."""
    parsed = _parse_timestamp(text)
    if parsed is None or parsed[2] or (parsed[1] is not None and _zone(parsed[1].strip(_JAVA_TRIM)) is None):
        return None
    year, month, day, hour, minute, second, micros = parsed[0]
    if not (_valid_date(year, month, day) and hour < 24 and minute < 60 and second < 60):
        return None
    seconds = _epoch_days(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
    result = seconds * 1_000_000 + micros
    return result if INT64_MIN <= result <= INT64_MAX else None
