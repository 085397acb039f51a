"""Writes into dynsource tables: every save mode, Spark's layout, atomic commits, registered tables, bad input."""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from decimal import Decimal

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

import dynsource
from dynsource import directorynames
from dynsource.layout.enumerator import PartitionEnumerator
from dynsource.scan import files
from dynsource.scan.options import ScanOptions
from dynsource.spark import writer as dynsource_writer
from dynsource.spark.catalog import load_definition
from dynsource.spark.metastore import UnregisteredCatalogTable, provider
from dynsource.spark.writeplan import WriteTarget
from tests.helpers import read, rows

SCHEMA = "id bigint, amount decimal(7,2), day date, region string, store int"
PARTITIONED = "region STRING, store INT"


def sales(spark, days: range, stores: int = 3, per_day: int = 4):
    """Rows of ``days`` (days after 2024-01-01) in ``stores`` stores; regions with characters Spark escapes,
    a null and an empty string (both Spark's null partition)."""
    regions = ["north/east", "a b", "x=y%", None, ""]
    data = [(day * 100 + i, Decimal(f"{day}.{i:02d}"), dt.date(2024, 1, 1) + dt.timedelta(days=day),
             regions[(day + i) % len(regions)], i % stores) for day in days for i in range(per_day)]
    return spark.createDataFrame(data, SCHEMA)


def leaves(root) -> list[str]:
    """The directories holding data files, relative to ``root`` (hidden ones and Spark's _SUCCESS marker aside)."""
    return sorted(os.path.relpath(d, root) for d, _, names in os.walk(root)
                  if any(not n.startswith(("_", ".")) for n in names)
                  and not any(directorynames.is_hidden(part) for part in os.path.relpath(d, root).split(os.sep)))


def save(df, path, mode="append", **options):
    df.write.format("dynsource").option("path", str(path)).options(**options).mode(mode).save()


def test_a_write_has_sparks_layout_and_reads_back_equal_everywhere(spark, tmp_path):
    df = sales(spark, range(5))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    save(df, ours, partitionColumns=PARTITIONED)
    df.write.partitionBy("region", "store").parquet(str(theirs))
    assert leaves(ours) == leaves(theirs) and "region=north%2Feast/store=0" in leaves(ours)
    expected = rows(spark.read.parquet(str(theirs)))
    assert rows(spark.read.parquet(str(ours))) == expected
    assert rows(read(spark, ours)) == expected
    assert spark.read.parquet(str(ours)).schema == spark.read.parquet(str(theirs)).schema
    by_arrow = ds.dataset(str(ours), partitioning="hive").to_table()
    assert sorted(by_arrow.column_names) == sorted(df.columns) and by_arrow.num_rows == df.count()
    assert not [name for name in os.listdir(ours) if name.startswith(".dynsource")]  # no staging left


def test_every_mode_on_a_path_as_spark_writes_it(spark, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    steps = [("append", range(0, 3)), ("append", range(3, 5)), ("overwrite", range(4, 6)), ("append", range(6, 7))]
    for mode, days in steps:
        df = sales(spark, days)
        save(df, ours, mode, partitionColumns=PARTITIONED, partitionOverwriteMode="static")
        df.write.partitionBy("region", "store").mode(mode).parquet(str(theirs))
        assert rows(read(spark, ours)) == rows(spark.read.parquet(str(theirs))), (mode, days)
    existing = rows(read(spark, ours))
    with pytest.raises(ValueError, match=r"already has data \(save mode 'error'\)"):
        dynsource.write(sales(spark, range(9, 10)), str(ours), mode="error")
    dynsource.write(sales(spark, range(9, 10)), str(ours), mode="ignore")
    assert rows(read(spark, ours)) == existing
    fresh = tmp_path / "fresh"
    dynsource.write(sales(spark, range(2)), str(fresh), mode="errorifexists", options={"partitionColumns": "store INT"})
    assert leaves(fresh) == ["store=0", "store=1", "store=2"]
    with pytest.raises((AnalysisException, PySparkException), match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        save(sales(spark, range(1)), fresh, "error")  # Spark's own save() takes only append and overwrite


@pytest.mark.smoke  # ./test --quick: writes
def test_dynamic_overwrite_replaces_only_the_partitions_written(spark, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    first, again = sales(spark, range(6), stores=3), sales(spark, range(20, 22), stores=2)
    save(first, ours, partitionColumns=PARTITIONED)
    first.write.partitionBy("region", "store").parquet(str(theirs))
    save(again, ours, "overwrite", partitionOverwriteMode="dynamic")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        again.write.partitionBy("region", "store").mode("overwrite").parquet(str(theirs))
        assert rows(read(spark, ours)) == rows(spark.read.parquet(str(theirs)))
        dynsource.write(first.where("store = 2"), str(ours), mode="overwrite")  # the session's setting
        first.where("store = 2").write.partitionBy("region", "store").mode("overwrite").parquet(str(theirs))
        assert rows(read(spark, ours)) == rows(spark.read.parquet(str(theirs)))
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")


def test_an_overwrite_whose_mode_is_set_nowhere_is_refused_before_anything_is_deleted(spark, tmp_path, definitions):
    """Spark does not pass its session's partitionOverwriteMode to a Python source: under the session's 'dynamic'
    an overwrite replacing the whole table would silently lose partitions, so it must be set on the write or table."""
    table = tmp_path / "t"
    save(sales(spark, range(3)), table, partitionColumns="day DATE")
    before = rows(read(spark, table))
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        for overwrite in (lambda: save(sales(spark, range(1)), table, "overwrite"),
                          lambda: spark.sql("INSERT OVERWRITE refused_sales SELECT * FROM refused_load")):
            dynsource.register_table(spark, "refused_sales", path=str(table), definitions=definitions, replace=True)
            sales(spark, range(1)).select(*spark.table("refused_sales").columns).createOrReplaceTempView(
                "refused_load")
            with pytest.raises(Exception, match=r"(needs option 'partitionOverwriteMode'.*Set it on the write "
                                                r"\(.option\('partitionOverwriteMode', 'dynamic'\)\) or on the "
                                                r"table)|(does not support dynamic overwrite)"):
                overwrite()
            assert rows(read(spark, table)) == before
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
        with pytest.raises(Exception, match=r"needs option 'partitionOverwriteMode'"):
            spark.sql("INSERT OVERWRITE refused_sales SELECT * FROM refused_load")  # the table sets no mode
        assert rows(read(spark, table)) == before
        save(sales(spark, range(1)), table, "overwrite", partitionOverwriteMode="dynamic")  # day 0 replaced
        assert rows(read(spark, table)) == before
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
        dynsource.drop_table(spark, "refused_sales", definitions=definitions)


def test_a_path_write_of_a_value_the_tables_partition_type_cannot_hold_writes_nothing(spark, tmp_path):
    table = tmp_path / "orders"
    dated = spark.createDataFrame([(1, dt.date(2024, 1, 1)), (2, dt.date(2024, 1, 2))], "id INT, order_date DATE")
    save(dated, table, partitionColumns="order_date")  # the name only: the type is the rows'
    texts = spark.createDataFrame([(3, "2024-01-03"), (4, "not-a-date")], "id INT, order_date STRING")
    with pytest.raises(Exception, match=r"Partition column 'order_date' of table '.*orders' is date \(inferred from "
                                        r"its directories\), but the rows to write have the value 'not-a-date'"):
        save(texts, table)
    assert leaves(table) == ["order_date=2024-01-01", "order_date=2024-01-02"]
    assert not [name for name in os.listdir(table) if name.startswith(".dynsource")]
    save(texts.where("id = 3"), table)  # a text that is a date is one
    assert rows(read(spark, table, "id INT, order_date DATE", partitionColumns="order_date DATE")) == [
        (1, dt.date(2024, 1, 1)), (2, dt.date(2024, 1, 2)), (3, dt.date(2024, 1, 3))]


def test_a_table_partitioned_by_strings_takes_any_value_and_names_must_match_the_tables(spark, tmp_path):
    table = tmp_path / "t"
    save(spark.createDataFrame([(1, "2024-01-01"), (2, "later")], "id INT, d STRING"), table, partitionColumns="d")
    save(spark.createDataFrame([(3, "2024-01-05")], "id INT, d STRING"), table)  # first directory a date: fine
    save(spark.createDataFrame([(4, "anything")], "id INT, d STRING"), table)
    assert len(leaves(table)) == 4
    with pytest.raises(Exception, match=r"Option 'partitionColumns' names \['id'\], but table '.*' is partitioned "
                                        r"by \['d'\]"):
        save(spark.createDataFrame([(5, "x")], "id INT, d STRING"), table, partitionColumns="id")


def test_partition_by_is_refused_by_spark_before_dynsource_runs(spark, tmp_path):
    """DataFrameWriter.partitionBy: Spark compares it with the table's partitioning, which a Python data source
    cannot declare, before any of dynsource's code runs (pyspark 4.0 and 4.3); partitionColumns is the way."""
    with pytest.raises(Exception, match="The provided partitioning or clustering columns do not match"):
        sales(spark, range(1)).write.format("dynsource").option("path", str(tmp_path / "t")).partitionBy("store") \
            .mode("append").save()
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("fmt", ["orc", "csv", "json"])
def test_other_formats_read_back_through_dynsource(spark, tmp_path, fmt):
    df = spark.createDataFrame([(i, f"n{i}", i % 2) for i in range(10)], "id bigint, name string, part int")
    save(df, tmp_path / fmt, format=fmt, partitionColumns="part INT")
    assert leaves(tmp_path / fmt) == ["part=0", "part=1"]
    assert rows(read(spark, tmp_path / fmt, "id bigint, name string, part int", format=fmt)) == rows(df)


def test_a_task_that_fails_half_way_leaves_nothing_visible(spark, tmp_path):
    table = tmp_path / "t"
    save(sales(spark, range(2)), table, partitionColumns=PARTITIONED)
    before, layout = rows(read(spark, table)), leaves(table)
    failing = sales(spark, range(10, 30)).repartition(2).selectExpr(  # the task holding id 2510 fails half-way
        "id", "amount", "day", "region",
        "CAST(CASE WHEN id < 2510 THEN store ELSE raise_error('boom') END AS INT) store")
    with pytest.raises(Exception, match="boom"):
        save(failing, table)
    assert rows(read(spark, table)) == before and leaves(table) == layout
    assert not [name for name in os.listdir(table) if name.startswith(".dynsource")]  # abort removed the staging


def test_only_the_attempts_spark_kept_are_published(tmp_path):
    """A retried or speculative attempt writes its own files; the commit publishes the attempts it is given."""
    import pyarrow as pa

    options = ScanOptions.parse({"path": str(tmp_path / "t"), "partitionColumns": "p INT"})
    job = dynsource_writer.DynsourceWriter(
        WriteTarget(options.path, options.storage_options, "parquet", ("p",)), overwrite=False)
    batch = pa.record_batch({"v": [1, 2], "p": pa.array([7, 7], pa.int32())})
    failed, retried = job.write(iter([batch])), job.write(iter([batch]))
    assert failed.attempt != retried.attempt and failed.files[0].name != retried.files[0].name
    job.commit([retried])
    assert ds.dataset(str(tmp_path / "t"), partitioning="hive").to_table().num_rows == 2
    assert leaves(tmp_path / "t") == ["p=7"] and len(os.listdir(tmp_path / "t" / "p=7")) == 1


def test_a_reader_during_writes_sees_whole_loads(spark, tmp_path):
    """New days, appends into existing days and overwrites of them, by several tasks each: the walk of dynsource's
    readers only ever sees the table between two loads."""
    table = tmp_path / "t"
    save(sales(spark, range(1), per_day=50), table, partitionColumns="day DATE")
    steps = [("append", range(1, 2)), ("append", range(0, 2)), ("append", range(1, 3)), ("overwrite", range(0, 2)),
             ("append", range(2, 4)), ("overwrite", range(1, 4))]
    per_day, totals = {0: 50}, {50}  # the rows of each day after each step, and the table's totals
    for mode, days in steps:
        per_day.update({day: 50 + (per_day.get(day, 0) if mode == "append" else 0) for day in days})
        totals.add(sum(per_day.values()))
    seen, errors, done = set(), [], threading.Event()

    def poll():
        while not done.is_set():
            try:  # what dynsource's readers see: its walk, which honours the commit records
                fs, root = files.open_table(str(table))
                listed = PartitionEnumerator(fs, root).enumerate()
                seen.add(sum(pq.ParquetFile(f.path).metadata.num_rows for p in listed.partitions for f in p.files))
            except FileNotFoundError:
                pass  # a replaced file deleted between the walk and its read, as for any reader of a rewritten table
            except Exception as error:  # reported by the assertion below
                errors.append(error)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for mode, days in steps:
            save(sales(spark, days, per_day=50).repartition(16), table, mode, partitionOverwriteMode="dynamic")
    finally:
        done.set()
        poller.join()
    assert not errors and seen and seen <= totals


def test_registered_table_takes_insert_into_overwrite_and_write_to(spark, tmp_path, definitions):
    path = tmp_path / "daily"
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    save(sales(spark, range(1)), path, partitionColumns="day DATE")
    dynsource.register_table(spark, "daily_sales", path=str(path), definitions=definitions, replace=True,
                             partitionOverwriteMode="dynamic")
    native = tmp_path / "native"
    sales(spark, range(1)).write.partitionBy("day").parquet(str(native))
    dates = spark.createDataFrame([(dt.date(2024, 1, 1) + dt.timedelta(days=d), d % 7 == 3) for d in range(10)],
                                  "d_date date, d_holiday boolean")
    dates.createOrReplaceTempView("dates")
    query = "SELECT count(*), sum(amount) FROM {t} JOIN dates ON day = d_date WHERE d_holiday"
    try:
        steps = [
            lambda: sales(spark, range(1, 4)).createOrReplaceTempView("load") or spark.sql(
                "INSERT INTO daily_sales SELECT id, amount, region, store, day FROM load"),
            lambda: sales(spark, range(3, 4), per_day=2).writeTo("daily_sales").append(),
            lambda: sales(spark, range(3, 5)).createOrReplaceTempView("load") or spark.sql(
                "INSERT OVERWRITE daily_sales SELECT id, amount, region, store, day FROM load"),
            lambda: dynsource.write(sales(spark, range(9, 11)), "daily_sales"),
        ]
        natives = [lambda: sales(spark, range(1, 4)).write.partitionBy("day").mode("append").parquet(str(native)),
                   lambda: sales(spark, range(3, 4), per_day=2).write.partitionBy("day").mode("append")
                   .parquet(str(native)), None,
                   lambda: sales(spark, range(9, 11)).write.partitionBy("day").mode("append").parquet(str(native))]
        for step, native_step in zip(steps, natives, strict=True):
            step()
            if native_step is None:  # dynamic overwrite of days 3 and 4, as the table's stored option says
                spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
                sales(spark, range(3, 5)).write.partitionBy("day").mode("overwrite").parquet(str(native))
                spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
            else:
                native_step()
            spark.read.parquet(str(native)).createOrReplaceTempView("native_sales")
            df = dynsource.sql(spark, query.format(t="daily_sales"))
            assert df.collect() == spark.sql(query.format(t="native_sales")).collect()
            assert dynsource.scan_report(df).assignments[0].handle is not None  # pruned by the holidays
            assert rows(spark.table("daily_sales")) == rows(spark.read.parquet(str(native)).select(
                *spark.table("daily_sales").columns))
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
        dynsource.drop_table(spark, "daily_sales", definitions=definitions)


def same_rows_twice(df, expected) -> None:
    """``df`` has the rows ``expected`` at an action, and again at the next one."""
    assert rows(df) == expected
    assert rows(df) == expected


def every_door_reads(spark, name, expected) -> None:
    """``spark.table``, ``dynsource.table`` and ``dynsource.sql`` read table ``name`` as ``expected``, twice each."""
    for df in (spark.table(name), dynsource.table(spark, name), dynsource.sql(spark, f"SELECT * FROM {name}")):
        same_rows_twice(df, expected)


@pytest.fixture
def own_definitions(definitions, monkeypatch) -> str:
    """The test's definitions directory as the default location: where dynsource.register's wrapper of Spark's
    table writes (which takes no definitions argument) registers the tables they make."""
    monkeypatch.setenv("DYNSOURCE_DEFINITIONS", definitions)
    return definitions


@pytest.mark.parametrize(("create", "options"), [
    (lambda df, name, path, options: df.write.format("dynsource").option("path", path).options(**options)
     .saveAsTable(name), {"partitionColumns": PARTITIONED}),
    (lambda df, name, path, options: df.writeTo(name).using("dynsource").option("path", path).options(**options)
     .create(), {"partitionColumns": PARTITIONED}),
    # An overwrite of a partitioned table says its mode; stored with the table, as Spark stores a saveAsTable's.
    (lambda df, name, path, options: df.writeTo(f"spark_catalog.default.{name}").using("dynsource").options(
        path=path, **options).createOrReplace(), {"partitionColumns": PARTITIONED, "partitionOverwriteMode": "static"}),
], ids=["saveAsTable", "writeTo-create", "writeTo-createOrReplace"])
def test_a_catalog_table_spark_writes_at_a_path_is_a_registered_table_every_door_reads(
        spark, tmp_path, own_definitions, create, options):
    # Spark gives the source of saveAsTable the options and calls of save(), and records a table of provider
    # 'dynsource' that it reads with no option: dynsource.register's wrapper registers it right after the write.
    path, name = str(tmp_path / "saved table"), "saved_as_table"
    try:
        create(sales(spark, range(3)), name, path, options)
        expected = rows(spark.read.parquet(path))
        assert len(expected) == 12
        every_door_reads(spark, name, expected)
        assert load_definition(spark, name).options == {"path": path, **options}
        assert os.listdir(own_definitions) == [f"default.{name}.json"]
    finally:
        dynsource.drop_table(spark, name, definitions=own_definitions, if_exists=True)


def test_a_saved_tables_declared_partition_types_and_format_are_its_registered_ones(spark, tmp_path,
                                                                                     own_definitions):
    # Inferred from the directories, zip=00501 would be the INT 501, and the ORC files would be read as Parquet.
    zips = spark.createDataFrame([(1, "00501"), (2, "00501"), (3, "10001")], "id BIGINT, zip STRING")
    try:
        zips.write.format("dynsource").option("path", str(tmp_path / "zips")).option(
            "partitionColumns", "zip STRING").saveAsTable("zips")
        every_door_reads(spark, "zips", rows(zips))
        assert {row.zip for row in spark.table("zips").collect()} == {"00501", "10001"}
        assert {row.zip for row in spark.read.parquet(str(tmp_path / "zips")).collect()} == {501, 10001}

        zips.writeTo("orc_zips").using("dynsource").options(path=str(tmp_path / "orc"), format="orc",
                                                             partitionColumns="zip").create()
        assert {f.name.rsplit(".", 1)[-1] for f in (tmp_path / "orc").glob("zip=*/*")} == {"orc"}
        every_door_reads(spark, "orc_zips", rows(zips))  # the rows' type: partitionColumns names zip without one
        assert load_definition(spark, "orc_zips").options == {"path": str(tmp_path / "orc"), "format": "orc",
                                                              "partitionColumns": "zip"}
    finally:
        for name in ("zips", "orc_zips"):
            dynsource.drop_table(spark, name, definitions=own_definitions, if_exists=True)


def test_a_saved_table_of_another_format_is_left_as_spark_made_it(spark, own_definitions):
    df = spark.createDataFrame([(1, "00501")], "id BIGINT, zip STRING")
    try:
        df.write.partitionBy("zip").saveAsTable("plain_saved")
        assert spark.table("plain_saved").collect() == df.collect()
        assert provider(spark, "default.plain_saved") == "parquet"
        assert not os.path.exists(own_definitions)
    finally:
        spark.sql("DROP TABLE IF EXISTS plain_saved")


def test_a_saved_table_that_cannot_be_registered_is_an_error_naming_the_call_after_its_files_are_written(
        spark, tmp_path, monkeypatch):
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("DYNSOURCE_DEFINITIONS", str(tmp_path / "a file" / "definitions"))  # no directory there
    path, name = str(tmp_path / "t"), "unregistrable"
    try:
        with pytest.raises(UnregisteredCatalogTable, match=(
                rf"^df.write.format\('dynsource'\).saveAsTable\('{name}'\) wrote its files at '{re.escape(path)}'"
                rf" for table 'default.{name}' .*making it a registered dynsource table failed .*" + re.escape(
                    f"Register it over its files: dynsource.register_table(spark, 'default.{name}', "
                    f"path='{path}', replace=True, format='orc', storageOptions=...).") + "$")):
            sales(spark, range(1)).write.format("dynsource").options(
                path=path, format="orc", storageOptions="{}").saveAsTable(name)
        assert len(spark.read.orc(path).collect()) == 4
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_catalog_table_sql_makes_of_the_dynsource_source_is_an_error_naming_register_table_at_its_path(
        spark, tmp_path, definitions):
    # CREATE TABLE ... USING dynsource runs in Spark's SQL, which no wrapper of pyspark's writers sees.
    path, name = str(tmp_path / "created table"), "created_by_sql"
    try:
        save(sales(spark, range(2)), path, partitionColumns=PARTITIONED)
        spark.sql(f"CREATE TABLE {name} ({SCHEMA}) USING dynsource LOCATION '{path}'")
        call = re.escape(f"dynsource.register_table(spark, 'default.{name}', path='{path}', replace=True)")
        for door in (lambda: dynsource.table(spark, name), lambda: dynsource.sql(spark, f"SELECT * FROM {name}"),
                     lambda: dynsource.write(sales(spark, range(1)), name)):
            with pytest.raises(UnregisteredCatalogTable,
                               match=rf"^Table 'default.{name}' is a catalog table of data source 'dynsource' at "
                                     rf"'{re.escape(path)}'.*{call}"):
                door()
        with pytest.raises(Exception, match=r"Option 'path' is required"):
            spark.table(name).collect()
        dynsource.register_table(spark, name, path=path, definitions=definitions, replace=True,
                                 partitionColumns=PARTITIONED)
        every_door_reads(spark, name, rows(spark.read.parquet(path)))
    finally:
        dynsource.drop_table(spark, name, definitions=definitions, if_exists=True)


@pytest.mark.parametrize(("options", "message"), [
    ({"partitionColumns": "shop INT"}, r"The rows to write have no partition column 'shop'"),
    ({"partitionColumns": "store BIGINT"}, r"Partition column 'store' is int in the rows to write, but option "
                                           r"'partitionColumns' declares it bigint"),
    ({"partitionColumns": "amount DECIMAL(7,2), id BIGINT, day DATE, region STRING, store INT"},
     r"Every column of the rows to write is a partition column"),
])
def test_bad_writes_are_clear_errors_and_write_nothing(spark, tmp_path, options, message):
    with pytest.raises(Exception, match=message):
        save(sales(spark, range(1)), tmp_path / "t", **options)
    assert not (tmp_path / "t").exists() or leaves(tmp_path / "t") == []


def test_an_append_must_have_the_tables_data_columns_and_types(spark, tmp_path):
    save(sales(spark, range(1)), tmp_path / "t", partitionColumns="store INT")
    with pytest.raises(Exception, match=r"Column 'amount' is double in the rows to write, but decimal\(7,2\) in "
                                        r"the files of table"):
        save(sales(spark, range(1, 2)).withColumn("amount", F.col("amount").cast("double")), tmp_path / "t")
    with pytest.raises(Exception, match=r"The columns of the rows to write do not match those of the files of table "
                                        r"'.*', \['amount', 'day', 'id', 'region'\]: missing \['region'\]"):
        save(sales(spark, range(1, 2)).drop("region"), tmp_path / "t")
    assert rows(read(spark, tmp_path / "t")) == rows(sales(spark, range(1)).select(
        "id", "amount", "day", "region", "store"))


def test_writes_into_a_file_a_float_partition_or_another_format_are_refused(spark, tmp_path, definitions):
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match=r"Option 'path' = '.*file' is a file; a write needs the table's directory"):
        save(sales(spark, range(1)), tmp_path / "file")
    floats = spark.createDataFrame([(1, 0.5)], "id bigint, ratio double")
    with pytest.raises(Exception, match=r"Partition column 'ratio' is of type double; dynsource writes partition"):
        save(floats, tmp_path / "floats", partitionColumns="ratio DOUBLE")
    save(sales(spark, range(1)), tmp_path / "t", partitionColumns="store INT")
    dynsource.register_table(spark, "typed_sales", path=str(tmp_path / "t"), definitions=definitions, replace=True)
    try:
        with pytest.raises(ValueError, match=r"Option 'format' = 'csv', but table 'typed_sales' is defined as parquet"):
            dynsource.write(sales(spark, range(1)), "typed_sales", options={"format": "csv"})
        with pytest.raises(ValueError, match=r"Column 'amount' is double in the DataFrame, but decimal\(7,2\) in "
                                             r"table 'typed_sales'"):
            dynsource.write(sales(spark, range(1)).withColumn("amount", F.col("amount").cast("double")),
                            "typed_sales")
    finally:
        dynsource.drop_table(spark, "typed_sales", definitions=definitions)


def test_a_tasks_rows_are_split_by_directory_as_spark_names_them():
    import pyarrow as pa

    empty = pa.record_batch({"v": pa.array([], pa.int64()), "p": pa.array([], pa.int32())})
    assert list(dynsource_writer._by_directory(empty, ["p"], None)) == []
    batch = pa.record_batch({"v": [1, 2, 3, 4], "p": pa.array([2, None, 2, 1], pa.int32()),
                             "s": ["a/b", "", "a/b", "x"]})
    split = {directory: rows.to_pydict() for directory, rows in dynsource_writer._by_directory(batch, ["p", "s"], None)}
    assert split == {"p=1/s=x": {"v": [4]}, "p=2/s=a%2Fb": {"v": [1, 3]},
                     "p=__HIVE_DEFAULT_PARTITION__/s=__HIVE_DEFAULT_PARTITION__": {"v": [2]}}


def test_dynsource_sql_inserts_write_what_sparks_own_table_writes(spark, tmp_path, definitions):
    """INSERT INTO / OVERWRITE with the session's partitionOverwriteMode, PARTITION (k = v) clauses, BY NAME and
    common table expressions, through dynsource.sql, against the same statements on Spark's own partitioned table."""
    source = spark.createDataFrame([(i, i % 3, "ab"[i % 2]) for i in range(12)], "id BIGINT, p INT, q STRING")
    source.createOrReplaceTempView("insert_source")
    spark.sql("CREATE TABLE insert_native (id BIGINT, p INT, q STRING) USING parquet PARTITIONED BY (p, q)")
    table = tmp_path / "inserted"
    source.write.format("dynsource").option("path", str(table)).option("partitionColumns", "p, q").mode("append") \
        .save()
    spark.sql("INSERT INTO insert_native SELECT * FROM insert_source")
    dynsource.register_table(spark, "insert_ours", path=str(table), definitions=definitions, replace=True)
    steps = [
        ("static", "INSERT INTO {t} SELECT id + 100, p, q FROM insert_source WHERE p = 0"),
        ("dynamic", "INSERT OVERWRITE {t} SELECT id + 200, p, q FROM insert_source WHERE p = 1"),
        ("static", "INSERT OVERWRITE TABLE {t} PARTITION (p = 1, q = 'a') SELECT id + 300 FROM insert_source"),
        ("static", "INSERT OVERWRITE {t} PARTITION (p = 2, q) SELECT id + 400, 'c' FROM insert_source WHERE id < 2"),
        ("dynamic", "INSERT OVERWRITE {t} PARTITION (p = 0, q) SELECT id + 500, q FROM insert_source WHERE q = 'b'"),
        ("static", "INSERT INTO {t} PARTITION (p = 7, q = 'z') SELECT id + 600 FROM insert_source WHERE id < 3"),
        ("static", "INSERT OVERWRITE {t} PARTITION (p = 1, q = 'a') SELECT id FROM insert_source WHERE false"),
        ("static", "INSERT INTO {t} BY NAME SELECT 'n' AS q, 9 AS p, id + 700 AS id FROM insert_source LIMIT 2"),
        ("dynamic", "WITH c AS (SELECT id + 800 AS id, p, q FROM insert_source WHERE p = 2) "
                    "INSERT OVERWRITE {t} SELECT * FROM c"),
    ]
    try:
        for mode, statement in steps:
            spark.conf.set("spark.sql.sources.partitionOverwriteMode", mode)
            spark.sql(statement.format(t="insert_native"))
            dynsource.sql(spark, statement.format(t="insert_ours"))
            assert rows(spark.table("insert_ours")) == rows(spark.table("insert_native")), (mode, statement)
        # REPLACE WHERE, which Spark's own file tables do not take: the partitions the predicate keeps are replaced.
        dynsource.sql(spark, "INSERT INTO insert_ours REPLACE WHERE p >= 7 SELECT id, 8, 'r' FROM insert_source "
                             "WHERE id = 0")
        ours = rows(spark.table("insert_ours"))
        assert [row for row in ours if row.p >= 7] == [(0, 8, "r")]
        assert [row for row in ours if row.p < 7] == [row for row in rows(spark.table("insert_native")) if row.p < 7]
        with pytest.raises(ValueError, match=r"the query gives 1 column\(s\), \['id'\], but the table takes 2, "
                                             r"\['id', 'q'\] besides those of its PARTITION clause, \['p'\]"):
            dynsource.sql(spark, "INSERT OVERWRITE insert_ours PARTITION (p = 1) SELECT id FROM insert_source")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
        spark.sql("DROP TABLE IF EXISTS insert_native")
        dynsource.drop_table(spark, "insert_ours", definitions=definitions)


def test_an_overwrite_with_partition_filter_replaces_only_the_partitions_it_keeps(spark, tmp_path):
    table = tmp_path / "t"
    save(sales(spark, range(4)), table, partitionColumns="day DATE, store INT")
    before = rows(read(spark, table))
    again = sales(spark, range(2, 3), per_day=2)
    save(again, table, "overwrite", partitionFilter="day >= DATE'2024-01-02'", partitionOverwriteMode="static")
    # Days 1 (2024-01-02) and 3 replaced by day 2's new rows: the filter keeps them, and the rows lie within it.
    written = rows(again.select("id", "amount", "region", "day", "store"))
    expected = sorted([r for r in before if r.day < dt.date(2024, 1, 2)] + written, key=repr)
    assert rows(read(spark, table)) == expected
    with pytest.raises(Exception, match=r"include partition 'day=2024-01-01/store=\d', which option 'partitionFilter' "
                                        r"= .day > DATE.2024-01-01.. does not keep.*Nothing was written"):
        save(sales(spark, range(0, 1)), table, "overwrite", partitionFilter="day > DATE'2024-01-01'",
             partitionOverwriteMode="static")
    with pytest.raises(Exception, match=r"Option 'partitionFilter' = .region = .x.. on an overwrite names the "
                                        r"partitions it replaces, but \['region'\] are not partition columns"):
        save(again, table, "overwrite", partitionFilter="region = 'x'", partitionOverwriteMode="static")
    assert rows(read(spark, table)) == expected  # the refused overwrites wrote nothing
