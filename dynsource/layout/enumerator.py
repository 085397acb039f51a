"""Partition enumeration: the static walk of a Hive-style table, and the dynamic one that prunes it.

Following Flink's ``flink-connector-files``, :class:`PartitionEnumerator` only
walks directories; :class:`DynamicPartitionEnumerator` wraps it and supplies the
per-level decision from a :class:`~dynsource.filtering.DynamicFilteringData`
(FLIP-248's ``DynamicFileEnumerator.setDynamicFilteringData``). Because the
decision is taken level by level, nothing below a pruned directory is listed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence

import fsspec
import pyarrow as pa
import pyarrow.compute as pc

from dynsource import directorynames, partitions, storage
from dynsource.filtering import DynamicFilteringData
from dynsource.layout import commits, directories
from dynsource.layout.directories import DataFile
from dynsource.layout.levels import Level, LevelFilter, PartitionTyping, PartitionValues
from dynsource.layout.listing import Listing, Partition

log = logging.getLogger(__name__)


class PartitionEnumerator:
    """Walks a Hive-style table directory (``root/k1=v1/k2=v2/file``) one level at a time."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, base: str | None = None) -> None:
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        # Spark's basePath: the directories from it down to root are partition levels of the walk.
        self.base = None if base is None else base.rstrip("/") or "/"

    def enumerate(self, level_filter: LevelFilter | None = None, typing: PartitionTyping | None = None) -> Listing:
        """List the table's partitions, descending only into directories ``level_filter`` keeps.

        With ``typing``, each level's values are typed once, as the level is
        listed, and carried down: the level filter and the listing get them.
        Files of a write not yet committed, or replaced by a committed one, are
        left out (:mod:`dynsource.layout.commits`); a write that commits during the
        walk makes it walk again.
        """
        table = self.base or self.root
        for _ in range(commits.WALKS):
            listing = self._walk(level_filter, typing)
            after = commits.read(self.fs, table)
            if after == listing.records:
                return listing.visible(after, table)
            self.fs.invalidate_cache()  # walk again from the store, not from listings s3fs-like filesystems cached
        raise RuntimeError(f"The table '{table}' kept changing while it was listed: writes committed during each of "
                           f"{commits.WALKS} walks. Retry when its writes are done.")

    def _walk(self, level_filter: LevelFilter | None, typing: PartitionTyping | None) -> Listing:
        listing = Listing(columns=(), partitions=[])
        root_info = self._root_info()
        directory = self.root if root_info["type"] == "directory" else self.root.rsplit("/", 1)[0]
        # The table's root is listed first, where its records directory shows; a walk below it reads them now.
        listing.records = commits.read(self.fs, self.base) if self.base not in (None, directory) else commits.NONE
        frontier, values = [(directory, ())], PartitionValues() if typing else None
        for column, raw in self._levels_above(directory):
            if not frontier:
                break
            candidates = [(path, (*raws, raw)) for path, raws in frontier]
            frontier, values = self._level(listing, column, candidates, range(len(frontier)), values, typing,
                                           level_filter)
        if root_info["type"] != "directory":
            file = DataFile(root_info["name"], root_info["size"])
            listing.partitions.extend(Partition(self.root, raws, (file,)) for _, raws in frontier)
            listing.values = values
            return listing
        with storage.listing_map(self.fs) as each:
            while frontier:
                children = list(each(lambda node: self._list(node[0], listing), frontier))
                if not any(kv for _, _, kv in children):
                    kept = self._leaves(frontier, children, each, listing)
                    listing.partitions.extend(partition for _, partition in kept)
                    values = values.take([index for index, _ in kept]) if values is not None else None
                    break
                column = self._level_column(frontier, children, listing.columns)
                parents = [index for index, (_, _, kv) in enumerate(children) for _ in kv]
                candidates = [(path, (*frontier[index][1], raw)) for index, (_, _, kv) in enumerate(children)
                              for path, _, raw in kv]
                frontier, values = self._level(listing, column, candidates, parents, values, typing, level_filter)
        listing.values = values
        return listing

    @staticmethod
    def _level(listing, column, candidates, parents, values, typing, level_filter):
        """Add ``column``'s level to the walk: type the candidates, keep those the level filter keeps."""
        listing.columns += (column,)
        if values is not None:
            values = values.take(list(parents)).extend(typing.type_level(column, [v[-1] for _, v in candidates]))
        keep = level_filter(Level(listing.columns, [v for _, v in candidates], values)) if level_filter else None
        if keep is not None:
            listing.pruned[column] = sum(1 for k in keep if not k)
            candidates = [c for c, k in zip(candidates, keep, strict=True) if k]
            values = values.filter(keep) if values is not None else None
        return candidates, values

    def _levels_above(self, directory: str) -> list[tuple[str, str]]:
        """(column, raw value) of each ``key=value`` directory from ``base`` down to ``directory``."""
        if self.base is None:
            return []
        if directory != self.base and not directory.startswith(self.base.rstrip("/") + "/"):
            raise ValueError(f"Option 'basePath' = '{self.base}' is not a parent directory of option 'path' = "
                             f"'{self.root}'.")
        segments = [segment for segment in directory[len(self.base):].split("/") if segment]
        levels = [directorynames.parse_directory_name(segment) for segment in segments]
        stray = next((segment for segment, level in zip(segments, levels, strict=True) if level is None), None)
        if stray is not None:
            raise ValueError(f"Option 'basePath': directory '{stray}' between basePath '{self.base}' and path "
                             f"'{self.root}' is not a partition directory (key=value); every one between them must be.")
        return levels

    def _root_info(self) -> dict:
        return storage.root_info(self.fs, self.root)

    def _list(self, path: str, listing: Listing) -> directories.Contents:
        """Visible files, plain sub-directories and ``key=value`` sub-directories of ``path``."""
        directory = directories.read(self.fs, path, top=not listing.listed_paths)
        listing.listed_paths.append(path)
        listing.read.append((path, directory))
        files, plain, kv, has_records = directory
        if has_records and path == (self.base or self.root):
            listing.records = commits.read(self.fs, path)
        return files, plain, kv

    def _level_column(self, frontier, children, known: tuple[str, ...]) -> str:
        """The one column this level partitions by; any other layout is Spark's 'conflicting' error."""
        first_path = {}
        for _, _, kv in children:
            for path, name, _ in kv:
                first_path.setdefault(name, path)
        if len(first_path) > 1:
            branches = "; ".join(f"{[*known, name]} in '{path}'" for name, path in sorted(first_path.items()))
            raise ValueError(
                f"Conflicting partition column names detected under '{self.root}': {branches}. Every branch must "
                "be partitioned by the same columns in the same order."
            )
        for (path, _), (files, plain, kv) in zip(frontier, children, strict=True):
            if kv and (files or plain):
                stray = files[0].path if files else plain[0]
                raise ValueError(
                    f"Conflicting directory structures detected under '{path}': '{stray}' sits beside partition "
                    f"directories like '{kv[0][0]}'. Move or delete it, or point option 'path' at a "
                    "partition directory."
                )
            if not kv and (files or plain):
                raise ValueError(
                    f"Conflicting directory structures detected: '{path}' holds data directly while other "
                    f"branches are partitioned by '{next(iter(first_path))}'; every leaf must be at the same depth."
                )
        return next(iter(first_path))

    def _leaves(self, frontier, children, each, listing: Listing) -> list[tuple[int, Partition]]:
        """Partitions for the last level, with their frontier index; files in plain sub-directories belong to them."""
        leaves = []
        for index, ((path, values), (files, plain, _)) in enumerate(zip(frontier, children, strict=True)):
            if plain:
                nested = [file for found in each(lambda d: self._find(d, listing), plain) for file in found]
                files = tuple(sorted((*files, *nested), key=lambda f: f.path))
            if files:
                leaves.append((index, Partition(path, values, files)))
        return leaves

    def _find(self, directory: str, listing: Listing) -> list[DataFile]:
        listing.listed_paths.append(directory)
        with storage.failing_as(f"list directory '{directory}'"):
            found = self.fs.find(directory, detail=True)
        prefix = len(directory.rstrip("/")) + 1
        return [
            DataFile(name, int(info["size"]))
            for name, info in found.items()
            if info["type"] != "directory"
            and not any(directorynames.is_hidden(part) for part in name[prefix:].split("/"))
        ]


class DynamicPartitionEnumerator:
    """Wraps a :class:`PartitionEnumerator` and keeps only partitions a dynamic filter may match.

    Parameters
    ----------
    static : PartitionEnumerator
        The walk to prune.
    column_types : mapping of str to str
        Known Spark SQL types of partition columns (from the table schema or
        ``partitionColumns``); other columns are typed by Spark's inference.
    data_columns : sequence of str
        Columns of the read schema: a filter field naming one of them (and no
        partition column) does not prune partitions but is a valid field, left
        to the reader's row-group and row filtering.
    settings : PartitionSettings
        The session settings typing partition values (the zone of timestamp
        values among them; without one, a timestamp column is an error).
    on_error : {"fallback", "fail"}
        What a filter that cannot be applied does: read everything (logged) or raise.
        A filter naming a field that is neither a partition nor a data column
        is set aside whole; the listing says so (``filter_dropped``) and why.
    static_filter : LevelFilter, optional
        A per-level decision known before the scan (the WHERE filters Spark pushed);
        a directory is descended into only when both it and the dynamic filter keep it.
    """

    def __init__(
        self,
        static: PartitionEnumerator,
        column_types: Mapping[str, str],
        *,
        data_columns: Sequence[str] = (),
        settings: partitions.PartitionSettings = partitions.DEFAULT_SETTINGS,
        on_error: str = "fallback",
        static_filter: LevelFilter | None = None,
    ) -> None:
        self.static = static
        self.static_filter = static_filter
        self.column_types = dict(column_types)
        self.data_columns = tuple(data_columns)
        self.settings = settings
        self.on_error = on_error
        self.data: DynamicFilteringData | None = None

    def set_dynamic_filtering_data(self, data: DynamicFilteringData) -> None:
        self.data = data

    def enumerate(self) -> Listing:
        """The walk pruned by the static and dynamic filters; a filter set aside is recorded in the listing."""
        dynamic = self.data is not None and self.data.is_filtering
        set_aside: list[str] = []  # the reason the dynamic filter stopped pruning during this walk
        listing = self._walk(dynamic, set_aside)
        unknown = self._unknown_fields(listing) if dynamic else None
        if unknown is None:
            return dataclasses.replace(listing, filter_set_aside=next(iter(set_aside), None))
        if self.on_error == "fail":
            raise ValueError(unknown)
        # The filter was collected for another table or with another mapping: none of it can be trusted here.
        log.warning("dynsource: %s; reading every partition.", unknown)
        return dataclasses.replace(self._walk(False, []), filter_set_aside=unknown, filter_dropped=True)

    def _walk(self, dynamic: bool, set_aside: list[str]) -> Listing:
        keep = functools.partial(self._keep, set_aside) if dynamic else None
        level_filters = [f for f in (self.static_filter, keep) if f is not None]
        typing = PartitionTyping(self.column_types, self.settings)
        return self.static.enumerate(_kept_by_all(level_filters) if level_filters else None, typing)

    def _keep(self, set_aside: list[str], level: Level) -> Sequence[bool] | None:
        if set_aside:
            return None
        try:
            return kept_by(self.data, level)
        except (TypeError, ValueError) as error:
            if self.on_error == "fail":
                raise
            set_aside.append(f"cannot apply the dynamic filter to column '{level.columns[-1]}': {error}")
            log.warning("dynsource: %s; reading every partition below this level.", set_aside[0])
            return None

    def _unknown_fields(self, listing: Listing) -> str | None:
        """Why the filter names fields the table does not have, or None when it has them all."""
        known = {column.lower() for column in (*listing.columns, *self.data_columns)}
        unknown = [name for name in self.data.field_names if name.lower() not in known]
        # With every directory pruned, deeper partition columns were never seen: they cannot be told apart.
        if not unknown or (not listing.partitions and listing.directories_pruned):
            return None
        partition_columns = {column.lower() for column in listing.columns}
        data_columns = [column for column in self.data_columns if column.lower() not in partition_columns]
        return (
            f"Dynamic filter field(s) {unknown} are neither partition columns nor data columns of "
            f"'{self.static.root}'; its partition columns are {list(listing.columns)} and its data columns "
            f"are {data_columns}."
        )


def _kept_by_all(level_filters: Sequence[LevelFilter]) -> LevelFilter:
    def keep(level: Level) -> Sequence[bool] | None:
        # Every filter sees every level, even one whose answer cannot matter: each records what it applied.
        decisions = [d for d in (f(level) for f in level_filters) if d is not None]
        if not decisions:
            return None
        return [all(votes) for votes in zip(*decisions, strict=True)]

    return keep


def kept_by(data: DynamicFilteringData, level: Level) -> list[bool] | None:
    """Which directories of ``level`` may hold rows ``data`` matches, on the level's columns that it filters; None
    where the level's own column is not one (it cannot prune more than its parent did).

    A directory whose value has no image in its column's type (Spark ignores it unless it holds files, and then
    fails the scan) cannot be judged: it is kept, and the others are still pruned.
    """
    fields = {name.lower() for name in data.field_names}
    filtered = [column for column in level.columns if column.lower() in fields]
    if not filtered or filtered[-1] != level.columns[-1]:
        return None
    typed = {column: level.typed(column) for column in filtered}
    mask = data.matching_mask(pa.table({column: values for column, (_, values, _) in typed.items()}))
    return functools.reduce(pc.or_, [failed for _, _, failed in typed.values()], mask).to_pylist()
