"""Clusters of containers (ZooKeeper + 3 brokers) driven by a stock client on the host."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict

import pytest

from tests.integration.containers import ContainerCluster
from tests.integration.kafka_io import (
    broker_ids,
    consume,
    create_topic,
    leaders,
    metadata,
    produce,
    wait_for,
)

pytestmark = pytest.mark.integration


def records(prefix: str, n: int, keys: int = 60) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % keys}".encode(), f"{prefix}-{i}".encode()) for i in range(n)]


def by_key(got: list[object]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):  # type: ignore[attr-defined]
        out[r.key].append(r.value)  # type: ignore[attr-defined]
    return dict(out)


def test_stock_client_produces_and_consumes_across_broker_containers(cluster_factory: object) -> None:
    assert callable(cluster_factory)
    cluster: ContainerCluster = cluster_factory("basic", rack="it")

    # Every broker is advertised on its published loopback port, whichever broker answers.
    for b in cluster.brokers:
        md = metadata(b.address)
        assert {bid: (m.host, m.port) for bid, m in md.brokers.items()} == {
            x.broker_id: ("127.0.0.1", x.port) for x in cluster.brokers
        }

    topic = "it-orders"
    create_topic(cluster.bootstrap, topic, partitions=6)
    lead = leaders(cluster.bootstrap, topic, 6)
    assert set(lead.values()) == {1, 2, 3}, f"partitions should be spread over all brokers: {lead}"

    sent = records("v", 600)
    delivered = produce(cluster.bootstrap, topic, sent, **{"compression.type": "lz4"})
    assert {p for p, _ in delivered} == set(range(6))

    got = consume(cluster.bootstrap, topic, list(range(6)), len(sent))
    assert len(got) == len(sent)
    want: dict[bytes, list[bytes]] = defaultdict(list)
    for k, v in sent:
        want[k].append(v)
    assert by_key(got) == dict(want), "every record once, in order per key"

    # The INTERNAL listener: a client inside broker1's container produces through broker2's
    # internal address; the host reads the records through the published ports.
    internal_topic = "it-internal"
    create_topic(cluster.bootstrap, internal_topic, partitions=1)
    out = cluster.broker(1).container.exec_run(
        [
            "sh",
            "-c",
            "printf 'k1:a\\nk2:b\\nk3:c\\n' | headwater produce --bootstrap-server broker2:9092 "
            f"--topic {internal_topic} --key-separator :",
        ]
    )
    assert out.exit_code == 0, out.output.decode(errors="replace")
    got = consume(cluster.bootstrap, internal_topic, [0], 3)
    assert [(r.key, r.value) for r in got] == [(b"k1", b"a"), (b"k2", b"b"), (b"k3", b"c")]

    # kcat, the other stock client, sees the same cluster.
    kcat = subprocess.run(["kcat", "-b", cluster.brokers[0].address, "-L"], capture_output=True, text=True, timeout=30)
    assert kcat.returncode == 0, kcat.stderr
    assert kcat.stdout.count(" at 127.0.0.1:") == 3, kcat.stdout


def test_cluster_fails_over_when_the_leader_container_is_killed(cluster_factory: object) -> None:
    assert callable(cluster_factory)
    cluster: ContainerCluster = cluster_factory("failover", **{"KAFKA_MIN_INSYNC_REPLICAS": "2"})
    topic = "it-failover"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})

    def fully_replicated() -> bool:
        p = metadata(cluster.bootstrap, topic).topics[topic].partitions[0]
        return len(p.replicas) == 3 and sorted(p.isrs) == sorted(p.replicas)

    wait_for(fully_replicated, 30, "3 replicas in sync")

    before = records("before", 200)
    produce(cluster.bootstrap, topic, before, **{"acks": "all"})
    old_leader = leaders(cluster.bootstrap, topic, 1)[0]

    cluster.kill(old_leader)
    survivors = ",".join(b.address for b in cluster.brokers if b.broker_id != old_leader)

    def new_leader() -> int:
        got = leaders(survivors, topic, 1).get(0, -1)
        return got if got not in (-1, old_leader) else 0

    elected = wait_for(new_leader, 45, f"a new leader after killing broker {old_leader}")
    assert elected in {b.broker_id for b in cluster.brokers} - {old_leader}
    wait_for(lambda: broker_ids(survivors) == {1, 2, 3} - {old_leader}, 30, "the dead broker to leave the metadata")

    # acks=all with min.insync.replicas=2 still works on the two survivors.
    after = records("after", 200)
    produce(survivors, topic, after, **{"acks": "all"})
    got = consume(survivors, topic, [0], len(before) + len(after))
    assert [r.value for r in got] == [v for _, v in before + after], "nothing acknowledged is lost, order kept"

    # The old leader comes back as a follower and catches up.
    cluster.start_again(old_leader)
    wait_for(fully_replicated, 60, "the restarted broker back in the ISR")


def test_broker_containers_restarted_keep_their_data(cluster_factory: object) -> None:
    assert callable(cluster_factory)
    cluster: ContainerCluster = cluster_factory("durable")
    topic = "it-durable"
    create_topic(cluster.bootstrap, topic, partitions=3)
    lead = leaders(cluster.bootstrap, topic, 3)
    assert set(lead.values()) == {1, 2, 3}, lead
    sent = records("d", 300)
    produce(cluster.bootstrap, topic, sent)

    def all_there(label: str) -> None:
        wait_for(lambda: broker_ids(cluster.bootstrap) == {1, 2, 3}, 60, f"3 live brokers {label}")
        wait_for(lambda: leaders(cluster.bootstrap, topic, 3) == lead, 60, f"the same leaders {label}")
        got = consume(cluster.bootstrap, topic, [0, 1, 2], len(sent))
        assert sorted(r.value for r in got) == sorted(v for _, v in sent), f"records lost {label}"
        assert len(got) == len(sent)

    # docker restart: SIGTERM and start, same container.
    cluster.restart(1)
    all_there("after docker restart of broker 1")

    # A new container on the old volume: the data lives on the named volume, not in the container.
    old_id = cluster.broker(2).container.id
    cluster.replace(2)
    assert cluster.broker(2).container.id != old_id
    all_there("after broker 2's container was replaced")

    # A crash (SIGKILL) and a start: the log is recovered, the ZooKeeper session of the dead
    # process expires, the broker registers again.
    cluster.kill(3)
    time.sleep(1)
    cluster.start_again(3)
    all_there("after broker 3 was killed and started again")

    # And the data keeps growing after all that.
    more = records("e", 30)
    produce(cluster.bootstrap, topic, more)
    got = consume(cluster.bootstrap, topic, [0, 1, 2], len(sent) + len(more))
    assert len(got) == len(sent) + len(more)
