"""The `holdline` command: run the system, and operator tools."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and dispatch."""
    parser = argparse.ArgumentParser(prog="holdline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="start the broker and every service in the foreground")
    args = parser.parse_args(argv)
    from libs.supervisor import main as run  # noqa: PLC0415 - only `run` needs the supervisor

    assert args.command == "run"
    return run()


if __name__ == "__main__":
    sys.exit(main())
