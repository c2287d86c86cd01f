"""Builds the Grafana dashboards of holdline as JSON, from this one file.

    python deploy/grafana/build.py           # rewrite deploy/grafana/dashboards/*.json
    python deploy/grafana/build.py --check   # exit 1 if a checked-in file is out of date

Every panel queries only the metric families the services export (`libs/metrics.py` and
`demo/sandbox_provider/metrics.py`); `tests/deploy/test_dashboards.py` checks that, and
that the checked-in JSON is what this script writes. Edit here, run it, commit both.

Each dashboard has a fixed uid, so links and bookmarks survive re-provisioning. Queries
take the `$datasource` and `$namespace` variables; `namespace=~".*"` also matches series
without the label, so the same dashboards work for `make run` scraped by a static config.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent / "dashboards"

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'
TOOL = 'tool=~"$tool"'
WINDOW = "5m"
QUANTILES: tuple[tuple[str, str], ...] = (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))
GRID_WIDTH = 24

Json = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """A panel before layout: kind, title, queries and display options."""

    title: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: tuple[tuple[float, str], ...] = ()
    stack: bool = False


@dataclass(frozen=True)
class Row:
    """A collapsible row header; the panels after it belong to it."""

    title: str


@dataclass
class Dashboard:
    """A dashboard before rendering."""

    uid: str
    title: str
    description: str
    items: list[Panel | Row] = field(default_factory=list)
    tool_variable: bool = False


# ---------------------------------------------------------------- query helpers


def sel(metric: str, *matchers: str) -> str:
    """`metric{namespace=~"$namespace", ...}`."""
    return f"{metric}{{{', '.join((NS, *matchers))}}}"


def rate(metric: str, *matchers: str, by: str = "") -> str:
    """Per-second rate summed over instances, optionally grouped."""
    group = f" by ({by})" if by else ""
    return f"sum{group} (rate({sel(metric, *matchers)}[{WINDOW}]))"


def increase(metric: str, *matchers: str, by: str = "") -> str:
    """Count over the dashboard's time range."""
    group = f" by ({by})" if by else ""
    return f"sum{group} (increase({sel(metric, *matchers)}[$__range]))"


def quantile(q: str, histogram: str, *matchers: str, by: str = "") -> str:
    """`histogram_quantile` over the rate of a histogram's buckets."""
    labels = ", ".join(part for part in ("le", by) if part)
    bucket = f"rate({sel(histogram + '_bucket', *matchers)}[{WINDOW}])"
    return f"histogram_quantile({q}, sum by ({labels}) ({bucket}))"


def quantiles(histogram: str, *matchers: str) -> tuple[Target, ...]:
    """p50, p95 and p99 of one histogram."""
    return tuple(Target(quantile(q, histogram, *matchers), name) for q, name in QUANTILES)


def ratio(numerator: str, denominator: str) -> str:
    """A share that shows no data (not a division by zero) while nothing happens."""
    return f"({numerator} or vector(0)) / ({denominator} > 0)"


def latency(title: str, histogram: str, description: str, *matchers: str) -> Panel:
    """A p50/p95/p99 time series in seconds."""
    return Panel(
        title=title, targets=quantiles(histogram, *matchers), unit="s", description=description
    )


def one(expr: str, legend: str) -> tuple[Target, ...]:
    """A single-query target list."""
    return (Target(expr, legend),)


# Stat thresholds: green until the value reaches the next step.
ZERO_IS_GOOD: tuple[tuple[float, str], ...] = ((1, "red"),)


# ---------------------------------------------------------------- the dashboards


def latency_dashboard() -> Dashboard:
    """(a) Conversation latency: how fast the system answers, interrupts and delivers."""
    d = Dashboard(
        uid="holdline-latency",
        title="holdline · conversation latency",
        description=(
            "Acceptance, barge-in and delivery latencies (DESIGN §9). Quantiles are computed "
            f"from histogram buckets over {WINDOW}."
        ),
    )
    d.items += [
        Row("At a glance"),
        Panel(
            "Acceptance p95",
            one(quantile("0.95", "holdline_acceptance_seconds"), "p95"),
            kind="stat",
            unit="s",
            width=6,
            height=4,
            thresholds=((0.5, "orange"), (1.0, "red")),
            description="Request to acceptance of a turn: the user hears 'I'm on it'.",
        ),
        Panel(
            "Barge-in p95",
            one(quantile("0.95", "holdline_barge_in_seconds"), "p95"),
            kind="stat",
            unit="s",
            width=6,
            height=4,
            thresholds=((0.2, "orange"), (0.5, "red")),
            description="First voiced frame of a barge-in to the clear sent to the channel.",
        ),
        Panel(
            "Delivery ready → sent p95",
            one(quantile("0.95", "holdline_delivery_ready_to_sent_seconds"), "p95"),
            kind="stat",
            unit="s",
            width=6,
            height=4,
            thresholds=((2.0, "orange"), (10.0, "red")),
            description="A closing message ready to it being written to the channel.",
        ),
        Panel(
            "Turns accepted",
            one(rate("holdline_acceptance_seconds_count"), "turns/s"),
            kind="stat",
            unit="reqps",
            width=6,
            height=4,
            description="Accepted turns per second, all channels.",
        ),
        Row("Turn"),
        latency(
            "Acceptance (request → acceptance)",
            "holdline_acceptance_seconds",
            "Time from a turn request to its acceptance; never waits for operations.",
        ),
        Panel(
            "Turn phases p50 (HOLDLINE_TURN_PHASES=1)",
            one(quantile("0.5", "holdline_turn_phase_seconds", by="phase"), "{{phase}}"),
            unit="s",
            description=(
                "Where a turn's acceptance time goes: claim, appends, model, admission, reply. "
                "Empty unless the surface runs with HOLDLINE_TURN_PHASES=1."
            ),
        ),
        latency(
            "Speech stop → acceptance audio",
            "holdline_speech_stop_to_acceptance_audio_seconds",
            "End of user speech to the first byte of acceptance audio (voice).",
        ),
        latency(
            "Barge-in (voiced frame → clear)",
            "holdline_barge_in_seconds",
            "How fast model output, TTS and queued audio stop when the user talks over them.",
        ),
        latency(
            "Generated → played gap",
            "holdline_generated_to_played_gap_seconds",
            "Audio generated to its playback confirmed by a mark.",
        ),
        Row("Delivery"),
        latency(
            "Operation complete → delivery ready",
            "holdline_operation_complete_to_delivery_ready_seconds",
            "Last member of a batch terminal to its closing delivery being ready.",
        ),
        latency(
            "Delivery ready → decision",
            "holdline_delivery_ready_to_decision_seconds",
            "delivery.ready to the delivery-policy's decision.",
        ),
        Panel(
            "Delivery ready → decision p95 by decision",
            one(
                quantile("0.95", "holdline_delivery_ready_to_decision_seconds", by="decision"),
                "{{decision}}",
            ),
            unit="s",
            description="Which decisions take long (waiting for quiet is expected to).",
        ),
        latency(
            "Delivery ready → sent",
            "holdline_delivery_ready_to_sent_seconds",
            "delivery.ready to delivery.sent, including waiting for a quiet window.",
        ),
        latency(
            "Delivery ready → first audio",
            "holdline_delivery_ready_to_first_audio_seconds",
            "delivery.ready to the first audio byte of the delivery (voice).",
        ),
        Panel(
            "Deliveries sent by mode",
            one(rate("holdline_deliveries_total", by="mode"), "{{mode}}"),
            unit="ops",
            stack=True,
            description="proactive, next_turn or interrupt.",
        ),
    ]
    return d


def operations_dashboard() -> Dashboard:
    """(b) Operations: throughput, failures, recovery and queueing."""
    d = Dashboard(
        uid="holdline-operations",
        title="holdline · operations",
        description=(
            "Side-effecting operations from admission to a terminal state: throughput, "
            "retries, UNKNOWN, timeouts, dead letters, backpressure and timings."
        ),
        tool_variable=True,
    )
    d.items += [
        Row("At a glance"),
        Panel(
            "Admitted",
            one(rate("holdline_operations_admitted_total", TOOL), "admitted/s"),
            kind="stat",
            unit="ops",
            width=4,
            height=4,
        ),
        Panel(
            "Committed share",
            one(
                ratio(
                    rate("holdline_operations_terminal_total", TOOL, 'status="committed"'),
                    rate("holdline_operations_terminal_total", TOOL),
                ),
                "committed",
            ),
            kind="stat",
            unit="percentunit",
            width=4,
            height=4,
            description="Committed among operations that reached a terminal state.",
        ),
        Panel(
            "UNKNOWN (range)",
            one(increase("holdline_operation_unknown_total", TOOL), "unknown"),
            kind="stat",
            width=4,
            height=4,
            thresholds=ZERO_IS_GOOD,
            description="Operations whose answer was lost after sending; reconciled first.",
        ),
        Panel(
            "Dead letters (range)",
            one(increase("holdline_dead_letters_total"), "dlq"),
            kind="stat",
            width=4,
            height=4,
            thresholds=ZERO_IS_GOOD,
        ),
        Panel(
            "Backpressure rejections (range)",
            one(
                increase("holdline_operations_rejected_total", TOOL, 'reason="backpressure"'),
                "backpressure",
            ),
            kind="stat",
            width=4,
            height=4,
            thresholds=ZERO_IS_GOOD,
        ),
        Panel(
            "Work pending",
            one(f"sum (max by (consumer) ({sel('holdline_consumer_pending')}))", "pending"),
            kind="stat",
            width=4,
            height=4,
            description="Messages not yet handled, summed over consumers.",
        ),
        Row("Throughput"),
        Panel(
            "Terminal operations by status",
            one(rate("holdline_operations_terminal_total", TOOL, by="status"), "{{status}}"),
            unit="ops",
            stack=True,
        ),
        Panel(
            "Terminal operations by tool",
            one(rate("holdline_operations_terminal_total", TOOL, by="tool"), "{{tool}}"),
            unit="ops",
            stack=True,
        ),
        Panel(
            "Admitted vs rejected",
            (
                Target(rate("holdline_operations_admitted_total", TOOL), "admitted"),
                Target(
                    rate("holdline_operations_rejected_total", TOOL, by="reason"),
                    "rejected: {{reason}}",
                ),
            ),
            unit="ops",
        ),
        Panel(
            "Backpressure rejections by tool",
            one(
                rate(
                    "holdline_operations_rejected_total", TOOL, 'reason="backpressure"', by="tool"
                ),
                "{{tool}}",
            ),
            unit="ops",
            description="Admission refused because a concurrency limit was full.",
        ),
        Row("Failures and recovery"),
        Panel(
            "Retries by tool",
            one(rate("holdline_operation_retries_total", TOOL, by="tool"), "{{tool}}"),
            unit="ops",
        ),
        Panel(
            "Timeouts by tool and phase",
            one(
                rate("holdline_operation_timeouts_total", TOOL, by="tool, phase"),
                "{{tool}} {{phase}}",
            ),
            unit="ops",
        ),
        Panel(
            "UNKNOWN by tool",
            one(rate("holdline_operation_unknown_total", TOOL, by="tool"), "{{tool}}"),
            unit="ops",
            description="A mutation was sent and its answer lost; never re-sent blindly.",
        ),
        Panel(
            "Dead letters by stream and reason",
            one(rate("holdline_dead_letters_total", by="stream, reason"), "{{stream}} {{reason}}"),
            unit="ops",
        ),
        Row("Timings"),
        latency(
            "Accept → start",
            "holdline_operation_accept_to_start_seconds",
            "operation.admitted to operation.started: queueing before the first attempt.",
            TOOL,
        ),
        Panel(
            "Accept → start p95 by tool",
            one(
                quantile("0.95", "holdline_operation_accept_to_start_seconds", TOOL, by="tool"),
                "{{tool}}",
            ),
            unit="s",
        ),
        latency(
            "Duration (start → terminal)",
            "holdline_operation_duration_seconds",
            "operation.started to a terminal state, retries included.",
            TOOL,
        ),
        Panel(
            "Duration p95 by tool and status",
            one(
                quantile("0.95", "holdline_operation_duration_seconds", TOOL, by="tool, status"),
                "{{tool}} {{status}}",
            ),
            unit="s",
        ),
        Row("Broker and consumers"),
        Panel(
            "Consumer pending",
            one(f"max by (consumer) ({sel('holdline_consumer_pending')})", "{{consumer}}"),
            description="Messages a durable consumer has not handled yet (lag).",
        ),
        Panel(
            "Events appended by stream",
            one(rate("holdline_events_published_total", by="stream"), "{{stream}}"),
            unit="ops",
            stack=True,
        ),
        Row("System of record (sandbox provider)"),
        Panel(
            "Provider requests by outcome",
            one(rate("holdline_sandbox_requests_total", by="outcome"), "{{outcome}}"),
            unit="reqps",
            stack=True,
        ),
        Panel(
            "Provider latency p95 by kind",
            one(quantile("0.95", "holdline_sandbox_request_seconds", by="kind"), "{{kind}}"),
            unit="s",
            description="Injected latency and hangs included.",
        ),
        Panel(
            "Provider callbacks by outcome",
            one(rate("holdline_sandbox_callbacks_total", by="outcome"), "{{outcome}}"),
            unit="ops",
        ),
        Row("Telephony"),
        Panel(
            "Calls by outcome",
            one(rate("holdline_telephony_calls_total", by="outcome"), "{{outcome}}"),
            unit="ops",
            stack=True,
        ),
        Panel(
            "Media Streams frames rejected by reason",
            one(rate("holdline_telephony_frames_rejected_total", by="reason"), "{{reason}}"),
            unit="ops",
            description="Garbage JSON, bad base64, unknown events: refused, recorded, call kept.",
        ),
    ]
    return d


def truthfulness_dashboard() -> Dashboard:
    """(c) Truthfulness: the rules of DESIGN §5 as numbers that should stay at zero."""
    d = Dashboard(
        uid="holdline-truthfulness",
        title="holdline · truthfulness",
        description=(
            "Did we do anything twice, say anything twice, say something stale, or lose a "
            "result? Counters here should stay flat; any increase deserves a look at the "
            "session timeline."
        ),
    )
    d.items += [
        Row("Must stay at zero"),
        Panel(
            "Duplicate side effects (range)",
            one(increase("holdline_duplicate_side_effects_total"), "duplicates"),
            kind="stat",
            width=8,
            height=4,
            thresholds=ZERO_IS_GOOD,
            description=(
                "Side effects beyond the first for one intent (rule 2), as the system of "
                "record's effect ledger counts them per idempotency key."
            ),
        ),
        Panel(
            "Duplicate deliveries refused (range)",
            one(increase("holdline_duplicate_deliveries_total"), "duplicates"),
            kind="stat",
            width=8,
            height=4,
            description="A second final delivery for a batch, refused (rule 3).",
        ),
        Panel(
            "Next-turn share",
            one(
                ratio(rate("holdline_next_turn_resyncs_total"), rate("holdline_deliveries_total")),
                "next turn",
            ),
            kind="stat",
            unit="percentunit",
            width=8,
            height=4,
            thresholds=((0.2, "orange"), (0.5, "red")),
            description="Deliveries that found no proactive window and waited for the next turn.",
        ),
        Row("Effects and deliveries"),
        Panel(
            "Duplicate side effects",
            one(
                rate("holdline_duplicate_side_effects_total", by="kind"),
                "duplicate effects: {{kind}}",
            ),
            unit="ops",
        ),
        Panel(
            "Real effects vs committed operations",
            (
                Target(rate("holdline_sandbox_effects_total", by="kind"), "effects: {{kind}}"),
                Target(
                    rate("holdline_operations_terminal_total", 'status="committed"'),
                    "committed operations",
                ),
            ),
            unit="ops",
            description=(
                "The sandbox ledger's real effects next to committed operations: effects "
                "above commits mean something ran twice."
            ),
        ),
        Panel(
            "Duplicate and stale deliveries",
            (
                Target(rate("holdline_duplicate_deliveries_total"), "duplicate (refused)"),
                Target(rate("holdline_stale_deliveries_total"), "stale (suppressed/replaced)"),
            ),
            unit="ops",
        ),
        Panel(
            "Next-turn resync share",
            one(
                ratio(rate("holdline_next_turn_resyncs_total"), rate("holdline_deliveries_total")),
                "next-turn share",
            ),
            unit="percentunit",
            description="holdline_next_turn_resyncs_total / holdline_deliveries_total.",
        ),
        Panel(
            "Deliveries by mode and channel",
            one(rate("holdline_deliveries_total", by="mode, channel"), "{{mode}} {{channel}}"),
            unit="ops",
            stack=True,
        ),
        Panel(
            "Cancelled unheard audio",
            one(rate("holdline_cancelled_unheard_audio_seconds_sum"), "unheard audio"),
            unit="s",
            description=(
                "Seconds of generated audio per second kept out of history because nobody "
                "heard it (rule 6)."
            ),
        ),
        Row("Cancellation, compensation, handoff"),
        Panel(
            "Cancellations requested vs confirmed",
            (
                Target(
                    rate("holdline_cancellations_requested_total", by="tool"), "requested {{tool}}"
                ),
                Target(
                    rate("holdline_cancellations_confirmed_total", by="tool"), "confirmed {{tool}}"
                ),
            ),
            unit="ops",
            description="Only an explicit request cancels business; a barge-in never does.",
        ),
        Panel(
            "Cancellations confirmed share",
            one(
                ratio(
                    rate("holdline_cancellations_confirmed_total"),
                    rate("holdline_cancellations_requested_total"),
                ),
                "confirmed / requested",
            ),
            unit="percentunit",
            description="Below 1 when operations committed before the cancel arrived.",
        ),
        Panel(
            "Compensations by tool",
            one(rate("holdline_compensations_total", by="tool"), "{{tool}}"),
            unit="ops",
            description="Linked compensation operations admitted after a commit (undo).",
        ),
        Panel(
            "Handoffs with pending operations",
            one(rate("holdline_handoffs_with_pending_operations_total"), "handoffs"),
            unit="ops",
            description="Handoffs while operations were still open: their results must survive.",
        ),
    ]
    return d


DASHBOARDS = (latency_dashboard, operations_dashboard, truthfulness_dashboard)


# ---------------------------------------------------------------- rendering


def _thresholds(steps: tuple[tuple[float, str], ...]) -> Json:
    return {
        "mode": "absolute",
        "steps": [
            {"color": "green", "value": None},
            *({"color": color, "value": value} for value, color in steps),
        ],
    }


def _panel(panel: Panel, panel_id: int, grid: Json) -> Json:
    targets = [
        {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": target.expr,
            "legendFormat": target.legend,
            "range": True,
            "refId": chr(ord("A") + index),
        }
        for index, target in enumerate(panel.targets)
    ]
    defaults: Json = {"unit": panel.unit, "thresholds": _thresholds(panel.thresholds)}
    if panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        options: Json = {
            "colorMode": "background" if panel.thresholds else "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        }
    else:
        defaults["color"] = {"mode": "palette-classic"}
        defaults["custom"] = {
            "drawStyle": "line",
            "fillOpacity": 20 if panel.stack else 0,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": True,
            "stacking": {"group": "A", "mode": "normal" if panel.stack else "none"},
        }
        if panel.unit in {"s", "ops", "reqps", "short", "percentunit"}:
            defaults["min"] = 0
        options = {
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    return {
        "datasource": DATASOURCE,
        "description": panel.description,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "gridPos": grid,
        "id": panel_id,
        "options": options,
        "targets": targets,
        "title": panel.title,
        "type": panel.kind,
    }


def _variables(dashboard: Dashboard) -> list[Json]:
    variables: list[Json] = [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Prometheus",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "type": "datasource",
        },
        _query_variable(
            "namespace", "Namespace", "label_values(holdline_acceptance_seconds_count, namespace)"
        ),
    ]
    if dashboard.tool_variable:
        variables.append(
            _query_variable(
                "tool",
                "Tool",
                f"label_values(holdline_operations_admitted_total{{{NS}}}, tool)",
            )
        )
    return variables


def _query_variable(name: str, label: str, query: str) -> Json:
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


def render(dashboard: Dashboard) -> Json:
    """The dashboard as Grafana JSON, panels laid out left to right, top to bottom."""
    panels: list[Json] = []
    x = y = row_height = 0
    for panel_id, item in enumerate(dashboard.items, start=1):
        if isinstance(item, Row):
            y += row_height
            x = row_height = 0
            panels.append(
                {
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                    "id": panel_id,
                    "panels": [],
                    "title": item.title,
                    "type": "row",
                }
            )
            y += 1
            continue
        if x + item.width > GRID_WIDTH:
            y += row_height
            x = row_height = 0
        grid = {"h": item.height, "w": item.width, "x": x, "y": y}
        panels.append(_panel(item, panel_id, grid))
        x += item.width
        row_height = max(row_height, item.height)
    return {
        "annotations": {"list": []},
        "description": dashboard.description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": True,
                "keepTime": True,
                "tags": ["holdline"],
                "targetBlank": False,
                "title": "holdline",
                "type": "dashboards",
            }
        ],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["holdline"],
        "templating": {"list": _variables(dashboard)},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": dashboard.title,
        "uid": dashboard.uid,
        "version": 1,
    }


def rendered() -> dict[str, str]:
    """File name → file content of every dashboard."""
    out: dict[str, str] = {}
    for build in DASHBOARDS:
        dashboard = build()
        out[f"{dashboard.uid}.json"] = json.dumps(render(dashboard), indent=2) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the dashboards, or with --check report whether the files are current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    files = rendered()
    stale = sorted(
        name
        for name, content in files.items()
        if not (OUT_DIR / name).exists() or (OUT_DIR / name).read_text() != content
    )
    extra = sorted(p.name for p in OUT_DIR.glob("*.json") if p.name not in files)
    if args.check:
        for name in stale:
            print(f"out of date: {OUT_DIR / name}")
        for name in extra:
            print(f"not built by this script: {OUT_DIR / name}")
        return 1 if stale or extra else 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in extra:
        (OUT_DIR / name).unlink()
    for name, content in files.items():
        (OUT_DIR / name).write_text(content)
    print(f"wrote {len(files)} dashboards to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
