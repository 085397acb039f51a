"""A Python data source without dynsource's interface: ``k BIGINT, v BIGINT`` rows (k, 10 k) for k below 200."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "plain_rows_test"
KEYS = 200


class PlainRowsReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        yield from ((key, key * 10) for key in range(KEYS))


class PlainRows(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "k BIGINT, v BIGINT"

    def reader(self, schema: object) -> PlainRowsReader:
        return PlainRowsReader()
