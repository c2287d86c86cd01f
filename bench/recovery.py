"""Recovery: `kill -9` of each kind of process mid-batch, time to the batch's closing.

`.venv/bin/python -m bench.recovery [--trials N]` (`make bench-recovery`) runs every service
once on one broker with the production timings (nothing shortened: ack wait, worker lease,
heartbeats as shipped), two workers, and a provider that holds every effect 1.5 s. Per trial
a chat turn admits a batch of two accesses; once both attempts have started one process is
killed with SIGKILL (broker, worker, coordinator, policy, surface or provider) and, except
for the worker whose twin carries on, started again at once as a supervisor does. Measured:
the time from the kill to the closing's delivery, minus the provider latency (what the
latency alone explains). p50/p99 per kind go to `bench/results/recovery.json`; the target is
3 s at p99. Trials: `--trials` or `HOLDLINE_BENCH_RECOVERY_TRIALS` (3). Only some kinds:
`--kinds worker,policy` or `HOLDLINE_BENCH_RECOVERY_KINDS`; their figures replace those kinds'
in the stored JSON, the others' are kept (each kind records its own trials and time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, percentiles_ms
from libs.config import env_int
from testkit.processes import Broker
from testkit.recovery import KINDS, kill_mid_batch, ledger_effects, recovery_stack

RESULTS = Path(__file__).parent / "results" / "recovery.json"
LATENCY_MS = 1500
TARGET_S = 3.0


async def _trials(
    stack: Any, broker: Broker, trials: int, kinds: list[str]
) -> dict[str, Any]:
    found: dict[str, list[float]] = {kind: [] for kind in kinds}
    extra_effects = 0
    async with httpx.AsyncClient(base_url=stack.url, timeout=30.0) as client:
        for _ in range(trials):
            for kind in kinds:
                trial = await kill_mid_batch(stack, broker, client, kind, latency_ms=LATENCY_MS)
                found[kind].append(max(0.0, trial.beyond_latency_s))
                counts = await ledger_effects(stack, trial.resources)
                extra_effects += sum(abs(n - 1) for n in counts.values())
                print(f"kill -9 {kind}: closing {trial.kill_to_closing_s:.2f} s after the kill "
                      f"({trial.beyond_latency_s:.2f} s beyond the latency)", flush=True)
                # Let the restarted process settle before the next kill.
                await asyncio.sleep(1.0)
    at = datetime.now(UTC).isoformat()
    per_kind = {
        kind: {**percentiles_ms(values), "trials": trials, "at": at}
        for kind, values in found.items()
    }
    return {"per_kind": per_kind, "effects_not_exactly_one": extra_effects}


def main() -> None:
    """Run the trials, write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int,
                        default=env_int("HOLDLINE_BENCH_RECOVERY_TRIALS", 3),
                        help="kills per kind of process")
    parser.add_argument("--kinds", default=os.environ.get("HOLDLINE_BENCH_RECOVERY_KINDS", ""),
                        help="comma-separated kinds to kill (default: all)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k] or list(KINDS)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {sorted(KINDS)}")
    result: dict[str, Any] = {
        "benchmark": "recovery",
        "what": "kill -9 of one process mid-batch (provider latency 1.5 s, default timings); "
                "seconds from the kill to the closing beyond the provider latency",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "provider_latency_ms": LATENCY_MS,
        "target_p99_s": TARGET_S,
        "trials_per_kind": args.trials,
    }
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="holdline-bench-recovery-") as tmp:
        root = Path(tmp)
        broker = Broker(store=root / "nats")
        broker.start()
        stack = recovery_stack(broker, root)
        stack.env["HOLDLINE_LOG_LEVEL"] = "WARNING"
        try:
            stack.start()
            result.update(asyncio.run(_trials(stack, broker, args.trials, kinds)))
        finally:
            stack.stop()
            broker.stop()
    result["load_average_1m"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    result["wall_s"] = round(time.monotonic() - started, 1)
    if set(kinds) != set(KINDS) and RESULTS.exists():
        # A partial run: keep the other kinds' figures from the stored result.
        stored = json.loads(RESULTS.read_text())
        kept = {
            kind: {
                "trials": stored.get("trials_per_kind"),
                "at": stored.get("at"),
                "load_average_1m": stored.get("load_average_1m"),
                **figures,
            }
            for kind, figures in stored.get("per_kind", {}).items()
        }
        for figures in result["per_kind"].values():
            figures["load_average_1m"] = result["load_average_1m"]
        merged = {**kept, **result["per_kind"]}
        result["trials_per_kind"] = None
        result["per_kind"] = {kind: merged[kind] for kind in KINDS if kind in merged}
        result["kinds_run"] = kinds
    result["worst_p99_s"] = round(
        max(p.get("p99_ms", 0.0) for p in result["per_kind"].values()) / 1000, 3
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
