"""Each role crossed between Apache Kafka 2.3.1 and Headwater brokers in one cluster (issue 45).

One mixed cluster for the module (Kafka 1 and 2, Headwater 3 and 4; tests/mixed/cluster.py). Every
test runs an acks=all writer (librdkafka) on topics of 3 replicas while the event happens, then
reads every replica's own copy (a debugging-consumer fetch from each broker) and finds every
acknowledged record at its offset in each, and ends with what Kafka's code logged: no ERROR, WARN
or exception line beyond the reasons in tests.mixed.cluster.ALLOWED.

Times on this 2-core machine shared with other test runs (load average 60-150), 6-8 runs each:
the cluster's start 15-41 s; test_zookeeper_documents_match <0.1 s; test_followers_cross 43-89 s
(median 60); test_kafka_controller_elects_headwater_leader 29-62 s (median 46);
test_headwater_controller_elects_kafka_leader 18-35 s (median 28);
test_headwater_controller_drives_kafka 40-114 s (median 86, slow: a restart of a Kafka JVM and
three runs of Kafka's tools); the module 3.5-5.2 min (median 4.5, five runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.zk import paths
from tests.mixed.cluster import AckedWriter, MixedCluster


@pytest.fixture(autouse=True)
def marked(mixed: MixedCluster) -> None:
    """Each test answers for what Kafka logged while it ran."""
    mixed.mark()


def create(mixed: MixedCluster, topic: str, replicas: list[int]) -> None:
    """A topic of one partition on ``replicas`` (the first its preferred leader), created through
    the controller as CreateTopics with a replica assignment; waits until its leader is elected."""
    admin = AdminClient({"bootstrap.servers": mixed.bootstrap})
    for f in admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[replicas])], operation_timeout=30
    ).values():
        f.result(60)
    mixed.wait_for(
        lambda: mixed.state(topic, 0).leader == replicas[0] and set(mixed.state(topic, 0).isr) == set(replicas),
        60,
        f"{topic}-0 led by {replicas[0]} with ISR {replicas}",
    )


def in_isr(mixed: MixedCluster, topic: str, broker: int) -> bool:
    return broker in mixed.state(topic, 0).isr


def assert_kafka_quiet(mixed: MixedCluster) -> None:
    problems = mixed.kafka_problems()
    assert not problems, "Kafka logged:\n" + "\n".join(problems[:40])


def test_zookeeper_documents_match(mixed: MixedCluster) -> None:
    """A Headwater broker registers in /brokers/ids with the document a Kafka 2.3.1 broker writes:
    the same keys, version and value types (only the values that are each broker's own differ)."""

    def registration(broker: int) -> dict[str, object]:
        data, _ = mixed.zk.get(paths.broker_path(broker))
        return dict(json.loads(data))

    kafka, headwater = registration(1), registration(3)
    assert sorted(headwater) == sorted(kafka)
    assert {k: type(v) for k, v in headwater.items()} == {k: type(v) for k, v in kafka.items()}
    same = ("version", "jmx_port", "listener_security_protocol_map", "host")
    assert {k: headwater[k] for k in same} == {k: kafka[k] for k in same}
    assert headwater["endpoints"] == [f"PLAINTEXT://127.0.0.1:{mixed.broker(3).port}"]
    assert_kafka_quiet(mixed)


def test_followers_cross(mixed: MixedCluster) -> None:
    """A Headwater follower replicates from a Kafka leader and rejoins the ISR after a restart; a
    Kafka follower does the same from a Headwater leader (under a Kafka controller)."""
    mixed.make_controller(2)
    create(mixed, "k-leads", [2, 3, 4])  # Kafka leader, Headwater followers
    create(mixed, "h-leads", [4, 1, 2])  # Headwater leader, Kafka followers
    with AckedWriter(mixed.bootstrap, ["k-leads", "h-leads"]) as writer:
        writer.wait_acked(100)
        mixed.stop_broker(3, 1)  # controlled shutdowns through the Kafka controller
        mixed.wait_for(lambda: not in_isr(mixed, "k-leads", 3), 60, "Headwater 3 out of k-leads' ISR")
        mixed.wait_for(lambda: not in_isr(mixed, "h-leads", 1), 60, "Kafka 1 out of h-leads' ISR")
        writer.wait_acked(100)  # written while they are away: they must fetch it to rejoin
        mixed.restart(3, 1)
        # the Kafka leader takes the Headwater follower back and the Headwater leader the Kafka one
        mixed.wait_for(lambda: in_isr(mixed, "k-leads", 3), 90, "Headwater 3 back in k-leads' ISR (Kafka leader 2)")
        mixed.wait_for(lambda: in_isr(mixed, "h-leads", 1), 90, "Kafka 1 back in h-leads' ISR (Headwater leader 4)")
        writer.wait_acked(100)
    assert writer.failed == 0
    mixed.assert_replicas_hold("k-leads", 0, writer.acked[("k-leads", 0)], [2, 3, 4])
    mixed.assert_replicas_hold("h-leads", 0, writer.acked[("h-leads", 0)], [4, 1, 2])
    assert mixed.state("k-leads", 0).leader == 2 and mixed.state("h-leads", 0).leader == 4
    assert_kafka_quiet(mixed)


def kill9_leader_and_rejoin(
    mixed: MixedCluster, controller: int, topic: str, replicas: list[int], successor: int
) -> None:
    """Under ``controller`` and an acks=all writer, kill -9 the leader of a new ``topic`` on ``replicas``
    (the first): the controller elects ``successor``, the killed broker comes back as its follower
    and rejoins the ISR, every acknowledged record stands in each replica and Kafka logged nothing."""

    def kind(broker: int) -> str:
        return "Kafka" if mixed.is_kafka(broker) else "Headwater"

    def name(broker: int) -> str:
        return f"{kind(broker)} {broker}"

    killed = replicas[0]
    mixed.make_controller(controller)
    create(mixed, topic, replicas)
    with AckedWriter(mixed.bootstrap, [topic]) as writer:
        writer.wait_acked(100)
        mixed.kill9(killed)
        mixed.wait_for(
            lambda: mixed.state(topic, 0).leader == successor,
            60,
            f"the {kind(controller)} controller to elect {name(successor)}",
        )
        writer.wait_acked(100)
        mixed.restart(killed)
        mixed.wait_for(
            lambda: in_isr(mixed, topic, killed), 90, f"{name(killed)} in {topic}' ISR (leader {name(successor)})"
        )
        writer.wait_acked(100)
    assert writer.failed == 0
    assert mixed.controller() == controller
    mixed.assert_replicas_hold(topic, 0, writer.acked[(topic, 0)], replicas)
    assert_kafka_quiet(mixed)


def test_kafka_controller_elects_headwater_leader(mixed: MixedCluster) -> None:
    """kill -9 of a Kafka leader: the Kafka controller elects a Headwater follower; the Kafka broker
    comes back as that Headwater leader's follower (truncating by OffsetForLeaderEpoch) and rejoins
    the ISR."""
    kill9_leader_and_rejoin(mixed, controller=2, topic="k-dies", replicas=[1, 3, 4], successor=3)


def test_headwater_controller_elects_kafka_leader(mixed: MixedCluster) -> None:
    """kill -9 of a Headwater leader: a Headwater controller elects a Kafka follower; the Headwater
    broker comes back as that Kafka leader's follower and rejoins the ISR."""
    kill9_leader_and_rejoin(mixed, controller=4, topic="h-dies", replicas=[3, 1, 2], successor=1)


@pytest.mark.slow
def test_headwater_controller_drives_kafka(mixed: MixedCluster, tmp_path: Path) -> None:
    """A Headwater controller takes a Kafka broker through a controlled shutdown (Kafka's
    ControlledShutdown request, leadership moved off it first), a preferred-leader election asked
    with Kafka's own tool, and a reassignment with throttles made and verified with Kafka's own
    tool: a Headwater replica added behind a Kafka leader, a Kafka replica removed (StopReplica)."""
    mixed.make_controller(3)
    create(mixed, "driven", [1, 2, 4])
    zk = mixed.zk_connect
    with AckedWriter(mixed.bootstrap, ["driven"]) as writer:
        writer.wait_acked(100)
        mixed.stop_broker(1)
        log = (mixed.kafka[1].dir / "server.log").read_text(errors="replace")
        assert "Controlled shutdown succeeded" in log.rpartition("Starting controlled shutdown")[2]
        assert mixed.state("driven", 0).leader == 2
        writer.wait_acked(100)
        mixed.restart(1)
        mixed.wait_for(lambda: in_isr(mixed, "driven", 1), 90, "Kafka 1 back in driven's ISR")

        election = tmp_path / "election.json"
        election.write_text(json.dumps({"partitions": [{"topic": "driven", "partition": 0}]}))
        mixed.kafka_tool(
            "kafka.admin.PreferredReplicaLeaderElectionCommand",
            "--bootstrap-server",
            mixed.bootstrap,
            "--path-to-json-file",
            str(election),
        )
        mixed.wait_for(lambda: mixed.state("driven", 0).leader == 1, 60, "the preferred leader, Kafka 1, elected")
        writer.wait_acked(100)

        plan = tmp_path / "reassign.json"
        target = [1, 4, 3]
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": "driven", "partition": 0, "replicas": target}]})
        )
        tool = "kafka.admin.ReassignPartitionsCommand"
        mixed.kafka_tool(
            tool, "--zookeeper", zk, "--reassignment-json-file", str(plan), "--execute", "--throttle", "5000000"
        )
        mixed.wait_for(
            lambda: (
                not mixed.zk.exists("/admin/reassign_partitions")
                and mixed.assignment("driven") == {0: target}
                and set(mixed.state("driven", 0).isr) == set(target)
            ),
            120,
            f"driven-0 reassigned to {target}",
        )
        out = mixed.kafka_tool(tool, "--zookeeper", zk, "--reassignment-json-file", str(plan), "--verify")
        assert "Reassignment of partition driven-0 completed successfully" in out, out
        assert "Throttle was removed" in out, out
        writer.wait_acked(100)
    assert writer.failed == 0
    assert mixed.controller() == 3
    mixed.assert_replicas_hold("driven", 0, writer.acked[("driven", 0)], target)
    # the removed Kafka replica was told to delete its log (StopReplica, delete_partitions)
    mixed.wait_for(lambda: not (mixed.kafka[2].dir / "logs" / "driven-0").exists(), 60, "Kafka 2 to drop driven-0")
    for b in mixed.ids:
        assert "leader.replication.throttled.rate" not in mixed.broker_config(b), b
    assert "leader.replication.throttled.replicas" not in mixed.topic_config("driven")
    assert_kafka_quiet(mixed)
