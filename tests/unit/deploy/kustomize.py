"""A small, offline renderer of the kustomize subset `deploy/k8s/` uses.

Supports `resources` (files and directories), `patches` (strategic-merge patch files),
`namespace` and `images`, which is all the overlays need; any other key fails loudly, so a
kustomization that grows a feature this renderer does not know cannot pass unchecked.
The result matches `kubectl kustomize` for these manifests (checked by hand when they change).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]

SUPPORTED_KEYS = frozenset({"apiVersion", "kind", "resources", "patches", "namespace", "images"})

# Lists that a strategic merge patch merges item by item, by this key (Kubernetes' own
# patchMergeKey for the fields the manifests patch). Other lists are replaced whole.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}

# Kinds without a namespace, among those the manifests use.
CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})


class KustomizeError(ValueError):
    """A kustomization this renderer cannot render faithfully."""


def load_documents(path: Path) -> list[Doc]:
    """Every non-empty YAML document of a file."""
    with path.open() as handle:
        docs = [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    for doc in docs:
        if not isinstance(doc, dict):
            raise KustomizeError(f"{path}: a document is not a mapping")
    return docs


def _identity(doc: Doc) -> tuple[str, str, str]:
    group = str(doc.get("apiVersion", "")).rpartition("/")[0]
    return group, str(doc.get("kind")), str(doc.get("metadata", {}).get("name"))


def _ports_key(items: list[Any]) -> str | None:
    if all(isinstance(i, dict) and "containerPort" in i for i in items):
        return "containerPort"
    if all(isinstance(i, dict) and "port" in i for i in items):
        return "port"
    return None


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Merge `patch` into `target` the way a strategic merge patch does, for simple cases.

    Maps merge recursively and a null value deletes a key; lists with a known merge key
    merge item by item; other lists and scalars are replaced.
    """
    if isinstance(patch, dict) and isinstance(target, dict):
        if any(str(key).startswith("$") for key in patch):
            raise KustomizeError(f"patch directives are not supported (in {field or 'root'})")
        merged = dict(target)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value, key)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(patch, list) and isinstance(target, list):
        key = MERGE_KEYS.get(field) or (_ports_key(target + patch) if field == "ports" else None)
        if key is None:
            return copy.deepcopy(patch)
        # As kustomize orders them: the patch's items first, then the target's others.
        by_key = {item.get(key): item for item in target}
        patched = [
            strategic_merge(by_key[item.get(key)], item, field)
            if item.get(key) in by_key
            else copy.deepcopy(item)
            for item in patch
        ]
        keys = {item.get(key) for item in patch}
        return patched + [copy.deepcopy(i) for i in target if i.get(key) not in keys]
    return copy.deepcopy(patch)


def _pod_specs(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {})
    if doc.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    template = spec.get("template", {}).get("spec")
    return [template] if isinstance(template, dict) else []


def _set_image(doc: Doc, images: list[Doc]) -> None:
    for pod in _pod_specs(doc):
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            name, _, tag = str(container.get("image", "")).partition(":")
            for image in images:
                if image["name"] == name:
                    new_tag = image.get("newTag", tag)
                    new_name = image.get("newName", name)
                    container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def render(directory: Path) -> list[Doc]:
    """The manifests a kustomization directory produces, in resource order."""
    path = directory / "kustomization.yaml"
    (kustomization,) = load_documents(path)
    unknown = set(kustomization) - SUPPORTED_KEYS
    if unknown:
        raise KustomizeError(f"{path}: unsupported keys {sorted(unknown)}")
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        resource = (directory / entry).resolve()
        docs += render(resource) if resource.is_dir() else load_documents(resource)
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        identity = _identity(doc)
        if identity in seen:
            raise KustomizeError(f"{path}: {identity} is declared twice")
        seen.add(identity)
    for entry in kustomization.get("patches", []):
        if set(entry) != {"path"}:
            raise KustomizeError(f"{path}: only `patches: - path: file` is supported")
        for patch in load_documents(directory / entry["path"]):
            matches = [i for i, doc in enumerate(docs) if _identity(doc) == _identity(patch)]
            if len(matches) != 1:
                raise KustomizeError(f"{path}: patch {_identity(patch)} matches {len(matches)}")
            docs[matches[0]] = strategic_merge(docs[matches[0]], patch)
    namespace = kustomization.get("namespace")
    if namespace:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = namespace
    for doc in docs:
        _set_image(doc, kustomization.get("images", []))
    return docs
