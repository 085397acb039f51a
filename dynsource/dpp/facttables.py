"""What one plan of :func:`dynsource.sql` learns of each fact table once, and why a pruning's keys are not
collected: Spark's own dynamic partition pruning prunes it, it would not pay, the fact's Python data source does not
accept its fields, or the same dimension was declined on the same fact before (:func:`declined_before`).

A dimension side without a selective predicate in the query (a view that filters; a join of ``date_dim`` only to
group by ``d_year``, which :mod:`dynsource.dpp.unfiltered` collects only where the session asks it to) holds the
same keys at every query while its tables are unchanged: collected once, it is judged by the benefit check, and
where it was declined ("keeps 2404 of 2404 partitions") that verdict is remembered for the same fact state (the
survey a warm session keeps while the fact's directories read alike) and the same dimension plan (Spark's semantic
hash of its rows), so later queries neither collect nor judge it again. Only declines are remembered: a
remembered one reads the fact whole, which is never wrong. Rows appended to a dimension's files add keys and keep
a decline true; a dimension whose rows were deleted keeps its verdict until the fact changes (a speed matter only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from dynsource.dpp import benefit, detection
from dynsource.dpp.placeholders import Frames
from dynsource.runtime.lru import LruMap
from dynsource.spark import catalog, filereader
from dynsource.spark.pythonsources import FilteringSource

VERDICTS_KEPT = 256
_broadcasts: LruMap[bool] = LruMap(VERDICTS_KEPT)  # see FactTables.broadcast
# By fact table, survey, dimension keys' text, fact columns, null safety, dimension plan hash and ratio: the survey
# (kept alive, so its id is not reused) and the decline's reason.
_declined: LruMap[tuple[benefit.Survey, str]] = LruMap(VERDICTS_KEPT)


@dataclass
class FactTables:
    """What one plan learns of each dynsource table once, however many of its scans and prunings ask."""

    spark: SparkSession
    tables: Mapping[str, detection.TableInfo]
    definitions: Mapping[str, catalog.TableDefinition]
    sources: Mapping[str, FilteringSource]
    frames: Frames  # the DataFrames the query's text names by placeholders
    resolved: tuple = ()  # the query's tables as resolved: their names and schemas
    _surveys: dict[str, benefit.Survey] = field(default_factory=dict)
    _readers: dict[str, str | None] = field(default_factory=dict)
    _dimensions: dict[str, DataFrame] = field(default_factory=dict)

    def survey(self, table: str) -> benefit.Survey:
        """``table``'s deep survey (its partition columns, the first data file a data-column filter is judged on)."""
        if table not in self._surveys:
            self._surveys[table] = benefit.survey(self.definitions[table].scan_options, self.tables[table].columns)
        return self._surveys[table]

    def broadcast(self, pruning: detection.Pruning) -> bool:
        """Whether Spark broadcasts ``pruning``'s dimension side by its size: its estimate of the dimension's rows
        (every column of them, so at least what the join's side holds) within ``spark.sql.autoBroadcastJoinThreshold``.
        Over Spark Connect, whose client cannot ask, it is taken to.

        The answer is kept by the dimension's text and the query's tables as resolved (their names and schemas):
        asking costs an analysis of the text (about 20 ms), a warm query's whole overhead otherwise. A dimension
        replaced by far more rows of the same schema keeps its answer: Spark then reads every partition, a speed
        matter only."""
        session = getattr(self.spark, "_jsparkSession", None)
        if session is None or pruning.pin is None:
            return True
        threshold = session.sessionState().conf().autoBroadcastJoinThreshold()
        key = (pruning.pin.rows_sql, self.resolved, threshold)
        known = _broadcasts.get(key)
        if known is None:
            known = threshold >= 0 and self._estimated_bytes(pruning.pin.rows_sql) <= threshold
            _broadcasts.put(key, known)
        return known

    def _estimated_bytes(self, text: str) -> int:
        """Spark's optimizer's estimate of the size of ``text``'s rows (without statistics: the relations' sizes,
        scaled by projections); 0 where it cannot be had. The analysed plan's would run a Spark job for a CTE."""
        try:
            size = self.dimension(text)._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
        except Exception:  # the collection meets the same error and reports it
            return 0
        return int(str(size))  # a Scala BigInt, which py4j may hand over as an int

    def dimension(self, text: str) -> DataFrame:
        """The DataFrame of a dimension side's rows ``text``, one per text for the plan: each check that asks for its
        plan, size or hash (:func:`dynsource.dpp.unfiltered.not_collected`, :func:`verdict_key`, :meth:`broadcast`)
        reads the analysis Spark made once. Raises what Spark's analysis of ``text`` raises."""
        if text not in self._dimensions:
            self._dimensions[text] = self.frames.sql(self.spark, text)
        return self._dimensions[text]

    def reader(self, table: str) -> str | None:
        """Which reader reads ``table`` (a Hadoop probe); None for a reader option its read reports as an error."""
        if table not in self._readers:
            try:
                self._readers[table] = filereader.choose(self.spark, self.definitions[table].scan_options)[0]
            except ValueError:
                self._readers[table] = None
        return self._readers[table]


def not_collected(facts: FactTables, pruning: detection.Pruning, min_bytes: int,
                  spark_prunes_local: bool) -> str | None:
    """Why ``pruning``'s keys are not collected (:func:`benefit.left_to_spark`, :func:`benefit.not_worth_collecting`,
    a field a Python data source does not accept); None when they are."""
    source = facts.sources.get(pruning.fact.table)
    if source is not None:
        return not_accepted(source, pruning.fact_columns)
    if facts.reader(pruning.fact.table) != "spark":
        return None  # dynsource's reader filters the rows before they cross to Spark: every filter pays there
    survey = facts.survey(pruning.fact.table)
    # Spark's dynamic partition pruning takes an equality (not <=>) with a dimension holding a selective predicate,
    # from the dimension's broadcast (a MERGE or SHUFFLE_HASH hint plans none: Spark then reads every partition).
    # It lists the whole table first: in a session that never read the table (a batch job's first query), that
    # listing costs more than a collection; later it is kept, and costs less.
    spark_prunes = (spark_prunes_local and (pruning.selective or pruning.filtered_by_subquery)
                    and not pruning.null_safe and pruning.strategy_hint is None
                    and filereader.planned_before(facts.spark, facts.definitions[pruning.fact.table].scan_options))
    left = benefit.left_to_spark(pruning.fact_columns, survey) if spark_prunes else None
    if left is not None and not facts.broadcast(pruning):
        left = None  # Spark plans no broadcast of the dimension, so its pruning filter is dropped: collected here
    return left or benefit.not_worth_collecting(pruning.fact_columns, survey, min_bytes)


def not_accepted(source: FilteringSource, columns: Sequence[str]) -> str | None:
    """Why a filter on ``columns`` cannot prune a scan of ``source``; None when it accepts them all."""
    refused = [column for column in columns if column.lower() not in source.accepted]
    if not refused:
        return None
    return (f"not collected: data source '{source.name}' accepts a dynamic filter on {sorted(source.accepted)} only, "
            f"not on {refused}")


def verdict_key(facts: FactTables, pruning: detection.Pruning, ratio: float) -> tuple | None:
    """What identifies ``pruning``'s benefit verdict where it cannot change while the tables do not: a dimension
    nothing filters, on a dynsource fact whose survey is kept; None for any other pruning."""
    if pruning.selective or pruning.filtered_by_subquery or pruning.pin is None or (
            pruning.fact.table not in facts.definitions):
        return None
    try:
        dimension = facts.dimension(pruning.pin.rows_sql).semanticHash()
    except Exception:  # the collection meets the same error and reports it
        return None
    survey = facts.survey(pruning.fact.table)
    return (pruning.fact.table, id(survey), pruning.dimension_sql, pruning.fact_columns, pruning.null_safe,
            dimension, ratio)


def declined_before(facts: FactTables, table: str, key: tuple | None) -> str | None:
    """The reason the pruning of ``key`` was declined before, on ``table``'s survey as it is now; None if it was
    not."""
    kept = None if key is None else _declined.get(key)
    if kept is None or kept[0] is not facts.survey(table):
        return None
    return f"{kept[1]} (judged at an earlier query on the same tables: not collected again)"


def remember_decline(facts: FactTables, table: str, key: tuple | None, reason: str) -> None:
    """Remember that the pruning of ``key`` was declined for ``reason`` on ``table``'s survey."""
    if key is not None:
        _declined.put(key, (facts.survey(table), reason))
