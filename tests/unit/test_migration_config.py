"""A Kafka broker's server.properties carried over to Headwater (issue 45, docs/operations.md
"Migrating from Apache Kafka 2.x"): inter.broker.protocol.version is understood, 2.3 accepted and
anything else refused with what to do."""

from __future__ import annotations

import pytest

from headwater.broker.config import ConfigError, config_from_props


@pytest.mark.parametrize("version", ["2.3", "2.3-IV1", "2.3.1"])
def test_the_2_3_protocol_is_accepted_and_known(version: str) -> None:
    config = config_from_props({"zookeeper.connect": "127.0.0.1:2181", "inter.broker.protocol.version": version})
    assert "inter.broker.protocol.version" not in config.unknown


@pytest.mark.parametrize("version", ["2.2", "2.1-IV2", "2.4"])
def test_another_protocol_is_refused(version: str) -> None:
    with pytest.raises(ConfigError, match=r"set 2\.3 on every Kafka broker first"):
        config_from_props({"zookeeper.connect": "127.0.0.1:2181", "inter.broker.protocol.version": version})
