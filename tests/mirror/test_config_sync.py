"""Topic configs kept in step (MM2's ``sync.topic.configs.enabled``, ``config.properties.exclude``):
every config set on the source topic except the excluded is copied at creation (not only the nine
of the old allow-list), a change at the source reaches the target within the interval, an override
removed at the source is removed in the target, and an operator's override of an excluded key on the
target (a longer ``retention.ms`` in the aggregate cluster) is kept. Read and changed with
librdkafka's DescribeConfigs / IncrementalAlterConfigs in both clusters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, wait_for

#: MM2's default list, plus the aggregate cluster's own retention
EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas, retention\.ms"
)
WEEK_MS = str(7 * 24 * 3600 * 1000)


def _topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """The configs set on the topic itself."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def _alter(admin: AdminClient, topic: str, set_: dict[str, str], delete: tuple[str, ...] = ()) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def _safe(admin: AdminClient, topic: str) -> dict[str, str] | None:
    try:
        return _topic_configs(admin, topic)
    except Exception:
        return None  # not created yet


def test_topic_configs_copied_and_kept_in_step(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    src = cluster_factory(1)
    dst = cluster_factory(1)
    source_configs = {
        "retention.ms": "3600000",
        "segment.ms": "600000",
        "min.cleanable.dirty.ratio": "0.3",  # not among the nine of the old allow-list
        "cleanup.policy": "compact",
    }
    create_topic(src, "orders", partitions=1, rf=1, min_isr=1, configs=source_configs)
    dc1, agg = AdminClient({"bootstrap.servers": src.bootstrap}), AdminClient({"bootstrap.servers": dst.bootstrap})
    props = {
        **flow_props(src, dst, "orders"),
        "sync.topic.configs.interval.seconds": "1",
        "config.properties.exclude": EXCLUDE,
        "emit.checkpoints.enabled": "false",
        "emit.heartbeats.enabled": "false",
    }
    copied = {"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.3", "cleanup.policy": "compact"}
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        # at creation: everything set at the source but the excluded (retention.ms, min.insync.replicas)
        wait_for(lambda: _safe(agg, "orders") == copied, 60, "orders created in agg with dc1's configs", m)
        # the operator keeps a week in the aggregate cluster; dc1 then changes its topic
        _alter(agg, "orders", {"retention.ms": WEEK_MS})
        _alter(dc1, "orders", {"max.message.bytes": "200000", "retention.ms": "7200000"}, delete=("segment.ms",))
        expected = {
            "min.cleanable.dirty.ratio": "0.3",
            "cleanup.policy": "compact",
            "max.message.bytes": "200000",
            "retention.ms": WEEK_MS,
        }
        wait_for(lambda: _topic_configs(agg, "orders") == expected, 20, "dc1's change in agg, the override kept", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    assert "topic configs of orders brought in step with orders: set max.message.bytes=200000" in m.log()
    assert "back to the target's default: segment.ms" in m.log()
