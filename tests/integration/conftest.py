"""Integration tests with containers (testcontainers + the docker SDK).

They need a Docker engine: when none answers, ``deploy/scripts/ensure-docker.sh`` is asked to
start one (it can when we are root); only when that fails too do they skip, saying why. Images
come from ``deploy/scripts/build-images.sh`` (cached: seconds when nothing changed), so they test
the code in this checkout. Set HEADWATER_IT_NO_BUILD=1 to use the images as they are.
Every container, network and volume made here is removed, even after a failure.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.containers import CLUSTER_LABEL, RUN_LABEL, ContainerCluster, remove_labelled

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "deploy" / "scripts"
TAG = os.environ.get("HEADWATER_IMAGE_TAG", "dev")
HEADWATER_IMAGE = f"headwater/headwater:{TAG}"
ZOOKEEPER_IMAGE = f"headwater/zookeeper:{TAG}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
            # The first test also waits for the image build (minutes on a fresh machine).
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(900))


def _connect() -> docker.DockerClient:
    client = docker.from_env(timeout=60)
    client.ping()
    return client


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = _connect()
    except Exception as first:
        # No engine answers: start one if we can (root), as `make test` does.
        try:
            proc = subprocess.run(
                ["bash", str(SCRIPTS / "ensure-docker.sh")], capture_output=True, text=True, timeout=900
            )
            lines = (proc.stdout + proc.stderr).strip().splitlines()
            said = [line for line in lines if line.startswith("ensure-docker:")][-2:] or lines[-2:]
        except Exception as e:
            said = [repr(e)]
        try:
            client = _connect()
        except Exception:
            pytest.skip(
                f"no Docker engine can be started ({first}); deploy/scripts/ensure-docker.sh said: {' | '.join(said)}"
            )
    yield client
    client.close()


@pytest.fixture(scope="session")
def images(docker_client: docker.DockerClient) -> dict[str, str]:
    """The images under test, built from this checkout (a cached rebuild takes seconds)."""
    if os.environ.get("HEADWATER_IT_NO_BUILD") != "1":
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "build-images.sh")],
            capture_output=True,
            text=True,
            timeout=1200,
            env={**os.environ, "HEADWATER_IMAGE_TAG": TAG},
        )
        assert proc.returncode == 0, f"build-images.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for image in (HEADWATER_IMAGE, ZOOKEEPER_IMAGE):
        docker_client.images.get(image)  # raises ImageNotFound with a clear message
    return {"headwater": HEADWATER_IMAGE, "zookeeper": ZOOKEEPER_IMAGE}


@pytest.fixture(scope="session")
def run_id(docker_client: docker.DockerClient) -> Iterator[str]:
    """A label value for everything this session creates; leftovers are removed at the end."""
    rid = uuid.uuid4().hex[:8]
    yield rid
    remove_labelled(docker_client, f"{RUN_LABEL}={rid}")


@pytest.fixture
def cluster_factory(
    docker_client: docker.DockerClient, images: dict[str, str], run_id: str
) -> Iterator[Callable[..., ContainerCluster]]:
    made: list[ContainerCluster] = []

    def make(name: str, size: int = 3, rack: str | None = None, **broker_config: str) -> ContainerCluster:
        cluster = ContainerCluster(
            docker_client,
            run_id,
            name,
            images["headwater"],
            images["zookeeper"],
            size=size,
            rack=rack,
            broker_config=broker_config,
        )
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop()
    for cluster in made:
        leftovers = remove_labelled(docker_client, f"{RUN_LABEL}={run_id}", f"{CLUSTER_LABEL}={cluster.name}")
        assert not leftovers, f"cluster {cluster.name} left {leftovers}"
