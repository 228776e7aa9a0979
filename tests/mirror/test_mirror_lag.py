"""Issue 43 item 8: the lag tells the truth. The target's only broker is paused (SIGSTOP: it takes
no writes) while the source keeps receiving records; fetching goes on, but
``headwater_mirror_partition_lag`` counts from what the target acknowledged, so it grows with every
record the target lacks, and ``headwater_mirror_record_age_ms`` with the time; once the target is
back both fall to 0. Real clusters, a real mirror process, its /metrics scraped."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, produce_keyed, read_topic, wait_for

TOPIC = "clicks"
LABELS = {"flow": "dc1->agg", "topic": TOPIC, "partition": "0"}


def _sample(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in LABELS.items()):
                return float(s.value)
    return None


def test_the_lag_counts_what_the_target_acknowledged_not_what_was_fetched(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(1)
    dst = cluster_factory(1, zookeeper_session_timeout_ms=60_000)  # paused, it keeps its session
    create_topic(src, TOPIC, partitions=1, rf=1, min_isr=1)
    assert produce_keyed(src.bootstrap, TOPIC, 10, prefix="a") == 10
    port = free_port()
    props = {
        **flow_props(src, dst, TOPIC),
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 100,
        "metrics.port": port,
    }
    m = MirrorProcess(tmp_path, "mirror", props).start()
    paused = False
    try:
        wait_for(lambda: len(read_topic(dst.bootstrap, TOPIC)) == 10, 60, "the first 10 records in agg", m)
        wait_for(lambda: _sample(port, "headwater_mirror_partition_lag") == 0, 30, "lag 0", m)
        latency = _sample(port, "headwater_mirror_replication_latency_ms")
        assert latency is not None and latency >= 0
        dst.pause(1)
        paused = True
        started = time.monotonic()
        # one record: the mirror fetches it and is stuck producing it into the paused target
        assert produce_keyed(src.bootstrap, TOPIC, 1, prefix="b") == 1
        wait_for(lambda: (_sample(port, "headwater_mirror_partition_lag") or 0) >= 1, 30, "lag 1", m)
        # more records, one produce request each: fetched ahead, never acknowledged
        for i in range(20):
            assert produce_keyed(src.bootstrap, TOPIC, 1, prefix=f"c{i}") == 1
        wait_for(
            lambda: _sample(port, "headwater_mirror_partition_lag") == 21, 30, "lag 21 while the target is paused", m
        )
        wait_for(
            lambda: (_sample(port, "headwater_mirror_record_age_ms") or 0) >= 2000,
            30,
            "record age growing while the target is paused",
            m,
        )
        print(f"lag 21 and record age >= 2 s after {time.monotonic() - started:.1f} s paused")
        dst.resume(1)
        paused = False
        wait_for(lambda: _sample(port, "headwater_mirror_partition_lag") == 0, 60, "lag 0 once the target is back", m)
        assert _sample(port, "headwater_mirror_record_age_ms") == 0
        assert len(read_topic(dst.bootstrap, TOPIC)) == 31
    finally:
        if paused:
            dst.resume(1)
        assert m.stop() == 0, m.log()[-3000:]
