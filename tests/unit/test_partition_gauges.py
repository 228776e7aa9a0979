"""The per-partition ISR gauges: refreshed on every ISR maintenance pass, yet only the changed,
new or gone partitions are written (a broker leading thousands of partitions)."""

from __future__ import annotations

from typing import Any

from headwater.broker.metrics import BrokerMetrics


def _values(m: BrokerMetrics, name: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for f in m.registry.collect()
        for s in f.samples
        if s.name == name
    }


def test_led_partition_gauges_follow_the_led_set_writing_only_changes() -> None:
    m = BrokerMetrics()
    written: list[tuple[str, str]] = []
    real = m.partition_isr_count.labels

    def labels(*args: Any) -> Any:
        written.append(args)
        return real(*args)

    m.partition_isr_count.labels = labels  # type: ignore[method-assign]
    m.set_led_partitions({("t", 0): (3, False), ("t", 1): (2, False)})
    assert sorted(written) == [("t", "0"), ("t", "1")]
    written.clear()
    m.set_led_partitions({("t", 0): (3, False), ("t", 1): (2, False)})
    assert written == []  # an idle pass writes nothing
    m.set_led_partitions({("t", 0): (1, True), ("u", 0): (3, False)})  # t-1 no longer led here
    assert sorted(written) == [("t", "0"), ("u", "0")]
    assert _values(m, "kafka_cluster_partition_insyncreplicascount") == {("t", "0"): 1, ("u", "0"): 3}
    assert _values(m, "kafka_cluster_partition_underminisr") == {("t", "0"): 1, ("u", "0"): 0}
