"""The ``dynsource`` command: ``demo``, ``explain`` (a scan report), ``expire`` (old handles), ``table`` (tables),
``sql`` (a query against the catalog, pruned automatically)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dynsource", description="Dynamic partition pruning for PySpark.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="join a small star schema with and without dynamic filtering")
    demo.add_argument("--data", default="sample_data", help="directory for the generated tables (default: %(default)s)")
    explain = commands.add_parser("explain", help="print the pruning report of the last scan that used a handle")
    explain.add_argument("handle", help="a filter handle, as returned by dynsource.collect() or publish()")
    explain.add_argument("--store", help="filter store URL (default: $DYNSOURCE_FILTER_STORE or the local cache)")
    explain.add_argument("--store-options", metavar="JSON",
                         help="fsspec storage options of the store as a JSON object (credentials, endpoint)")
    expire = commands.add_parser(
        "expire", help="remove the filter handles unused for a while, with their markers and scan reports",
        description="Remove every handle of the filter store that nothing published, resolved or reported for "
                    "--older-than: its payload, pending/failed markers, lease and saved scan reports. A handle a "
                    "query resolved within the last hour (its lease) is kept whatever --older-than says.",
    )
    expire.add_argument("--older-than", required=True, type=_duration, metavar="AGE",
                        help="a number with an optional unit s, m, h, d or w (default s), e.g. 7d or 12h")
    expire.add_argument("--store", help="filter store URL (default: $DYNSOURCE_FILTER_STORE or the local cache)")
    expire.add_argument("--store-options", metavar="JSON",
                        help="fsspec storage options of the store as a JSON object (credentials, endpoint)")
    _add_table_commands(commands)
    _add_sql_command(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from dynsource.demo import run

        run(args.data)
    elif args.command == "explain":
        _explain(args.handle, args.store, args.store_options)
    elif args.command == "expire":
        _expire(args.older_than, args.store, args.store_options)
    elif args.command == "sql":
        _sql(args)
    else:
        _table(args)


def _add_table_commands(commands: argparse._SubParsersAction) -> None:
    table = commands.add_parser("table", help="register, list and drop dynsource tables in Spark's Hive catalog")
    actions = table.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="register table NAME reading the files at --path")
    create.add_argument("name", help="table name: 'table' or 'db.table'")
    create.add_argument("--path", required=True, help="the table directory (fsspec URL or local path)")
    create.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a reader option stored with the table, e.g. format=orc (repeatable)")
    create.add_argument("--replace", action="store_true", help="replace an existing table of that name")
    actions.add_parser("list", help="list the registered tables: name, in the catalog or not, path")
    drop = actions.add_parser("drop", help="drop table NAME and delete its definition")
    drop.add_argument("name", help="table name: 'table' or 'db.table'")
    for action in actions.choices.values():
        action.add_argument("--definitions", help="definitions URL (default: $DYNSOURCE_DEFINITIONS or "
                                                  "<spark.sql.warehouse.dir>/_dynsource)")
        action.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                            help="a Spark setting, e.g. spark.sql.warehouse.dir=/data/warehouse (repeatable)")


def _add_sql_command(commands: argparse._SubParsersAction) -> None:
    sql = commands.add_parser(
        "sql", help="run a Spark SQL query against the catalog with automatic dynamic partition pruning",
        description="Run QUERY with dynsource.sql in a Spark session with a Hive catalog: joins of registered "
                    "dynsource tables with filtered dimensions are pruned. Prints the result, then the report.")
    sql.add_argument("query", help="one Spark SQL SELECT statement")
    sql.add_argument("--explain", action="store_true",
                     help="only collect the dimension keys and plan the pruned scans; print the report")
    sql.add_argument("--limit", type=int, default=20, metavar="N", help="rows to print (default: %(default)s)")
    sql.add_argument("--definitions", help="definitions URL (default: $DYNSOURCE_DEFINITIONS or "
                                           "<spark.sql.warehouse.dir>/_dynsource)")
    sql.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark setting, e.g. spark.sql.warehouse.dir=/data/warehouse (repeatable)")


def _sql(args: argparse.Namespace) -> None:
    import dynsource
    from dynsource import catalog

    spark = _hive_session(_pairs(args.conf, "--conf"))
    if args.definitions:
        catalog.register_tables(spark, definitions=args.definitions)
    if args.explain:
        print(dynsource.explain_sql(spark, args.query))
        return
    df = dynsource.sql(spark, args.query)
    df.show(args.limit, truncate=False)
    print(dynsource.scan_report(df))


def _table(args: argparse.Namespace) -> None:
    from dynsource import catalog

    spark = _hive_session(_pairs(args.conf, "--conf"))
    if args.definitions:  # dynsource.register() restored only the tables of the default location
        catalog.register_tables(spark, definitions=args.definitions)
    try:
        if args.action == "create":
            catalog.register_table(spark, args.name, args.path, definitions=args.definitions, replace=args.replace,
                                   **_pairs(args.option, "--option"))
            print(f"created table {catalog.qualified_name(spark, args.name)}")
        elif args.action == "drop":
            catalog.drop_table(spark, args.name, definitions=args.definitions)
            print(f"dropped table {catalog.qualified_name(spark, args.name)}")
        else:
            _list_tables(spark, args.definitions)
    except ValueError as error:
        sys.exit(f"dynsource table {args.action}: {error}")


def _list_tables(spark: SparkSession, definitions: str | None) -> None:
    from dynsource import catalog

    location = catalog.definitions_location(spark, definitions)
    for table in catalog.stored_tables(location):
        state = "in catalog" if catalog.in_catalog(spark, table) else "not in catalog"
        try:
            path = catalog.read_definition(table, location).path
        except catalog.TableDefinitionError as error:
            path = f"(unreadable: {error})"
        print(f"{table}\t{state}\t{path}")


def _hive_session(settings: dict[str, str]) -> SparkSession:
    # Workers must run this interpreter (the system python3 lacks pyarrow), and only a Hive catalog keeps
    # tables after the command.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import dynsource

    builder = SparkSession.builder.appName("dynsource-table").config("spark.ui.enabled", "false").enableHiveSupport()
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    dynsource.register(spark)
    return spark


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            sys.exit(f"dynsource table: {flag} {item!r} is not KEY=VALUE")
        pairs[key.strip()] = value
    return pairs


def _explain(handle: str, store: str | None, store_options: str | None) -> None:
    from dynsource.report import scan_report
    from dynsource.storage import StorageOptions

    try:
        report = scan_report(handle, store, storage_options=StorageOptions.parse("--store-options", store_options))
    except (LookupError, ValueError) as error:
        sys.exit(f"dynsource explain: {error}")
    width = max(len(field.name) for field in dataclasses.fields(report))
    for field in dataclasses.fields(report):
        print(f"{field.name:<{width}}  {getattr(report, field.name)}")


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _duration(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; expected a number with an optional unit s, m, h, d or w, e.g. 7d"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def _expire(older_than: float, store_url: str | None, store_options: str | None) -> None:
    from dynsource import store
    from dynsource.storage import FilterStore, StorageOptions

    try:
        location = FilterStore.of(store_url, StorageOptions.parse("--store-options", store_options))
    except ValueError as error:
        sys.exit(f"dynsource expire: {error}")
    removed = store.expire(older_than, location)
    for handle in removed:
        print(handle)
    print(f"removed {len(removed)} handle(s) unused for {older_than:g} s from {location}", file=sys.stderr)


if __name__ == "__main__":
    main()
