"""The figures on docs/benchmarks.md, rendered from bench/results/*.json.

    .venv/bin/python -m devtools.bench_page          # rewrite the figures on the page
    .venv/bin/python -m devtools.bench_page --check  # exit 1 if the page is stale

Only the block between the two marker comments is generated; the prose around it is written
by hand. The tables come from the same functions as `bench/results/latest.md`
(`bench.report`, `bench.cost_report`), so the page and the report cannot disagree, and a
test runs the check so the page never drifts from the results.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Final

from bench import cost_report, report

ROOT: Final = Path(__file__).resolve().parent.parent
RESULTS: Final = ROOT / "bench" / "results"
PAGE: Final = ROOT / "docs" / "benchmarks.md"
START: Final = "<!-- bench-figures:start (devtools/bench_page.py writes this block) -->"
END: Final = "<!-- bench-figures:end -->"

# The report's section headings, as this page titles them (one level down, under "Latest
# figures"). A heading not listed keeps its text.
_HEADINGS: Final = {
    "Issue 17's targets (2 cores)": "Targets on two cores",
    "Cost model: broker messages and CPU per chat turn (bench.messages)":
        "Broker messages and CPU per chat turn (bench.messages)",
}


def _retitled(lines: list[str]) -> list[str]:
    """The report's `## ` headings as `### `, renamed where this page says it otherwise."""
    return [f"### {_HEADINGS.get(line[3:], line[3:])}" if line.startswith("## ") else line
            for line in lines]


def _machine(results: Path) -> str:
    """Where the figures were taken, from the merged report's own record."""
    latest = results / "latest.json"
    if not latest.exists():
        return "Figures from `bench/results/`."
    data: dict[str, Any] = json.loads(latest.read_text())
    m = data.get("machine", {})
    return (f"Figures from `bench/results/` (the merged report `latest.json` was generated "
            f"{data.get('generated_at', '?')} on {m.get('cpus', '?')} x {m.get('cpu_model', '?')}, "
            f"Python {m.get('python', '?')}).")


def render(results: Path = RESULTS) -> str:
    """The generated block, markers included."""
    benchmarks = report.load(results)
    lines = [START, "", _machine(results)]
    lines += cost_report.targets_lines(cost_report.targets(benchmarks))
    measures = report.latency_measures(benchmarks)
    if measures:
        lines += ["", "## Latency distributions", "",
                  "| measure | p50 ms | p95 ms | p99 ms |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {report._fmt(p50)} | {'—' if p95 is None else report._fmt(p95)} "
                  f"| {report._fmt(p99)} |" for name, (p50, p95, p99) in measures]
    series = report.throughput(benchmarks)
    if series:
        lines += ["", "## Throughput vs concurrent sessions", "",
                  "| series | sessions | per second |", "|---|---:|---:|"]
        for name, points in series.items():
            lines += [f"| {name} | {s} | {report._fmt(v)} |" for s, v in points]
    lines += report.phase_table(benchmarks)
    lines += report.scale_out(benchmarks)
    lines += cost_report.cost_lines(cost_report.cost_model(benchmarks))
    lines += cost_report.delivery_lines(benchmarks)
    lines += cost_report.recovery_lines(benchmarks)
    lines += ["", END]
    return "\n".join(_retitled(lines)) + "\n"


def updated(page: str, block: str) -> str:
    """The page with its generated block replaced; the markers must be there once each."""
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END) + r"\n?", re.S)
    if len(pattern.findall(page)) != 1:
        raise ValueError(f"{PAGE.name} must hold the marker comments once: {START} ... {END}")
    return pattern.sub(lambda _: block, page)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the page's figures, or with --check report whether they are stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    fresh = updated(page, render())
    if args.check:
        if fresh != page:
            print(f"{PAGE} is stale: run .venv/bin/python -m devtools.bench_page", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
