"""Offline checks of what the deployment exposes: the ingress serves only the public routes,
the NetworkPolicies let only the intended pods talk (evaluated here with Kubernetes'
semantics for the subset the manifests use), and each service reaches the broker as its own
user, over TLS in production, with the permissions generated from its declared roles.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from devtools import nats_values
from libs.broker_access import SERVICE_PACKAGES, declared_users, inbox_for, user_of
from services.interaction_surface.app import create_app

from .test_manifests import NATS, OVERLAYS, find, rendered, workloads

# Never through the ingress: probes, metrics and the API's own documentation.
PRIVATE = ("/metrics", "/readyz", "/healthz", "/docs", "/redoc", "/openapi.json")
INGRESS_NS = {"kubernetes.io/metadata.name": "ingress-nginx"}
MONITORING_NS = {"kubernetes.io/metadata.name": "monitoring"}
HOME_NS = {"kubernetes.io/metadata.name": "holdline"}
NATS_POD = {"app.kubernetes.io/name": "nats"}
EXTERNAL = "203.0.113.10"


def pod(name: str) -> dict[str, str]:
    """The labels of a holdline service's pods."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "holdline"}


# ---------------------------------------------------------------------------- ingress


def _paths(overlay: str) -> list[tuple[str, str]]:
    ingress = find(rendered(overlay), "Ingress", "interaction-surface")
    return [
        (p["path"], p["pathType"])
        for rule in ingress["spec"]["rules"]
        for p in rule["http"]["paths"]
    ]


def routed(paths: list[tuple[str, str]], request: str) -> bool:
    """Whether a request path reaches a backend (Exact: equal; Prefix: by whole segments)."""
    for path, kind in paths:
        if kind == "Exact" and request == path:
            return True
        if kind == "Prefix" and (
            path in ("/", request) or request.startswith(path.rstrip("/") + "/")
        ):
            return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_ingress_routes_only_public_routes(overlay: str) -> None:
    paths = _paths(overlay)
    for private in PRIVATE:
        assert not routed(paths, private), f"{private} is reachable through the ingress"
    public = sorted(
        {
            route.path
            for route in create_app().routes
            if route.path.startswith(("/v1/sessions", "/v1/telephony", "/mcp"))  # type: ignore[attr-defined]
        }
    )
    assert "/v1/sessions/{session_id}/ws-ticket" in public
    assert "/mcp" in public, "the MCP endpoint is public"
    for path in [*public, "/", "/static/app.js"]:
        assert routed(paths, path.replace("{", "").replace("}", "")), f"{path} not routed"
    assert routed(paths, "/v1/demo/faults") == (overlay == "dev"), "the demo, in dev only"


# -------------------------------------------------------------------- network policies


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels", {})
    assert set(selector) <= {"matchLabels"}, "only matchLabels is evaluated here"
    return all(labels.get(k) == v for k, v in wanted.items())


def _peer_matches(peer: dict[str, Any], ns: dict[str, str], labels: dict[str, str] | None,
                  address: str | None) -> bool:
    if "ipBlock" in peer:
        return address is not None
    if labels is None:
        return False
    ns_ok = _selects(peer["namespaceSelector"], ns) if "namespaceSelector" in peer else (
        ns == HOME_NS
    )
    pod_ok = _selects(peer["podSelector"], labels) if "podSelector" in peer else True
    return ns_ok and pod_ok


def _port_matches(rule: dict[str, Any], port: int, names: dict[str, int]) -> bool:
    if "ports" not in rule:
        return True
    return any(names.get(str(p["port"]), p["port"]) == port for p in rule["ports"])


def allowed(
    overlay: str, direction: str, target: dict[str, str], port: int, *,
    ns: dict[str, str] = HOME_NS, labels: dict[str, str] | None = None,
    address: str | None = None, names: dict[str, int] | None = None,
) -> bool:
    """Whether traffic is allowed, with NetworkPolicy semantics: a pod selected by a policy
    of that direction is isolated, and then allowed only what some such policy's rule allows.

    `target` is the pod whose policies apply (the receiver for Ingress, the sender for
    Egress); the other end is a pod (`ns`, `labels`) or an outside address.
    """
    kind, field, peers = (
        ("Ingress", "ingress", "from") if direction == "in" else ("Egress", "egress", "to")
    )
    policies = [
        d["spec"] for d in rendered(overlay)
        if d["kind"] == "NetworkPolicy" and kind in d["spec"]["policyTypes"]
        and _selects(d["spec"]["podSelector"], target)
    ]
    if not policies:
        return True
    for spec in policies:
        for rule in spec.get(field, []):
            if not _port_matches(rule, port, names or {}):
                continue
            if peers not in rule or any(
                _peer_matches(p, ns, labels, address) for p in rule[peers]
            ):
                return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_surface_is_reachable_from_the_ingress(overlay: str) -> None:
    http = {"http": 8080}
    assert allowed(overlay, "in", pod("interaction-surface"), 8080, ns=INGRESS_NS, labels={},
                   names=http)
    # Not from another namespace, nor from an unrelated pod of its own.
    assert not allowed(overlay, "in", pod("interaction-surface"), 8080,
                       ns={"kubernetes.io/metadata.name": "default"}, labels={}, names=http)
    assert not allowed(overlay, "in", pod("interaction-surface"), 8080, labels={"app": "x"},
                       names=http)
    for name, port in (("batch-coordinator", 8092), ("delivery-policy", 8093)):
        assert not allowed(overlay, "in", pod(name), port, ns=INGRESS_NS, labels={},
                           names={"http": port})
        # Prometheus scrapes every service.
        assert allowed(overlay, "in", pod(name), port, ns=MONITORING_NS, labels={},
                       names={"http": port})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_broker_is_reachable_from_the_services_only(overlay: str) -> None:
    for package in SERVICE_PACKAGES:
        source = pod(user_of(package))
        assert allowed(overlay, "out", source, 4222, labels=NATS_POD)
        assert allowed(overlay, "in", NATS_POD, 4222, labels=source)
    assert not allowed(overlay, "in", NATS_POD, 4222, labels={"app": "intruder"})
    assert not allowed(overlay, "in", NATS_POD, 4222, ns=INGRESS_NS, labels={})
    # The routes between NATS pods stay open.
    assert allowed(overlay, "in", NATS_POD, 6222, labels=NATS_POD)
    assert allowed(overlay, "out", NATS_POD, 6222, labels=NATS_POD)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_worker_and_the_model_users_go_outside(overlay: str) -> None:
    assert allowed(overlay, "out", pod("operation-worker"), 443, address=EXTERNAL)
    assert allowed(overlay, "out", pod("interaction-surface"), 443, address=EXTERNAL)
    assert not allowed(overlay, "out", pod("delivery-policy"), 443, address=EXTERNAL)
    assert not allowed(overlay, "out", pod("delivery-policy"), 8091,
                       labels=pod("operation-worker"))
    assert not allowed(overlay, "out", pod("operation-worker"), 5432, address=EXTERNAL)


def test_the_sandbox_provider_calls_back_the_workers_in_dev() -> None:
    provider = pod("sandbox-provider")
    assert allowed("dev", "out", pod("operation-worker"), 8090, labels=provider)
    assert allowed("dev", "in", provider, 8090, labels=pod("operation-worker"))
    assert allowed("dev", "out", provider, 8091, labels=pod("operation-worker"))
    assert allowed("dev", "in", pod("operation-worker"), 8091, labels=provider)
    assert not allowed("dev", "in", provider, 8090, labels=pod("delivery-policy"))


# --------------------------------------------------------------------- broker users, TLS


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_connects_as_its_own_broker_user(overlay: str) -> None:
    users = {u.user for u in declared_users()}
    found = workloads(rendered(overlay))
    for package in SERVICE_PACKAGES:
        name = user_of(package)
        (container,) = found[name]["spec"]["template"]["spec"]["containers"]
        env = _env(container)
        assert env["NATS_USER"] == name
        assert name in users
        assert env["NATS_PASSWORD"] == {
            "secretKeyRef": {"name": nats_values.SECRET, "key": name}
        }
        assert env["HOLDLINE_NATS_INBOX_PREFIX"] == inbox_for(name)


def test_the_helm_users_are_the_generated_ones() -> None:
    assert (NATS / "values-users.yaml").read_text() == nats_values.values(), (
        "stale: run python -m devtools.nats_values"
    )
    values = yaml.safe_load((NATS / "values-users.yaml").read_text())
    listed = values["config"]["merge"]["authorization"]["users"]
    assert [u["user"] for u in listed] == [u.user for u in declared_users()]
    for user in listed:
        assert user["permissions"]["subscribe"]["allow"] == [f"{inbox_for(user['user'])}.>"]
        assert "password" in user
        assert user["password"].startswith("<< $")
        assert ">" not in user["permissions"]["publish"]["allow"]


def test_production_talks_to_the_broker_over_tls() -> None:
    values = yaml.safe_load((NATS / "values.yaml").read_text())
    assert values["config"]["nats"]["tls"]["enabled"] is True
    secret = values["config"]["nats"]["tls"]["secretName"]
    docs = rendered("production")
    config = find(docs, "ConfigMap", "holdline-config")["data"]
    ca_path = config["NATS_TLS_CA"]
    for package in SERVICE_PACKAGES:
        spec = workloads(docs)[user_of(package)]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert volumes["nats-ca"]["secret"]["secretName"] == secret
        assert ca_path.startswith(mounts["nats-ca"] + "/")
    tls = list(yaml.safe_load_all((NATS / "tls" / "certificates.yaml").read_text()))
    assert any(d["kind"] == "Certificate" and d["spec"]["secretName"] == secret for d in tls)
