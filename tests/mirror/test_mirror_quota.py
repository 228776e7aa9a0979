"""The mirror held by a produce quota on the aggregate cluster (issue 42 item 4): it copies
everything, reports being throttled (``headwater_mirror_produce_throttle_time_seconds``, one log line
a minute at most), and never takes a throttle for an error. Real clusters, a real mirror process, the
quota written by ``headwater configs`` as Kafka's kafka-configs does; the log's once-a-minute rule
with an injected clock."""

from __future__ import annotations

import logging
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from headwater.mirror.metrics import MirrorMetrics, ThrottleReport
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, produce_keyed, read_topic, wait_for, zk_connect

QUOTA = 10_000  # bytes/s; the 3000 records below are ~180 kB uncompressed: past the ~10 s burst allowance


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_a_mirror_held_by_its_produce_quota_copies_everything_and_reports_the_throttle(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src, dst = cluster_factory(1), cluster_factory(1)
    create_topic(src, "clicks", partitions=1, rf=1, min_isr=1)
    # the mirror's client id on the aggregate cluster (unauthenticated: user ANONYMOUS)
    subprocess.run(
        [
            *(sys.executable, "-m", "headwater.cli.main", "configs", "--zookeeper", zk_connect(dst), "--alter"),
            *("--entity-type", "clients", "--entity-name", "headwater-mirror"),
            *("--add-config", f"producer_byte_rate={QUOTA}"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert produce_keyed(src.bootstrap, "clicks", 3000, compression="none") == 3000
    port = free_port()
    props = {
        **flow_props(src, dst, "clicks"),
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 100,
        "metrics.port": port,
    }
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        wait_for(lambda: len(read_topic(dst.bootstrap, "clicks")) == 3000, 120, "all 3000 records in agg", m)
        assert sorted(read_topic(dst.bootstrap, "clicks")) == sorted(read_topic(src.bootstrap, "clicks"))
        throttled = _metric(port, "headwater_mirror_produce_throttle_time_seconds_count")
        total_s = _metric(port, "headwater_mirror_produce_throttle_time_seconds_sum")
        print(f"throttled answers {throttled:.0f}, {total_s:.1f} s in all")
        assert throttled > 0 and total_s > 0
        assert _metric(port, "headwater_mirror_produce_errors_total") == 0  # a throttle is not an error
        lines = [line for line in m.log().splitlines() if "throttled" in line and "produce answer" in line]
        assert len(lines) == 1, lines  # the first time, then at most once a minute
        assert "dc1->agg: agg throttled" in lines[0] and "(first time)" in lines[0]
    finally:
        assert m.stop() == 0, m.log()[-3000:]


def test_the_throttle_is_logged_at_most_once_a_minute_with_what_happened_since() -> None:
    now = [0.0]
    logger = logging.getLogger("test.throttle")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger.addHandler(Keep())
    metrics = MirrorMetrics()
    report = ThrottleReport(metrics, clock=lambda: now[0], logger=logger)
    report.throttled("dc1->agg", "agg", 300)
    for _ in range(10):
        now[0] += 5
        report.throttled("dc1->agg", "agg", 200)
    assert len(records) == 1 and "1 produce answer(s) (first time) (0.3 s in all, longest 300 ms)" in records[0]
    now[0] += 11  # a minute after the first line
    report.throttled("dc1->agg", "agg", 900)
    assert len(records) == 2
    assert "11 produce answer(s) since the last report (2.9 s in all, longest 900 ms)" in records[1]
    report.throttled("dc2->agg", "agg", 50)  # another flow: its own first line
    assert len(records) == 3 and records[2].startswith("dc2->agg: agg throttled 1")
    count = metrics.registry.get_sample_value(
        "headwater_mirror_produce_throttle_time_seconds_count", {"flow": "dc1->agg"}
    )
    assert count == 12
