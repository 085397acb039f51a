"""The ``dynsource`` command: ``demo`` runs the main job, ``explain`` prints a scan report."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dynsource", description="Dynamic partition pruning for PySpark.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="join a small star schema with and without dynamic filtering")
    demo.add_argument("--data", default="sample_data", help="directory for the generated tables (default: %(default)s)")
    explain = commands.add_parser("explain", help="print the pruning report of the last scan that used a handle")
    explain.add_argument("handle", help="a filter handle, as returned by dynsource.collect() or publish()")
    explain.add_argument("--store", help="filter store URL (default: $DYNSOURCE_FILTER_STORE or the local cache)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from dynsource.demo import run

        run(args.data)
    else:
        _explain(args.handle, args.store)


def _explain(handle: str, store: str | None) -> None:
    from dynsource.report import scan_report

    try:
        report = scan_report(handle, store)
    except (LookupError, ValueError) as error:
        sys.exit(f"dynsource explain: {error}")
    width = max(len(field.name) for field in dataclasses.fields(report))
    for field in dataclasses.fields(report):
        print(f"{field.name:<{width}}  {getattr(report, field.name)}")


if __name__ == "__main__":
    main()
