"""Offline checks of the deployment assets under deploy/ and the root Dockerfile.

The kustomize overlays are rendered without a kustomize binary (tests/deploy/kustomize.py)
and every manifest is validated against the Kubernetes JSON schemas shipped inside the
`kubernetes-validate` package, in strict mode (unknown fields are errors). Then the things a
schema cannot see: every service has probes on /readyz and /healthz, resources, a locked-down
security context, a Service and a PodDisruptionBudget; the worker autoscales; the stateful
services run one partition per pod, N = replicas, over subjects the broker leaves as published;
ports and names agree with libs/process_table.py (SERVICES), the single list of services.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from libs.modes import DEMO_PROCESSES
from libs.supervisor import SERVICES

from .kustomize import Doc, KustomizeError, load_documents, render, strategic_merge

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
NATS = DEPLOY / "nats"

# The oldest Kubernetes the manifests support (the StatefulSet pod-index label is on by
# default from 1.28) and the newest the installed schemas know.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
OVERLAYS = ("dev", "production")
NAMESPACES = {"dev": "holdline-dev", "production": "holdline"}

# service name → (python module, env prefix, port), from the supervisor's list and the
# demo's processes.
SERVICE_TABLE: dict[str, tuple[str, str, int]] = {
    **{
        package.replace("_", "-"): (f"services.{package}", prefix, port)
        for package, prefix, port in SERVICES
    },
    **{name: (module, prefix, port) for name, module, prefix, port in DEMO_PROCESSES},
}
PARTITIONED = ("batch-coordinator", "delivery-policy")
DEV_ONLY = ("sandbox-provider",)
PARTITION_LABEL = "metadata.labels['apps.kubernetes.io/pod-index']"
RUN_AS_USER = 10001


@functools.cache
def rendered(target: str) -> tuple[Doc, ...]:
    """The manifests of `base` or of an overlay."""
    directory = K8S / "base" if target == "base" else K8S / "overlays" / target
    return tuple(render(directory))


def find(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    """The one manifest of a kind and name."""
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workloads(docs: tuple[Doc, ...]) -> dict[str, Doc]:
    """Deployments and StatefulSets by name."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in {"Deployment", "StatefulSet"}}


def expected_services(overlay: str) -> list[str]:
    """The services an overlay runs."""
    return [s for s in SERVICE_TABLE if overlay == "dev" or s not in DEV_ONLY]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels only) matches these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def yaml_files() -> list[Path]:
    """Every YAML file under deploy/."""
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})


def nats_values(name: str) -> dict[str, Any]:
    """One values file of the NATS chart."""
    values = yaml.safe_load((NATS / name).read_text())
    assert isinstance(values, dict)
    return values


# ---------------------------------------------------------------- rendering and schemas


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses_into_mappings(path: Path) -> None:
    docs = load_documents(path)
    assert docs, f"{path} holds no document"


def test_renderer_merges_like_a_strategic_merge_patch() -> None:
    target = {
        "spec": {
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "x",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "args": ["--one"],
                        }
                    ]
                }
            },
        }
    }
    patch = {
        "spec": {
            "replicas": 3,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "app", "env": [{"name": "B", "value": "3"}], "args": ["--two"]}
                    ]
                }
            },
        }
    }
    merged = strategic_merge(target, patch)
    (container,) = merged["spec"]["template"]["spec"]["containers"]
    assert merged["spec"]["replicas"] == 3
    assert container["image"] == "x"
    assert container["env"] == [{"name": "B", "value": "3"}, {"name": "A", "value": "1"}]
    assert container["args"] == ["--two"]
    assert target["spec"]["replicas"] == 1, "the target is not modified"
    with pytest.raises(KustomizeError, match="directives"):
        strategic_merge(target, {"spec": {"$patch": "replace"}})


@pytest.mark.parametrize("target", ["base", *OVERLAYS])
def test_overlays_render_with_unique_names_in_their_namespace(target: str) -> None:
    docs = rendered(target)
    assert docs
    keys = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys))
    if target in NAMESPACES:
        namespace = NAMESPACES[target]
        assert ("Namespace", namespace) in keys
        for doc in docs:
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("target", ["base", *OVERLAYS])
def test_manifests_validate_strictly_against_kubernetes_schemas(target: str, version: str) -> None:
    failures = []
    for doc in rendered(target):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(part) for part in exc.path)
            failures.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(exc.message)
    assert not failures, "\n".join(failures)


def test_strict_validation_rejects_unknown_fields() -> None:
    service = dict(find(rendered("base"), "Service", "operation-worker"))
    service["spec"] = {**service["spec"], "portz": []}
    with pytest.raises(kubernetes_validate.ValidationError, match="portz"):
        kubernetes_validate.validate(service, K8S_VERSIONS[0], strict=True)


# ---------------------------------------------------------------- workloads


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_runs_as_its_own_probed_sized_locked_down_workload(overlay: str) -> None:
    docs = rendered(overlay)
    found = workloads(docs)
    assert sorted(found) == sorted(expected_services(overlay))
    for name, workload in found.items():
        package, _prefix, port = SERVICE_TABLE[name]
        expected_kind = "StatefulSet" if name in PARTITIONED else "Deployment"
        assert workload["kind"] == expected_kind, name
        template = workload["spec"]["template"]
        assert selects(workload["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port)
        assert annotations["prometheus.io/path"] == "/metrics"
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == RUN_AS_USER
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", package], name
        assert container["image"].startswith(("holdline:", "registry.example.com/holdline:"))
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http": port}, name
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        resources = container["resources"]
        for section in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[section]), f"{name} {section}"
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/lib/holdline"} <= mounts, name
        sources = [s.get("configMapRef", {}).get("name") for s in container["envFrom"]]
        assert "holdline-config" in sources, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_has_a_service_and_a_disruption_budget(overlay: str) -> None:
    docs = rendered(overlay)
    for name, workload in workloads(docs).items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        port = SERVICE_TABLE[name][2]
        service = find(docs, "Service", name)
        assert selects(service["spec"]["selector"], labels), name
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "http")]
        if workload["kind"] == "StatefulSet":
            assert workload["spec"]["serviceName"] == name
            assert service["spec"]["clusterIP"] == "None", "a StatefulSet's Service is headless"
        budget = find(docs, "PodDisruptionBudget", name)
        assert selects(budget["spec"]["selector"]["matchLabels"], labels), name
        assert budget["spec"].get("maxUnavailable") == 1 or budget["spec"].get("minAvailable")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_operation_worker_scales_out_on_cpu(overlay: str) -> None:
    docs = rendered(overlay)
    worker = find(docs, "Deployment", "operation-worker")
    assert "replicas" not in worker["spec"], "the HPA owns the worker's replica count"
    hpa = find(docs, "HorizontalPodAutoscaler", "operation-worker")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "operation-worker",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource"
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    if overlay == "production":
        assert hpa["spec"]["minReplicas"] >= 2
        assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    else:
        assert hpa["spec"]["maxReplicas"] == 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_stateful_services_are_partitioned_by_pod_ordinal(overlay: str) -> None:
    docs = rendered(overlay)
    for name in PARTITIONED:
        statefulset = find(docs, "StatefulSet", name)
        replicas = statefulset["spec"]["replicas"]
        assert replicas > 1, f"{name} runs more than one partition"
        assert "holdline/partitioning" in statefulset["metadata"]["annotations"]
        assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["HOLDLINE_PARTITION"]["valueFrom"]["fieldRef"]["fieldPath"] == PARTITION_LABEL
        assert int(env["HOLDLINE_PARTITIONS"]["value"]) == replicas, name
        budget = find(docs, "PodDisruptionBudget", name)
        assert budget["spec"]["maxUnavailable"] == 1


def test_the_broker_keeps_holdline_subjects_as_published() -> None:
    # Partitions filter sessions in their consumers and read aggregates by exact subject, so a
    # subject mapping on holdline subjects (e.g. one appending a partition token) would hide
    # every aggregate from its readers.
    for path in sorted(NATS.glob("*.yaml")):
        values = nats_values(path.name)
        mappings = values.get("config", {}).get("merge", {}).get("mappings", {})
        assert not [m for m in mappings if str(m).startswith("hl.")], path.name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_points_every_service_at_the_broker_and_its_port(overlay: str) -> None:
    docs = rendered(overlay)
    data = find(docs, "ConfigMap", "holdline-config")["data"]
    assert data["NATS_URL"] == "nats://nats:4222"
    assert data["HOLDLINE_STREAM_REPLICAS"] == ("1" if overlay == "dev" else "3")
    for _package, prefix, port in SERVICES:
        assert data[f"{prefix}_HOST"] == "0.0.0.0"
        assert data[f"{prefix}_PORT"] == str(port)
    assert all(isinstance(v, str) for v in data.values())


def test_production_phone_calls_fail_closed_at_the_public_tls_url() -> None:
    docs = rendered("production")
    data = find(docs, "ConfigMap", "holdline-config")["data"]
    # The surface refuses to start without TWILIO_AUTH_TOKEN (checked at start-up).
    assert data["HOLDLINE_REQUIRE_TWILIO_AUTH"] == "1"
    # Twilio signs the Ingress's https URL; the TwiML's stream must be wss:// on that host.
    ingress = find(docs, "Ingress", "interaction-surface")
    assert data["HOLDLINE_PUBLIC_URL"] == f"https://{ingress['spec']['tls'][0]['hosts'][0]}"
    dev = find(rendered("dev"), "ConfigMap", "holdline-config")["data"]
    assert "HOLDLINE_REQUIRE_TWILIO_AUTH" not in dev


def test_sandbox_provider_runs_only_in_dev() -> None:
    assert "sandbox-provider" in workloads(rendered("dev"))
    assert "sandbox-provider" not in workloads(rendered("production"))
    sandbox = find(rendered("dev"), "Deployment", "sandbox-provider")
    assert sandbox["spec"]["strategy"]["type"] == "Recreate", "one writer of the SQLite ledger"


def test_production_serves_the_tools_file_it_mounts_and_no_demo() -> None:
    docs = rendered("production")
    data = find(docs, "ConfigMap", "holdline-config")["data"]
    assert "HOLDLINE_DEMO" not in data, "production mode is chosen by having tools, never forced"
    folder, _, name = data["HOLDLINE_TOOLS_FILE"].rpartition("/")
    for service in expected_services("production"):
        spec = workloads(docs)[service]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["name"]: m for m in spec["containers"][0].get("volumeMounts", [])}
        assert mounts["tools"]["mountPath"] == folder, f"{service} does not see the tools file"
        assert volumes["tools"]["configMap"]["name"] == "holdline-tools", service
    assert name == "tools.toml"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_reaches_the_surface_with_websockets_and_pinning(overlay: str) -> None:
    docs = rendered(overlay)
    ingress = find(docs, "Ingress", "interaction-surface")
    annotations = ingress["metadata"]["annotations"]
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert annotations["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    backends = [
        path["backend"]["service"]
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]
    assert backends, "the public routes (tests/unit/deploy/test_network.py) reach the surface"
    assert all(b == {"name": "interaction-surface", "port": {"name": "http"}} for b in backends)
    if overlay == "production":
        assert ingress["spec"]["tls"][0]["secretName"]


# ---------------------------------------------------------------- NATS, Prometheus, image


def test_nats_values_describe_a_three_node_jetstream_cluster_on_disk() -> None:
    values = nats_values("values.yaml")
    assert values["fullnameOverride"] == "nats", "the Service behind nats://nats:4222"
    assert values["config"]["cluster"] == {"enabled": True, "replicas": 3}
    jetstream = values["config"]["jetstream"]
    assert jetstream["enabled"] is True
    assert jetstream["fileStore"]["enabled"] is True
    assert jetstream["fileStore"]["pvc"]["enabled"] is True
    assert jetstream["memoryStore"]["enabled"] is False
    assert values["podDisruptionBudget"]["enabled"] is True
    assert "mappings" not in values["config"].get("merge", {}), "opt-in: values-partitions.yaml"
    dev = nats_values("values-dev.yaml")
    assert dev["fullnameOverride"] == "nats"
    assert dev["config"]["cluster"]["enabled"] is False


def test_prometheus_scrapes_annotated_pods_and_local_ports() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "holdline")
    (discovery,) = job["kubernetes_sd_configs"]
    assert discovery["role"] == "pod"
    assert set(discovery["namespaces"]["names"]) == set(NAMESPACES.values())
    sources = [tuple(r.get("source_labels", [])) for r in job["relabel_configs"]]
    assert ("__meta_kubernetes_pod_annotation_prometheus_io_scrape",) in sources
    assert (
        "__address__",
        "__meta_kubernetes_pod_annotation_prometheus_io_port",
    ) in sources
    assert {r.get("target_label") for r in job["relabel_configs"]} >= {"namespace", "pod"}
    local = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-local.yml").read_text())
    targets = {
        target
        for group in local["scrape_configs"][0]["static_configs"]
        for target in group["targets"]
    }
    assert targets == {f"127.0.0.1:{port}" for _module, _prefix, port in SERVICE_TABLE.values()}


def test_dockerfile_builds_a_slim_non_root_runtime_image() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [
        line.strip()
        for line in dockerfile.replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    bases = [line.split()[1] for line in instructions if line.startswith("FROM ")]
    assert bases
    # Every stage on the one base image, pinned by digest (a tag can move).
    (image,) = [line for line in instructions if line.startswith("ARG PYTHON_IMAGE=")]
    assert re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11[\w.-]*-slim[\w.-]*@sha256:[0-9a-f]{64}",
                        image), image
    assert all(base == "${PYTHON_IMAGE}" for base in bases)
    runs = " ".join(line for line in instructions if line.startswith("RUN "))
    # The server extra only, every file checked against the lock's hashes, then the project
    # without dependencies.
    assert re.search(r"--require-hashes --no-deps -r requirements/server\.txt", runs)
    assert re.search(r"pip install --no-deps --no-build-isolation \.(\s|$)", runs)
    assert "[dev]" not in runs
    assert "lock.txt" not in runs
    assert " -e " not in runs
    assert "espeak-ng" in runs
    (user,) = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert user.split(":")[0] == str(RUN_AS_USER), "numeric, matching runAsUser"
    assert instructions[-1].startswith("CMD ")
    (workdir,) = [line for line in instructions if line.startswith("WORKDIR /var")]
    assert workdir == "WORKDIR /var/lib/holdline", "the writable mount of the pods"
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".data", "tests"} <= ignored
    shipped = {"libs", "services", "holdline", "demo", "pyproject.toml", "README.md"}
    shipped.add("requirements")
    assert not shipped & ignored
