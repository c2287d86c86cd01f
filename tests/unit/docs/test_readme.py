"""The README stays a five-minute page a newcomer can trust.

It is short, it cites nothing outside the repository, every figure in its "how fast" table
links to where it is measured, and the changelog's newest release is the package's version.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_WORDS = 1500

# A figure with its unit: "6.6 / 10.5 ms", "780.6 / 594.9 per s", "0.52 s", "12 %".
FIGURE = re.compile(r"\d+(?:[.,]\d+)?\s*(?:ms|µs|s|per s|/s|%)(?![\w])")
LINK = re.compile(r"\[[^\]]+\]\([^)\s]+\)")


def _section(markdown: str, title: str) -> str:
    """The body of the `## <title>` section, up to the next heading of level two or one."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^#{{1,2}} |\Z)", markdown, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_is_short() -> None:
    # Every whitespace-separated token counts, code included: the simplest and strictest count.
    words = len(README.split())
    assert words <= MAX_WORDS, f"README.md has {words} words; at most {MAX_WORDS}"


def test_readme_cites_nothing_outside_the_repository() -> None:
    for pattern in (r"\bissues? \d+", r"#\d{2,}", r"\bDESIGN\b", r"\bseed 0"):
        found = re.search(pattern, README, re.I if pattern.startswith(r"\bissue") else 0)
        assert found is None, f"README.md cites {found.group(0)!r}"


def test_every_figure_links_to_where_it_is_measured() -> None:
    rows = [line for line in _section(README, "How fast").splitlines() if line.startswith("|")]
    figures = [line for line in rows if FIGURE.search(line)]
    assert figures, "the how-fast table has no figures"
    unlinked = [line for line in figures if not LINK.search(line)]
    assert not unlinked, f"figures without a link to their measurement: {unlinked}"


def test_readme_links_resolve_in_the_repository() -> None:
    # Relative links render on GitHub only when their target exists; docs/ pages other slices
    # write may not exist yet on this branch, so only bench results and root files are held.
    for target in re.findall(r"\]\(([^)#\s]+)\)", README):
        if target.startswith(("http://", "https://", "docs/")):
            continue
        assert (ROOT / target).exists(), f"README.md links to a missing {target}"


def test_changelog_newest_release_is_the_package_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert releases, "CHANGELOG.md has no dated release"
    with (ROOT / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    newest = releases[0]
    assert newest == version, f"CHANGELOG.md's newest is {newest}, pyproject.toml says {version}"
    assert "## [Unreleased]" in changelog.split(f"## [{newest}]")[0]
