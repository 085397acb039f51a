"""Star-join detection in one SELECT of a query: its sources, join sides and conjuncts, and which of its
equalities pair a fact scan with a dimension's keys soundly (the rules are :mod:`dynsource.dpp.starjoin`'s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from sqlglot import exp
from sqlglot.optimizer.scope import Scope
from sqlglot.tokens import Token

from dynsource.dpp import snapshots, sqltree
from dynsource.dpp.detection import FactScan, Pruning, Refusal, TableInfo

_INTEGRAL_WIDTH = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
# Spark's join strategy hints: its dynamic partition pruning reuses the broadcast of the dimension, and a join
# planned otherwise drops its pruning filter (spark.sql.optimizer.dynamicPartitionPruning.reuseBroadcastOnly).
_BROADCAST_HINTS = frozenset({"BROADCAST", "BROADCASTJOIN", "MAPJOIN"})
_STRATEGY_HINTS = _BROADCAST_HINTS | {"MERGE", "SHUFFLE_MERGE", "MERGEJOIN", "SHUFFLE_HASH", "SHUFFLE_REPLICATE_NL"}


class Statement(NamedTuple):
    """What every SELECT of the statement shares."""

    tables: Mapping[str, TableInfo]
    ctes: exp.With | None
    aliased: set[int]  # text positions of the table names written with an alias
    root: exp.Expression  # the qualified statement
    star: bool  # a * qualify() could not expand into columns is left (count(*) aside), as in struct(*)
    tokens: Sequence[Token]  # of the text, for the spans of parenthesised sources


class _Equality(NamedTuple):
    """``fact.column = key`` (or ``<=>``), ``key`` an expression of the dimension's columns, placed in ``on``."""

    fact: str
    column: str
    dimension: str
    key: exp.Expression
    on: exp.Join | None
    null_safe: bool


class SelectJoins:
    """Detection in one SELECT: its sources, join sides and conjuncts."""

    def __init__(self, scope: Scope, statement: Statement, prunings: list[Pruning], refusals: list[Refusal]) -> None:
        self.scope = scope
        self.statement = statement
        self.select: exp.Select = scope.expression
        self.tables = statement.tables
        self.prunings = prunings
        self.refusals = refusals
        self.where = sqltree.conjuncts(self.select.args.get("where"))
        self.joins: list[exp.Join] = self.select.args.get("joins") or []
        first = self.select.args.get("from_")
        # Every source joined here, semi-joined ones too (Scope.selected_sources leaves those out).
        self.nodes = {node.alias_or_name: node for node in [*([first.this] if first else []),
                                                           *(join.this for join in self.joins)]}
        self.null_supplied = self._null_supplied()
        # Derived tables that pass a fact's rows through (a view seen through): their column names -> the fact's.
        self.renamed: dict[str, dict[str, str]] = {}

    def detect(self) -> list[FactScan]:
        """Record the prunings and refusals of this SELECT; its dynsource table scans."""
        facts = {alias: self._fact(alias) for alias in self.nodes}
        facts = {alias: fact for alias, fact in facts.items() if fact is not None}
        placed = [(None, c) for c in self.where]
        placed += [(j, c) for j in self.joins for c in sqltree.conjuncts(j.args.get("on"))]
        self._refuse_hidden([c for _, c in placed], facts)
        if not facts:
            return []
        pairs: dict[tuple[str, str], list[_Equality]] = {}
        for on, conjunct in placed:
            if on is None:
                self._in_subquery(conjunct, facts)
                self._exists(conjunct, facts)
            for equality in self._equalities(conjunct, facts, on):
                pairs.setdefault((equality.fact, equality.dimension), []).append(equality)
        for (fact, dimension), equalities in pairs.items():
            self._pair(facts[fact], dimension, equalities)
        return [fact for alias, fact in facts.items() if alias not in self.renamed]  # the others' SELECT has them

    def _fact(self, alias: str) -> FactScan | None:
        node, source = self.nodes[alias], self.scope.sources.get(alias)
        if isinstance(source, Scope) and (source.is_derived_table or (source.is_cte and self._read_once(node))):
            traced = self._passed_through(source)
            if traced is not None:
                self.renamed[alias] = traced[1]
            return None if traced is None else traced[0]
        if not isinstance(source, exp.Table):
            return None  # a subquery or a CTE
        info = self.tables.get(sqltree.table_name(node))
        if info is None or not info.dynsource:
            return None
        start = sqltree.start(node)
        columns = None if self.statement.star else self._used_columns(alias, info)
        return FactScan(sqltree.table_name(node), alias, start, node.this.meta["end"] + 1,
                        start in self.statement.aliased, columns, self._predicates(alias))

    def _read_once(self, node: exp.Expression) -> bool:
        """Whether the CTE ``node`` names is read once in the whole statement: a filter on the fact its rows pass
        through would prune its other readers too (another CTE of that name counts: it is only conservative)."""
        name = node.name.lower()
        return sum(1 for t in self.statement.root.find_all(exp.Table) if not t.db and t.name.lower() == name) == 1

    def _passed_through(self, derived: Scope) -> tuple[FactScan, dict[str, str]] | None:
        """The fact scan whose rows the ``derived`` table passes through one by one, and which of its columns
        each output column is; None for any other derived table.

        It passes them through when it selects from that scan alone (or from such a derived table), at most
        filtered, with no aggregate, window, DISTINCT or LIMIT: each of its rows is then one of the fact's rows, so
        a join key that is a fact column there prunes the fact as it would the fact itself. Views seen through
        (:mod:`dynsource.dpp.views`) have this shape when they project and filter their table; so may a CTE the
        statement reads once.
        """
        select = derived.expression
        if (not isinstance(select, exp.Select) or select.args.get("joins") or not select.args.get("from_")
                or any(select.args.get(part) for part in ("group", "having", "qualify", "distinct", "limit",
                                                          "offset", "laterals", "windows"))
                or any(e.find(exp.AggFunc, exp.Window) for e in select.expressions)):
            return None
        inner = SelectJoins(derived, self.statement, [], [])
        (alias,) = inner.nodes
        fact = inner._fact(alias)
        if fact is None:
            return None
        columns = {}
        for output in select.expressions:
            column = output.unalias()
            if isinstance(column, exp.Column) and column.table == alias:
                passed = inner._through(alias, column.name)
                if passed is not None:
                    columns[output.alias_or_name.lower()] = passed
        return fact, columns

    def _refuse_hidden(self, conjuncts: Sequence[exp.Expression], facts: Mapping[str, FactScan]) -> None:
        """Refuse, saying what stopped it, each equi-join of a source that reads a dynsource table through a derived
        table or CTE that does not pass the table's rows through (a window, an aggregate, a UNION...)."""
        for conjunct in conjuncts:
            if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                continue
            sides = [sqltree.only_source(side) for side in (conjunct.this, conjunct.expression)]
            if sides[0] == sides[1] or not all(side in self.nodes for side in sides):
                continue
            for alias in sides:
                source = self.scope.sources.get(alias)
                if alias in facts or not isinstance(source, Scope):
                    continue
                tables = sorted(_dynsource_tables(source, self.tables))
                if tables:
                    self.refusals.append(Refusal(None, (
                        f"{conjunct.sql('spark')}: {alias} reads {', '.join(tables)} through {_stopped_by(source)}; "
                        "dynsource prunes a dynsource table only where the query reads it directly or through derived "
                        "tables that filter and project its rows")))

    def _through(self, alias: str, column: str) -> str | None:
        """The fact column that ``alias.column`` is (None: no fact column), through derived tables that pass a
        fact's rows through."""
        renamed = self.renamed.get(alias)
        return column if renamed is None else renamed.get(column.lower())

    def _predicates(self, alias: str) -> tuple[str, ...]:
        """The WHERE conjuncts on ``alias`` alone, unqualified; none when an outer join may null-extend it."""
        if alias in self.null_supplied:
            return ()
        found = []
        for conjunct in self.where:
            if sqltree.only_source(conjunct) == alias:
                unqualified = conjunct.copy()
                for column in unqualified.find_all(exp.Column):
                    column.set("table", None)
                found.append(unqualified.sql("spark"))
        return tuple(found)

    def _used_columns(self, alias: str, info: TableInfo) -> tuple[str, ...] | None:
        """The table's columns named with ``alias`` anywhere, a * expanded (a superset when the alias is reused
        elsewhere); None when that is all of them."""
        named = {column.name.lower() for column in self.statement.root.find_all(exp.Column) if column.table == alias}
        used = tuple(column for column in info.columns if column.lower() in named)
        return None if len(used) == len(info.columns) else used

    def _equalities(self, conjunct: exp.Expression, facts: dict[str, FactScan], on: exp.Join | None) -> list[_Equality]:
        """The sound fact-dimension equalities of one conjunct; the unsound ones are refused."""
        if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
            return []
        null_safe = isinstance(conjunct, exp.NullSafeEQ)
        found = []
        for fact_side, dim_side in ((conjunct.this, conjunct.expression), (conjunct.expression, conjunct.this)):
            dimension, fact_alias = sqltree.only_source(dim_side), sqltree.only_source(fact_side)
            if fact_alias not in facts or dimension is None or dimension == fact_alias or dimension not in self.nodes:
                continue
            column = self._fact_column(fact_side, facts)
            reason = self._unsound(fact_alias, dimension, on, null_safe)
            if column is None:
                reason = f"the fact key {fact_side.sql('spark')} is not a column or a widening cast of one"
            if reason is not None:
                self.refusals.append(Refusal(facts[fact_alias], f"{conjunct.sql('spark')}: {reason}"))
                continue
            found.append(_Equality(fact_alias, column[1], dimension, dim_side, on, null_safe))
        return found

    def _in_subquery(self, conjunct: exp.Expression, facts: dict[str, FactScan]) -> None:
        query = conjunct.args.get("query") if isinstance(conjunct, exp.In) else None
        if query is None:
            return
        probes = conjunct.this.expressions if isinstance(conjunct.this, exp.Tuple) else [conjunct.this]
        columns = [self._fact_column(probe, facts) for probe in probes]
        if any(column is None for column in columns) or len({alias for alias, _ in columns}) != 1:
            return
        subquery = query.this if isinstance(query, exp.Subquery) else query
        outputs = subquery.selects if isinstance(subquery, exp.Query) else []
        if len(outputs) != len(columns) or sqltree.correlated(subquery, self.scope):
            self.refusals.append(Refusal(facts[columns[0][0]], f"{conjunct.sql('spark')}: a correlated or "
                                         "mismatched IN subquery is not pruned"))
            return
        keys = exp.select(*[exp.alias_(exp.column(output.alias_or_name, table="_d"), f"k{i}")
                            for i, output in enumerate(outputs)])
        keyed = keys.from_(exp.Subquery(this=subquery.copy(), alias=exp.TableAlias(this=exp.to_identifier("_d"))))
        pin = snapshots.subquery_pin(subquery, keyed, self.statement.ctes, self.statement.tokens)
        self.prunings.append(Pruning(facts[columns[0][0]], tuple(column for _, column in columns), "(subquery)",
                                     tuple(output.unalias().sql("spark") for output in outputs), self._with_ctes(keyed),
                                     null_safe=False, selective=sqltree.selective(subquery), pin=pin))

    def _exists(self, conjunct: exp.Expression, facts: dict[str, FactScan]) -> None:
        """``EXISTS (SELECT ... FROM dim WHERE dim.k = fact.k AND <dimension predicates>)``: a semi join."""
        subquery = conjunct.this if isinstance(conjunct, exp.Exists) else None
        if not isinstance(subquery, exp.Select) or subquery.args.get("joins"):
            return
        inner = subquery.args["from_"].this.alias_or_name if subquery.args.get("from_") else None
        correlated, local = [], []
        for predicate in sqltree.conjuncts(subquery.args.get("where")):
            outer = {column.table for column in predicate.find_all(exp.Column) if column.table != inner}
            (correlated if outer else local).append(predicate)
        equalities = [self._correlation(p, inner, facts) for p in correlated]
        refused = (not equalities or None in equalities or len({alias for alias, _, _ in equalities}) != 1
                   or any(subquery.args.get(part) for part in ("group", "having", "limit")))
        if refused:
            if any(column.table in facts for column in subquery.find_all(exp.Column)):
                self.refusals.append(Refusal(None, f"{conjunct.sql('spark')}: only EXISTS correlated by "
                                                   "equalities with one fact's columns is pruned"))
            return
        keyed = subquery.copy()
        keyed.set("expressions", [exp.alias_(key.copy(), f"k{i}") for i, (_, _, key) in enumerate(equalities)])
        keyed.set("where", exp.Where(this=exp.and_(*[p.copy() for p in local])) if local else None)
        pin = snapshots.source_pin(subquery.args["from_"].this, local, keyed, self.statement.ctes,
                                   self.statement.tokens)
        self.prunings.append(Pruning(facts[equalities[0][0]], tuple(column for _, column, _ in equalities), "(exists)",
                                     tuple(key.sql("spark") for _, _, key in equalities), self._with_ctes(keyed),
                                     null_safe=False, selective=any(sqltree.selective_predicate(p) for p in local),
                                     pin=pin))

    def _correlation(self, predicate: exp.Expression, inner: str | None,
                     facts: dict[str, FactScan]) -> tuple[str, str, exp.Expression] | None:
        """:func:`sqltree.correlation`, its fact column seen through derived tables; None when it is none."""
        found = sqltree.correlation(predicate, inner, facts)
        column = None if found is None else self._through(found[0], found[1])
        return None if column is None else (found[0], column, found[2])

    def _fact_column(self, node: exp.Expression, facts: dict[str, FactScan]) -> tuple[str, str] | None:
        """(fact alias, fact column) when ``node`` is a fact column or an injective cast of one."""
        cast = node if isinstance(node, exp.Cast) else None
        node = node.this if cast is not None else node
        if not isinstance(node, exp.Column) or node.table not in facts:
            return None
        column = self._through(node.table, node.name)
        if column is None:
            return None
        if cast is not None:
            source_type = self.tables[facts[node.table].table].columns.get(column, "")
            if _INTEGRAL_WIDTH.get(source_type.lower(), 9) > _INTEGRAL_WIDTH.get(cast.to.sql("spark").lower(), 0):
                return None
        return node.table, column

    def _unsound(self, fact: str, dimension: str, on: exp.Join | None, null_safe: bool) -> str | None:
        """Why pruning ``fact`` by ``dimension`` through this conjunct could change the result, or None."""
        if null_safe and (fact in self.null_supplied or dimension in self.null_supplied):
            return "<=> with a side an outer join null-extends is not pruned"
        if on is None:
            return None  # a WHERE conjunct holds for every result row
        joined = on.this.alias_or_name
        side, kind = (on.side or "").upper(), (on.kind or "").upper()
        if kind == "ANTI" or side == "FULL":
            return f"a {side or kind} {kind if side else ''} join keeps fact rows without a match".replace("  ", " ")
        fact_is_right = fact == joined
        if side == "LEFT" and kind != "SEMI" and not fact_is_right:
            return "the fact side is preserved by the LEFT JOIN"
        if side == "RIGHT" and fact_is_right:
            return "the fact side is preserved by the RIGHT JOIN"
        return None

    def _pair(self, fact: FactScan, dimension: str, equalities: list[_Equality]) -> None:
        """Record the pruning of ``fact`` by ``dimension`` through all their equalities."""
        node, source = self.nodes[dimension], self.scope.sources.get(dimension)
        places = [*self.where, *(c for join in {id(e.on): e.on for e in equalities if e.on}.values()
                                 for c in sqltree.conjuncts(join.args.get("on")))]
        predicates = [c for c in places if sqltree.only_source(c) == dimension]
        selective = any(sqltree.selective_predicate(p) for p in predicates)
        if isinstance(source, Scope):  # a subquery, or a CTE (named by a Table node)
            selective = selective or sqltree.selective(source.expression)
        info = self.tables.get(sqltree.table_name(node)) if isinstance(source, exp.Table) else None
        if not selective and info is not None and info.dynsource:
            # Counting whether it is small could read a fact whole (TPC-DS q17's store_returns beside store_sales).
            self.refusals.append(Refusal(fact, f"{sqltree.shown_name(node)}: not collected: a dynsource table joined "
                                               "without a selective predicate on it is not read to learn whether it "
                                               "is small enough to prune by (it may be as large as a fact): give it "
                                               "a selective predicate, or collect its keys with dynsource.collect "
                                               "and read the fact WITH ('dynamicFilter' = ...)"))
            return
        keys = [e.key for e in equalities]
        keyed = exp.select(*[exp.alias_(key.copy(), f"k{i}") for i, key in enumerate(keys)]).from_(node.copy())
        if predicates:
            keyed = keyed.where(exp.and_(*[p.copy() for p in predicates]))
        # The snapshot keeps the WHERE's filter only: an ON condition filters for its own join alone.
        pinned = [] if dimension in self.null_supplied else [c for c in self.where if c in predicates]
        pin = snapshots.source_pin(node, pinned, keyed, self.statement.ctes, self.statement.tokens)
        name = sqltree.shown_name(node) if isinstance(source, exp.Table) else dimension
        self.prunings.append(Pruning(fact, tuple(e.column for e in equalities), name,
                                     tuple(key.sql("spark") for key in keys), self._with_ctes(keyed),
                                     null_safe=any(e.null_safe for e in equalities), selective=selective, pin=pin,
                                     filtered_by_subquery=any(sqltree.filters_by_subquery(c, dimension, self.scope)
                                                              for c in places),
                                     strategy_hint=self._strategy_hint(equalities[0].fact, dimension)))

    def _strategy_hint(self, fact: str, dimension: str) -> str | None:
        """The join strategy hint of this SELECT under which Spark plans the join of ``fact`` and ``dimension``
        without broadcasting the dimension (so its dynamic partition pruning drops its filter); None without one.

        As Spark resolves them: a relation takes the first strategy hint naming its alias, and a broadcast of the
        dimension wins over a hint on the fact unless the fact is hinted to be broadcast too.
        """
        hint = self.select.args.get("hint")
        first: dict[str, exp.JoinHint] = {}
        for join_hint in hint.expressions if hint is not None else []:
            if isinstance(join_hint, exp.JoinHint) and join_hint.name.upper() in _STRATEGY_HINTS:
                for named in join_hint.expressions:
                    first.setdefault(named.name.lower(), join_hint)
        on_fact, on_dimension = first.get(fact.lower()), first.get(dimension.lower())
        broadcast = {side: found is not None and found.name.upper() in _BROADCAST_HINTS
                     for side, found in (("fact", on_fact), ("dimension", on_dimension))}
        if broadcast["dimension"] and not broadcast["fact"]:
            return None
        found = on_fact or on_dimension
        return None if found is None else found.sql("spark")

    def _with_ctes(self, query: exp.Select) -> str:
        return snapshots.with_ctes_sql(query, self.statement.ctes)

    def _null_supplied(self) -> set[str]:
        """Aliases whose rows an outer join of this SELECT may null-extend."""
        supplied: set[str] = set()
        seen = list(self.nodes)[:1] if self.select.args.get("from_") else []
        for join in self.joins:
            joined = join.this.alias_or_name
            side = (join.side or "").upper()
            if side in ("LEFT", "FULL") and (join.kind or "").upper() not in ("SEMI", "ANTI"):
                supplied.add(joined)
            if side in ("RIGHT", "FULL"):
                supplied.update(seen)
            seen.append(joined)
        return supplied


def _dynsource_tables(scope: Scope, tables: Mapping[str, TableInfo], seen: set[int] | None = None) -> set[str]:
    """The dynsource tables ``scope`` reads, through its derived tables, subqueries and the CTEs it selects from."""
    seen = set() if seen is None else seen
    seen.add(id(scope))
    found = set()
    for inner in scope.traverse():
        for _, source in inner.selected_sources.values():
            if isinstance(source, exp.Table):
                info = tables.get(sqltree.table_name(source))
                if info is not None and info.dynsource:
                    found.add(sqltree.shown_name(source))
            elif isinstance(source, Scope) and source.is_cte and id(source) not in seen:
                found |= _dynsource_tables(source, tables, seen)
    return found


def _stopped_by(scope: Scope) -> str:
    """What keeps the rows of ``scope`` (a derived table or CTE reading a dynsource table) from being that table's
    rows passed through one by one, in words."""
    query = scope.expression
    if isinstance(query, exp.SetOperation):
        return f"a {query.key.upper()}{' ALL' if not query.args.get('distinct') else ''}"
    if not isinstance(query, exp.Select):
        return "a query"
    if query.args.get("windows") or query.args.get("qualify") or any(e.find(exp.Window) for e in query.expressions):
        return "a window function"
    if query.args.get("group") or query.args.get("having") or any(e.find(exp.AggFunc) for e in query.expressions):
        return "an aggregate"
    for part, words in (("distinct", "DISTINCT"), ("limit", "a LIMIT"), ("offset", "an OFFSET"),
                        ("laterals", "a LATERAL VIEW"), ("joins", "a join")):
        if query.args.get(part):
            return words
    sources = [source for _, source in scope.selected_sources.values()]
    if len(sources) == 1 and isinstance(sources[0], Scope):
        return _stopped_by(sources[0])
    return "a common table expression (WITH) the query reads more than once" if scope.is_cte else "a derived table"
