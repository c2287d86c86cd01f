"""The demo is a fenced layer: nothing in the core imports it, and the core alone runs.

Every module under libs/, services/ and holdline/ is parsed (`ast`): none imports the `demo`
package. The one place that names the demo is `libs/modes.py`, by import path strings.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CORE = ("libs", "services", "holdline")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _is_demo(module: str) -> bool:
    return module == "demo" or module.startswith("demo.")


def core_files() -> list[Path]:
    """Every Python file of the core."""
    return sorted(p for top in CORE for p in (ROOT / top).rglob("*.py"))


def test_the_walk_sees_the_whole_core() -> None:
    files = core_files()
    assert len(files) > 200
    assert ROOT / "libs" / "modes.py" in files
    assert ROOT / "services" / "interaction_surface" / "app.py" in files


def test_no_core_module_imports_the_demo() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: import {module}"
        for path in core_files()
        for line, module in _imports(path)
        if _is_demo(module)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_check_would_catch_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom demo.models import MockModel\nimport demo.tools as t\n")
    assert [m for _, m in _imports(bad) if _is_demo(m)] == ["demo.models", "demo.tools"]


def test_importing_every_service_loads_no_demo_module() -> None:
    code = (
        "import sys\n"
        "import libs.tools, libs.models, libs.supervisor, libs.cli, holdline.client\n"
        "import services.interaction_surface.app, services.operation_worker.app\n"
        "import services.batch_coordinator.app, services.delivery_policy.app\n"
        "loaded = sorted(m for m in sys.modules if m == 'demo' or m.startswith('demo.'))\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("top", ["demo.tools", "demo.models", "demo.routes", "demo.sandbox"])
def test_the_demo_paths_the_core_configures_exist(top: str) -> None:
    from libs import modes  # noqa: PLC0415

    named = {
        *modes.DEMO_TOOL_MODULES,
        *modes.DEMO_MODEL_MODULES,
        *(p.split(":")[0] for p in modes.DEMO_SURFACE_ROUTES),
        *(module for _, module, _, _ in modes.DEMO_PROCESSES),
        "demo.sandbox",
    }
    assert top in named
    assert (ROOT / (top.replace(".", "/") + ".py")).exists() or (
        ROOT / top.replace(".", "/") / "__init__.py"
    ).exists()
