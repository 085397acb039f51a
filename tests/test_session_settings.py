"""The session settings that change how Spark types partition values, through every door.

Hourly partitions written by Spark under UTC and read in a session whose time zone is America/Los_Angeles: Spark
types ``ts=2024-01-01 05%3A00%3A00`` in the session's zone when it reads the table, so every door must show what
``spark.read.parquet`` shows there. Zero-padded codes in a session with partition type inference off stay strings.
"""

from __future__ import annotations

import datetime as dt
import logging

import pytest

import dynsource
from dynsource import partitions
from tests.helpers import read, rows
from tests.spark_oracle import session_set

LOS_ANGELES = {partitions.TIME_ZONE_SETTING: "America/Los_Angeles"}
HOURS = 48


@pytest.fixture(scope="module")
def hourly(spark, tmp_path_factory):
    """480 rows in 48 hourly partitions written by Spark under UTC, registered, and a dimension of two hours."""
    root = str(tmp_path_factory.mktemp("hourly") / "events")
    with session_set(spark, {partitions.TIME_ZONE_SETTING: "UTC"}):
        start = dt.datetime(2024, 1, 1)
        data = [(start + dt.timedelta(hours=i // 10), i) for i in range(HOURS * 10)]
        spark.createDataFrame(data, "ts TIMESTAMP_NTZ, v INT").selectExpr("CAST(ts AS TIMESTAMP) AS ts", "v") \
            .write.partitionBy("ts").parquet(root)
    definitions = str(tmp_path_factory.mktemp("definitions"))
    dynsource.register_table(spark, "hourly_events", path=root, definitions=definitions, replace=True)
    dynsource.register_table(spark, "hourly_events_py", path=root, definitions=definitions, replace=True,
                             reader="python")
    yield root
    for name in ("hourly_events", "hourly_events_py"):
        dynsource.drop_table(spark, name)


def hours(spark):
    """Two instants: 03:00 and 10:00 of the table's two days in Los Angeles, whatever the session's zone."""
    return spark.createDataFrame([(dt.datetime(2024, 1, 1, 11, tzinfo=dt.UTC),),
                                  (dt.datetime(2024, 1, 2, 18, tzinfo=dt.UTC),)], "h TIMESTAMP")


@pytest.mark.parametrize("mode", ["collect", "auto"])
@pytest.mark.parametrize("table", ["hourly_events", "hourly_events_py"])
def test_every_sql_query_of_a_timestamp_table_equals_spark_in_another_session_zone(spark, hourly, mode, table):
    with session_set(spark, {**LOS_ANGELES, "spark.dynsource.partitionPruning": mode}):
        spark.read.parquet(hourly).createOrReplaceTempView("hourly_native")
        hours(spark).where("h IS NOT NULL").createOrReplaceTempView("hrs")
        for query in (
            "SELECT min(ts), max(ts), count(*) FROM {t}",
            "SELECT count(*) FROM {t} WHERE ts >= TIMESTAMP'2024-01-02 00:00:00'",
            "SELECT ts, sum(v) FROM {t} JOIN hrs ON ts = h WHERE h > TIMESTAMP'2000-01-01 00:00:00' GROUP BY ts",
        ):
            expected = rows(spark.sql(query.format(t="hourly_native")))
            assert rows(dynsource.sql(spark, query.format(t=table))) == expected, query
        bounds = rows(dynsource.sql(spark, f"SELECT CAST(min(ts) AS STRING), CAST(max(ts) AS STRING) FROM {table}"))
        # Written in UTC, read in Los Angeles: the wall-clock values, as Spark shows them.
        assert tuple(bounds[0]) == ("2024-01-01 00:00:00", "2024-01-02 23:00:00")


@pytest.mark.smoke  # ./test --quick: dynsource.table and a session zone
def test_dataframe_doors_of_a_timestamp_table_equal_spark_in_another_session_zone(spark, hourly):
    with session_set(spark, {partitions.TIME_ZONE_SETTING: "UTC"}):
        handle = dynsource.collect(hours(spark), {"ts": "h"})  # collected under another zone: instants compare
    with session_set(spark, LOS_ANGELES):
        native, dim = spark.read.parquet(hourly), hours(spark)
        expected = rows(native.join(dim, native.ts == dim.h).select("ts", "v"))
        assert len(expected) == 20
        loaded = read(spark, hourly, dynamicFilter=handle, timeZone="America/Los_Angeles")
        assert rows(loaded.join(dim, loaded.ts == dim.h).select("ts", "v")) == expected
        assert dynsource.scan_report(handle).partitions_kept == 2
        table = dynsource.table(spark, "hourly_events_py")
        assert rows(table.join(dim, table.ts == dim.h).select("ts", "v")) == expected
        joined = dynsource.dynamic_join("hourly_events_py", dim, {"ts": "h"})
        assert rows(joined.select("ts", "v")) == expected
        assert rows(read(spark, hourly, timeZone="America/Los_Angeles")) == rows(native)


TIMESTAMP_PREDICATES = (
    "ts >= TIMESTAMP'2024-01-02 00:00:00'",
    "ts BETWEEN '2024-01-01 22:00:00' AND '2024-01-02 01:30:00'",
    "ts IN (TIMESTAMP_LTZ'2024-01-01 03:00:00', '2024-01-02 10:00:00') OR ts IS NULL",
    "ts < '2024-01-01'",  # a date-only string: midnight, as Spark casts it
)


@pytest.mark.parametrize("zone", ["America/Los_Angeles", "Asia/Kolkata"])
def test_a_partition_filter_on_a_timestamp_column_keeps_what_spark_keeps_in_the_session_zone(spark, hourly, zone):
    with session_set(spark, {partitions.TIME_ZONE_SETTING: zone}):
        native = spark.read.parquet(hourly)
        for predicate in TIMESTAMP_PREDICATES:
            expected = rows(native.where(predicate).select("ts", "v"))
            loaded = read(spark, hourly, partitionFilter=predicate, timeZone=zone)
            assert rows(loaded.select("ts", "v")) == expected, predicate
            assert dynsource.scan_report(loaded).partitions_kept == len({row.ts for row in expected}), predicate
            query = dynsource.sql(spark, f"SELECT ts, v FROM hourly_events_py WHERE {predicate}")
            assert rows(query) == expected, predicate
            assert "partitionFilter" in str(dynsource.scan_report(query)), predicate


def test_a_partition_filter_on_a_timestamp_column_needs_the_zone_and_literals_of_its_type(spark, hourly):
    with pytest.raises(Exception) as error:
        read(spark, hourly, partitionFilter="ts > '2024-01-01 12:00:00'").collect()
    assert "Partition column 'ts' is a TIMESTAMP" in str(error.value) and "'timeZone'" in str(error.value)
    with pytest.raises(Exception, match=r"Option 'partitionFilter' = .*literal '2024-01-01' is not a timestamp value"):
        read(spark, hourly, partitionFilter="ts > DATE'2024-01-01'", timeZone="UTC").collect()
    with pytest.raises(Exception, match=r"cannot be applied: column 'ts': literal 'soon' cannot be converted"):
        read(spark, hourly, partitionFilter="ts > 'soon'", timeZone="UTC").collect()


def test_a_timestamp_partition_read_without_the_session_zone_is_refused_naming_the_option(spark, hourly):
    with session_set(spark, LOS_ANGELES), pytest.raises(Exception) as error:
        read(spark, hourly).collect()  # Spark tells a Python data source no session setting
    assert "Partition column 'ts' is a TIMESTAMP" in str(error.value) and "'timeZone'" in str(error.value)
    with session_set(spark, LOS_ANGELES), pytest.raises(Exception) as error:
        spark.table("hourly_events_py").collect()
    assert "spark.sql.session.timeZone" in str(error.value)


def test_a_timestamp_partition_write_names_directories_as_spark_does_in_the_session_zone(spark, tmp_path):
    data = [(dt.datetime(2024, 3, 10, 1, 30), 1), (dt.datetime(2024, 3, 10, 12, 0, 0, 500_000), 2), (None, 3)]
    with session_set(spark, LOS_ANGELES):
        df = spark.createDataFrame(data, "ts TIMESTAMP_NTZ, v INT").selectExpr("CAST(ts AS TIMESTAMP) AS ts", "v")
        df.write.partitionBy("ts").parquet(str(tmp_path / "spark"))
        dynsource.write(df, str(tmp_path / "ours"), options={"partitionColumns": "ts"})
        assert _directories(tmp_path / "ours") == _directories(tmp_path / "spark")
        assert rows(spark.read.parquet(str(tmp_path / "ours")).select("ts", "v")) == rows(df)
        with pytest.raises(Exception) as error:  # Spark does not pass the session's zone to a Python source
            df.write.format("dynsource").option("path", str(tmp_path / "raw")).option("partitionColumns", "ts") \
                .mode("append").save()
        assert "option 'timeZone'" in str(error.value)


def _directories(root) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.name.startswith("ts="))


def test_with_partition_type_inference_off_zero_padded_codes_stay_strings(spark, tmp_path):
    root = str(tmp_path / "zips")
    spark.createDataFrame([(1, "00501"), (2, "02134"), (3, "10001")], "v INT, zip STRING") \
        .write.partitionBy("zip").parquet(root)
    with session_set(spark, {partitions.INFERENCE_SETTING: "false"}):
        dynsource.register_table(spark, "zips", path=root, definitions=str(tmp_path / "definitions"), replace=True)
        try:
            spark.read.parquet(root).createOrReplaceTempView("zips_native")
            codes = spark.createDataFrame([("00501",), ("02134",)], "code STRING").where("code IS NOT NULL")
            codes.createOrReplaceTempView("codes")
            for query in ("SELECT v, zip FROM {t} WHERE zip IN ('00501', '02134')",
                          "SELECT v, zip FROM {t} JOIN codes ON zip = code"):
                expected = rows(spark.sql(query.format(t="zips_native")))
                assert rows(dynsource.sql(spark, query.format(t="zips"))) == expected
            assert expected == [(1, "00501"), (2, "02134")]
        finally:
            dynsource.drop_table(spark, "zips")


def test_a_scan_read_whole_warns_only_where_a_predicate_on_a_partition_column_did_not_prune(spark, hourly, caplog):
    with session_set(spark, LOS_ANGELES), caplog.at_level(logging.WARNING, logger="dynsource"):
        caplog.clear()
        dynsource.sql(spark, "SELECT min(ts), max(ts) FROM hourly_events_py").collect()
        assert not [r for r in caplog.records if "prune no partition" in r.getMessage()]
        caplog.clear()
        df = dynsource.sql(spark, "SELECT count(*) FROM hourly_events_py WHERE hour(ts) = 3")
        said = [r.getMessage() for r in caplog.records if "prune no partition" in r.getMessage()]
        assert len(said) == 1 and "hour(ts) = 3" in said[0].lower(), said
        assert "prune no partition" in str(dynsource.scan_report(df))
