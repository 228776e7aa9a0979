"""Every MirrorMaker 2 key is honoured, taken differently (accepted, the reason logged) or refused at start
with one line and exit 2; never silently ignored (issue 43, item 6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater.mirror.config import MirrorConfigError, parse

BASE = {
    "clusters": "dc1, agg",
    "dc1.zookeeper.connect": "zk:2181",
    "agg.bootstrap.servers": "agg:9092",
    "dc1->agg.enabled": "true",
}


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("sync.topic.acls.enabled", "yes", "not true or false"),
        ("sync.topic.configs.enabled", "true", "not kept in step"),
        ("config.properties.exclude", "retention.ms", "allow-list"),
        ("topic.filter.class", "com.example.MyFilter", "only DefaultTopicFilter"),
        ("value.converter", "org.apache.kafka.connect.json.JsonConverter", "only ByteArrayConverter"),
        ("exactly.once.source.support", "enabled", "at-least-once"),
        ("offset-syncs.topic.location", "target", "only source"),
        ("dc1.consumer.max.poll.records", "10", "client overrides"),
        ("producer.linger.ms", "10", "client overrides"),
        ("dc1->agg.emit.checkpoints.enabled", "false", "not supported per flow"),
        ("connector.class", "MirrorSourceConnector", "dedicated-mode"),
    ],
)
def test_refused_keys_stop_the_mirror_with_one_line(key: str, value: str, says: str) -> None:
    with pytest.raises(MirrorConfigError) as e:
        parse({**BASE, key: value})
    assert says in str(e.value) and "\n" not in str(e.value) and key in str(e.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sync.topic.acls.enabled", "false"),
        ("sync.topic.configs.enabled", "false"),
        ("topic.filter.class", "org.apache.kafka.connect.mirror.DefaultTopicFilter"),
        ("key.converter", "org.apache.kafka.connect.converters.ByteArrayConverter"),
        ("dc1.exactly.once.source.support", "disabled"),
    ],
)
def test_values_the_mirror_honours_are_accepted(key: str, value: str) -> None:
    config = parse({**BASE, key: value})
    assert config.unknown == [] and config.differently == []


def test_keys_taken_differently_are_accepted_with_the_reason() -> None:
    config = parse({**BASE, "tasks.max": "4", "refresh.topics.interval.seconds": "5", "dc1->agg.tasks.max": "2"})
    assert config.unknown == []
    assert any(d.startswith("tasks.max: taken differently: every source partition") for d in config.differently)
    assert len(config.differently) == 3


def test_sync_group_offsets_needs_checkpoints() -> None:
    assert parse({**BASE, "sync.group.offsets.enabled": "true"}).sync_group_offsets_s == 60.0
    with pytest.raises(MirrorConfigError, match=r"needs emit\.checkpoints\.enabled"):
        parse({**BASE, "sync.group.offsets.enabled": "true", "emit.checkpoints.enabled": "false"})


def test_cli_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("".join(f"{k} = {v}\n" for k, v in {**BASE, "sync.topic.configs.enabled": "true"}.items()))
    r = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "sync.topic.configs.enabled" in r.stderr


def test_acl_sync_is_off_unless_asked() -> None:
    assert parse(BASE).acl_sync_interval_s is None  # MM2's default is true: docs/mirror.md says why not here
    config = parse({**BASE, "sync.topic.acls.enabled": "true", "sync.topic.acls.interval.seconds": "5"})
    assert config.acl_sync_interval_s == 5.0 and config.unknown == [] and config.differently == []
