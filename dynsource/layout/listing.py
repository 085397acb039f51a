"""What a walk of a table found: its leaf partitions and their files, with what a scan report counts.

The enumerators (:mod:`dynsource.layout.enumerator`) make a :class:`Listing`; the commit records
(:mod:`dynsource.layout.commits`) say which of its files belong to the table now.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from dynsource import directorynames
from dynsource.layout import commits, directories
from dynsource.layout.directories import DataFile
from dynsource.layout.levels import PartitionValues


@dataclass(frozen=True)
class Partition:
    """A leaf partition directory: its raw (escaped) values, one per column, and its data files."""

    path: str
    raw_values: tuple[str, ...]
    files: tuple[DataFile, ...]


@dataclass
class Listing:
    """What one enumeration found, with the counts the scan report needs."""

    columns: tuple[str, ...]
    partitions: list[Partition]
    pruned: dict[str, int] = field(default_factory=dict)  # directories pruned at each partition column's level
    listed_paths: list[str] = field(default_factory=list)
    # Each directory read through table.directories, with what it held (a plain sub-directory's search is not).
    read: list[tuple[str, directories.Directory]] = field(default_factory=list)
    values: PartitionValues | None = None  # the partitions', when the walk typed them
    # Why a dynamic filter stopped pruning (below a level, or whole when ``filter_dropped``), if it did.
    filter_set_aside: str | None = None
    filter_dropped: bool = False  # the filter names fields the table does not have: none of it was used
    records: commits.Records = commits.NONE  # the table's commit records when the walk began

    @property
    def directories_pruned(self) -> int:
        return sum(self.pruned.values())

    @functools.cached_property
    def files(self) -> tuple[DataFile, ...]:
        """The kept partitions' data files, in order, of the finished enumeration (a kept plan's report counts them
        at every query that is given it again)."""
        return tuple(f for p in self.partitions for f in p.files)

    @functools.cached_property
    def files_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def leaf_total(self) -> int | None:
        """The table's leaf partitions, when the walk knows them: nothing was pruned above the leaf level.

        A walk that pruned every directory never saw the leaf level, so it cannot tell its count.
        """
        if not self.partitions and self.directories_pruned:
            return None
        above_leaves = [column for column, count in self.pruned.items() if count and column != self.columns[-1]]
        return None if above_leaves else len(self.partitions) + self.directories_pruned

    def checkable(self, root: str) -> bool:
        """Whether :func:`directories.read_alike` can tell that a walk from ``root`` would find this listing again:
        the walk read every directory it listed through :mod:`dynsource.layout.directories`, ``root`` first, and
        the root holds no commit records (a record written later changes the records' directory, not the root; creating
        that directory changes the root)."""
        return (bool(self.read) and len(self.read) == len(self.listed_paths) and self.read[0][0] == root
                and not self.read[0][1][3])

    def visible(self, records: commits.Records, table: str) -> Listing:
        """This listing without the files ``records`` hide, nor the partitions left without a file."""
        if not records.states:
            return self
        prefix = table.rstrip("/") + "/"
        kept = []
        for index, partition in enumerate(self.partitions):
            files = tuple(f for f in partition.files if not records.hides(f.path.removeprefix(prefix)))
            if files:
                kept.append((index, dataclasses.replace(partition, files=files)))
        values = self.values.take([index for index, _ in kept]) if self.values is not None else None
        return dataclasses.replace(self, partitions=[partition for _, partition in kept], values=values)

    def typed_rows(self, columns: Sequence[str]) -> list[tuple]:
        """Each partition's typed values of ``columns``; a value Spark cannot convert raises ``ValueError``."""
        indexes = [self.columns.index(column) for column in columns]
        for index in indexes:
            failed = self.values.failed[index]
            if pc.any(failed).as_py():
                partition = self.partitions[pc.index(failed, True).as_py()]
                raise _unconvertible(self.columns[index], self.values.types[index], partition, index)
        typed = [self.values.arrays[index].to_pylist() for index in indexes]
        return list(zip(*typed, strict=True)) if typed else [()] * len(self.partitions)


def _unconvertible(column: str, type_name: str, partition: Partition, index: int) -> ValueError:
    """The error for a kept partition whose value of ``column`` (its ``index``-th) Spark cannot convert."""
    raw = partition.raw_values[index]
    segments = partition.path.split("/")
    # The leaf path ends with the directory of each column, deepest last (then the file, when path is one).
    depth = next((position for position in range(len(segments) - 1, -1, -1)
                  if directorynames.parse_directory_name(segments[position]) == (column, raw)), len(segments) - 1)
    directory = "/".join(segments[:depth + 1])
    return ValueError(
        f"Partition column '{column}' is {type_name}, but directory '{directory}' has the value '{raw}', which "
        f"cannot be converted to {type_name}. Declare the column's type with option partitionColumns (e.g. "
        f"partitionColumns='{column} STRING'; register a registered table again with it and replace=True), or fix "
        "or remove the directory."
    )
