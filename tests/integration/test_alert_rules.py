"""The lab's alerting rules (deploy/compose/alerts.yml, issue 25) checked by the promtool of the
lab's own Prometheus image: the rules parse (`promtool check rules`), prometheus.yml loads them
(`promtool check config`), and `promtool test rules alerts.test.yml` fires each alert on made-up
series (and keeps it quiet below its threshold). A broken rule is refused, so the check can fail."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import ROOT, SCRIPTS, TAG
from tests.integration.containers import RUN_LABEL

COMPOSE = ROOT / "deploy" / "compose"
IMAGE = f"headwater/prometheus:{TAG}"


@pytest.fixture(scope="module")
def prometheus_image(docker_client: docker.DockerClient) -> str:
    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:  # only this image: the others take minutes
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "build-images.sh"), "prometheus"],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "HEADWATER_IMAGE_TAG": TAG},
        )
        assert proc.returncode == 0, f"build-images.sh prometheus failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return IMAGE


def _promtool(
    client: docker.DockerClient, image: str, run_id: str, directory: Path, *args: str, at: str = "/etc/prometheus"
) -> tuple[int, str]:
    container = client.containers.run(
        image,
        list(args),
        entrypoint="promtool",
        volumes={str(directory): {"bind": at, "mode": "ro"}},
        working_dir=at,
        user="0",  # the test's tmp dir is not readable by the image's prometheus user
        network_mode="none",
        labels={RUN_LABEL: run_id},
        detach=True,
    )
    try:
        code = int(container.wait(timeout=120)["StatusCode"])
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_alert_rules_parse_load_and_fire(
    docker_client: docker.DockerClient, prometheus_image: str, run_id: str, tmp_path: Path
) -> None:
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "check", "rules", "alerts.yml")
    assert code == 0 and "SUCCESS: 12 rules found" in out, out
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "test", "rules", "alerts.test.yml")
    assert code == 0 and "SUCCESS" in out, out
    # prometheus.yml loads the rules from where the lab's compose file mounts them
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "check", "config", "prometheus.yml")
    assert code == 0 and "SUCCESS: 1 rule files found" in out and "SUCCESS: 12 rules found" in out, out
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in (COMPOSE / "docker-compose.yml").read_text()
    # the check can fail: a rule with a broken expression is refused
    broken = (
        (COMPOSE / "alerts.yml")
        .read_text()
        .replace("headwater_audit_completeness < 1", "headwater_audit_completeness < < 1", 1)
    )
    (tmp_path / "alerts.yml").write_text(broken)
    code, out = _promtool(docker_client, prometheus_image, run_id, tmp_path, "check", "rules", "alerts.yml")
    assert code != 0 and "FAILED" in out, out
