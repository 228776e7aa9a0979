"""Each role crossed between Apache Kafka 2.3.1 and Headwater brokers in one cluster (issue 45).

One mixed cluster for the module (Kafka 1 and 2, Headwater 3 and 4; tests/mixed/cluster.py). Every
test runs an acks=all writer (librdkafka) on topics of 3 replicas while the event happens, then
reads every replica's own copy (a debugging-consumer fetch from each broker) and finds every
acknowledged record at its offset in each, and ends with what Kafka's code logged: no ERROR, WARN
or exception line beyond the reasons in tests.mixed.cluster.ALLOWED.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from tests.mixed.cluster import AckedWriter, MixedCluster


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


def test_followers_cross(mixed: MixedCluster) -> None:
    """A Headwater follower replicates from a Kafka leader and rejoins the ISR after a restart; a
    Kafka follower does the same from a Headwater leader (under a Kafka controller)."""
    mixed.make_controller(2)
    create(mixed, "k-leads", [2, 3, 4])  # Kafka leader, Headwater followers
    create(mixed, "h-leads", [4, 1, 2])  # Headwater leader, Kafka followers
    with AckedWriter(mixed.bootstrap, ["k-leads", "h-leads"]) as writer:
        writer.wait_acked(200)
        mixed.broker(3).stop()  # a controlled shutdown through the Kafka controller
        mixed.broker(1).stop()
        mixed.wait_for(lambda: not in_isr(mixed, "k-leads", 3), 60, "Headwater 3 out of k-leads' ISR")
        mixed.wait_for(lambda: not in_isr(mixed, "h-leads", 1), 60, "Kafka 1 out of h-leads' ISR")
        writer.wait_acked(200)  # written while they are away: they must fetch it to rejoin
        mixed.restart(3)
        mixed.restart(1)
        # the Kafka leader takes the Headwater follower back and the Headwater leader the Kafka one
        mixed.wait_for(lambda: in_isr(mixed, "k-leads", 3), 90, "Headwater 3 back in k-leads' ISR (Kafka leader 2)")
        mixed.wait_for(lambda: in_isr(mixed, "h-leads", 1), 90, "Kafka 1 back in h-leads' ISR (Headwater leader 4)")
        writer.wait_acked(200)
    assert writer.failed == 0
    mixed.assert_replicas_hold("k-leads", 0, writer.acked[("k-leads", 0)], [2, 3, 4])
    mixed.assert_replicas_hold("h-leads", 0, writer.acked[("h-leads", 0)], [4, 1, 2])
    assert mixed.state("k-leads", 0).leader == 2 and mixed.state("h-leads", 0).leader == 4
    assert_kafka_quiet(mixed)
