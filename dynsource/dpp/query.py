"""``dynsource.sql``: Spark SQL with automatic dynamic partition pruning, where every table reference keeps
its own ``WITH (...)`` options.

Star joins of registered dynsource tables with filtered dimensions are found,
collected and wired by :mod:`dynsource.dpp.queryplan` (detection is
:mod:`dynsource.dpp.starjoin`); what follows is about the options.

Spark resolves each table name of a statement once: a second reference to the
same table reuses the first one's relation, options included (its per-query
relation cache is keyed by the name, not the options). So in

    SELECT k FROM t WITH ('dynamicFilter' = 'h1') UNION ALL SELECT k FROM t

both branches read with ``h1``. The same happens to a temporary view of
``spark.read.options(...).table("t")``, whose name is resolved again in each query.

:func:`sql` gives each reference to a registered dynsource table that carries
options a relation of its own: it finds the ``name WITH (...)`` clauses with
sqlglot's Spark tokenizer, keeps those whose name Spark resolves to a dynsource
table (not a CTE or a temporary view of that name, see :mod:`dynsource.dpp.nameresolution`),
reads each through the table's own source
(``spark.read.format("dynsource.<db>.<table>")``, which involves no table name)
and runs the query with the clause replaced by that DataFrame
(:mod:`dynsource.dpp.placeholders`). Everything else in the text, including the options
of tables that are not dynsource's, is left as written.

What a returned DataFrame pins: the dimension rows its fact scans were pruned
by are read once, when :func:`sql` runs, and every action joins those rows (a
local checkpoint); the fact tables' files are listed at the first action and
reused by later ones, as ``spark.read.parquet`` does. Call :func:`sql` again to
see rows added to a dimension since.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from dynsource.dpp import benefit, dimensions, inserts, nameresolution, queryplan, queryreport, sqltree, views
from dynsource.dpp.placeholders import Frames
from dynsource.dpp.unfiltered import collects_unfiltered
from dynsource.runtime import deployment, settings
from dynsource.scan import latechecks, options, planner
from dynsource.spark import catalog, metastore

log = logging.getLogger(__name__)

# Where a table reference starts: a table name follows these tokens.
_BEFORE_TABLE = (TokenType.FROM, TokenType.JOIN, TokenType.COMMA)
_NAME = re.compile(r"^\w+$")
_VALUES = (TokenType.STRING, TokenType.NUMBER, TokenType.TRUE, TokenType.FALSE)


@dataclass(frozen=True)
class TableOptions:
    """One ``name WITH (...)`` clause: the text span it covers, the table's name parts and the options."""

    start: int
    end: int  # exclusive
    name: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    options_start: int  # where ``WITH`` starts
    aliased: bool  # an alias follows the clause


def sql(spark: SparkSession, query: str, args: Any = None, **kwargs: Any) -> DataFrame:
    """``spark.sql(query)``, its star joins pruned, each table reference's ``WITH (...)`` options its own.

    Each join of a registered dynsource table with a dimension holding a
    selective predicate, where pruning cannot change the result (see
    :mod:`dynsource.dpp.starjoin`), has the dimension's keys collected first; the
    fact table is then read with that dynamic filter and only the columns the
    query names. The result equals ``spark.sql(query)``; ``dynsource.scan_report``
    of it says what was pruned and why other joins were not.

    A query's dimensions are collected concurrently, each dimension text once,
    for at most the session's ``spark.dynsource.collectTimeoutMs`` (default
    60000 ms); a filter not collected by then is not applied and the report
    says so (the query's rows are the same, read unpruned). A filter on data
    columns only of a fact Spark's file reader reads is collected only when the
    fact is estimated at ``spark.dynsource.dataFilterMinScanBytes`` or more
    (default: Spark's runtime filter threshold,
    ``spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold``, 10 GB).
    A filter on partition columns only of a fact Spark's file reader reads from a local
    disk is left to Spark's own dynamic partition pruning (listing the whole table
    there costs less than a collection, once the session has read the table: its
    first query of it collects) unless the session's
    ``spark.dynsource.partitionPruning`` is ``collect`` (default ``auto``).
    A dimension side that nothing filters (joined only to group by one of its
    columns) is not collected, as Spark's own pruning does not prune by it,
    unless ``spark.dynsource.unfilteredDimensions`` is ``collect`` (default
    ``skip``): then a small one is.
    A local table's files are looked up at every query, so that files written
    since are read; with ``spark.dynsource.listingCheckIntervalMs`` (default 0)
    a table found unchanged less than that long ago is read as it was found,
    without looking again: files written within the interval are read once it
    ends (Trino's file status cache expires the same way; a warm Spark
    DataFrame never looks again).

    Parameters
    ----------
    spark : SparkSession
    query : str
        A Spark SQL statement. ``FROM t WITH ('dynamicFilter' = '<handle>')``
        may appear several times for one table, with different options or none.
    args, **kwargs
        Passed to ``spark.sql`` (query parameters). A query with parameters is
        not pruned automatically: its dimension queries would lose their values.

    Returns
    -------
    DataFrame
        What ``spark.sql`` returns for the rewritten query.

    Examples
    --------
    >>> import dynsource, pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> root = tempfile.mkdtemp()
    >>> pq.write_to_dataset(pa.table({"v": [1, 2, 3], "k": [1, 2, 3]}), root, partition_cols=["k"])
    >>> _ = dynsource.register_table(spark, "kv", path=root, definitions=tempfile.mkdtemp())
    >>> dynsource.sql(spark, '''SELECT v FROM kv WITH ('partitionFilter' = 'k = 1')
    ...                         UNION ALL SELECT v FROM kv WITH ('partitionFilter' = 'k = 3')''').collect()
    [Row(v=1), Row(v=3)]
    >>> spark.createDataFrame([(3, "x"), (2, "y")], "d INT, tag STRING").createOrReplaceTempView("tags")
    >>> spark.conf.set("spark.dynsource.partitionPruning", "collect")  # auto: Spark prunes this local table
    >>> df = dynsource.sql(spark, "SELECT v, tag FROM kv JOIN tags ON k = d WHERE tag = 'x'")
    >>> df.collect()
    [Row(v=3, tag='x')]
    >>> print(dynsource.scan_report(df))
    default.kv (kv.k) <- tags (tags.d): exact, 1 keys, collected in ... ms; reads all columns
      payload: exact, 1 key(s), ... bytes
      partitions: 1 of 3 kept
      files: 1 (... bytes) read by Spark's file reader
      listings: ...
    >>> dynsource.drop_table(spark, "kv")
    """
    if args or kwargs:  # the dimension queries would lose the parameters' values
        text, frames, _, _ = _with_options_read(spark, query)
        return frames.sql(spark, text, args, **kwargs)
    inserted = inserts.run(spark, query, sql)
    if inserted is not None:
        return inserted
    with (latechecks.checked_later() as checks,
          nameresolution.confirmed_ahead(spark, queryplan.known_references(query)),  # beside the settings' request
          settings.read_at_once(spark)):
        checks.interval_s = options.session_ms(spark, planner.CHECK_INTERVAL_CONF, 0) / 1000
        df = _pruned(spark, query, checks)
    if df is not None and checks.held():
        return df
    log.debug("dynsource: a kept plan or a table name changed since it was kept: the query is planned again")
    with settings.read_at_once(spark):
        return _pruned(spark, query)  # planned again, each check first


def _pruned(spark: SparkSession, query: str, checks: latechecks.LateChecks | None = None) -> DataFrame | None:
    """:func:`sql` of a query without parameters; with ``checks`` of plans given before their check ended, None
    where a check failed before a statement that runs at once (an INSERT, a CACHE TABLE) would have run."""
    text, frames, view_notes, given = _with_options_read(spark, query)
    timeout_ms, min_scan_bytes = dimensions.timeout_ms(spark), benefit.min_scan_bytes(spark)
    spark_prunes_local, collect_unfiltered = benefit.spark_prunes_local(spark), collects_unfiltered(spark)
    try:
        plan = queryplan.plan(spark, text, frames=frames, timeout_ms=timeout_ms, min_scan_bytes=min_scan_bytes,
                            spark_prunes_local=spark_prunes_local, prepare=True, given=given,
                            collect_unfiltered=collect_unfiltered)
    except metastore.UnregisteredCatalogTable:
        raise  # spark.sql cannot read that table either, and its error cannot name it
    except Exception as error:  # an analysis that fails must never fail a query spark.sql runs
        log.warning("dynsource: the query could not be analysed for dynamic pruning, running it as written: %s",
                    error)
        plan, unanalysed = None, queryreport.QueryReport(given, (*view_notes,
                                                                 f"the query could not be analysed: {error}"))
    else:
        plan.notes[:0] = view_notes
    # spark.sql runs any other statement at once: it must not run on a plan whose check then fails.
    if checks is not None and (plan is None or not plan.is_query) and not checks.held():
        return None
    df = frames.sql(spark, text) if plan is None else plan.run(spark)
    queryreport.record_query(df, unanalysed if plan is None else plan.report)
    return df


def explain_sql(spark: SparkSession, query: str) -> queryreport.QueryReport:
    """The dynamic filters :func:`sql` wires into ``query``, with each pruned scan planned but not run.

    Like Trino's ``EXPLAIN ANALYZE`` for dynamic filters: the dimension queries
    run (their keys are collected and published) and each pruned fact scan is
    planned, so ``str()`` of the result shows, per scan, the filter
    (``store_sales (ss.ss_sold_date_sk) <- date_dim (d.d_date_sk)``), its kind,
    keys and collection time, and the partitions kept of the total; and why other
    joins are not pruned. The query itself does not run, but Spark analyses it
    first: a query ``spark.sql`` rejects raises its error here too.
    """
    text, frames, view_notes, given = _with_options_read(spark, query)
    frames.sql(spark, text)  # Spark's own parse and analysis errors, before any dimension runs
    plan = queryplan.plan(spark, text, frames=frames, timeout_ms=dimensions.timeout_ms(spark),
                        min_scan_bytes=benefit.min_scan_bytes(spark),
                        spark_prunes_local=benefit.spark_prunes_local(spark), given=given,
                        collect_unfiltered=collects_unfiltered(spark))
    plan.plan_scans(spark)
    plan.notes[:0] = view_notes
    return plan.report


def _with_options_read(spark: SparkSession, query: str) -> tuple[
        str, Frames, tuple[str, ...], tuple[queryreport.Assignment, ...]]:
    """``query`` with each view over a registered dynsource table seen through (:mod:`dynsource.dpp.views`) and
    each ``name WITH (...)`` reference of a registered dynsource table replaced by a placeholder of its own
    DataFrame; those DataFrames; why views were not seen through; and what each such reference reads with."""
    frames, chosen, given = Frames(), [], []
    references = table_options(query)
    if any("'" in value for reference in references for _, value in reference.options):
        _judged_by_spark(spark, query)
    expanded = views.expand(spark, query, _blanked(query, references), {r.start for r in references})
    if expanded.text != query:
        query, references = expanded.text, table_options(expanded.text)
    tables = _table_starts(query, references) if references else set()
    resolver = nameresolution.Resolver(spark)
    looked_up = [reference.name for reference in references if reference.start in tables]
    by_name = dict(zip(looked_up, resolver.resolve_all(looked_up), strict=True))
    for reference in references:
        relation = by_name.get(reference.name) if reference.start in tables else None
        if relation is not None and relation.definition is not None:
            df = catalog.read_table(spark, relation.key, dict(reference.options))
            chosen.append((reference, frames.add("ref", df)))
            given.append(_given(relation.key, relation.definition, dict(reference.options)))
    return rewrite(query, chosen), frames, expanded.notes, tuple(given)


def _given(table: str, definition: catalog.TableDefinition, options: Mapping[str, str]) -> queryreport.Assignment:
    """The report's entry of a reference to ``table`` read with its own ``options``: the filters they give it."""
    scan = definition.scan_options.with_options(options)
    static = scan.partition_filter
    return queryreport.Assignment(table, handle=scan.dynamic_filter, given=tuple(options),
                                  partition_filter=None if static is None else static.text, store=scan.filter_store)


def _judged_by_spark(spark: SparkSession, query: str) -> None:
    """Raise Spark's error for a text Spark's parser rejects: pyspark 4.0's takes no quote doubled inside an option
    value (4.1+ does), which the rewrite would hide. A query is analysed by ``spark.sql`` (which runs nothing); any
    other statement, which ``spark.sql`` would run (an INSERT twice, counting the rewritten one), is only parsed,
    by the session's parser; Spark Connect gives the client no parser, so there such a statement is not judged
    (it runs as rewritten, where pyspark 4.0's ``spark.sql`` would have rejected it)."""
    try:
        is_query = sqltree.is_query(sqlglot.parse_one(query, read="spark"))
    except SqlglotError:
        is_query = False
    if is_query:
        spark.sql(query)
    elif not deployment.is_connect(spark):
        spark._jsparkSession.sessionState().sqlParser().parsePlan(query)


def _table_starts(query: str, references: Sequence[TableOptions]) -> set[int]:
    """Where the references of ``query`` to a table or view start (not those to a CTE in scope).

    Judged by sqlglot's scopes on the text with the option clauses blanked out;
    when that cannot be parsed, every reference counts as a table's.
    """
    try:
        return {sqltree.start(table) for table in
                nameresolution.references(sqlglot.parse_one(_blanked(query, references), read="spark"))}
    except SqlglotError:
        return {reference.start for reference in references}


def _blanked(query: str, references: Sequence[TableOptions]) -> str:
    """``query`` with the ``WITH (...)`` options of ``references`` blanked out, for sqlglot (positions kept)."""
    for reference in references:
        blank = " " * (reference.end - reference.options_start)
        query = query[:reference.options_start] + blank + query[reference.end:]
    return query


def rewrite(query: str, references: Sequence[tuple[TableOptions, str]]) -> str:
    """``query`` with each reference's ``name WITH (...)`` replaced by its placeholder (the name as its alias)."""
    pieces, position = [], 0
    for reference, name in sorted(references, key=lambda r: r[0].start):
        alias = "" if reference.aliased else f" AS {reference.name[-1]}"
        pieces += [query[position:reference.start], name + alias]
        position = reference.end
    return "".join([*pieces, query[position:]])


def table_options(query: str) -> list[TableOptions]:
    """Every ``name WITH (key = value, ...)`` table reference of ``query``, in order.

    A ``WITH`` that starts a common table expression (``WITH name AS``) is no
    table reference: only one that follows a table name right after ``FROM``,
    ``JOIN`` or a comma, and opens a parenthesis, is. A text the tokenizer
    cannot read (an unclosed string or comment) has none: Spark reports it.
    """
    try:
        tokens = sqltree.tokens(query)
    except SqlglotError:
        return []
    found = []
    for index, token in enumerate(tokens):
        if token.token_type != TokenType.WITH or _next_type(tokens, index) != TokenType.L_PAREN:
            continue
        first = _name_start(tokens, index)
        if first is None:
            continue
        options, close = _options(tokens, index + 2, query)
        name = tuple(t.text for t in tokens[first:index:2])
        aliased = _next_type(tokens, close) in (TokenType.ALIAS, TokenType.VAR, TokenType.IDENTIFIER)
        found.append(TableOptions(tokens[first].start, tokens[close].end + 1, name, options, token.start, aliased))
    return found


def _next_type(tokens: Sequence[Token], index: int) -> TokenType | None:
    return tokens[index + 1].token_type if index + 1 < len(tokens) else None


def _name_start(tokens: Sequence[Token], with_index: int) -> int | None:
    """Index of the first token of the dotted table name before ``tokens[with_index]``, if one is there."""
    index = with_index - 1
    while index >= 0 and _is_name(tokens[index]):
        if index >= 1 and tokens[index - 1].token_type == TokenType.DOT:
            index -= 2
            continue
        before = tokens[index - 1].token_type if index >= 1 else None
        return index if before in _BEFORE_TABLE else None
    return None


def _is_name(token: Token) -> bool:
    return token.token_type == TokenType.IDENTIFIER or bool(_NAME.match(token.text))


def _options(tokens: Sequence[Token], index: int, query: str) -> tuple[tuple[tuple[str, str], ...], int]:
    """The ``key [=] value`` pairs from ``tokens[index]`` up to the closing parenthesis, and that one's index."""
    options = []
    while index < len(tokens):
        key_end = index
        while key_end + 1 < len(tokens) and tokens[key_end + 1].token_type == TokenType.DOT:
            key_end += 2
        key = "".join(t.text for t in tokens[index:key_end + 1])
        value_index = key_end + 1
        if value_index < len(tokens) and tokens[value_index].token_type == TokenType.EQ:
            value_index += 1
        if value_index >= len(tokens) or tokens[value_index].token_type not in _VALUES:
            raise ValueError(f"dynsource.sql cannot read the table options at position {tokens[index].start} "
                             f"of the query: expected 'key' = 'value' pairs, got {query[tokens[index].start:][:40]!r}")
        value, after = _value(tokens, value_index)
        options.append((key, value))
        if after < len(tokens) and tokens[after].token_type == TokenType.R_PAREN:
            return tuple(options), after
        if after >= len(tokens) or tokens[after].token_type != TokenType.COMMA:
            break
        index = after + 1
    raise ValueError(f"dynsource.sql cannot read the table options at position {tokens[index - 1].start} of the "
                     "query: expected ',' or ')' after a 'key' = 'value' pair.")


def _value(tokens: Sequence[Token], index: int) -> tuple[str, int]:
    """The option value at ``tokens[index]``, and the index after it.

    Spark reads two quotes inside a string as one quote (``'a = ''x'''``); the
    tokenizer sees adjacent strings there, which are joined back with the quote.
    """
    value = tokens[index].text
    while (index + 1 < len(tokens) and tokens[index].token_type == TokenType.STRING
           and tokens[index + 1].token_type == TokenType.STRING and tokens[index + 1].start == tokens[index].end + 1):
        index += 1
        value += "'" + tokens[index].text
    return value, index + 1
