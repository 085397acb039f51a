"""Hive/Spark partition directory names: ``k=v`` parsed, escaped and unescaped as Spark's
``ExternalCatalogUtils`` does them, the null value's name, and the names Spark skips when it lists a table."""

from __future__ import annotations

import re

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"

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
