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
    rules = sum(1 for line in (COMPOSE / "alerts.yml").read_text().splitlines() if line.strip().startswith("- alert:"))
    # the 13 of the audit, mirror and brokers, KafkaClientThrottled (quotas), HeadwaterMirrorPartitionLagging
    assert rules >= 15, rules
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "check", "rules", "alerts.yml")
    assert code == 0 and f"SUCCESS: {rules} rules found" in out, out
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "test", "rules", "alerts.test.yml")
    assert code == 0 and "SUCCESS" in out, out
    # prometheus.yml loads the rules from where the lab's compose file mounts them
    code, out = _promtool(docker_client, prometheus_image, run_id, COMPOSE, "check", "config", "prometheus.yml")
    assert code == 0 and "SUCCESS: 1 rule files found" in out and f"SUCCESS: {rules} rules found" in out, out
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


def test_a_loss_fires_HeadwaterAuditLoss_in_the_lab_prometheus(
    docker_client: docker.DockerClient, prometheus_image: str, run_id: str, tmp_path: Path
) -> None:
    """End to end: the real audit app (a loss written into its store, one reconciliation pass)
    scraped by the lab image's Prometheus with alerts.yml; the alert fires with its labels."""
    import asyncio
    import json
    import time
    import urllib.request

    from aiohttp import web

    from tests.audit.dashboard_data import W, app, now_window, service, write
    from tests.integration.containers import free_port

    s = service(tmp_path)
    now = now_window()
    write(s, "clicks", [now - 3 * W])
    write(s, "clicks", [now - 2 * W], tiers={"dc1": {"agg": 976}})  # the last closed window lost 24 at agg
    prom_port = free_port()

    async def scenario() -> dict[str, object]:
        await s.check()  # sets headwater_audit_completeness{topic="clicks",tier="agg"} = 1976/2000
        runner = web.AppRunner(app(s), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        audit_port = runner.addresses[0][1]
        conf = tmp_path / "prom"
        conf.mkdir()
        (conf / "alerts.yml").write_text((COMPOSE / "alerts.yml").read_text())
        (conf / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [/etc/prometheus/alerts.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: audit\n    static_configs: [{{targets: ['127.0.0.1:{audit_port}']}}]\n"
        )
        container = await asyncio.to_thread(
            docker_client.containers.run,
            prometheus_image,
            [
                "--config.file=/etc/prometheus/prometheus.yml",
                "--storage.tsdb.path=/tmp/prometheus",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            volumes={str(conf): {"bind": "/etc/prometheus", "mode": "ro"}},
            user="0",
            network_mode="host",  # to scrape the app on this host's loopback; it listens on loopback only
            labels={RUN_LABEL: run_id},
            detach=True,
        )

        def firing() -> dict[str, object] | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alerts", timeout=5) as r:
                    alerts = json.load(r)["data"]["alerts"]
            except OSError:
                return None
            return next(
                (a for a in alerts if a["labels"]["alertname"] == "HeadwaterAuditLoss" and a["state"] == "firing"),
                None,
            )

        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                got = await asyncio.to_thread(firing)
                if got is not None:
                    return got
                await asyncio.sleep(1)
            logs = (await asyncio.to_thread(container.logs, tail=40)).decode(errors="replace")
            raise AssertionError(f"HeadwaterAuditLoss did not fire in 120 s; Prometheus said:\n{logs}")
        finally:
            await asyncio.to_thread(container.remove, force=True)
            await runner.cleanup()

    alert = asyncio.run(scenario())
    s.store.close()
    labels = alert["labels"]
    assert isinstance(labels, dict)
    assert (labels["topic"], labels["tier"], labels["severity"]) == ("clicks", "agg", "page")
    assert "98.8%" in str(alert["annotations"])  # 1976 of 2000 records
