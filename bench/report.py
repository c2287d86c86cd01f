"""Merge every benchmark's JSON into `bench/results/latest.json` and write a readable report.

    .venv/bin/python -m bench.report [--results bench/results]

Reads each `<name>.json` the benchmarks wrote (ops, coordination, acceptance, messages,
recovery, voice when present, the design changes' before/after, and the extra
`ops-s<N>.json` runs at other session counts), writes `latest.json` (all of them, keyed by
name, plus the headline figures: issue 17's targets beside what was measured, the cost model
and its floor, the recovery table) and `latest.md` with three PNG plots: latency percentiles
per measure, throughput against concurrent sessions, and the cost of one operation against
the raw broker publish rate. The cost model, targets, design-change and recovery sections
are in `bench/cost_report.py`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

from bench import cost_report
from bench.common import machine

Json = dict[str, Any]
OUTPUTS = {"latest.json", "latest.md"}
_OPS_RUN = re.compile(r"^ops(?:-s(\d+))?$")


def load(results: Path) -> dict[str, Json]:
    """Every benchmark's result file, keyed by its name (file stem)."""
    found: dict[str, Json] = {}
    for path in sorted(results.glob("*.json")):
        if path.name in OUTPUTS:
            continue
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            found[path.stem] = data
    return found


Pcts = tuple[float, float | None, float]


def _percentiles(node: Json) -> Pcts | None:
    """(p50, p95, p99) in ms from either naming the benchmarks use; p95 may be missing."""
    for suffix in ("_ms", ""):
        p50, p95, p99 = (node.get(f"p{q}{suffix}") for q in (50, 95, 99))
        if isinstance(p50, int | float) and isinstance(p99, int | float):
            return float(p50), float(p95) if isinstance(p95, int | float) else None, float(p99)
    return None


_NOISE = {"runs", "rounds", "acceptance"}
# Results with a table of their own (historic before/after figures), not latency rows.
_OWN_TABLES = {"design-changes"}


def _label(path: list[str]) -> str:
    words = [path[0]] + [p for p in path[1:] if p and p not in _NOISE]
    return " · ".join(w.replace("_", " ").removesuffix(" ms") for w in words)


def latency_measures(benchmarks: dict[str, Json]) -> list[tuple[str, Pcts]]:
    """Every percentile block found in the results, named by where it sits."""
    out: list[tuple[str, Pcts]] = []

    def walk(node: Any, path: list[str]) -> Iterator[tuple[str, Pcts]]:
        if isinstance(node, dict):
            found = _percentiles(node)
            if found is not None:
                yield _label(path), found
                return
            for key, value in node.items():
                yield from walk(value, [*path, str(key)])
        elif isinstance(node, list):
            for item in node:
                yield from walk(item, [*path, _run_name(item)])

    for name, data in benchmarks.items():
        match = _OPS_RUN.match(name)
        if (match and match.group(1)) or name in _OWN_TABLES:
            continue  # the extra session counts feed the throughput plot only
        out.extend(walk(data, [name]))
    return out


def _run_name(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    parts = []
    if "turns_per_session" in item:
        parts.append("closed loop")
    if "sessions" in item:
        parts.append(f"{item['sessions']} sessions")
    if "period_s" in item:
        parts.append(f"a turn every {item['period_s']:g} s")
    if "provider_latency_ms" in item:
        parts.append(f"provider +{item['provider_latency_ms']} ms")
    return ", ".join(parts)


def throughput(benchmarks: dict[str, Json]) -> dict[str, list[tuple[int, float]]]:
    """Series name → [(concurrent sessions, per second)]."""
    series: dict[str, list[tuple[int, float]]] = {}
    for name, data in benchmarks.items():
        if _OPS_RUN.match(name):
            for r in data.get("rounds", []):
                key = f"operations committed/s (provider +{r['provider_latency_ms']} ms)"
                series.setdefault(key, []).append((int(r["sessions"]), float(r["committed_per_s"])))
        elif name == "acceptance":
            for r in data.get("runs", []):
                series.setdefault("chat turns accepted/s", []).append(
                    (int(r["sessions"]), float(r["turns_per_s"]))
                )
    return {k: sorted(set(v)) for k, v in series.items()}


def cost(benchmarks: dict[str, Json]) -> Json:
    """Raw broker publish rates, committed operation rates and worker CPU per operation."""
    ops = benchmarks.get("ops", {})
    raw = ops.get("raw_jetstream_acked_publish", {})
    rounds = [
        {
            "sessions": r["sessions"],
            "provider_latency_ms": r["provider_latency_ms"],
            "committed_per_s": r["committed_per_s"],
            "worker_cpu_ms_per_operation": r.get("worker_cpu_ms_per_operation"),
        }
        for name, data in benchmarks.items()
        if _OPS_RUN.match(name)
        for r in data.get("rounds", [])
    ]
    rounds.sort(key=lambda r: (int(r["sessions"]), int(r["provider_latency_ms"])))
    best = max((r["committed_per_s"] for r in rounds), default=0.0)
    return {
        "raw_sequential_publish_per_s": raw.get("sequential_per_s"),
        "raw_pipelined_publish_per_s": raw.get("pipelined_per_s"),
        "rounds": rounds,
        "raw_pipelined_publishes_per_committed_operation": (
            round(raw["pipelined_per_s"] / best, 1) if raw.get("pipelined_per_s") and best else None
        ),
    }


# The turn's phases in the order a turn runs them (others follow, by name).
_PHASE_ORDER = (
    "route", "auth", "parse", "turn_handled", "claim", "received_append", "received_applied",
    "conflict_sync", "model", "admission", "admission_intent_claims", "admission_batch_append",
    "admission_operation_appends", "updates", "acceptance_text", "replied_append",
    "replied_applied", "delivered", "store_answer", "respond",
)


def phase_table(benchmarks: dict[str, Json]) -> list[str]:
    """Markdown: mean ms per turn phase, one column per acceptance run (floor, paced, closed)."""
    data = benchmarks.get("acceptance", {})
    columns: list[tuple[str, Json]] = []
    if isinstance(data.get("single"), dict):
        columns.append(("1 session, unloaded", data["single"]))
    columns += [(f"paced, {r['sessions']} sessions", r) for r in data.get("paced", [])]
    columns += [(f"closed loop, {r['sessions']} sessions", r) for r in data.get("runs", [])]
    columns = [(name, run) for name, run in columns if run.get("phases_ms")]
    if not columns:
        return []
    seen = {p for _, run in columns for p in run["phases_ms"]}
    phases = [p for p in _PHASE_ORDER if p in seen] + sorted(seen - set(_PHASE_ORDER))
    lines = [
        "",
        "## Where a turn's acceptance time goes",
        "",
        "Mean milliseconds per occurrence of each phase (`holdline_turn_phase_seconds`, "
        "`turn_handled` is `holdline_acceptance_seconds`): every phase runs inside `route`, the "
        "`admission_*` ones inside `admission`; `conflict_sync` runs only after a lost "
        "expected-sequence race. The first rows are the client's figures.",
        "",
        "| phase | " + " | ".join(name for name, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
        "| client p50 / p99 | " + " | ".join(
            f"{_fmt(run['acceptance']['p50_ms'])} / {_fmt(run['acceptance']['p99_ms'])}"
            for _, run in columns
        ) + " |",
        "| client mean outside the route | " + " | ".join(
            "—" if run.get("outside_route_mean_ms") is None
            else _fmt(float(run["outside_route_mean_ms"]))
            for _, run in columns
        ) + " |",
    ]
    for phase in phases:
        cells = [
            _fmt(float(run["phases_ms"][phase]["mean_ms"])) if phase in run["phases_ms"] else "—"
            for _, run in columns
        ]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return lines


def plot_latency(measures: list[tuple[str, Pcts]], out: Path) -> None:
    """Horizontal p50/p95/p99 bars per measure, log scale."""
    height = max(3.0, 0.42 * len(measures) + 1.2)
    fig, ax = plt.subplots(figsize=(11, height))
    names = [m[0] for m in measures]
    ys = range(len(measures))
    for offset, (index, label, color) in zip(
        (-0.27, 0.0, 0.27),
        ((0, "p50", "#4c9be8"), (1, "p95", "#f0a030"), (2, "p99", "#d9534f")),
        strict=True,
    ):
        values = [m[1][index] for m in measures]
        ax.barh(
            [y + offset for y, v in zip(ys, values, strict=True) if v is not None],
            [max(v, 0.001) for v in values if v is not None],
            height=0.26, label=label, color=color,
        )
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    ax.set_title("Latency distributions: p50 / p95 / p99 per measure")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_throughput(series: dict[str, list[tuple[int, float]]], out: Path) -> None:
    """Per-second rates against the number of concurrent sessions."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, points in series.items():
        xs, ys = zip(*points, strict=True) if points else ((), ())
        ax.plot(xs, ys, marker="o", label=name)
        for x, y in points:
            ax.annotate(f"{y:.0f}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("per second")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs concurrent sessions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_cost(figures: Json, out: Path) -> None:
    """Left: raw broker publish rates beside committed operation rates. Right: CPU per op."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), width_ratios=(3, 2))
    labels: list[str] = []
    values: list[float] = []
    colors: list[str] = []
    for key, label in (
        ("raw_pipelined_publish_per_s", "raw publish\n(pipelined)"),
        ("raw_sequential_publish_per_s", "raw publish\n(sequential)"),
    ):
        if figures.get(key):
            labels.append(label)
            values.append(float(figures[key]))
            colors.append("#999999")
    for r in figures["rounds"]:
        labels.append(f"committed ops\n{r['sessions']} sessions\n+{r['provider_latency_ms']} ms")
        values.append(float(r["committed_per_s"]))
        colors.append("#4c9be8")
    left.bar(range(len(values)), values, color=colors)
    left.set_xticks(range(len(values)), labels, fontsize=7)
    left.set_yscale("log")
    left.set_ylabel("per second (log scale)")
    ratio = figures.get("raw_pipelined_publishes_per_committed_operation")
    left.set_title(
        "Broker publish rate vs committed operations"
        + (f"\n(raw broker rate = {ratio}x the committed rate)" if ratio else "")
    )
    for x, v in enumerate(values):
        left.annotate(f"{v:,.0f}", (x, v), textcoords="offset points", xytext=(0, 3),
                      ha="center", fontsize=7)
    cpu = [r for r in figures["rounds"] if r.get("worker_cpu_ms_per_operation") is not None]
    right.bar(
        range(len(cpu)), [float(r["worker_cpu_ms_per_operation"]) for r in cpu], color="#5cb85c"
    )
    right.set_xticks(
        range(len(cpu)),
        [f"{r['sessions']} sessions\n+{r['provider_latency_ms']} ms" for r in cpu],
        fontsize=7,
    )
    right.set_ylabel("worker CPU ms per committed operation")
    right.set_title("Cost per operation (worker CPU)")
    for x, r in enumerate(cpu):
        right.annotate(f"{r['worker_cpu_ms_per_operation']:.2f}",
                       (x, r["worker_cpu_ms_per_operation"]), textcoords="offset points",
                       xytext=(0, 3), ha="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _fmt(value: float) -> str:
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def markdown(latest: Json, measures: list[tuple[str, Pcts]]) -> str:
    """The human report."""
    m = latest["machine"]
    lines = [
        "# holdline benchmark report",
        "",
        f"Generated {latest['generated_at']} on {m['cpus']} x {m['cpu_model']} "
        f"(Python {m['python']}). Reproduce with `make bench` (or `.venv/bin/python -m bench`);"
        " every figure below is in `latest.json`.",
        *cost_report.targets_lines(latest["targets"]),
        "",
        "## Latency distributions",
        "",
        "![latency percentiles](latency.png)",
        "",
        "| measure | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {_fmt(p50)} | {'—' if p95 is None else _fmt(p95)} | {_fmt(p99)} |"
              for name, (p50, p95, p99) in measures]
    lines += [
        "",
        "## Throughput vs concurrent sessions",
        "",
        "![throughput](throughput.png)",
        "",
        "| series | sessions | per second |",
        "|---|---:|---:|",
    ]
    for name, points in latest["throughput"].items():
        lines += [f"| {name} | {s} | {_fmt(v)} |" for s, v in points]
    c = latest["cost"]
    lines += [
        "",
        "## Cost per operation vs raw broker rate",
        "",
        "![cost](cost.png)",
        "",
        f"Raw JetStream acknowledged publishes: {c['raw_pipelined_publish_per_s']}/s pipelined, "
        f"{c['raw_sequential_publish_per_s']}/s sequential. The broker alone acknowledges "
        f"{c['raw_pipelined_publishes_per_committed_operation']}x more publishes per second "
        "than the runtime commits operations: one operation is several acked appends (admitted, "
        "started, committed carrying its attempt, and its share of the batch and delivery "
        "events), each "
        "with a dedup id and an expected sequence, plus the consumers' reads and the provider's "
        "HTTP round trip.",
        "",
        "| sessions | provider latency ms | committed/s | worker CPU ms/op |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['sessions']} | {r['provider_latency_ms']} | {_fmt(float(r['committed_per_s']))} "
        f"| {r['worker_cpu_ms_per_operation']} |"
        for r in c["rounds"]
    ]
    lines += phase_table(latest["benchmarks"])
    lines += scale_out(latest["benchmarks"])
    lines += cost_report.cost_lines(latest["cost_model"])
    lines += cost_report.delivery_lines(latest["benchmarks"])
    lines += cost_report.design_change_lines(latest["benchmarks"])
    lines += cost_report.recovery_lines(latest["benchmarks"])
    lines += ["", "## Benchmarks included", ""]
    lines += [f"- `{name}.json`" for name in latest["benchmarks"]]
    return "\n".join(lines) + "\n"


def scale_out(benchmarks: dict[str, Json]) -> list[str]:
    """Single node next to the 3-node cluster, and node kill → closing (bench/cluster.py)."""
    found = benchmarks.get("cluster")
    if not found or "single_node" not in found or "cluster_r3" not in found:
        return []
    lines = [
        "",
        "## Scale-out: single node vs 3-node cluster (R3)",
        "",
        "| topology | operations committed/s | acceptance p50 ms | acceptance p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for key, name in (("single_node", "single node"), ("cluster_r3", "3 nodes, R3")):
        row = found[key]
        acc = row["acceptance"]
        lines.append(f"| {name} | {_fmt(float(row['operations_committed_per_s']))} "
                     f"| {_fmt(float(acc['p50_ms']))} | {_fmt(float(acc['p99_ms']))} |")
    kills = found.get("node_kill_to_closing")
    if kills:
        lines += [
            "",
            f"Node `kill -9` → closing of every batch in flight (provider latency "
            f"{kills['provider_latency_ms']} ms, target {kills['target_s']} s):",
            "",
            "| node killed | batches | p50 s | max s |",
            "|---|---:|---:|---:|",
        ]
        for key, name in (("operations_leader_killed", "operations stream leader"),
                          ("other_node_killed", "another node")):
            p = kills.get(key, {})
            if p.get("n"):
                lines.append(f"| {name} | {p['n']} | {p['p50_ms'] / 1000:.1f} "
                             f"| {p['max_ms'] / 1000:.1f} |")
    return lines


def build(results: Path) -> Json:
    """Write latest.json, latest.md and the plots; return latest.json's content."""
    benchmarks = load(results)
    measures = latency_measures(benchmarks)
    series = throughput(benchmarks)
    figures = cost(benchmarks)
    latest: Json = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "benchmarks": benchmarks,
        "latency_ms": {name: dict(zip(("p50", "p95", "p99"), v, strict=True))
                       for name, v in measures},
        "throughput": {k: [list(p) for p in v] for k, v in series.items()},
        "cost": figures,
        "cost_model": cost_report.cost_model(benchmarks),
        "targets": cost_report.targets(benchmarks),
        "recovery": cost_report.recovery_rows(benchmarks),
    }
    # A plot needs something to draw (a log axis of nothing fails): none for empty results.
    if measures:
        plot_latency(measures, results / "latency.png")
    if series:
        plot_throughput(series, results / "throughput.png")
    if figures["rounds"]:
        plot_cost(figures, results / "cost.png")
    (results / "latest.json").write_text(json.dumps(latest, indent=2) + "\n")
    (results / "latest.md").write_text(markdown(latest, measures))
    return latest


def main() -> None:
    """Build the report from whatever results exist."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default="bench/results")
    args = parser.parse_args()
    results = Path(args.results)
    build(results)
    print(f"wrote {results / 'latest.json'}, {results / 'latest.md'} and 3 plots")


if __name__ == "__main__":
    main()
