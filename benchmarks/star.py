"""A deterministic TPC-DS-like star schema for the benchmarks: ``date_dim`` and ``store_sales``.

``store_sales`` is Hive-partitioned by ``ss_sold_date_sk`` with one Parquet file
per partition (about 0.1% of the rows have a null key and land in
``__HIVE_DEFAULT_PARTITION__``); scale 1 is 10 million rows. Generated data is
cached per (scale, seed): a second run reuses it.

Run ``python -m benchmarks.star --scale 1`` to generate without benchmarking.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dynsource.demo import DAYS, FIRST_DATE, FIRST_DATE_SK

ROWS_AT_SCALE_1 = 10_000_000
DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
KEY = "ss_sold_date_sk"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NULL_KEY_SHARE = 0.001
_PRICE = pa.decimal128(7, 2)  # TPC-DS money: decimal, so every engine's SUM is exact and comparable


@dataclass(frozen=True)
class Star:
    """Paths of a generated star schema."""

    root: Path
    date_dim: Path
    store_sales: Path
    scale: float
    seed: int
    rows: int


def generate(scale: float = 1.0, seed: int = 7, data_dir: Path | str = DEFAULT_DATA_DIR) -> Star:
    """Generate (or reuse) the star schema of ``scale`` and ``seed`` under ``data_dir``.

    The data is written to a temporary directory and renamed into place, so an
    interrupted run never leaves a half-written table that a later run would reuse.
    """
    if scale <= 0:
        raise ValueError(f"--scale must be a positive number, got {scale}.")
    root = Path(data_dir).resolve() / f"star-scale{scale:g}-seed{seed}"
    rows = max(1, round(ROWS_AT_SCALE_1 * scale))
    star = Star(root, root / "date_dim", root / "store_sales", scale, seed, rows)
    if (root / "manifest.json").exists():
        return star
    building = root.with_name(f"{root.name}.{os.getpid()}.tmp")
    shutil.rmtree(building, ignore_errors=True)
    (building / "date_dim").mkdir(parents=True)
    pq.write_table(date_dim_table(), building / "date_dim" / "part-0.parquet")
    _write_partitioned(store_sales_table(rows, seed), building / "store_sales")
    manifest = {"scale": scale, "seed": seed, "rows": rows, "days": DAYS}
    (building / "manifest.json").write_text(json.dumps(manifest))
    try:
        building.rename(root)
    except OSError:  # another run finished the same data first
        shutil.rmtree(building, ignore_errors=True)
    return star


def date_dim_table() -> pa.Table:
    """1,826 days from 1998-01-01 with TPC-DS surrogate keys and calendar attributes ('Y'/'N' flags as TPC-DS)."""
    dates = [FIRST_DATE + datetime.timedelta(days=i) for i in range(DAYS)]
    holidays = {d for year in range(FIRST_DATE.year, dates[-1].year + 1) for d in _holidays(year)}
    flag = lambda values: pa.array(["Y" if v else "N" for v in values])  # noqa: E731
    return pa.table({
        "d_date_sk": pa.array(range(FIRST_DATE_SK, FIRST_DATE_SK + DAYS), pa.int32()),
        "d_date": pa.array(dates),
        "d_year": pa.array([d.year for d in dates], pa.int32()),
        "d_moy": pa.array([d.month for d in dates], pa.int32()),
        "d_dom": pa.array([d.day for d in dates], pa.int32()),
        "d_weekend": flag(d.weekday() >= 5 for d in dates),
        "d_holiday": flag(d in holidays for d in dates),
        "d_following_holiday": flag(d - datetime.timedelta(days=1) in holidays for d in dates),
    })


def _holidays(year: int) -> list[datetime.date]:
    """Six US holidays: New Year, Memorial Day, Independence Day, Labor Day, Thanksgiving, Christmas."""
    def nth_weekday(month: int, weekday: int, n: int) -> datetime.date:
        first = datetime.date(year, month, 1)
        return first + datetime.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))

    last_may_monday = nth_weekday(5, 0, 5) if nth_weekday(5, 0, 5).month == 5 else nth_weekday(5, 0, 4)
    return [datetime.date(year, 1, 1), last_may_monday, datetime.date(year, 7, 4), nth_weekday(9, 0, 1),
            nth_weekday(11, 3, 4), datetime.date(year, 12, 25)]


def store_sales_table(rows: int, seed: int) -> pa.Table:
    """``rows`` sales with uniformly drawn days, sorted by day (nulls last) as a partitioned batch write leaves them."""
    rng = np.random.default_rng(seed)
    days = rng.integers(FIRST_DATE_SK, FIRST_DATE_SK + DAYS, rows, dtype=np.int32)
    null_keys = rng.random(rows) < NULL_KEY_SHARE
    table = pa.table({
        "ss_item_sk": rng.integers(1, 18_001, rows, dtype=np.int32),
        "ss_customer_sk": rng.integers(1, 100_001, rows, dtype=np.int32),
        "ss_store_sk": rng.integers(1, 13, rows, dtype=np.int32),
        "ss_quantity": rng.integers(1, 101, rows, dtype=np.int32),
        "ss_sales_price": _cents(rng.integers(0, 20_001, rows)),
        "ss_net_profit": _cents(rng.integers(-10_000, 10_001, rows)),
        KEY: pa.array(days, mask=null_keys),
    })
    # Arrow's sort is stable: within a day the rows keep their draw order, so the files are deterministic.
    return table.sort_by([(KEY, "ascending")])  # nulls last (the default)


def _cents(values: np.ndarray) -> pa.Array:
    """Exact decimal(7, 2) from integer cents: a decimal128 is the 128-bit two's complement unscaled value."""
    words = np.empty((len(values), 2), dtype=np.int64)
    words[:, 0] = values
    words[:, 1] = values >> 63  # sign extension into the high word
    return pa.Array.from_buffers(_PRICE, len(values), [None, pa.py_buffer(words.tobytes())])


def _write_partitioned(table: pa.Table, root: Path) -> None:
    """One file per ``KEY`` value in ``root/KEY=value/part-0.parquet``, without the key column (as Spark writes)."""
    keys = table.column(KEY)
    data = table.drop_columns([KEY])
    valid = keys.drop_null().to_numpy()
    values, starts = np.unique(valid, return_index=True)
    bounds = [*starts.tolist(), len(valid)]
    for value, start, stop in zip(values.tolist(), bounds, bounds[1:], strict=False):
        _write_partition(data.slice(start, stop - start), root / f"{KEY}={value}")
    if keys.null_count:
        _write_partition(data.slice(len(valid)), root / f"{KEY}={NULL_PARTITION}")


def _write_partition(table: pa.Table, directory: Path) -> None:
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part-0.parquet")


def partition_sizes(store_sales: Path) -> dict[int | None, tuple[int, int]]:
    """(files, bytes) of each partition of ``store_sales`` by key (None for the null partition), from the disk."""
    sizes = {}
    for directory in store_sales.iterdir():
        value = directory.name.split("=", 1)[1]
        files = [f for f in directory.iterdir() if f.is_file()]
        key = None if value == NULL_PARTITION else int(value)
        sizes[key] = (len(files), sum(f.stat().st_size for f in files))
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1 = 10 million store_sales rows (default 1)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR, help="cache directory of generated data")
    args = parser.parse_args(argv)
    star = generate(args.scale, args.seed, args.data)
    print(f"date_dim: {star.date_dim}\nstore_sales: {star.store_sales} ({star.rows:,} rows)")


if __name__ == "__main__":
    main()
