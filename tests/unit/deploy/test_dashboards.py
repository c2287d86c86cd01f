"""The Grafana dashboards query only what the services export, and are what build.py writes.

The exported names come from the prometheus_client registries themselves: the families of
`libs.metrics` (every service's `/metrics`) and of the sandbox provider's own registry,
expanded to the sample names Prometheus stores (counters `_total`, histograms
`_bucket`/`_sum`/`_count`). Every `holdline_*` identifier in a panel or variable query must
be one of them, and every label a query filters or groups by must belong to the metric.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import CollectorRegistry

import libs.metrics
from demo.sandbox_provider.metrics import Metrics as SandboxMetrics

ROOT = Path(__file__).resolve().parents[3]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = GRAFANA / "dashboards"
UIDS = ("holdline-latency", "holdline-operations", "holdline-truthfulness")

METRIC_RE = re.compile(r"\bholdline_[a-z0-9_]+")
SELECTOR_RE = re.compile(r"\b(holdline_[a-z0-9_]+)\{([^}]*)\}")
MATCHER_RE = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING_RE = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
# Labels Prometheus attaches to every target (deploy/prometheus/*.yml).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service"})
SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}

Json = dict[str, Any]


def _families(registry: CollectorRegistry) -> dict[str, str]:
    return {
        family.name: family.type
        for family in registry.collect()
        if family.name.startswith("holdline_")
    }


@functools.cache
def exported_families() -> dict[str, str]:
    """Family name → type, for every holdline family a service exposes."""
    assert libs.metrics.ACCEPTANCE is not None  # the import registers the families
    families = _families(REGISTRY)
    families.update(_families(SandboxMetrics().registry))
    return families


@functools.cache
def exported_samples() -> dict[str, str]:
    """Sample name (as stored by Prometheus) → its family name."""
    samples: dict[str, str] = {}
    for family, kind in exported_families().items():
        for suffix in SUFFIXES.get(kind, ("",)):
            samples[family + suffix] = family
    return samples


@functools.cache
def family_labels() -> dict[str, frozenset[str]]:
    """Family name → its label names (histograms also have `le`)."""
    collectors = [v for v in vars(libs.metrics).values() if isinstance(v, MetricWrapperBase)]
    collectors += [v for v in vars(SandboxMetrics()).values() if isinstance(v, MetricWrapperBase)]
    labels: dict[str, frozenset[str]] = {}
    for collector in collectors:
        for family in collector.describe():
            extra = {"le"} if family.type == "histogram" else set()
            labels[family.name] = frozenset(collector._labelnames) | extra
    return labels


def load_build_module() -> ModuleType:
    """deploy/grafana/build.py, imported from its path (deploy/ is not a package)."""
    spec = importlib.util.spec_from_file_location("holdline_grafana_build", GRAFANA / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, Json]:
    """File name → dashboard JSON, as checked in."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panels(dashboard: Json) -> list[Json]:
    """Every panel, including those nested in collapsed rows."""
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found += panel.get("panels", [])
    return found


def queries(dashboard: Json) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable."""
    found = [
        (f"{dashboard['uid']} / {panel['title']} / {target['refId']}", target["expr"])
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found.append((f"{dashboard['uid']} / ${variable['name']}", text))
    return found


ALL_QUERIES = [q for d in dashboards().values() for q in queries(d)]


def test_exported_names_include_the_design_measures() -> None:
    samples = exported_samples()
    for name in (
        "holdline_acceptance_seconds_bucket",
        "holdline_barge_in_seconds_bucket",
        "holdline_delivery_ready_to_sent_seconds_bucket",
        "holdline_operations_terminal_total",
        "holdline_dead_letters_total",
        "holdline_sandbox_effects_total",
        "holdline_sandbox_request_seconds_bucket",
    ):
        assert name in samples, name


def test_dashboard_json_is_what_build_py_writes() -> None:
    build = load_build_module()
    expected = build.rendered()
    actual = {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    assert sorted(actual) == sorted(expected), "run: python deploy/grafana/build.py"
    for name, content in expected.items():
        assert actual[name] == content, f"{name} is stale; run: python deploy/grafana/build.py"


def test_uids_are_fixed_unique_and_name_their_files() -> None:
    found = dashboards()
    assert sorted(d["uid"] for d in found.values()) == sorted(UIDS)
    for name, dashboard in found.items():
        assert name == f"{dashboard['uid']}.json"
        assert dashboard["title"].startswith("holdline")
        ids = [panel["id"] for panel in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"


@pytest.mark.parametrize(("where", "expr"), ALL_QUERIES, ids=[w for w, _ in ALL_QUERIES])
def test_every_query_uses_only_exported_metrics_and_their_labels(where: str, expr: str) -> None:
    samples = exported_samples()
    labels = family_labels()
    names = set(METRIC_RE.findall(expr))
    assert names, f"{where}: no holdline metric in {expr!r}"
    unknown = sorted(names - set(samples))
    assert not unknown, f"{where}: not exported: {unknown}"
    assert expr.count("(") == expr.count(")"), where
    assert expr.count("{") == expr.count("}"), where
    used = set()
    for metric, matchers in SELECTOR_RE.findall(expr):
        allowed = labels[samples[metric]] | TARGET_LABELS
        for label in MATCHER_RE.findall(matchers):
            assert label in allowed, f"{where}: {metric} has no label {label!r}"
        used |= labels[samples[metric]]
    for group in GROUPING_RE.findall(expr):
        for label in filter(None, (part.strip() for part in group.split(","))):
            assert label in used | TARGET_LABELS, f"{where}: grouping by unknown {label!r}"


def test_quantiles_are_taken_over_histogram_bucket_rates() -> None:
    count = 0
    for where, expr in ALL_QUERIES:
        for match in re.finditer(r"histogram_quantile\((0\.\d+), sum by \(le[,)]", expr):
            count += 1
            assert 0 < float(match.group(1)) < 1, where
        if "histogram_quantile" in expr:
            assert re.search(r"rate\(holdline_[a-z0-9_]+_bucket\{[^}]*\}\[5m\]\)", expr), where
            assert expr.count("histogram_quantile") == len(
                re.findall(r"histogram_quantile\(0\.\d+, sum by \(le[,)]", expr)
            ), where
    assert count >= 20


def _exprs(uid: str) -> str:
    (dashboard,) = [d for d in dashboards().values() if d["uid"] == uid]
    return "\n".join(expr for _, expr in queries(dashboard))


def test_latency_dashboard_shows_p50_p95_p99_of_each_conversation_latency() -> None:
    exprs = _exprs("holdline-latency")
    for histogram in (
        "holdline_acceptance_seconds",
        "holdline_barge_in_seconds",
        "holdline_delivery_ready_to_sent_seconds",
        "holdline_delivery_ready_to_decision_seconds",
        "holdline_delivery_ready_to_first_audio_seconds",
    ):
        for q in ("0.5", "0.95", "0.99"):
            pattern = rf"histogram_quantile\({q}, sum by \(le\) \(rate\({histogram}_bucket"
            assert re.search(pattern, exprs), f"{histogram} p{q}"


def test_operations_dashboard_covers_throughput_failures_and_timings() -> None:
    exprs = _exprs("holdline-operations")
    for needle in (
        "holdline_operations_terminal_total",
        "holdline_operation_retries_total",
        "holdline_operation_unknown_total",
        "holdline_operation_timeouts_total",
        "holdline_dead_letters_total",
        'holdline_operations_rejected_total{namespace=~"$namespace", tool=~"$tool", '
        'reason="backpressure"}',
        "holdline_operation_accept_to_start_seconds_bucket",
        "holdline_operation_duration_seconds_bucket",
    ):
        assert needle in exprs, needle
    assert "sum by (status)" in exprs
    assert "sum by (tool)" in exprs


def test_truthfulness_dashboard_covers_duplicates_staleness_and_next_turn_share() -> None:
    exprs = _exprs("holdline-truthfulness")
    for needle in (
        "holdline_duplicate_side_effects_total",
        "holdline_duplicate_deliveries_total",
        "holdline_stale_deliveries_total",
        "holdline_cancellations_requested_total",
        "holdline_cancellations_confirmed_total",
        "holdline_compensations_total",
        "holdline_handoffs_with_pending_operations_total",
    ):
        assert needle in exprs, needle
    share = re.compile(
        r"\(sum \(rate\(holdline_next_turn_resyncs_total\{[^}]*\}\[5m\]\)\) or vector\(0\)\) / "
        r"\(sum \(rate\(holdline_deliveries_total\{[^}]*\}\[5m\]\)\) > 0\)"
    )
    assert share.search(exprs), "next-turn share = resyncs / deliveries"


def test_every_exported_family_appears_on_a_dashboard() -> None:
    samples = exported_samples()
    shown = {samples[name] for _, expr in ALL_QUERIES for name in METRIC_RE.findall(expr)}
    missing = sorted(set(exported_families()) - shown)
    assert not missing, f"no panel shows: {missing} (add one in deploy/grafana/build.py)"


def test_provisioning_files_load_the_dashboards_from_prometheus() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    assert datasources["apiVersion"] == 1
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["uid"]
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/holdline.yaml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"]
    for dashboard in dashboards().values():
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for panel in panels(dashboard):
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
