"""Changing a topic's dynamic configs in ZooKeeper (what AlterConfigs / IncrementalAlterConfigs do).

Layout, as Kafka 2.3's AdminZkClient writes it:

- ``/config/topics/<topic>``: ``{"version":1,"config":{"retention.ms":"60000",...}}``, the topic's
  overrides only (a key absent here takes the broker's default);
- ``/config/changes/config_change_NNNNNNNNNN`` (persistent sequential):
  ``{"version":2,"entity_path":"topics/<topic>"}``, the change notification Kafka's brokers
  and tools watch.

Both are written in one ZooKeeper transaction, after the whole new set of overrides passed the
topic config registry's validation (``config.validate_topic_config``, the table CreateTopics
uses): an unknown key or a bad value is refused with INVALID_CONFIG and nothing is stored. Every
broker applies the change live through its watch on ``/config/topics/<topic>``
(``MetadataCache._on_config`` -> the log manager's ``update_topic_config``; Produce reads
``min.insync.replicas`` from the same cache).
"""

from __future__ import annotations

from collections.abc import Mapping

from kazoo.exceptions import BadVersionError, NoNodeError

from headwater.broker.config import LIST_TOPIC_CONFIGS, validate_topic_config
from headwater.broker.storage.log import LogConfig
from headwater.broker.zk import ZooKeeper
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.zk import config as zkconfig
from headwater.zk import paths as zkpaths
from headwater.zk.json import ZnodeFormatError

CONFIG_CHANGE_PREFIX = zkpaths.CONFIG_CHANGE_PREFIX

# IncrementalAlterConfigs config_operation values (KIP-339)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def read_topic_overrides(zk: ZooKeeper, topic: str) -> tuple[dict[str, str], int | None]:
    """The topic's overrides and the config znode's version (None: no znode). Raises
    UNKNOWN_TOPIC_OR_PARTITION when the topic does not exist."""
    if await zk.call(zk.client.exists, zkpaths.topic_path(topic)) is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {topic} does not exist")
    path = zkpaths.topic_config_path(topic)
    try:
        data, stat = await zk.call(zk.client.get, path)
    except NoNodeError:
        return {}, None
    try:
        return zkconfig.decode_entity_config(path, data), stat.version
    except ZnodeFormatError:
        return {}, stat.version


def incremental(current: Mapping[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to ``current``; raises KafkaError for a bad operation."""
    names = [name for name, _, _ in ops]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {dupes}")
    out = dict(current)
    for name, op, value in ops:
        if op == SET:
            if value is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for SET of {name}")
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in LIST_TOPIC_CONFIGS:
                verb = "append" if op == APPEND else "subtract"
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
            items = [v for v in (out.get(name) or "").split(",") if v]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            if items:
                out[name] = ",".join(items)
            else:
                out.pop(name, None)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")
    return out


async def write_topic_overrides(
    zk: ZooKeeper,
    topic: str,
    overrides: dict[str, str],
    version: int | None,
    defaults: LogConfig,
    validate_only: bool = False,
) -> None:
    """Validate the topic's complete new overrides and (unless ``validate_only``) store them with a
    change notification, conditional on the config znode's ``version`` read before (None: absent)."""
    problem = validate_topic_config(overrides, defaults)
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
    if validate_only:
        return
    data = zkconfig.encode_entity_config(overrides)
    tx = zk.client.transaction()
    if version is None:
        tx.create(zkpaths.topic_config_path(topic), data)
    else:
        tx.set_data(zkpaths.topic_config_path(topic), data, version=version)
    tx.create(CONFIG_CHANGE_PREFIX, zkconfig.encode_change("topics", topic), sequence=True)
    results = await zk.call(tx.commit)
    failures = [r for r in results if isinstance(r, Exception)]
    if any(isinstance(r, BadVersionError | NoNodeError) for r in failures) or (version is None and failures):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"The configs of topic {topic} changed meanwhile; describe them and retry"
        )
    if failures:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper refused the config change: {failures[0]!r}")
