"""Adding a broker and moving a topic onto it (issue 27): kafka-reassign-partitions' workflow with a
replication throttle while an acks=all producer runs, on four real brokers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all

TOPIC = "moving"
PARTITIONS = 3
THROTTLE = 400_000  # bytes/s
PRELOAD_PER_PARTITION = 1_000_000  # bytes already in each partition when the move starts
# every partition changes; all new replicas land on the new broker 4; 1 leaves, p0's leader moves
PLAN = {0: [4, 2], 1: [3, 4], 2: [4, 3]}


@pytest.fixture
def growing_cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """Four brokers configured, three started (broker 4 is the one added later)."""
    c = Cluster(
        tmp_path / "reassign",
        "127.0.0.1",
        zookeeper.port,
        "/reassign-cluster",
        4,
        auto_leader_rebalance_enable=False,
        # Kafka's Rate measures over (num - 1) full windows at least: 2 x 1 s keeps the burst
        # allowed at the start of a move to about one second's worth of the throttle
        replication_quota_window_num=2,
        replication_quota_window_size_seconds=1,
        # a follower's fetch brings at most this much per partition: the throttle acts in steps of
        # it (Kafka's 1 MB default would let the first fetch copy a whole test partition at once)
        replica_fetch_max_bytes=65536,
    )
    try:
        for b in (1, 2, 3):
            c.brokers[b].start(wait=False)
        for b in (1, 2, 3):
            c.brokers[b].wait_ready(60)
        c.zk.start(timeout=15)
        c.wait_for(lambda: c.live_ids() == [1, 2, 3], 60, "three brokers registered")
        yield c
    finally:
        c.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _replica_bytes(c: Cluster, broker: int) -> int:
    total = 0
    for p in range(PARTITIONS):
        d = Path(c.brokers[broker].log_dir) / f"{TOPIC}-{p}"
        total += sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0
    return total


class AckedProducer:
    """acks=all records, keyed by partition, written from a thread until stopped; keeps what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is None:
            self.acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for p in range(PARTITIONS):
                try:
                    self.p.produce(
                        TOPIC, value=b"live-%08d" % n + b"." * 200, partition=p, on_delivery=self._on_delivery
                    )
                except BufferError:
                    self.p.poll(0.1)
                n += 1
            self.p.poll(0)
            self.stop.wait(0.02)  # ~ 3 x 50 records/s x 210 bytes: well under the throttle

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.p.flush(60) == 0


def test_add_a_broker_and_reassign_a_topic_onto_it_with_a_throttle(growing_cluster: Cluster, tmp_path: Path) -> None:
    c = growing_cluster
    zk_connect = f"127.0.0.1:{c.zk_port}{c.chroot}"
    create_topic(c, TOPIC, partitions=PARTITIONS, rf=2, min_isr=2)
    current = json.loads(c.zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]
    assert all(4 not in rs for rs in current.values())
    preload = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 16384})
    for p in range(PARTITIONS):
        for i in range(PRELOAD_PER_PARTITION // 1000):
            preload.produce(TOPIC, value=b"%06d" % i + b"p" * 994, partition=p)
            preload.poll(0)
    assert preload.flush(60) == 0

    # the new broker joins
    c.brokers[4].start(timeout=60)
    c.wait_for(lambda: c.live_ids() == [1, 2, 3, 4], 60, "broker 4 registered")

    # --generate proposes an assignment over the new broker set
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    gen = _cli("reassign-partitions", "--zookeeper", zk_connect, "--generate", "--topics-to-move-json-file",
               str(topics), "--broker-list", "2,3,4")  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    proposed = json.loads(gen.stdout.split("Proposed partition reassignment configuration")[1])
    assert {e["partition"] for e in proposed["partitions"]} == set(range(PARTITIONS))
    assert all(set(e["replicas"]) <= {2, 3, 4} and len(e["replicas"]) == 2 for e in proposed["partitions"])

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": TOPIC, "partition": p, "replicas": rs} for p, rs in PLAN.items()]}
        )
    )
    producer = AckedProducer(c.bootstrap)
    producer.thread.start()
    try:
        c.wait_for(lambda: len(producer.acked) > 30, 60, "the producer to get going")
        before = _replica_bytes(c, 4)
        acked_before = len(producer.acked)
        started = time.monotonic()
        out = _cli("reassign-partitions", "--zookeeper", zk_connect, "--execute", "--reassignment-json-file",
                   str(plan), "--throttle", str(THROTTLE))  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "Successfully started reassignment of partitions." in out.stdout
        assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out.stdout
        rollback = json.loads(out.stdout.split("Current partition replica assignment")[1].split("Save this")[0])
        assert {e["partition"]: e["replicas"] for e in rollback["partitions"]} == {
            int(p): rs for p, rs in current.items()
        }
        # the throttles, as Kafka's tool sets them
        broker4 = json.loads(c.zk.get("/config/brokers/4")[0])["config"]
        assert broker4["follower.replication.throttled.rate"] == str(THROTTLE)
        topic_cfg = json.loads(c.zk.get(f"/config/topics/{TOPIC}")[0])["config"]
        assert "0:4" in topic_cfg["follower.replication.throttled.replicas"].split(",")
        assert f"0:{current['0'][0]}" in topic_cfg["leader.replication.throttled.replicas"].split(",")
        again = _cli(
            "reassign-partitions", "--zookeeper", zk_connect, "--execute", "--reassignment-json-file", str(plan)
        )
        assert again.returncode == 1 and "There is an existing assignment running." in again.stderr

        # the controller moves mid-reassignment (its znode deleted, as operators force a failover):
        # the new one resumes what /admin/reassign_partitions lists
        first_controller = c.controller()
        c.zk.delete("/controller")
        c.wait_for(lambda: c.controller() not in (None, first_controller), 60, "another controller")
        new_controller = c.controller()
        assert new_controller is not None and c.zk.exists("/admin/reassign_partitions")

        # progress, measured from broker 4's own log dir, until --verify says done
        samples: list[tuple[float, int]] = []
        statuses: list[str] = []
        follower_rates: list[float] = []
        deadline = time.monotonic() + 120
        while True:
            samples.append((time.monotonic(), _replica_bytes(c, 4)))
            if not c.zk.exists("/admin/reassign_partitions"):
                break
            assert time.monotonic() < deadline, f"reassignment not done; last --verify: {statuses[-1:]}"
            follower_rates.append(c.metric(4, "kafka_server_followerreplication_byte_rate") or 0.0)
            if len(samples) % 10 == 1:
                v = _cli("reassign-partitions", "--zookeeper", zk_connect, "--verify", "--reassignment-json-file",
                         str(plan))  # fmt: skip
                statuses.append(v.stdout)
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        done = _cli("reassign-partitions", "--zookeeper", zk_connect, "--verify", "--reassignment-json-file", str(plan))
        assert done.returncode == 0, done.stdout + done.stderr
        for p in PLAN:
            assert f"Reassignment of partition {TOPIC}-{p} completed successfully" in done.stdout
        assert "Throttle was removed." in done.stdout
        resumed = c.brokers[new_controller].output.read_text(errors="replace")
        assert f"[Controller id={new_controller}] reassignment of {TOPIC}-" in resumed
        assert "completed: replicas" in resumed  # the new controller finished the move
        assert any("is still in progress" in s for s in statuses)
        # the producer kept going through the move
        c.wait_for(lambda: len(producer.acked) > acked_before + 100, 30, "acks after the move")
    finally:
        producer.close()

    # the throttle bounded the copy: what broker 4 received, over the time it took
    copied = samples[-1][1] - before
    assert copied >= PARTITIONS * PRELOAD_PER_PARTITION  # every partition is on broker 4 now
    rate = copied / elapsed
    print(
        f"reassignment: {copied} bytes to broker 4 in {elapsed:.1f}s = {rate / 1000:.0f} kB/s (throttle {THROTTLE / 1000:.0f} kB/s)"
    )
    assert rate <= 2 * THROTTLE, f"{rate:.0f} B/s copied with a {THROTTLE} B/s throttle"
    # and no 3 s stretch went far above it (the start may burst about one window's worth)
    for i, (t0, b0) in enumerate(samples):
        for t1, b1 in samples[i + 1 :]:
            if t1 - t0 >= 3.0:
                assert (b1 - b0) / (t1 - t0) <= 2.5 * THROTTLE, f"{(b1 - b0) / (t1 - t0):.0f} B/s over {t1 - t0:.1f}s"
                break

    # broker 4's own measure of its throttled fetching (kafka_server_followerreplication_byte_rate)
    assert max(follower_rates) > 0
    print(f"broker 4's follower byte-rate while moving: max {max(follower_rates) / 1000:.0f} kB/s")

    # the cluster's view: the plan is the assignment, the ISR is the new replicas, broker 1 holds nothing
    final = json.loads(c.zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]
    assert {int(p): rs for p, rs in final.items()} == PLAN
    for p, rs in PLAN.items():
        c.wait_for(lambda p=p, rs=rs: sorted(c.state(TOPIC, p)["isr"]) == sorted(rs), 60, f"{TOPIC}-{p} ISR {rs}")
        assert c.state(TOPIC, p)["leader"] in rs
    c.wait_for(
        lambda: not any((Path(c.brokers[1].log_dir) / f"{TOPIC}-{p}").exists() for p in range(PARTITIONS)),
        60,
        "broker 1's replicas deleted",
    )
    assert json.loads(c.zk.get("/config/brokers/4")[0])["config"] == {}
    assert "follower.replication.throttled.replicas" not in json.loads(c.zk.get(f"/config/topics/{TOPIC}")[0])["config"]

    # nothing acknowledged was lost
    assert not producer.errors, producer.errors[:5]
    for p in range(PARTITIONS):
        stored = read_all(c, TOPIC, p)
        acked = {off: v for (q, off), v in producer.acked.items() if q == p}
        missing = [off for off, v in acked.items() if stored.get(off) != v]
        assert not missing, f"{TOPIC}-{p}: {len(missing)} acknowledged records lost, e.g. offsets {missing[:5]}"
        assert len(stored) >= PRELOAD_PER_PARTITION // 1000 + len(acked)

    # the Ansible way (deploy/ansible/rebalance.yml): spread the topic over all four brokers again
    out = _run_rebalance_playbook(c, tmp_path, [1, 2, 3, 4], throttle=20_000_000)
    assert "Throttle was removed." in out
    assert not c.zk.exists("/admin/reassign_partitions")
    spread = json.loads(c.zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]
    assert all(len(rs) == 2 and set(rs) <= {1, 2, 3, 4} for rs in spread.values())
    for p in spread:  # --verify's lines, as the playbook showed them: the generated plan is what happened
        assert f"Reassignment of partition {TOPIC}-{p} completed successfully" in out
    for p, rs in spread.items():
        c.wait_for(lambda p=p, rs=rs: sorted(c.state(TOPIC, int(p))["isr"]) == sorted(rs), 60, f"{TOPIC}-{p} in sync")
        stored = read_all(c, TOPIC, int(p))
        acked = {off: v for (q, off), v in producer.acked.items() if q == int(p)}
        assert all(stored.get(off) == v for off, v in acked.items())


def _run_rebalance_playbook(c: Cluster, tmp_path: Path, broker_ids: list[int], throttle: int) -> str:
    """deploy/ansible/rebalance.yml against the test cluster, from this machine (a local connection
    in place of SSH, this checkout's headwater command in place of a broker unit's)."""
    ansible_dir = Path(__file__).resolve().parents[2] / "deploy" / "ansible"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "dc1": {"hosts": {"localhost": {}}},
                        "brokers": {"hosts": {"localhost": {}}},
                        "zookeeper": {"hosts": {}},
                    },
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                }
            }
        )
    )
    extra = {
        "rebalance_datacenter": "dc1",
        "rebalance_broker_ids": broker_ids,
        "rebalance_topics": [TOPIC],
        "rebalance_throttle": throttle,
        "rebalance_poll_interval": 1,
        "rebalance_timeout": 120,
        "rebalance_zookeeper_connect": f"127.0.0.1:{c.zk_port}{c.chroot}",
        "rebalance_bootstrap": c.bootstrap,
        "rebalance_headwater_cli": str(Path(sys.executable).parent / "headwater"),
        "ansible_become": False,
    }
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            "rebalance.yml",
            "-e",
            json.dumps(extra),
        ],
        cwd=ansible_dir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return run.stdout
