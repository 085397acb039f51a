"""Pins: where the rows a dimension's keys come from stand in a query's text, so one snapshot serves both.

:func:`dynsource.sql` collects a dimension's keys when it is called, and Spark
runs the rewritten query at each action. If the query read the dimension again,
rows added to it since would find their fact rows pruned. So the rows the keys
come from are read once into a snapshot (a local checkpoint), the keys are
collected from it, and the query reads the snapshot in the dimension's place.

A :class:`Pin` says which text to replace and with what; ``PINNED`` in its SQL
stands for the snapshot's name. Built on trees qualified by sqlglot (pure, no Spark).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from dynsource.dpp import sqltree

PINNED = "__dynsource_pinned__"


@dataclass(frozen=True)
class Pin:
    """The text ``[start, end)`` of a dimension source, the rows it reads, and what reads them from a snapshot."""

    start: int
    end: int  # exclusive
    rows_sql: str  # the rows to snapshot (the statement's CTEs included)
    reference: str  # what takes the text's place, reading PINNED
    keys_sql: str  # the pruning's keys, from PINNED
    # The snapshot's columns the keys are, in order, when keys_sql only renames them (no expression, no filter).
    key_columns: tuple[str, ...] | None = None

    def with_snapshot(self, name: str) -> Pin:
        return Pin(self.start, self.end, self.rows_sql, self.reference.replace(PINNED, name),
                   self.keys_sql.replace(PINNED, name), self.key_columns)


def source_pin(node: exp.Expression, predicates: Sequence[exp.Expression], keyed: exp.Select,
               ctes: exp.With | None, tokens: Sequence[Token]) -> Pin | None:
    """A pin of a FROM or JOIN source (a table, view, CTE or derived table) filtered by ``predicates``.

    The source's text, alias included, becomes ``PINNED AS alias``; ``keyed``
    (the pruning's key query over that source) reads PINNED instead.
    """
    alias = node.alias_or_name
    span = _source_span(node, tokens)
    if span is None:
        return None
    rows = exp.select("*").from_(node.copy())
    if predicates:
        rows = rows.where(exp.and_(*[p.copy() for p in predicates]))
    return Pin(*span, with_ctes_sql(rows, ctes), f"{PINNED} AS {alias}", *_keys_from_pinned(keyed, alias, predicates))


def subquery_pin(subquery: exp.Query, keyed: exp.Select, ctes: exp.With | None,
                 tokens: Sequence[Token]) -> Pin | None:
    """A pin of an ``IN (subquery)``: the parenthesised subquery becomes ``(SELECT * FROM PINNED)``."""
    span = _enclosing_parens(subquery, tokens)
    if span is None:
        return None
    return Pin(*span, with_ctes_sql(subquery.copy(), ctes), f"(SELECT * FROM {PINNED})",
               *_keys_from_pinned(keyed, "_d", ()))


def _keys_from_pinned(keyed: exp.Select, alias: str, applied: Sequence[exp.Expression],
                      ) -> tuple[str, tuple[str, ...] | None]:
    """``keyed`` reading PINNED AS ``alias``, without the predicates the snapshot ``applied`` already; and the
    snapshot's columns the keys are, when they are plain columns and no predicate is left."""
    pinned = keyed.copy()
    pinned.set("with_", None)
    pinned.set("joins", None)
    pinned.set("from_", exp.From(this=exp.alias_(exp.to_table(PINNED), alias, table=True)))
    done = {predicate.unnest().sql("spark") for predicate in applied}
    left = [p for p in sqltree.conjuncts(pinned.args.get("where")) if p.unnest().sql("spark") not in done]
    pinned.set("where", exp.Where(this=exp.and_(*left)) if left else None)
    keys = [key.unalias() for key in pinned.expressions]
    clauses = [name for name, value in pinned.args.items() if value and name not in ("expressions", "from_")]
    plain = not clauses and all(isinstance(key, exp.Column) and key.table in ("", alias) for key in keys)
    return pinned.sql("spark"), tuple(key.name for key in keys) if plain else None


def with_ctes_sql(query: exp.Query, ctes: exp.With | None) -> str:
    """``query``'s text as written, with the statement's CTEs it may read (directly or through each other).

    Only those: Spark evaluates a CTE the query never names (TPC-DS q14's ``cross_items``, an intersect over three
    fact tables, took 8.9 s in front of ``SELECT * FROM item``, which takes 0.17 s alone).
    """
    if ctes is not None:
        by_name = {cte.alias_or_name.lower(): cte for cte in ctes.expressions}
        read, pending = set(), [query]
        while pending:
            for table in pending.pop().find_all(exp.Table):
                name = table.name.lower()
                if name in by_name and name not in read:  # qualified or not: keeping one too many is only slower
                    read.add(name)
                    pending.append(by_name[name].this)
        if read:
            kept = ctes.copy()
            kept.set("expressions", [cte for cte in kept.expressions if cte.alias_or_name.lower() in read])
            query.set("with_", kept)
    return sqltree.as_written(query).sql("spark")


def _source_span(node: exp.Expression, tokens: Sequence[Token]) -> tuple[int, int] | None:
    alias = node.args.get("alias")
    alias_end = alias.this.meta.get("end") if alias is not None and alias.this is not None else None
    if isinstance(node, exp.Table):
        end = alias_end if alias_end is not None else node.this.meta["end"]
        return sqltree.start(node), end + 1
    if isinstance(node, exp.Subquery) and alias_end is not None:
        parens = _enclosing_parens(node.this, tokens)
        return None if parens is None else (parens[0], alias_end + 1)
    return None


def _enclosing_parens(node: exp.Expression, tokens: Sequence[Token]) -> tuple[int, int] | None:
    """The text span of the innermost parenthesis pair around all of ``node``'s written parts."""
    positions = [(n.meta["start"], n.meta["end"]) for n in node.walk() if "start" in n.meta]
    if not positions:
        return None
    first, last = min(p[0] for p in positions), max(p[1] for p in positions)
    best, opened = None, []
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            opened.append(token.start)
        elif token.token_type == TokenType.R_PAREN and opened:
            start = opened.pop()
            if start < first and token.start > last and (best is None or start > best[0]):
                best = (start, token.end + 1)
    return best
