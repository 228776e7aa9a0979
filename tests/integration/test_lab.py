"""The compose lab (deploy/compose/docker-compose.yml) as `make lab` runs it, under a project
name and host ports of its own so it never meets a lab someone already runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from headwater.testing.zookeeper_ensemble import four_letter
from tests.integration import kafka_io
from tests.integration.containers import free_ports
from tests.integration.kafka_io import consume, create_topic, metadata, produce, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "compose" / "docker-compose.yml"
CLUSTERS = {"dc1": (101, "dc1"), "dc2": (201, "dc2"), "agg": (301, "agg")}
WINDOW_MS = 2000
GRACE_MS = 10000
SERVICES = 30  # 3 x (3 ZooKeeper + 3 brokers), 2 WAN links, mirror, audit + PostgreSQL, 2 x activity, Spark x 2, loader, registry, Prometheus


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

    def zookeeper(self, cluster: str, i: int, command: bytes) -> dict[str, str]:
        """A four-letter word's answer (``srvr``, ``mntr``) from ZooKeeper server ``i`` of ``cluster``,
        on its published port, as key -> value ({} when it does not serve)."""
        answer = four_letter(int(self.env[f"{cluster.upper()}_ZOOKEEPER{i}_PORT"]), command, timeout=5)
        pairs = (re.split(r":\s*|\t", line, maxsplit=1) for line in answer.splitlines())
        return {kv[0].strip(): kv[1].strip() for kv in pairs if len(kv) == 2}

    def ensemble(self, cluster: str) -> dict[int, str]:
        """Server -> its mode (leader, follower; "" when it does not serve) in ``cluster``'s ensemble."""
        return {i: self.zookeeper(cluster, i, b"srvr").get("Mode", "") for i in (1, 2, 3)}


def _one_leader_two_followers(modes: dict[int, str]) -> bool:
    return sorted(modes.values()) == ["follower", "follower", "leader"]


@pytest.fixture(scope="module")
def lab(
    docker_client: docker.DockerClient, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Lab]:
    from headwater.testing import registry

    why = registry.unavailable()  # the lab's registry service runs the app make registry-deps builds
    if why:
        pytest.skip(f"the lab needs its schema registry: {why}")
    project = f"hw-it-lab-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    # the lab's CA and broker certificates, as `make lab` makes them (lab.sh certs), of this run only
    env["LAB_TLS_DIR"] = str(tmp_path_factory.mktemp("lab-tls"))
    certs = subprocess.run(
        ["bash", str(ROOT / "deploy" / "scripts" / "lab.sh"), "certs"], env=env, capture_output=True, text=True
    )
    assert certs.returncode == 0, certs.stderr
    ports = iter(free_ports(25))
    for cluster in CLUSTERS:
        for i in (1, 2, 3):
            env[f"{cluster.upper()}_ZOOKEEPER{i}_PORT"] = str(next(ports))
        for i in (1, 2, 3):
            env[f"{cluster.upper()}_BROKER{i}_PORT"] = str(next(ports))
    env["MIRROR_METRICS_PORT"] = str(next(ports))
    env["DC1_LINK_CONTROL_PORT"] = str(next(ports))
    env["DC2_LINK_CONTROL_PORT"] = str(next(ports))
    env["AUDIT_HTTP_PORT"] = str(next(ports))
    env["PROMETHEUS_PORT"] = str(next(ports))
    env["SPARK_MASTER_UI_PORT"] = str(next(ports))
    env["REGISTRY_PORT"] = str(next(ports))
    env["AUDIT_WINDOW_MS"] = str(WINDOW_MS)  # short audit windows, so the test sees them close
    env["AUDIT_GRACE_MS"] = str(GRACE_MS)
    env["LAB_ACTIVITY_RATE"] = "20"
    env["SPARK_WORKER_MEMORY"] = "1g"
    env["HEADWATER_IMAGE"] = images["headwater"]
    env["HEADWATER_ZOOKEEPER_IMAGE"] = images["zookeeper"]
    lab = Lab(project, env)
    # The host's clients log in on EXTERNAL as the lab's operator (User:admin; lab.sh certs wrote its password)
    admin_password = (Path(env["LAB_TLS_DIR"]) / "admin.password").read_text().strip()
    kafka_io.CLIENT_CONF.update(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": admin_password,
        }
    )
    try:
        lab.compose("up", "-d", "--wait", "--wait-timeout", "300", timeout=360)
        yield lab
    except BaseException:
        print(lab.compose("logs", "--tail", "40", check=False).stdout[-8000:])
        print(lab.compose("logs", "lab-init", check=False).stdout[-3000:])
        raise
    finally:
        kafka_io.CLIENT_CONF.clear()
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
    assert len(health) == SERVICES, health
    assert set(health.values()) == {"healthy"}, health

    for cluster, (first_id, rack) in CLUSTERS.items():
        # Item 38.3: each cluster's ZooKeeper is an ensemble of three, one leader and two followers
        # (their own srvr), the leader with two synced followers (mntr), which logged in to it with
        # the ensemble's SASL login (quorum.auth.enableSasl); the brokers list all three.
        modes = lab.ensemble(cluster)
        assert _one_leader_two_followers(modes), (cluster, modes)
        leader = next(i for i, mode in modes.items() if mode == "leader")
        mntr = lab.zookeeper(cluster, leader, b"mntr")
        assert (mntr.get("zk_server_state"), mntr.get("zk_synced_followers")) == ("leader", "2"), (cluster, mntr)
        leader_log = lab.compose("logs", f"{cluster}-zookeeper{leader}", check=False).stdout
        assert "Successfully authenticated learner: authenticationID=zkquorum" in leader_log, leader_log[-3000:]
        assert "zk-quorum-lab-secret" not in leader_log
        connect = lab.compose("exec", "-T", f"{cluster}-broker1", "printenv", "KAFKA_ZOOKEEPER_CONNECT").stdout.strip()
        assert connect == ",".join(f"{cluster}-zookeeper{i}:2181" for i in (1, 2, 3)), connect

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
        create_topic(bootstrap, topic, partitions=3, replication_factor=3)
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
    # Security: the mirror crossed the WAN on SASL_SSL as User:mirror; a principal without an ACL
    # for a topic is refused (the audit's may read page-views, not write it).
    mirror_log = lab.compose("logs", "mirror", check=False).stdout
    assert "cluster dc1: SASL_SSL (SCRAM-SHA-512 as mirror)" in mirror_log, mirror_log[-3000:]
    assert "mirror-lab-secret" not in mirror_log
    refused = lab.compose(
        "exec",
        "-T",
        "audit",
        "python3",
        "-c",
        _AS_AUDIT_PRODUCE,
        check=False,
    )
    assert "TOPIC_AUTHORIZATION_FAILED" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    # Review H4 (lab): the audit container carries no admin password in its environment, and no
    # listener another container reaches serves a connection that did not log in (EXTERNAL's
    # container port included: it is reachable from the DC network, not only through the host).
    audit_env = lab.compose("exec", "-T", "audit", "printenv", check=False).stdout
    assert "LAB_ADMIN_PASSWORD" not in audit_env and "admin-lab-secret" not in audit_env
    for port in (9092, 9094):
        probe = lab.compose("exec", "-T", "dc1-activity", "python3", "-c", _PLAINTEXT_METADATA % port, check=False)
        assert probe.stdout.strip() == "closed", (port, probe.stdout, probe.stderr)
    # Review M6 (lab): each ZooKeeper takes SASL logins; what the brokers wrote only they change, the
    # SCRAM credentials only they read, and the mirror reached dc1's ZooKeeper over the link logged
    # in (its group's znodes carry its SASL identity).
    zk = lab.compose("exec", "-T", "audit", "python3", "-c", _ANONYMOUS_ZOOKEEPER, check=False)
    assert zk.stdout.splitlines() == [
        "brokers ['101', '102', '103']",
        "register NoAuth",
        "acl NoAuth",
        "topic-config NoAuth",
        "read-credentials NoAuth",
        "mirror-group sasl:mirror",
    ], zk.stdout + zk.stderr

    # The mirror's own view: it serves its metrics on the published port.
    port = lab.env["MIRROR_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert b"headwater_mirror_records_total" in r.read()

    # Prometheus scrapes every broker, the mirror and the audit service (its own view: `up`).
    prom = f"http://127.0.0.1:{lab.env['PROMETHEUS_PORT']}/api/v1/query?query=up"

    def all_up() -> bool:
        with urllib.request.urlopen(prom, timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        return len(result) == 11 and all(x["value"][1] == "1" for x in result)

    wait_for(all_up, 120, "Prometheus to scrape 9 brokers, the mirror and the audit service")

    # ... and evaluates every alerting rule of deploy/compose/alerts.yml (its own view: /api/v1/rules).
    # (promtool test rules fires each one on made-up series: tests/integration/test_alert_rules.py.)
    shipped = set(re.findall(r"^\s*- alert: (\w+)", (COMPOSE_FILE.parent / "alerts.yml").read_text(), re.M))
    rules_url = f"http://127.0.0.1:{lab.env['PROMETHEUS_PORT']}/api/v1/rules?type=alert"

    def evaluated() -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(rules_url, timeout=10) as r:
            groups = json.loads(r.read())["data"]["groups"]
        rules = {rule["name"]: rule for g in groups for rule in g["rules"]}
        return (
            rules
            if set(rules) == shipped and all(r.get("lastEvaluation", "").startswith("20") for r in rules.values())
            else {}
        )

    wait_for(lambda: bool(evaluated()), 120, "Prometheus to load and evaluate every shipped alerting rule")
    rules = evaluated()
    assert len(shipped) >= 13 and all(r["health"] == "ok" for r in rules.values()), rules
    print("alerting rules:", {n: r["state"] for n, r in sorted(rules.items())})


# As User:audit (its password is in the audit container's environment), produce into dc1's page-views.
_AS_AUDIT_PRODUCE = """
import asyncio, os
from headwater.client.producer import Producer
sec = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
       "sasl.username": "audit", "sasl.password": "env:LAB_AUDIT_PASSWORD"}
async def main():
    async with Producer("dc1-broker1:9092", acks="all", security=sec, delivery_timeout_ms=20000) as p:
        await (await p.send("page-views", b"not-allowed"))
try:
    asyncio.run(main())
    print("written")
except Exception as e:
    print(repr(e))
"""


# A Metadata v1 request without any login, from another container: "closed" when the broker refuses it.
_PLAINTEXT_METADATA = """
import socket, struct
body = struct.pack(">hhih", 3, 1, 1, 5) + b"probe" + struct.pack(">i", 0)
s = socket.create_connection(("dc1-broker1", %d), timeout=10)
s.sendall(struct.pack(">i", len(body)) + body)
try:
    print("answered" if s.recv(4) else "closed")
except OSError:
    print("closed")
"""

# dc1's ZooKeeper as a client that does not log in (from the audit container, on every DC network).
_ANONYMOUS_ZOOKEEPER = """
from kazoo.exceptions import NoAuthError
from headwater.zk.client import kazoo_client
from headwater.zk.security import ZkSecurity
zk = kazoo_client("dc1-zookeeper1:2181,dc1-zookeeper2:2181,dc1-zookeeper3:2181", security=ZkSecurity())
zk.start(timeout=30)
print("brokers", sorted(zk.get_children("/brokers/ids")))
for name, attempt in (
    ("register", lambda: zk.create("/brokers/ids/999", b"{}", ephemeral=True)),
    ("acl", lambda: zk.create("/kafka-acl/Topic/evil", b"{}")),
    ("topic-config", lambda: zk.set("/config/topics/page-views", b"{}")),
    ("read-credentials", lambda: zk.get("/config/users/admin")),
):
    try:
        attempt()
        print(name, "ALLOWED")
    except NoAuthError:
        print(name, "NoAuth")
ids = zk.get_children("/consumers/headwater-mirror/ids")
print("mirror-group", " ".join(sorted({f"{a.id.scheme}:{a.id.id}" for a in zk.get_acls("/consumers/headwater-mirror/ids/" + ids[0])[0] if a.perms == 31})))
zk.stop()
"""


# ---- the whole pipeline under faults ---------------------------------------------------------

AUDITED = ("page-views", "clicks")


def _rows(lab: Lab, topic: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{lab.env['AUDIT_HTTP_PORT']}/api/v1/completeness?topic={topic}"
    with urllib.request.urlopen(url, timeout=10) as r:
        rows: list[dict[str, Any]] = json.loads(r.read())["rows"]
    return rows


def _windows(lab: Lab, start_ms: int, end_ms: int) -> dict[tuple[str, int, str], dict[str, dict[str, Any]]]:
    """(topic, window start, datacenter) -> tier -> row, for the windows inside [start_ms, end_ms)."""
    out: dict[tuple[str, int, str], dict[str, dict[str, Any]]] = {}
    for topic in AUDITED:
        for r in _rows(lab, topic):
            if start_ms <= int(r["window_start"]) and int(r["window_end"]) <= end_ms and r["datacenter"] != "-":
                out.setdefault((topic, int(r["window_start"]), r["datacenter"]), {})[r["tier"]] = r
    return out


def _under_replicated(bootstrap: str) -> list[str]:
    md = metadata(bootstrap)
    return [
        f"{t}-{p}"
        for t, tm in md.topics.items()
        for p, pm in tm.partitions.items()
        if pm.error is not None or sorted(pm.isrs) != sorted(pm.replicas)
    ]


def _kill_and_restart_broker(lab: Lab, cluster: str, i: int) -> None:
    """kill -9 of one broker; back once the others see it gone; recovered when it is in every ISR
    again (no under-replicated partition, in the brokers' own metadata)."""
    service, broker_id = f"{cluster}-broker{i}", CLUSTERS[cluster][0] + i - 1
    others = ",".join(lab.port(f"{cluster}-broker{j}", 9094) for j in (1, 2, 3) if j != i)
    lab.compose("kill", "-s", "SIGKILL", service)
    wait_for(lambda: broker_id not in metadata(others).brokers, 120, f"{cluster} to see broker {broker_id} gone")
    lab.compose("up", "-d", "--no-deps", "--wait", "--wait-timeout", "180", service, timeout=240)
    bootstrap = lab.bootstrap(cluster)
    wait_for(lambda: broker_id in metadata(bootstrap).brokers, 120, f"broker {broker_id} registered again")
    wait_for(lambda: not _under_replicated(bootstrap), 180, f"{cluster}: broker {broker_id} back in every ISR")


def test_pipeline_check_then_faults_lose_nothing_at_any_tier(lab: Lab) -> None:
    """The pipeline check, then kill -9 of a dc1 broker, of the mirror and of an aggregate broker while
    the demo producers keep writing; every window that closed meanwhile balances at the dc and
    aggregate tiers, and after a load on the lab's Spark master, at the warehouse tier."""
    aggregate = ",".join(f"agg-broker{i}:9092" for i in (1, 2, 3))
    sources = [f"--source={dc}=" + ",".join(f"{dc}-broker{i}:9092" for i in (1, 2, 3)) for dc in ("dc1", "dc2")]
    check = lab.compose(
        "exec",
        "-T",
        "audit",
        "headwater",
        "lab",
        "check",
        "--json",
        *sources,
        f"--aggregate={aggregate}",
        "--audit-url=http://127.0.0.1:8080",
        "--records=100",
        "--command-config=/etc/headwater/lab-admin.properties",
        timeout=300,
        check=False,
    )
    print(check.stderr[-2000:])
    report = json.loads(check.stdout)
    for d in report["datacenters"]:
        assert (d["acknowledged"], d["arrived"], d["duplicates"]) == (100, 100, 0), report
        print(f"pipeline check {d['datacenter']} -> agg latency: {d['latency_ms']}")

    started_ms = (int(time.time() * 1000) // WINDOW_MS + 1) * WINDOW_MS  # first whole window of the faults
    _kill_and_restart_broker(lab, "dc1", 2)
    lab.compose("kill", "-s", "SIGKILL", "mirror")
    lab.compose("up", "-d", "--no-deps", "--wait", "--wait-timeout", "180", "mirror", timeout=240)
    _kill_and_restart_broker(lab, "agg", 3)
    ended_ms = (int(time.time() * 1000) // WINDOW_MS) * WINDOW_MS  # last whole window of the faults
    assert ended_ms - started_ms >= 5 * WINDOW_MS

    # Every window of the faults closes (grace.ms after its end) and balances: a record held up by a
    # fault may reach a tier after its window closed (the audit then says "late"), so wait for the
    # counts themselves, not only for the windows to close.
    def snapshot() -> dict[tuple[str, int, str], dict[str, dict[str, Any]]]:
        got = _windows(lab, started_ms, ended_ms)
        # every window has page views from both DCs (clicks are a fifth of the traffic: one may lack them)
        views = {("page-views", w, dc) for w in range(started_ms, ended_ms, WINDOW_MS) for dc in ("dc1", "dc2")}
        if not views <= set(got):
            return {}
        closed = all(
            {"producer", dc, "agg"} <= set(tiers) and all(r["status"] != "open" for r in tiers.values())
            for (_, _, dc), tiers in got.items()
        )
        return got if closed else {}

    def balanced(got: dict[tuple[str, int, str], dict[str, dict[str, Any]]]) -> bool:
        return bool(got) and all(
            int(t[dc]["count"]) == int(t["producer"]["count"]) == int(t["agg"]["count"])
            for (_, _, dc), t in got.items()
        )

    deadline = time.monotonic() + 300
    windows = snapshot()
    while not balanced(windows) and time.monotonic() < deadline:
        time.sleep(2)
        windows = snapshot() or windows
    assert windows, "the windows of the faults never closed at every tier"
    for (topic, w, dc), tiers in sorted(windows.items()):
        sent = int(tiers["producer"]["count"])
        assert sent > 0, (topic, w, dc, tiers)
        # 100 % where it was produced and in the aggregate cluster: nothing lost, and nothing
        # doubled (the mirror skips what it had copied before its kill -9, and what a produce
        # whose answer died with the aggregate leader had appended).
        assert int(tiers[dc]["count"]) == sent, (topic, w, dc, tiers[dc])
        assert int(tiers["agg"]["count"]) == sent, (topic, w, dc, tiers["agg"])
    late = sum(1 for t in windows.values() for r in t.values() if r["status"] == "late")
    print(f"{len(windows)} windows of the faults balanced at the producer, dc and agg tiers ({late} tier(s) late)")

    # The nightly load, now, on the lab's Spark master: 100 % at the warehouse tier too.
    load = lab.compose(
        "exec",
        "-T",
        "loader",
        "sh",
        "-c",
        'exec headwater load -c /etc/headwater/loader.properties --override audit.window.ms="$AUDIT_WINDOW_MS"',
        timeout=600,
        check=False,
    )
    assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-5000:]
    assert "published" in load.stderr, load.stderr[-3000:]
    # dc1's Avro searches (schema in the lab's registry) landed typed: searches@v1, a struct per row
    typed = lab.compose(
        "exec",
        "-T",
        "loader",
        "python3",
        "-c",
        "import pyarrow.dataset as ds; t = ds.dataset('/var/lib/headwater/warehouse/searches@v1', partitioning='hive')"
        ".to_table(); v = t.column('value')[0].as_py(); print(t.num_rows, sorted(v), v['datacenter'])",
        check=False,
    )
    assert typed.returncode == 0, typed.stdout[-2000:] + typed.stderr[-3000:]
    rows, *rest = typed.stdout.split(maxsplit=1)
    assert int(rows) > 0 and "['datacenter', 'member', 'query', 'results', 'sent'] dc1" in rest[0], typed.stdout

    # The audit counter takes the load's count events from __audit in its own time, and a window's
    # warehouse row may show before its count has arrived: wait for the counts themselves.
    def warehouse() -> dict[tuple[str, int, str], dict[str, dict[str, Any]]]:
        got = _windows(lab, started_ms, ended_ms)
        return got if all("warehouse" in tiers for tiers in got.values()) else {}

    seen: list[dict[tuple[str, int, str], dict[str, dict[str, Any]]]] = [{}]

    def warehouse_balanced() -> bool:
        seen[0] = warehouse() or seen[0]
        return bool(seen[0]) and all(
            int(t["warehouse"]["count"]) == int(t["producer"]["count"]) for t in seen[0].values()
        )

    deadline = time.monotonic() + 180
    while not warehouse_balanced() and time.monotonic() < deadline:
        time.sleep(2)
    loaded = seen[0]
    assert loaded, "the warehouse tier of the windows of the faults never showed"
    for key, tiers in sorted(loaded.items()):
        assert int(tiers["warehouse"]["count"]) == int(tiers["producer"]["count"]), (key, tiers["warehouse"])


# ---- item 38.0 (the lab's half): a full restart keeping the volumes heals by itself ----------

RESTART_TOPIC = "lab-restart-%s"  # per cluster: the mirror copies dc1's and dc2's into agg
HEAL_S = 30.0  # the bound on an idle machine


def _heal_deadline() -> float:
    """HEAL_S, stretched by the machine's load (1-minute load average per core, at most 4x): the
    lab's 29 containers share the cores with whatever else runs."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return HEAL_S * min(4.0, max(1.0, load))


def _acks_all_to_every_partition(bootstrap: str, topic: str, partitions: int) -> bool:
    """One acks=all record to each partition of ``topic``, every one acknowledged (raises otherwise)."""
    from confluent_kafka import Producer

    errors: list[object] = []
    acked: set[int] = set()

    def on_delivery(err: object, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.add(msg.partition())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": 10000,
            **kafka_io.QUIET,
            **kafka_io.CLIENT_CONF,
        }
    )
    for partition in range(partitions):
        p.produce(topic, value=b"after-restart-%d" % partition, partition=partition, on_delivery=on_delivery)
    assert p.flush(15) == 0, "not every record was answered"
    assert not errors and acked == set(range(partitions)), (errors[:5], sorted(acked))
    return True


@pytest.mark.slow  # ~3.5 min: the lab's down (~30 s) and up again (~2.5 min) dominate
def test_full_restart_keeping_volumes_heals_every_isr(lab: Lab) -> None:
    """`make lab-down` (docker compose down, volumes kept) then `make lab`: within 30 s of the lab
    being up again (every service healthy; longer on a loaded machine: _heal_deadline) every
    partition of every cluster has its full ISR (the brokers' own metadata) and an acks=all produce
    to every partition of a topic succeeds in each cluster (min.insync.replicas=2, RF 3); each
    ZooKeeper ensemble has its leader and two followers again; nothing acknowledged before is lost."""
    for cluster in CLUSTERS:
        create_topic(lab.bootstrap(cluster), RESTART_TOPIC % cluster, partitions=6, replication_factor=3)
        wait_for(lambda c=cluster: not _under_replicated(lab.bootstrap(c)), 120, f"{cluster}: every ISR full before")
        produce(lab.bootstrap(cluster), RESTART_TOPIC % cluster, [(b"k%d" % i, b"before-%d" % i) for i in range(30)])
    started = time.monotonic()
    lab.compose("down", timeout=300)  # as lab.sh down: containers and networks go, the volumes stay
    down_s = time.monotonic() - started
    lab.compose("up", "-d", "--wait", "--wait-timeout", "300", timeout=360)
    up = time.monotonic()
    deadline = _heal_deadline()
    print(
        f"lab down {down_s:.0f} s, up again (all healthy) {up - started - down_s:.0f} s; heal deadline {deadline:.0f} s"
    )

    healed: dict[str, float] = {}
    for cluster in CLUSTERS:
        bootstrap = lab.bootstrap(cluster)
        wait_for(
            lambda b=bootstrap: not _under_replicated(b),
            max(1.0, deadline - (time.monotonic() - up)),
            f"{cluster}: every ISR full",
        )
        wait_for(
            lambda b=bootstrap, t=RESTART_TOPIC % cluster: _acks_all_to_every_partition(b, t, 6),
            max(1.0, deadline - (time.monotonic() - up)),
            f"{cluster}: acks=all to every partition of {RESTART_TOPIC % cluster}",
        )
        healed[cluster] = time.monotonic() - up
        assert _one_leader_two_followers(lab.ensemble(cluster)), (cluster, lab.ensemble(cluster))
    print(
        "healed (every ISR full, acks=all to every partition), seconds after up:",
        {c: round(t, 1) for c, t in healed.items()},
    )
    # The data survived: what was acknowledged before the restart is all there.
    for cluster in CLUSTERS:
        got = consume(lab.bootstrap(cluster), RESTART_TOPIC % cluster, list(range(6)), 36)
        assert {r.value for r in got} >= {b"before-%d" % i for i in range(30)}, cluster
