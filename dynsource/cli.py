"""The ``dynsource`` command: ``demo``, ``explain`` (a scan report), ``expire`` (old handles), ``table`` (tables),
``sql`` (a query against the catalog, pruned automatically)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
from importlib import metadata
from typing import TYPE_CHECKING

from dynsource import clisession

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dynsource.filtering.filterstore import FilterStore

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dynsource", description="Dynamic partition pruning for PySpark.")
    # The distribution's metadata, as dynsource.__version__, without importing pyspark for every command.
    parser.add_argument("--version", action="version", version=f"dynsource {metadata.version('dynsource')}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="join a small star schema with and without dynamic filtering")
    demo.add_argument("--data", default="sample_data", help="directory for the generated tables (default: %(default)s)")
    explain = commands.add_parser("explain", help="print the pruning report of the newest scan that used a handle")
    explain.add_argument("handle", help="a filter handle, as returned by dynsource.collect() or publish()")
    explain.add_argument("--all", action="store_true", help="every kept scan of the handle, oldest first")
    explain.add_argument("--json", action="store_true", help="every figure, as JSON (a list with --all)")
    _add_store_arguments(explain)
    _add_expire_command(commands)
    _add_table_commands(commands)
    _add_sql_command(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        _run(args)
        sys.stdout.flush()  # inside the try: a reader gone shows here, not at the interpreter's exit
    except BrokenPipeError:  # the reader of the output stopped (`| head`): nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _run(args: argparse.Namespace) -> None:
    if args.command == "demo":
        from dynsource.demo import run

        run(args.data)
    elif args.command == "explain":
        _explain(args)
    elif args.command == "expire":
        _expire(args.older_than, args.store, args.store_options, dry_run=args.dry_run)
    elif args.command == "sql":
        _sql(args)
    else:
        _table(args)


def _add_store_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--store", help="filter store URL (default: $DYNSOURCE_FILTER_STORE or the local cache)")
    command.add_argument("--store-options", metavar="JSON",
                         help="fsspec storage options of the store as a JSON object (credentials, endpoint)")


def _add_expire_command(commands: argparse._SubParsersAction) -> None:
    expire = commands.add_parser(
        "expire", help="remove the filter handles unused for a while, with their markers and scan reports",
        description="Remove every handle of the filter store that nothing published, resolved or reported for "
                    "--older-than: its payload, pending/failed markers, lease and saved scan reports. A handle a "
                    "query resolved within the last hour (its lease) is kept whatever --older-than says.",
    )
    expire.add_argument("--older-than", required=True, type=_duration, metavar="AGE",
                        help="a number and its unit, s, m, h, d or w: 30s, 12h, 7d")
    expire.add_argument("--dry-run", action="store_true",
                        help="list the handles that would be removed, and remove nothing")
    _add_store_arguments(expire)


def _add_table_commands(commands: argparse._SubParsersAction) -> None:
    table = commands.add_parser("table", help="register, list and drop dynsource tables in Spark's Hive catalog")
    actions = table.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="register table NAME reading the files at --path")
    create.add_argument("name", help="table name: 'table' or 'db.table'")
    create.add_argument("--path", required=True, help="the table directory (fsspec URL or local path)")
    create.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a reader option stored with the table, e.g. format=orc (repeatable)")
    create.add_argument("--schema", metavar="DDL",
                        help="the table's schema, partition columns included, e.g. 'v INT, day STRING' "
                             "(default: the first data file's columns, then the partition columns)")
    create.add_argument("--replace", action="store_true", help="replace an existing table of that name")
    listing = actions.add_parser("list", help="list the registered tables' names and paths, from their definitions "
                                              "(no Spark session is started)")
    listing.add_argument("--catalog", action="store_true",
                         help="also say whether each is in Spark's catalog (starts a Spark session)")
    drop = actions.add_parser("drop", help="drop table NAME and delete its definition")
    drop.add_argument("name", help="table name: 'table' or 'db.table'")
    for action in actions.choices.values():
        _add_session_arguments(action)
    vacuum = actions.add_parser(
        "vacuum", help="remove what killed writes left in a table (staging directories, pending commits)",
        description="Remove the staging directories and pending commits of writes killed before they finished, "
                    "older than --older-than, with the files those commits had moved in, and expired commit "
                    "records. TABLE is a table directory (no Spark session is started) or a registered table's name.")
    vacuum.add_argument("table", help="a table directory (fsspec URL or local path) or a registered table's name")
    vacuum.add_argument("--older-than", type=_duration, default=_duration("1d"), metavar="AGE",
                        help="a number and its unit, s, m, h, d or w (default: 1d)")
    vacuum.add_argument("--dry-run", action="store_true", help="list what would be removed, and remove nothing")
    vacuum.add_argument("--storage-options", metavar="JSON",
                        help="fsspec storage options of a table directory as a JSON object (credentials, endpoint)")
    _add_session_arguments(vacuum)


def _add_sql_command(commands: argparse._SubParsersAction) -> None:
    sql = commands.add_parser(
        "sql", help="run a Spark SQL query against the catalog with automatic dynamic partition pruning",
        description="Run QUERY with dynsource.sql in a Spark session with a Hive catalog: joins of registered "
                    "dynsource tables with filtered dimensions are pruned. Prints the result, then the report.")
    sql.add_argument("query", help="one Spark SQL SELECT statement")
    sql.add_argument("--explain", action="store_true",
                     help="only collect the dimension keys and plan the pruned scans; print the report")
    sql.add_argument("--limit", type=int, default=20, metavar="N", help="rows to print (default: %(default)s)")
    _add_session_arguments(sql)


def _add_session_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--definitions", help="definitions URL (default: $DYNSOURCE_DEFINITIONS or "
                                               "<spark.sql.warehouse.dir>/_dynsource)")
    command.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                         help="a Spark setting, e.g. spark.sql.warehouse.dir=/data/warehouse (repeatable)")
    command.add_argument("--metastore", metavar="DIR",
                         help="directory of the Hive catalog's Derby database (DIR/metastore_db) and its "
                              "DIR/derby.log (default: the current directory)")


def _sql(args: argparse.Namespace) -> None:
    from pyspark.errors import PySparkException

    spark = clisession.hive_session(args.conf, args.metastore)
    try:
        _run_sql(spark, args)
    # What the query can cause: any error of Spark's (a parse, analysis or cast error), dynsource's on its options.
    except (ValueError, OSError, PySparkException) as error:
        sys.exit(f"dynsource sql: {_first_line(error)}")


def _run_sql(spark: SparkSession, args: argparse.Namespace) -> None:
    import dynsource
    from dynsource.spark import catalog

    if args.definitions:
        catalog.register_tables(spark, definitions=args.definitions)
    if args.explain:
        print(dynsource.explain_sql(spark, args.query))
        return
    df = dynsource.sql(spark, args.query)
    df.show(args.limit, truncate=False)
    print(dynsource.scan_report(df))


def _table(args: argparse.Namespace) -> None:
    from pyspark.errors import AnalysisException

    from dynsource.spark import catalog, tablewrites

    if args.action == "vacuum" and tablewrites.is_path(args.table):  # a directory: no session to start
        _vacuum(None, args)
        return
    if args.action == "list" and not args.catalog:  # the definitions alone: no session to start
        _list_tables(None, args)
        return
    spark = clisession.hive_session(args.conf, args.metastore)
    actions = {"create": _create_table, "drop": _drop_table, "list": _list_tables, "vacuum": _vacuum}
    try:
        if args.definitions:  # dynsource.register() restored only the tables of the default location
            catalog.register_tables(spark, definitions=args.definitions)
        actions[args.action](spark, args)
    # What a user can cause: a bad name, path, option or location (ValueError, OSError), a missing database.
    except (ValueError, OSError, AnalysisException) as error:
        sys.exit(f"dynsource table {args.action}: {_first_line(error)}")


def _create_table(spark: SparkSession, args: argparse.Namespace) -> None:
    from dynsource.spark import catalog

    table = catalog.qualified_name(spark, args.name)
    # register_table's own message names its Python argument (replace=True), not this command's flag.
    if not args.replace and catalog.in_catalog(spark, table):
        raise ValueError(f"table {table} already exists; pass --replace to replace it")
    catalog.register_table(spark, args.name, args.path, definitions=args.definitions, replace=args.replace,
                           schema=args.schema, **clisession.pairs(args.option, "--option"))
    print(f"created table {table}")


def _drop_table(spark: SparkSession, args: argparse.Namespace) -> None:
    from dynsource.spark import catalog

    table = catalog.qualified_name(spark, args.name)
    catalog.drop_table(spark, table, definitions=catalog.definitions_location(spark, args.definitions))
    print(f"dropped table {table}")


def _list_tables(spark: SparkSession | None, args: argparse.Namespace) -> None:
    """Each table's name, its state in the catalog (with a session) and its path."""
    from dynsource.spark import catalog

    if spark is not None:
        location = catalog.definitions_location(spark, args.definitions)
    else:  # where the session would find them: the same settings, without starting it
        location = (args.definitions or os.environ.get(catalog.DEFINITIONS_ENV)
                    or f"{clisession.warehouse(clisession.pairs(args.conf, '--conf'))}/_dynsource").rstrip("/")
    tables = catalog.stored_tables(location)
    if not tables:
        print(f"no dynsource tables registered in {location}")
    for table in tables:
        state = [] if spark is None else ["in catalog" if catalog.in_catalog(spark, table) else "not in catalog"]
        try:
            path = catalog.read_definition(table, location).path
        except catalog.TableDefinitionError as error:
            path = f"(unreadable: {error})"
        print("\t".join([table, *state, path]))


def _vacuum(spark: SparkSession | None, args: argparse.Namespace) -> None:
    from dynsource.spark import tablewrites
    from dynsource.storage import StorageOptions

    try:
        options = StorageOptions.parse("--storage-options", args.storage_options)
        found = tablewrites.vacuum(args.table, spark=spark, older_than_s=args.older_than.seconds, dry_run=args.dry_run,
                              storage_options=options)
    except (ValueError, OSError) as error:
        sys.exit(f"dynsource table vacuum: {_first_line(error)}")
    for line in found.lines():
        print(line)
    verb, note = ("would remove", " (dry run: nothing removed)") if args.dry_run else ("removed", "")
    print(f"{verb} {len(found.staging)} staging director(ies), {len(found.pending)} pending commit(s) with "
          f"{len(found.files)} file(s), {len(found.expired)} expired record(s) older than {args.older_than.text} "
          f"from {args.table}{note}", file=sys.stderr)


def _first_line(error: Exception) -> str:
    # Spark's errors append the JVM stack trace to their message.
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _explain(args: argparse.Namespace) -> None:
    from dynsource.explain import scan_report, scan_reports
    from dynsource.filtering.filterstore import FilterStore
    from dynsource.storage import StorageOptions

    try:
        options = StorageOptions.parse("--store-options", args.store_options)
        if not _store_exists(FilterStore.of(args.store, options)):
            sys.exit(f"dynsource explain: filter store {FilterStore.of(args.store, options)} (--store) does not "
                     "exist: give the store the handle was published in")
        reports = (scan_reports(args.handle, args.store, storage_options=options) if args.all
                   else [scan_report(args.handle, args.store, storage_options=options)])
    except (LookupError, ValueError, OSError) as error:
        sys.exit(f"dynsource explain: {error}")
    if not reports:
        sys.exit(f"dynsource explain: no scan has used dynamic filter handle '{args.handle}' yet")
    if args.json:
        fields = [dataclasses.asdict(report) for report in reports]
        print(json.dumps(fields if args.all else fields[0], indent=2))
    else:
        print("\n\n".join(str(report) for report in reports))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclasses.dataclass(frozen=True)
class _Duration:
    """An --older-than value: as typed, for messages, and in seconds."""

    text: str
    seconds: float


def _duration(text: str) -> _Duration:
    # A bare number is refused: 7 meant as days, read as seconds, would remove every handle of a shared store.
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; expected a number and its unit, s, m, h, d or w: 30s, 12h, 7d"
        )
    return _Duration(text.strip(), float(match.group(1)) * _UNITS[match.group(2)])


def _expire(older_than: _Duration, store_url: str | None, store_options: str | None, *, dry_run: bool) -> None:
    from dynsource.filtering.filterstore import FilterStore
    from dynsource.storage import StorageOptions

    try:
        location = FilterStore.of(store_url, StorageOptions.parse("--store-options", store_options))
        if not _store_exists(location):
            print(f"dynsource expire: filter store {location} does not exist; nothing to remove", file=sys.stderr)
            return
        handles = location.expire(older_than.seconds, dry_run=dry_run)
    except (ValueError, ImportError, OSError) as error:  # a malformed or unreachable store
        sys.exit(f"dynsource expire: {error}")
    for handle in handles:
        print(handle)
    verb, note = ("would remove", " (dry run: nothing removed)") if dry_run else ("removed", "")
    print(f"{verb} {len(handles)} handle(s) unused for {older_than.text} from {location}{note}", file=sys.stderr)


_STORE_URLS = "expected a local directory or an fsspec URL of an installed filesystem (file://, s3://, memory://...)"


def _store_exists(location: FilterStore) -> bool:
    """Whether the store's directory exists; ValueError when its URL names no installed fsspec filesystem."""
    try:
        fs, root = location.open()
    except (ValueError, ImportError) as error:  # "Protocol not known: xy", or its package is not installed
        raise ValueError(f"filter store '{location}' (--store) cannot be opened: {error}; {_STORE_URLS}") from None
    return fs.exists(root)


if __name__ == "__main__":
    main()
