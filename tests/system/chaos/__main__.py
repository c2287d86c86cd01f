"""`python -m tests.system.chaos` (what `make chaos` runs): the long run, figures on stdout
and in JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import shutil
import sys
import tempfile
from pathlib import Path

from .harness import Config, run, table

_ROOT = Path(__file__).resolve().parents[3]


def main() -> int:
    """Parse arguments, run, print the table, write the JSON; exit 1 on any violation."""
    parser = argparse.ArgumentParser(prog="python -m tests.system.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="replay a run (printed at start)")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--sessions", type=int, default=4, help="concurrent session loops")
    parser.add_argument("--quiesce", type=float, default=120.0, help="max seconds to settle")
    parser.add_argument(
        "--cluster", action="store_true",
        help="a 3-node JetStream cluster (R3); node kills, pauses, restarts and wipes join in",
    )
    parser.add_argument(
        "--json", type=Path, default=None,
        help="where to write the figures (bench/results/chaos[-cluster].json)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs and the broker store")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    # Broker kills make every client log its reconnects; the figures say what matters.
    logging.getLogger("libs.bus").setLevel(logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    root = Path(tempfile.mkdtemp(prefix="holdline-chaos-"))
    config = Config(
        seed=seed,
        duration_s=args.duration,
        root=root,
        session_loops=args.sessions,
        quiesce_s=args.quiesce,
        cluster=args.cluster,
    )
    out = args.json or _ROOT / "bench" / "results" / (
        "chaos-cluster.json" if args.cluster else "chaos.json"
    )
    try:
        figures = asyncio.run(run(config))
    finally:
        if args.keep:
            print(f"logs and store kept under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table(figures))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures written to {out}")
    return 1 if figures["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
