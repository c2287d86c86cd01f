"""The lock files (`python -m devtools.lock`) pin every dependency pyproject.toml names, each
with a sha256, and every install path uses them with --require-hashes: `make venv` (so CI,
which runs `make test`) and the Dockerfile."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
REQUIREMENTS = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s\\]+) \\\n    --hash=sha256:[0-9a-f]{64}$", re.M)


def pins(name: str) -> dict[str, str]:
    """A lock file's pins by canonical name; fails on any line that is not a hashed pin."""
    text = (REQUIREMENTS / name).read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    found = {canonicalize_name(m[1]): m[2] for m in PIN.finditer(body)}
    leftover = PIN.sub("", body).strip()
    assert not leftover, f"{name}: lines that are not hashed pins: {leftover[:200]!r}"
    return found


def wanted(extra: str) -> set[str]:
    """The distributions pyproject.toml names for an extra (self-references followed) that
    apply on this platform."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    todo, seen = [extra, ""], set()  # "": the distribution's own dependencies
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        specs = project["dependencies"] if current == "" else project["optional-dependencies"][
            current
        ]
        for spec in specs:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate(
                {**default_environment(), "extra": current}
            ):
                continue
            if canonicalize_name(req.name) == "holdline":
                todo += [e for e in req.extras if e not in seen]
                continue
            names.add(canonicalize_name(req.name))
    return names


@pytest.mark.parametrize(("lock", "extra"), [("lock.txt", "dev"), ("server.txt", "server")])
def test_every_dependency_is_pinned_with_its_hash(lock: str, extra: str) -> None:
    pinned = pins(lock)
    missing = wanted(extra) - set(pinned)
    assert not missing, f"{lock} lacks {sorted(missing)}: run python -m devtools.lock"


def test_the_build_tools_and_the_model_wheel_are_pinned() -> None:
    assert {"pip", "setuptools", "silero-vad"} <= set(pins("no-deps.txt"))


def test_the_venv_installs_only_from_the_locks() -> None:
    script = (ROOT / "scripts" / "ensure-venv.sh").read_text()
    installs = [line for line in script.splitlines() if "-r requirements/" in line]
    assert {Path(line.split("-r ")[1].split()[0]).name for line in installs} == {
        "no-deps.txt", "lock.txt",
    }
    assert all("--require-hashes" in line and "--no-deps" in line for line in installs)
    # The project itself, from the tree, never resolving anything.
    (project,) = [line for line in script.splitlines() if line.rstrip().endswith("-e .")]
    assert "--no-deps" in project
    assert "--upgrade pip" not in script
    assert "'.[dev]'" not in script
    assert "requirements/*.txt" in script, "a lock change reinstalls"
