"""The benefit check of a dynamic filter: skip a filter that keeps most partitions, or nearly every row.

A filter on partition columns is judged on the fact table's partition
directories, as Spark's ``fallbackFilterRatio``: it must drop at least half of
them at some level of the survey's walk (the top level, and below it the
directories under the first one at each level), judged where it keeps least: a
``year=/month=/day=`` table holding one year is pruned by its months and days.
A filter on data columns only is judged, as Trino drops a dynamic
filter that is not selective, on the rows of one data file (of up to
``SAMPLE_FILES`` of them, down the first directories, while fewer than
``MIN_SAMPLE_ROWS`` rows: a table of small files): a filter keeping
more than ``DATA_COLUMN_RATIO`` of them (a dimension's keys covering nearly every
value of the fact column) would cost every read more than it saves. :func:`survey`
lists the directories and finds that file (the enumerator's walk, with its
checks, down one branch: the same walk tells the partition columns). Any other
filter is assumed to pay.

Before collecting, :func:`not_worth_collecting` skips a filter on data columns
only of a scan Spark's file reader reads: there the join filters the rows
anyway and the filter pays only by the Parquet or ORC row groups its keys skip,
which a small scan cannot repay a collection's Spark jobs with. Like Spark,
which injects a runtime Bloom filter only into a scan of at least
``spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold``
(10 GB), the session setting ``spark.dynsource.dataFilterMinScanBytes``
(default: that Spark setting) is the least estimated size of the fact worth it.
:func:`left_to_spark` skips a filter on partition columns only of such a scan
whose table is on a local disk: Spark's own dynamic partition pruning prunes
those partitions at run time from the broadcast it builds for the join, and
listing every partition of a local table (13-27 ms for 1,800 on two cores,
from listings kept while the directories are unchanged; 66 ms without) costs
less than a collection's Spark job (60-100 ms). On an object store the
listing is what pruning saves, so dynsource collects there.
:func:`worth_applying` applies the
check to each dimension's filter and makes those that pay the parts of the scan's
one filter (:meth:`DynamicFilteringData.all_of`: a row must match every part),
for :func:`dynsource.sql` and :func:`dynsource.dynamic_join` alike.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from dynsource import storage
from dynsource.filtering import DynamicFilteringData
from dynsource.layout import directories
from dynsource.layout.enumerator import PartitionEnumerator, kept_by
from dynsource.layout.levels import Level, PartitionTyping
from dynsource.layout.listing import Listing
from dynsource.runtime import settings
from dynsource.runtime.lru import LruMap
from dynsource.scan import files
from dynsource.scan.options import ScanOptions

DEFAULT_FALLBACK_FILTER_RATIO = 0.5  # spark.sql.optimizer.dynamicPartitionPruning.fallbackFilterRatio
DATA_COLUMN_RATIO = 0.9  # a filter on data columns keeping more of a sampled file's rows does not pay
MIN_SAMPLE_ROWS = 30  # fewer judge nothing; 30 rows all kept by a filter keeping 90% happen 4% of the time
SAMPLE_FILES = 8  # the most data files read to make MIN_SAMPLE_ROWS rows (each a listing and a read)
MIN_SCAN_CONF = "spark.dynsource.dataFilterMinScanBytes"
SPARK_MIN_SCAN_CONF = "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold"
SPARK_MIN_SCAN_DEFAULT = "10GB"  # Spark's default for it (since 3.3)
PRUNING_CONF = "spark.dynsource.partitionPruning"
PRUNING_MODES = ("auto", "collect")  # auto: left_to_spark decides; collect: dynsource collects wherever it pays
SPARK_DPP_CONF = "spark.sql.optimizer.dynamicPartitionPruning.enabled"
LEFT_TO_SPARK = "left to Spark's dynamic partition pruning at run time"  # how reports say left_to_spark declined
_SIZE = re.compile(r"(\d+)\s*([kmgtp]?)b?", re.IGNORECASE)
KEPT_SURVEYS = 64
_kept_surveys: LruMap[tuple[Survey, Listing]] = LruMap(KEPT_SURVEYS)  # see survey()


@dataclass(frozen=True)
class Survey:
    """What a walk of the fact table tells: its partition columns and its typed top level (``survey``'s walk), and
    when a filter on data columns asks, the rows of the first data file down the first branch (or of a few)."""

    fact: ScanOptions
    column_types: Mapping[str, str]
    columns: tuple[str, ...]  # the partition columns (only the top one when the walk was shallow)
    levels: tuple[Level, ...]  # the walk's: the top level, then those under its first directory (none: unpartitioned)
    branch: Listing | None = None  # the walk down the first branch, when survey() made it
    fanout: int = 1  # the directories at each level of the walk down the first branch, multiplied

    @property
    def top(self) -> Level | None:
        return self.levels[0] if self.levels else None

    @property
    def typing(self) -> PartitionTyping:
        """How the fact's walks type its partition values: its columns' types, under the reading session's settings."""
        return PartitionTyping(self.column_types, self.fact.partition_settings)

    def estimated_bytes(self) -> int:
        """The table's size were every leaf partition as large as the first one (a deep survey's estimate)."""
        return self.fanout * sum(f.size for p in self.first_branch.partitions[:1] for f in p.files)

    @functools.cached_property
    def first_branch(self) -> Listing:
        return self.branch or _walk(PartitionEnumerator(*files.open_table(self.fact.path, self.fact.storage_options)),
                                    self.typing, deep=True)[1]

    def sample(self, columns: Sequence[str]) -> pa.Table | None:
        """``columns`` of the first data file of the first branch, and of the next ones (:attr:`more_files`, up to
        ``SAMPLE_FILES`` in all) while they hold fewer than ``MIN_SAMPLE_ROWS`` rows; None when the table has none."""
        first = next((f.path for f in self.first_branch.files), None)
        if first is None:
            return None
        fs, _ = files.open_table(self.fact.path, self.fact.storage_options)
        read = functools.partial(files.read_columns, fs=files.arrow_filesystem(fs), format_name=self.fact.format,
                                 columns=columns)
        tables = [read(first)]
        if tables[0].num_rows < MIN_SAMPLE_ROWS:  # only then is the wider walk made (once per survey)
            for path in (path for path in self.more_files if path != first):
                tables.append(read(path))
                if len(tables) == SAMPLE_FILES or sum(table.num_rows for table in tables) >= MIN_SAMPLE_ROWS:
                    break
        return pa.concat_tables(tables)

    @functools.cached_property
    def more_files(self) -> list[str]:
        """Data files down the first ``SAMPLE_FILES`` directories at each level: where :meth:`sample` finds more
        rows when the first file holds few (a table of small files), walked when first asked."""
        enumerator = PartitionEnumerator(*files.open_table(self.fact.path, self.fact.storage_options))
        listing = _walk(enumerator, self.typing, deep=True, width=SAMPLE_FILES)[1]
        return [f.path for f in listing.files][:SAMPLE_FILES]


def survey(fact: ScanOptions, column_types: Mapping[str, str], *, deep: bool = True) -> Survey:
    """Walk the fact table down its first directory at each level: one listing per partition level.

    ``deep=False`` lists the top level only (one listing); ``Survey.columns`` then names its column alone.
    A warm session surveys a table at every query: a deep survey of a local table is kept (the newest
    ``KEPT_SURVEYS``) and given again while the directories its walk read are unchanged (their watches, or a
    few ``stat`` calls, instead of typing every top-level value again). A shallow one is not: its first
    branch, walked when asked, is no part of what its walk read.
    """
    fs, root = files.open_table(fact.path, fact.storage_options)
    key = (fact, tuple(sorted(column_types.items()))) if deep and storage.is_local(fact.path) else None
    kept = _kept_surveys.get(key) if key else None
    if kept is not None and directories.read_alike(fs, kept[1].read):
        return kept[0]
    typing = PartitionTyping(column_types, fact.partition_settings)
    levels, listing = _walk(PartitionEnumerator(fs, root), typing, deep)
    result = Survey(fact, column_types, listing.columns, tuple(levels), listing if deep else None,
                    math.prod(len(level.raw_rows) for level in levels) if deep else 1)
    if key and listing.checkable(root):
        _kept_surveys.put(key, (result, listing))
    return result


def _walk(enumerator: PartitionEnumerator, typing: PartitionTyping, deep: bool,
          width: int = 1) -> tuple[list[Level], Listing]:
    """The levels listed and the listing of a walk down the first ``width`` directories at each level (``deep``)."""
    levels: list[Level] = []

    def first_only(level: Level) -> list[bool]:
        levels.append(level)
        return [deep and index < width for index in range(len(level.raw_rows))]

    return levels, enumerator.enumerate(first_only, typing)


def min_scan_bytes(spark: SparkSession) -> int:
    """The session's ``spark.dynsource.dataFilterMinScanBytes`` (Spark's runtime filter threshold when unset)."""
    text = settings.get(spark, MIN_SCAN_CONF) or settings.get(spark, SPARK_MIN_SCAN_CONF, SPARK_MIN_SCAN_DEFAULT)
    # Spark's byte strings (10737418240b, 512m, 10gb), read here: a Spark Connect client has no JVM to ask.
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{MIN_SCAN_CONF} must be a size in bytes, 0 or more, such as 0, 512m or 10g; got {text!r}.")
    number, unit = match.groups()
    return int(number) * 1024 ** "_kmgtp".index(unit.lower() or "_")


def spark_prunes_local(spark: SparkSession) -> bool:
    """Whether :func:`left_to_spark` applies in the session: ``spark.dynsource.partitionPruning`` is ``auto`` (the
    default) and Spark's own dynamic partition pruning is on."""
    return (settings.choice(spark, PRUNING_CONF, PRUNING_MODES) == "auto"
            and (settings.get(spark, SPARK_DPP_CONF) or "true").strip().lower() == "true")


def left_to_spark(fact_columns: Sequence[str], survey: Survey) -> str | None:
    """Why a filter on ``fact_columns`` of a scan Spark's file reader reads is left to Spark's dynamic partition
    pruning (they are partition columns of a table on a local disk); None when dynsource should collect it."""
    if not storage.is_local(survey.fact.path):
        return None
    if not {column.lower() for column in fact_columns} <= {column.lower() for column in survey.first_branch.columns}:
        return None
    return (f"{LEFT_TO_SPARK}: the table is on a local disk, where listing "
            f"all of its partitions costs less than a collection ({PRUNING_CONF} = auto)")


def not_worth_collecting(fact_columns: Sequence[str], survey: Survey, min_bytes: int) -> str | None:
    """Why a filter on ``fact_columns`` of a scan Spark's file reader reads is not worth its collection; None when
    one of them is a partition column or the fact is estimated at ``min_bytes`` or more."""
    if {column.lower() for column in fact_columns} & {column.lower() for column in survey.first_branch.columns}:
        return None
    estimate = survey.estimated_bytes()
    if estimate >= min_bytes:
        return None
    return (f"not collected: its columns are data columns of a fact Spark's file reader reads, where the join "
            f"filters the rows and the keys could only skip row groups, not worth a collection on "
            f"{estimate:,} bytes (estimated), under {MIN_SCAN_CONF} ({min_bytes:,})")


def no_benefit(data: DynamicFilteringData, survey: Survey | None, ratio: float) -> str | None:
    """Why filtering with ``data`` would not pay on the fact ``survey`` tells of; None when it does."""
    if not data.is_filtering or survey is None:
        return None  # an exceeded filter reads everything anyway, and the scan report says so
    return _partitions_kept(data, survey.levels, ratio) or _rows_kept(data, survey)


def _partitions_kept(data: DynamicFilteringData, levels: Sequence[Level], ratio: float) -> str | None:
    """Why the filter keeps too many directories at each level it filters (the reason names the level where it
    keeps least); None when it drops enough at one of them."""
    judged = []
    for level in levels:
        try:
            kept = kept_by(data, level)
        except (TypeError, ValueError):  # the enumerator sets such a filter aside: no level of it to judge
            break
        if kept is None:
            continue
        judged.append((sum(kept) / len(kept), sum(kept), len(kept), level.columns[-1]))
        if not kept[0]:  # the walk went down a directory the filter drops: what lies below it tells nothing
            break
    if not judged:
        return None
    fraction, kept_count, total, column = min(judged)
    if fraction <= ratio:
        return None
    where = f"'{column}'" if column == levels[0].columns[0] else f"'{column}' under the first directory above it"
    return (f"the filter keeps {kept_count} of {total} partitions of {where} (more than {ratio:.0%}), "
            "so it is not worth applying (fallback_filter_ratio)")


def _rows_kept(data: DynamicFilteringData, survey: Survey) -> str | None:
    fields = {name.lower() for name in data.field_names}
    # A filter on partition columns prunes directories and is judged by them; the top level tells its column
    # without a walk, the first branch the deeper ones.
    if fields & {column.lower() for column in survey.columns}:
        return None
    try:
        if fields & {column.lower() for column in survey.first_branch.columns}:
            return None
        rows = survey.sample(data.field_names)
        if rows is None or rows.num_rows < MIN_SAMPLE_ROWS:
            return None
        kept = pc.sum(pc.fill_null(data.matching_mask(rows), True)).as_py() or 0
    except (OSError, TypeError, ValueError, pa.ArrowException):
        return None  # a file that cannot tell is no reason to decline
    if kept <= DATA_COLUMN_RATIO * rows.num_rows:
        return None
    return (f"the filter keeps {kept} of {rows.num_rows} rows sampled from the table's first data file(s) by data "
            f"column(s) {list(data.field_names)} (more than {DATA_COLUMN_RATIO:.0%}), so it is not worth applying")


@dataclass(frozen=True)
class Candidate:
    """A dimension's filter that may prune the fact scan: its label, the fact columns it filters, its collection."""

    label: str
    fact_columns: Sequence[str]
    collect: Callable[[], tuple[DynamicFilteringData | None, str | None]]  # the data, or None and why not


@dataclass(frozen=True)
class Choice:
    """What :func:`worth_applying` chose: the labels applied, their conjunction, and what was left out."""

    applied: list[str]
    data: DynamicFilteringData | None  # None when no filter pays
    declined: list[tuple[str, str]]  # (label, why): not collected, or not paying
    left_out: list[str]  # notes on filters that pay but do not join those applied

    @property
    def kind(self) -> str | None:
        """The filter's kind as reports name it: ``exact``, ``bloom``, ``range`` or ``all of N parts``."""
        if self.data is None:
            return None
        return f"all of {len(self.data.parts)} parts" if self.data.kind == "all" else self.data.kind


def worth_applying(candidates: Sequence[Candidate], survey: Survey | None, ratio: float) -> Choice:
    """Collect each candidate (those on the fact's first partition column first), keep those that pay, conjoin them."""
    first = survey.columns[0].lower() if survey is not None and survey.columns else None
    ordered = sorted(candidates, key=lambda c: first not in {column.lower() for column in c.fact_columns})
    worth, declined = [], []
    for candidate in ordered:
        data, reason = candidate.collect()
        reason = reason or no_benefit(data, survey, ratio)
        if reason is None:
            worth.append((candidate.label, data))
        else:
            declined.append((candidate.label, reason))
    if not worth:
        return Choice([], None, declined, [])
    applied, data, left_out = conjoin(worth)
    return Choice(applied, data, declined, left_out)


def conjoin(filters: Sequence[tuple[str, DynamicFilteringData]]) -> tuple[list[str], DynamicFilteringData, list[str]]:
    """``filters`` (labelled, best first) as the parts of one filter: the labels applied, the filter, and a note
    for each left out (one exceeded, which holds no key, unless all are; one on a field a part already filters)."""
    (label, combined), *rest = sorted(filters, key=lambda item: not item[1].is_filtering)
    applied, notes = [label], []
    for label, data in rest:
        if not data.is_filtering:
            notes.append(f"{label}: not applied: it exceeded the collector's threshold and holds no key")
            continue
        try:
            combined = DynamicFilteringData.all_of([combined, data])
            applied.append(label)
        except ValueError as reason:
            notes.append(f"{label}: not applied with {' AND '.join(applied)} on one scan: {reason}")
    return applied, combined, notes
