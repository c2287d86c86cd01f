"""Run every benchmark in one go, with a progress bar, then write the report.

    .venv/bin/python -m bench [--quick] [--only ops,acceptance] [--report-only]

Each benchmark runs as its own process (each starts its own broker and services) and writes
its JSON under `bench/results/`; its output goes to `bench/results/logs/<step>.log` so the
bar stays readable. The operation plane also runs at two smaller session counts, for the
throughput-vs-sessions plot. The cost model (`bench.messages`: broker messages and CPU per
turn and per operation, sequential and under 30 paced sessions) runs last of the stack
benchmarks. A `bench/voice.py`, when present, runs too. Then
`bench.report` merges everything into `latest.json` and `latest.md` with plots, and
`devtools.bench_page` renders the figures into docs/benchmarks.md, so the page shows this run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from bench import report
from devtools import bench_page

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Step:
    """One benchmark process and roughly how long it takes (weights the bar)."""

    name: str
    module: str
    args: tuple[str, ...]
    estimate_s: float


def steps(quick: bool) -> list[Step]:
    """The full run, or a small one that still exercises every benchmark."""
    if quick:
        found = [
            Step("ops", "bench.ops", ("--operations", "200", "--sessions", "20"), 25),
            Step("ops-s10", "bench.ops", ("--operations", "100", "--sessions", "10",
                                          "--out", "bench/results/ops-s10.json"), 20),
            Step("coordination", "bench.coordination", ("--sessions", "20"), 15),
            Step(
                "acceptance",
                "bench.acceptance",
                (
                    "--sessions", "10", "20", "--turns", "2", "--paced-sessions", "10",
                    "--paced-turns", "3", "--period", "1", "--single-turns", "10",
                ),
                30,
            ),
            Step("agent_api", "bench.agent_api", ("--single-calls", "10", "--sessions", "10",
                                                  "--paced-calls", "2", "--closed-calls", "2"),
                 25),
            Step("mcp", "bench.mcp", ("--single-calls", "10", "--sessions", "10",
                                      "--paced-calls", "2"), 25),
            Step("cluster", "bench.cluster", ("--sessions", "10", "--turns", "3",
                                              "--operations", "200", "--kill-trials", "1"), 90),
            Step("recovery", "bench.recovery", ("--trials", "1"), 60),
            Step("messages", "bench.messages", ("--turns", "10", "--sessions", "1", "5",
                                                "--paced-turns", "3", "--period", "1"), 40),
            Step("delivery", "bench.delivery", ("--deliveries", "400", "--rounds", "1"), 15),
        ]
    else:
        found = [
            Step("ops", "bench.ops", (), 60),
            Step("ops-s50", "bench.ops", ("--operations", "1000", "--sessions", "50",
                                          "--out", "bench/results/ops-s50.json"), 35),
            Step("ops-s100", "bench.ops", ("--operations", "1000", "--sessions", "100",
                                           "--out", "bench/results/ops-s100.json"), 40),
            Step("coordination", "bench.coordination", (), 25),
            Step("acceptance", "bench.acceptance", ("--sessions", "50", "100", "200"), 140),
            Step("agent_api", "bench.agent_api", (), 60),
            Step("mcp", "bench.mcp", (), 60),
            Step("cluster", "bench.cluster", (), 240),
            Step("recovery", "bench.recovery", (), 150),
            # The cost model: 40 sequential turns, then 30 sessions paced a turn every 3 s.
            Step("messages", "bench.messages", ("--turns", "40", "--sessions", "1", "30"), 90),
            # What one delivery costs a consumer: the durable consumer against the floor.
            Step("delivery", "bench.delivery", (), 45),
        ]
    if (ROOT / "bench" / "voice.py").exists():
        voice_args = (
            ("--trials", "5", "--blips", "5", "--stop-trials", "3", "--stimulus-trials", "1")
            if quick else ()
        )
        found.append(Step("voice", "bench.voice", voice_args, 60 if quick else 600))
    if (ROOT / "bench" / "speech.py").exists():
        # The offline recognizer on a telephone speech corpus made in the run.
        found.append(Step("speech", "bench.speech", (), 180))
    return found


def run(step: Step, bar: tqdm, logs: Path) -> int:
    """Run one benchmark; advance the bar with its estimate while it runs."""
    log_path = logs / f"{step.name}.log"
    started = time.monotonic()
    advanced = 0.0
    with log_path.open("w") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own modules, with the same interpreter
            [sys.executable, "-m", step.module, *step.args],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )
        while proc.poll() is None:
            time.sleep(0.5)
            elapsed = time.monotonic() - started
            # Never let one step eat the next one's share: stop at 95 % of its estimate.
            target = min(elapsed, step.estimate_s * 0.95)
            if target > advanced:
                bar.update(target - advanced)
                advanced = target
            bar.set_postfix_str(f"{step.name} {elapsed:.0f}s")
    bar.update(step.estimate_s - advanced)
    return proc.returncode


def main() -> None:
    """Run the benchmarks, then the report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", default="", help="comma-separated step names to run")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    logs = RESULTS / "logs"
    logs.mkdir(exist_ok=True)
    chosen = [] if args.report_only else steps(args.quick)
    if args.only:
        wanted = {name.strip() for name in args.only.split(",")}
        chosen = [s for s in chosen if s.name in wanted]
    failed: list[str] = []
    total = sum(s.estimate_s for s in chosen)
    with tqdm(total=total, unit="s", desc="benchmarks", dynamic_ncols=True,
              bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} est. s [{elapsed}{postfix}]") as bar:
        for step in chosen:
            if run(step, bar, logs) != 0:
                failed.append(step.name)
                tqdm.write(f"{step.name} failed: see {logs / (step.name + '.log')}")
    latest = report.build(RESULTS)
    print(f"wrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'} "
          f"({len(latest['benchmarks'])} benchmarks, {len(latest['latency_ms'])} latency measures)")
    bench_page.main([])
    print(f"wrote the figures of {bench_page.PAGE}")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
