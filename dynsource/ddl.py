"""Column lists in Spark's DDL form: the ``partitionColumns`` option, ``'year INT, `b c` STRING'``."""

from __future__ import annotations

import re

from dynsource.types import normalize_type

_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")


def parse_ddl(ddl: str, *, untyped: bool = False) -> list[tuple[str, str]]:
    """``'a BIGINT, `b c` string'`` -> ``[('a', 'bigint'), ('b c', 'string')]`` (types normalized).

    With ``untyped``, a column may be named without a type (``'a, b INT'``): its type is ``''``.
    Raises ``ValueError`` naming the bad piece and what was expected.
    """
    if not ddl.strip():
        raise ValueError("The partition column list is empty; expected 'name type, ...', e.g. 'year int'.")
    columns: list[tuple[str, str]] = []
    seen: set[str] = set()
    for piece in _split_columns(ddl):
        name, type_text = _column(piece, untyped)
        if name.lower() in seen:  # Spark resolves column names case-insensitively
            raise ValueError(f"Column '{name}' is declared twice in '{ddl}'; expected each column once.")
        seen.add(name.lower())
        try:
            columns.append((name, normalize_type(type_text) if type_text else ""))
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


def _column(piece: str, untyped: bool) -> tuple[str, str]:
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
    if not rest.strip() and not untyped:
        raise ValueError(f"Column '{name}' has no type; expected 'name type', e.g. '{name} int'.")
    return name, rest.strip()
