"""Review finding 1: a compacted source topic, cleaned before the mirror starts, is mirrored from
earliest; every surviving key arrives and the target's offsets are dense (real clusters)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.harness.records import latest_by_key, read_from_start
from tests.mirror.test_mirror import _healthz, _props
from tests.mirror.util import MirrorProcess, raw_batches, wait_for

TOPIC = "changelog"
KEYS = 20


def test_a_cleaned_compacted_topic_is_mirrored_key_for_key_with_dense_target_offsets(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(1, log_cleaner_backoff_ms=200)
    dst = cluster_factory(1, log_cleaner_enable=False)  # the target keeps what the mirror wrote, uncleaned
    configs = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
    create_topic(src, TOPIC, rf=1, min_isr=1, configs=configs)
    p = Producer({"bootstrap.servers": src.bootstrap, "acks": "all", "batch.size": 2000, "enable.idempotence": False})
    expected: dict[str, str | None] = {}
    for r in range(100):
        for k in range(KEYS):
            value = None if (r == 99 and k == 0) else f"v{r}"  # key-0 ends in a tombstone
            p.produce(TOPIC, key=f"key-{k}".encode(), value=None if value is None else value.encode(), partition=0)
            expected[f"key-{k}"] = value
        p.poll(0)
    assert p.flush(60) == 0
    wait_for(lambda: f"cleaned {TOPIC}-0" in src.brokers[1].output.read_text(), 90, "the source to clean")
    source = read_from_start(src.bootstrap, TOPIC)
    assert latest_by_key(source) == expected
    cleaned = [h for h, _ in raw_batches(src.bootstrap, TOPIC, 0) if h.records_count != h.last_offset_delta + 1]
    assert cleaned, "the cleaner left batches with offset gaps"

    port = free_port()
    m = MirrorProcess(tmp_path, "mirror", _props(src, dst, **{"dc1->agg.topics": TOPIC, "metrics.port": port})).start()
    try:
        wait_for(
            lambda: len(read_from_start(dst.bootstrap, TOPIC)) == len(source),
            120,
            "every source record in the target",
            m,
        )
        target = read_from_start(dst.bootstrap, TOPIC)
        assert latest_by_key(target) == expected
        assert [(k, v) for _, k, v in target] == [(k, v) for _, k, v in source]  # same order, nothing twice
        assert [o for o, _, _ in target] == list(range(len(target)))  # dense
        for h, _ in raw_batches(dst.bootstrap, TOPIC, 0):
            assert h.records_count == h.last_offset_delta + 1
        wait_for(lambda: _healthz(port) == 200, 60, "the mirror to report healthy", m)
        assert "re-encoded" in m.log()
    finally:
        assert m.stop() == 0, m.log()[-3000:]
