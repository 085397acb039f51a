"""The ``dynsource`` command."""

from __future__ import annotations

import argparse
import logging


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dynsource", description="Dynamic partition pruning for PySpark.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="join a small star schema with and without dynamic filtering")
    demo.add_argument("--data", default="sample_data", help="directory for the generated tables (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from dynsource.demo import run

        run(args.data)


if __name__ == "__main__":
    main()
