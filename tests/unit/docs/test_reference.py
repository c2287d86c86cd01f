"""The docs site's reference pages are generated from the code (devtools/docs_reference.py):
they are up to date, and every `HOLDLINE_*` variable the code reads is on the settings page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from devtools import docs_reference

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[3]
_VARIABLE = re.compile(r"^HOLDLINE_[A-Z0-9_]+$")

# Read by the code but deliberately not on the settings page, each with its reason.
NOT_SETTINGS = {
    # Fault injection for the crash and chaos tests (libs/crash.py): a test's tool, never a
    # deployment's setting.
    "HOLDLINE_CRASH_POINTS": "test crash points",
    "HOLDLINE_PAUSE_POINTS": "test pause points",
}


def _variables_in_source() -> set[str]:
    """Every string literal in libs/ and services/ that is exactly a `HOLDLINE_*` name."""
    found: set[str] = set()
    for folder in ("libs", "services"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
                if is_text and _VARIABLE.match(node.value):
                    found.add(node.value)
    return found


@pytest.fixture(scope="module")
def pages() -> dict[Path, str]:
    return docs_reference.render()


def test_the_generated_pages_are_up_to_date(pages: dict[Path, str]) -> None:
    stale = [str(path.relative_to(ROOT)) for path in docs_reference.stale(pages)]
    assert not stale, f"stale reference pages (run make docs-build): {stale}"


def test_every_holdline_variable_is_on_the_settings_page(pages: dict[Path, str]) -> None:
    page = pages[docs_reference.REFERENCE / "settings.md"]
    documented = docs_reference.documented_variables(page)
    missing = _variables_in_source() - documented - NOT_SETTINGS.keys()
    assert not missing, f"read by the code but not on docs/reference/settings.md: {sorted(missing)}"


def test_the_exceptions_are_still_read() -> None:
    """An exception the code no longer reads is taken off the list."""
    assert NOT_SETTINGS.keys() <= _variables_in_source()


def test_a_setting_without_a_description_fails_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described = docs_reference.field_descriptions

    def without_replicas(ref: docs_reference.ClassRef) -> dict[str, tuple[str, str]]:
        fields = described(ref)
        if ref.name == "BusSettings":
            fields["replicas"] = (fields["replicas"][0], "")
        return fields

    monkeypatch.setattr(docs_reference, "field_descriptions", without_replicas)
    with pytest.raises(docs_reference.MissingDescription, match="HOLDLINE_STREAM_REPLICAS"):
        docs_reference.render_settings()
