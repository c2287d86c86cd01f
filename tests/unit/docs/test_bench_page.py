"""docs/benchmarks.md shows the figures of bench/results/, never older ones."""

from __future__ import annotations

import pytest

from devtools import bench_page


def test_the_benchmarks_page_shows_the_results_as_they_are() -> None:
    page = bench_page.PAGE.read_text()
    assert page == bench_page.updated(page, bench_page.render()), (
        "docs/benchmarks.md is stale: run .venv/bin/python -m devtools.bench_page"
    )


def test_only_the_block_between_the_markers_is_rewritten() -> None:
    page = f"intro\n{bench_page.START}\nold figures\n{bench_page.END}\noutro\n"
    assert bench_page.updated(page, "NEW\n") == "intro\nNEW\noutro\n"


def test_a_page_without_its_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="marker"):
        bench_page.updated("no markers here\n", "NEW\n")
