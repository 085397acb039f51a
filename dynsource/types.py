"""Spark SQL atomic type names and their Arrow counterparts.

Filter fields and partition columns are declared with Spark SQL type names
(``"int"``, ``"bigint"``, ``"decimal(10,2)"``...). This module is the one place
that turns those names into Arrow types and decides how two types compare.
"""

from __future__ import annotations

import inspect
import re

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

_ALIASES = {
    "boolean": "boolean", "bool": "boolean",
    "tinyint": "tinyint", "byte": "tinyint",
    "smallint": "smallint", "short": "smallint",
    "int": "int", "integer": "int",
    "bigint": "bigint", "long": "bigint",
    "float": "float", "real": "float",
    "double": "double",
    "string": "string", "varchar": "string", "char": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp", "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}

_ARROW = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    # Spark hands Python sources timestamps as UTC instants (to_arrow_schema(timezone="UTC")).
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}

INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"^decimal\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_LENGTHED = re.compile(r"^(varchar|char)\s*\(\s*\d+\s*\)$")


def normalize_type(name: str) -> str:
    """Canonical Spark SQL name of an atomic type (``"INTEGER"`` -> ``"int"``).

    Raises ``ValueError`` naming the type when it is not an atomic Spark SQL type.
    """
    text = name.strip().lower()
    if text in _ALIASES:
        return _ALIASES[text]
    if _LENGTHED.match(text):
        return "string"
    match = _DECIMAL.match(text)
    if match:
        precision = int(match.group(1) or 10)
        scale = int(match.group(2) or 0)
        if not 0 < precision <= 38 or scale > precision:
            raise ValueError(
                f"Type '{name}' is not a valid decimal: expected decimal(p,s) with 1 <= p <= 38 and s <= p."
            )
        return f"decimal({precision},{scale})"
    raise ValueError(
        f"Type '{name}' is not a supported Spark SQL atomic type; expected one of "
        f"{sorted(set(_ALIASES.values()))} or decimal(p,s)."
    )


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type Spark uses for the Spark SQL type ``name``."""
    canonical = normalize_type(name)
    if canonical.startswith("decimal"):
        precision, scale = _decimal_parts(canonical)
        return pa.decimal128(precision, scale)
    return _ARROW[canonical]


def type_name(arrow: pa.DataType) -> str:
    """The Spark SQL name of an Arrow type (inverse of :func:`arrow_type`)."""
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    if pa.types.is_timestamp(arrow):
        return "timestamp" if arrow.tz else "timestamp_ntz"
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return "string"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return "binary"
    for name, candidate in _ARROW.items():
        if candidate == arrow:
            return name
    raise ValueError(f"Arrow type {arrow} has no Spark SQL atomic counterpart.")


def holds(arrow: pa.DataType, spark_type: str) -> bool:
    """Whether values stored as ``arrow`` (dictionary-encoded or not) are values of Spark SQL type ``spark_type``."""
    if pa.types.is_dictionary(arrow):
        arrow = arrow.value_type
    try:
        return type_name(arrow) == spark_type
    except ValueError:
        return False


def is_numeric(name: str) -> bool:
    return name in INTEGRAL or name in ("float", "double") or name.startswith("decimal")


def comparison_type(left: str, right: str) -> str | None:
    """The type both sides are cast to when Spark evaluates ``left = right``.

    Follows Spark's binary-comparison coercion: integrals widen, decimals absorb
    integrals, anything with a float becomes double, a string is cast to the
    other side's type, a date meets a timestamp as a timestamp. ``None`` means
    the two types cannot be compared.
    """
    left, right = normalize_type(left), normalize_type(right)
    if left == right:
        return left
    if is_numeric(left) and is_numeric(right):
        return _wider_numeric(left, right)
    if left == "string":
        return right
    if right == "string":
        return left
    if {left, right} <= {"date", "timestamp", "timestamp_ntz"}:
        return "timestamp" if "timestamp" in (left, right) else "timestamp_ntz"
    return None


def _wider_numeric(left: str, right: str) -> str:
    if left in INTEGRAL and right in INTEGRAL:
        return max(left, right, key=INTEGRAL.index)
    if "float" in (left, right) or "double" in (left, right):
        return "double"
    precision_l, scale_l = _as_decimal(left)
    precision_r, scale_r = _as_decimal(right)
    scale = max(scale_l, scale_r)
    integer_digits = max(precision_l - scale_l, precision_r - scale_r)
    return f"decimal({min(38, integer_digits + scale)},{scale})"


def _as_decimal(name: str) -> tuple[int, int]:
    """Spark's decimal view of an integral type (int -> decimal(10,0))."""
    digits = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
    if name in digits:
        return digits[name], 0
    return _decimal_parts(name)


def _decimal_parts(name: str) -> tuple[int, int]:
    match = _DECIMAL.match(name)
    return int(match.group(1)), int(match.group(2))


def spark_schema(arrow: pa.Schema) -> StructType:
    """The Spark schema of Arrow data, as Spark types Parquet columns (a zone-less timestamp is timestamp_ntz).

    pyspark 4.0 defaults ``prefer_timestamp_ntz`` to False and 4.1+ to True: say it explicitly.
    """
    return from_arrow_schema(arrow, prefer_timestamp_ntz=True)


def read_arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects from ``read()`` for ``schema``: timestamps as UTC instants."""
    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # pyspark >= 4.1
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # pyspark 4.0: UTC timestamps by default
