"""The compose lab (deploy/compose/docker-compose.yml) as `make lab` runs it, under a project
name and host ports of its own so it never meets a lab someone already runs."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from headwater.client.audit import SyncAuditingProducer
from tests.integration.containers import free_ports
from tests.integration.kafka_io import consume, create_topic, metadata, produce, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "compose" / "docker-compose.yml"
CLUSTERS = {"dc1": (101, "dc1"), "dc2": (201, "dc2"), "agg": (301, "agg")}


class Lab:
    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project = project
        self.env = env

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", "compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def port(self, service: str, port: int) -> str:
        return self.compose("port", service, str(port)).stdout.strip()

    def bootstrap(self, cluster: str) -> str:
        return ",".join(self.port(f"{cluster}-broker{i}", 9094) for i in (1, 2, 3))


@pytest.fixture
def lab(docker_client: docker.DockerClient, images: dict[str, str]) -> Iterator[Lab]:
    project = f"hw-it-lab-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    ports = iter(free_ports(14))
    for cluster in CLUSTERS:
        env[f"{cluster.upper()}_ZOOKEEPER_PORT"] = str(next(ports))
        for i in (1, 2, 3):
            env[f"{cluster.upper()}_BROKER{i}_PORT"] = str(next(ports))
    env["MIRROR_METRICS_PORT"] = str(next(ports))
    env["AUDIT_HTTP_PORT"] = str(next(ports))
    env["AUDIT_WINDOW_MS"] = "2000"  # short audit windows, so the test sees them close
    env["AUDIT_GRACE_MS"] = "5000"
    env["HEADWATER_IMAGE"] = images["headwater"]
    env["HEADWATER_ZOOKEEPER_IMAGE"] = images["zookeeper"]
    lab = Lab(project, env)
    try:
        lab.compose("up", "-d", "--wait", "--wait-timeout", "240", timeout=300)
        yield lab
    except BaseException:
        print(lab.compose("logs", "--tail", "40", check=False).stdout[-8000:])
        raise
    finally:
        lab.compose("down", "-v", "--remove-orphans", "--timeout", "5", check=False)
        flt = {"label": f"com.docker.compose.project={project}"}
        left = (
            [c.name for c in docker_client.containers.list(all=True, filters=flt)]
            + [n.name for n in docker_client.networks.list(filters=flt)]
            + [v.name for v in docker_client.volumes.list(filters=flt)]
        )
        for c in docker_client.containers.list(all=True, filters=flt):
            c.remove(force=True, v=True)
        assert not left, f"compose down -v left {left}"


def test_compose_lab_serves_every_cluster_and_mirrors_the_dcs_into_the_aggregate(lab: Lab) -> None:
    ps = [json.loads(line) for line in lab.compose("ps", "--format", "json").stdout.splitlines() if line.strip()]
    health = {p["Service"]: p.get("Health") for p in ps}
    assert len(health) == 15, health  # 3 x (ZooKeeper + 3 brokers), the mirror, the audit and its PostgreSQL
    assert set(health.values()) == {"healthy"}, health

    for cluster, (first_id, rack) in CLUSTERS.items():
        bootstrap = lab.bootstrap(cluster)
        published = [lab.env[f"{cluster.upper()}_BROKER{i}_PORT"] for i in (1, 2, 3)]
        assert bootstrap == ",".join(f"127.0.0.1:{p}" for p in published)

        # Three brokers, each advertised on its published loopback port.
        md = metadata(bootstrap)
        assert {bid: (m.host, m.port) for bid, m in md.brokers.items()} == {
            first_id + i: ("127.0.0.1", int(published[i])) for i in range(3)
        }, f"{cluster}: {md.brokers}"
        env = lab.compose("exec", "-T", f"{cluster}-broker1", "printenv", "KAFKA_BROKER_RACK").stdout.strip()
        assert env == rack

        # Each cluster is its own: a topic made here exists nowhere else.
        topic = f"lab-{cluster}"
        create_topic(bootstrap, topic, partitions=3)
        sent = [(f"k{i}".encode(), f"{cluster}-{i}".encode()) for i in range(90)]
        produce(bootstrap, topic, sent)
        got = consume(bootstrap, topic, [0, 1, 2], len(sent))
        assert sorted(r.value for r in got) == sorted(v for _, v in sent)

    # The mirror copies each DC's topic into the aggregate cluster: same partitions, every record.
    agg = lab.bootstrap("agg")
    for cluster in ("dc1", "dc2"):
        topic = f"lab-{cluster}"
        source = {(r.partition, r.value) for r in consume(lab.bootstrap(cluster), topic, [0, 1, 2], 90)}
        wait_for(lambda topic=topic: topic in metadata(agg).topics, 120, f"the mirror to create {topic} in agg")
        mirrored = {(r.partition, r.value) for r in consume(agg, topic, [0, 1, 2], 90, timeout=120)}
        assert mirrored == source, topic
    # Nothing flows the other way, nor between the DCs.
    for cluster, expected in (("dc1", {"lab-dc1"}), ("dc2", {"lab-dc2"}), ("agg", {"lab-dc1", "lab-dc2", "lab-agg"})):
        topics = set(metadata(lab.bootstrap(cluster)).topics)
        assert {t for t in topics if t.startswith("lab-")} == expected, (cluster, topics)
    # The mirror's own view: it serves its metrics on the published port.
    port = lab.env["MIRROR_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert b"headwater_mirror_records_total" in r.read()

    # The whole pipeline: Headwater's auditing producer in dc1, the mirror, and the audit service
    # (state in PostgreSQL) reporting 100 % at the producer, dc1 and agg tiers once windows close.
    with SyncAuditingProducer(
        lab.bootstrap("dc1"), datacenter="dc1", host="lab-test", application="it", window_ms=2000, acks="all"
    ) as p:
        for f in [p.send("page-views", f"v{i}".encode(), key=f"m{i % 7}".encode()) for i in range(300)]:
            f.result(60)
    api = f"http://127.0.0.1:{lab.env['AUDIT_HTTP_PORT']}/api/v1/completeness?topic=page-views"

    def balanced() -> list[dict[str, object]]:
        with urllib.request.urlopen(api, timeout=10) as r:
            rows: list[dict[str, object]] = json.loads(r.read())["rows"]
        if not rows or any(r["status"] == "open" or r["completeness"] != 1.0 for r in rows):
            return []
        return rows

    rows = wait_for(balanced, 180, "the audit to balance page-views at every tier")
    assert isinstance(rows, list)
    assert {r["tier"] for r in rows} == {"producer", "dc1", "agg"}
    assert sum(int(str(r["count"])) for r in rows if r["tier"] == "producer") == 300
