"""Retention in a running broker: an idle partition's data expires on its own (segment.ms rolls the
active segment without appends), and the log start offset moves forward (ListOffsets earliest)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer

from headwater.client.sync import SyncConsumer
from tests.harness.broker import BrokerProcess


def test_idle_partition_expires_by_retention_ms(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(
        0,
        log_roll_ms=1000,
        log_retention_ms=3000,
        log_retention_check_interval_ms=500,
        auto_create_topics_enable="true",
        num_partitions=1,
    )
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(20):
        p.produce("idle", value=f"v{i}".encode(), timestamp=int(time.time() * 1000))
    assert p.flush(30) == 0
    with SyncConsumer(b.bootstrap) as c:
        assert c.offsets_before("idle", 0, -1, 1) == [20]
        deadline = time.monotonic() + 60
        # Nothing is appended any more: the broker alone must roll and then expire the data.
        while c.offsets_before("idle", 0, -2, 1) != [20]:
            assert time.monotonic() < deadline, "the idle partition's records never expired"
            time.sleep(0.2)
        assert c.offsets_before("idle", 0, -1, 1) == [20]  # the log end offset stays
