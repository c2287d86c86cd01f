"""One three-node cluster and one system on it for the module; each test leaves it healthy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from testkit.cluster import Cluster
from testkit.cluster_harness import cluster_stack
from testkit.surface import SurfaceStack


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three routed nodes with a JetStream meta leader."""
    nodes = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        nodes.start()
        asyncio.run(nodes.wait_meta_leader())
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def system(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service on the cluster: two surfaces, two workers, two partitions each."""
    stack = cluster_stack(cluster, tmp_path_factory.mktemp("cluster-logs"))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(autouse=True)
def healed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whatever a cluster test did (or left, failing), the next starts with three nodes up."""
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").heal()
