"""DataFrames named inside SQL text: how :func:`dynsource.sql`'s rewrites refer to what they read themselves.

A rewritten query names each DataFrame it put in (a fact scan with its filter,
a dimension's snapshot, a table reference with its own options) by a
placeholder, a plain identifier no user writes. :meth:`Frames.sql` runs such a
text through ``spark.sql(text, **dataframes)``: classic PySpark drops the
temporary views it makes for that call as soon as the query is analysed, and
Spark Connect sends the DataFrames' plans with the query, so no temporary view
is left in the session either way. A DataFrame read again by later queries (a
fact scan the planner gives again) is named instead by its lasting view in
Spark's global temporary database, made once (:mod:`dynsource.spark.globalviews`);
on Spark Connect, by the temporary view of the kept files its scan reads
(:mod:`dynsource.spark.connect`).

On Spark Connect, a local checkpoint lives on the server only while the
client's DataFrame of it does: PySpark removes it when that object is garbage
collected. ``spark.sql`` returns a DataFrame that names the checkpoint by id
but holds no reference to it, so :meth:`Frames.sql` ties the DataFrames it
named to the returned plan: the checkpoints and views live as long as the result or any
DataFrame derived from it. A DataFrame built from the text of a further
``spark.sql(..., x=result)`` call holds only ids again, so keep ``result``
while using it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from threading import Lock
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from sqlglot.tokens import TokenType

from dynsource.dpp import sqltree
from dynsource.runtime import deployment
from dynsource.spark import connect, globalviews

PREFIX = "__dynsource_"
_NAMES = (TokenType.VAR, TokenType.IDENTIFIER)


class Frames:
    """The DataFrames a query text names by placeholders."""

    def __init__(self) -> None:
        self._frames: dict[str, DataFrame] = {}
        self._lock = Lock()

    @property
    def frames(self) -> Mapping[str, DataFrame]:
        return self._frames

    def add(self, kind: str, df: DataFrame) -> str:
        """A new placeholder for ``df``; ``kind`` says what it is to a reader of the text."""
        with self._lock:  # dimensions are collected on several threads
            name = f"{PREFIX}{kind}_{len(self._frames)}"
            self._frames[name] = df
        return name

    def sql(self, spark: SparkSession, text: str, args: Any = None, **kwargs: Any) -> DataFrame:
        """``spark.sql(text, args, **kwargs)``, each placeholder in ``text`` reading its DataFrame: by the name of
        its lasting view (:mod:`dynsource.spark.globalviews`) if it has one, else by a view ``spark.sql`` makes for
        the call.

        With ``kwargs``, ``text`` is already a format string (``{name}`` fields), as ``spark.sql`` takes it.
        """
        if not self._frames:
            return _sql(spark, text, args, **kwargs)
        formatted, used = self._formatted(spark, text, bool(kwargs), checked=False)
        try:
            result = _sql(spark, formatted, args, **kwargs, **used)
        except AnalysisException as error:
            if not globalviews.named_in(error):
                raise
            # A lasting view dropped since it was made (nothing ran: the analysis failed) is made again; the text
            # is analysed again only if one was, else the error is the text's own.
            remade, used = self._formatted(spark, text, bool(kwargs), checked=True)
            if remade == formatted:
                raise
            result = _sql(spark, remade, args, **kwargs, **used)
        _hold(result, self._frames.values())  # also those named by a view that lives while they do
        return result

    def query(self, spark: SparkSession, text: str) -> DataFrame:
        """:meth:`sql` of a query ``text`` (it runs nothing): over Spark Connect, where it names its DataFrames by
        their lasting views, sent for analysis only the session's first time (:func:`connect.analysed_query`)."""
        if not deployment.is_connect(spark):
            return self.sql(spark, text)
        formatted, used = self._formatted(spark, text, False, checked=False)
        if used:
            return self.sql(spark, text)
        result = connect.analysed_query(spark, formatted)
        _hold(result, self._frames.values())
        return result

    def _formatted(self, spark: SparkSession, text: str, is_format: bool,
                   checked: bool) -> tuple[str, dict[str, DataFrame]]:
        """``text`` with each placeholder named by its lasting view (``checked``: made again if dropped) or made a
        ``{placeholder}`` field, and the DataFrames of those fields."""
        spans = [(token.start, token.end + 1, token.text) for token in sqltree.tokens(text)
                 if token.token_type in _NAMES and token.text in self._frames]
        lasting = {placeholder: connect.view_name(self._frames[placeholder])
                   or globalviews.name(spark, self._frames[placeholder], checked=checked)
                   for _, _, placeholder in spans}
        used = {placeholder: self._frames[placeholder] for placeholder, name in lasting.items() if name is None}
        # spark.sql formats a text it is given keyword arguments for: a plain text's braces must be doubled.
        escape = used and not is_format
        escaped = (lambda piece: piece.replace("{", "{{").replace("}", "}}")) if escape else (lambda piece: piece)
        pieces, position = [], 0
        for start, end, placeholder in spans:
            pieces += [escaped(text[position:start]), lasting[placeholder] or "{" + placeholder + "}"]
            position = end
        return "".join([*pieces, escaped(text[position:])]), used


def _sql(spark: SparkSession, text: str, args: Any = None, **kwargs: Any) -> DataFrame:
    """``spark.sql(text, args, **kwargs)``; a text without arguments, in a classic session, in one JVM call, not the
    five of ``spark.sql``, which builds an empty argument array by reflection each time (1-2 ms of a warm query)."""
    if args is None and not kwargs and not deployment.is_connect(spark):
        return DataFrame(spark._jsparkSession.sql(text), spark)
    return spark.sql(text, args, **kwargs)


def _hold(result: DataFrame, frames: Iterable[DataFrame]) -> None:
    """Keep ``frames`` alive while ``result``'s plan is (Spark Connect: a checkpoint dies with its DataFrame)."""
    # A Spark Connect DataFrame's plan; classic ones keep theirs in the JVM. Not getattr: a classic DataFrame takes
    # a missing attribute for a column name and asks the JVM for its columns.
    plan = vars(result).get("_plan")
    if plan is not None:
        plan.__dict__.setdefault("_dynsource_frames", []).extend(frames)
