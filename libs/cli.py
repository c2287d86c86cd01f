"""The `holdline` command: run the system, and operator tools."""

from __future__ import annotations

import argparse
import asyncio
import sys

_SOURCES = ("interaction", "control", "operations", "batches", "deliveries", "work")


def _nodes(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of nodes: {value!r}") from None
    if not 3 <= count <= 7:
        # Fewer than three cannot keep a quorum with one node down; more is not a laptop.
        raise argparse.ArgumentTypeError("a cluster has 3 to 7 nodes")
    return count


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="holdline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the broker and every service in the foreground")
    run.add_argument(
        "--cluster",
        type=_nodes,
        default=0,
        metavar="N",
        help="scale-out on this machine: N broker nodes (3 or more), R3 streams, "
        "two surfaces, two workers, two partitions of the coordinator and the policy",
    )

    dlq = sub.add_parser("dlq", help="dead letters: list and redrive")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    listing = dlq_sub.add_parser("list", help="list dead letters, oldest first")
    listing.add_argument("--stream", choices=_SOURCES, help="only letters from this stream")
    listing.add_argument("--json", action="store_true", help="print JSON")
    again = dlq_sub.add_parser("redrive", help="send a dead letter's work again")
    again.add_argument("dlq_seq", type=int, help="the letter's sequence in the DLQ stream")
    again.add_argument("--force", action="store_true", help="redrive even if already redriven")

    resolve = sub.add_parser("resolve", help="resolve by hand an operation stuck in UNKNOWN")
    resolve.add_argument("session_id")
    resolve.add_argument("operation_id")
    resolve.add_argument("--as", dest="outcome", choices=("committed", "failed"), required=True)
    resolve.add_argument("--by", required=True, help="who decides (recorded in the event)")
    resolve.add_argument("--why", required=True, help="why (recorded in the event)")

    rebuild = sub.add_parser("rebuild", help="rebuild a projection by replay (read-only)")
    rebuild.add_argument("projection", choices=("operations", "batches", "deliveries", "sessions"))
    rebuild.add_argument("--session", help="only this session")
    rebuild.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and dispatch."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        from libs.supervisor import main as run  # noqa: PLC0415 - only `run` needs the supervisor

        return run(args.cluster)
    from libs.operator.commands import run as operate  # noqa: PLC0415 - keeps `run` light

    return asyncio.run(operate(args))


if __name__ == "__main__":
    sys.exit(main())
