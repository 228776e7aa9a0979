"""The Java producer (kafka-clients 2.3.1 and 4.x) against a 3-broker Headwater cluster: acks 0/1/all,
the idempotent producer, the four codecs, headers, a 1 MB record; every record read back by the same
client's consumer, at the offset the producer was told."""

from __future__ import annotations

from typing import Any

from tests.cluster.harness import Cluster
from tests.java.conftest import Driver


def topic(driver: Driver, cluster: Cluster, name: str, *configs: str, partitions: int = 3) -> str:
    name = f"{name}-{driver.version}"
    assert driver.admin(cluster.bootstrap, "createTopic", name, str(partitions), "3", *configs) == {
        "op": "createTopic",
        "result": "created",
    }
    return name


def read_back(driver: Driver, cluster: Cluster, name: str, count: int) -> list[dict[str, Any]]:
    records = driver.run("consume", cluster.bootstrap, name, str(count))["records"]
    assert len(records) == count, f"read {len(records)} of {count}"
    return list(records)


def test_acks_0_1_all(driver: Driver, cluster: Cluster) -> None:
    name = topic(driver, cluster, "acks")
    acked: dict[str, list[list[int]]] = {}
    for acks in ("0", "1", "all"):
        out = driver.run("produce", cluster.bootstrap, name, "40", "10", f"acks={acks}", "linger.ms=5")
        assert "error" not in out, out
        acked[acks] = out["acked"]
    assert all(o == -1 for _, o in acked["0"]), acked["0"]  # acks=0: no answer, no offset (as Kafka)
    records = read_back(driver, cluster, name, 120)
    stored = {(r["p"], r["o"]) for r in records}
    for acks in ("1", "all"):  # every acknowledged record at the offset it was given
        assert {(p, o) for p, o in acked[acks]} <= stored
    keys = sorted(r["k"] for r in records)
    assert keys == sorted(f"k{i}" for i in range(40) for _ in range(3))


def test_idempotent_producer_each_codec_with_headers(driver: Driver, cluster: Cluster) -> None:
    name = topic(driver, cluster, "codecs")
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        out = driver.run(
            "produce",
            cluster.bootstrap,
            name,
            "50",
            "300",
            "enable.idempotence=true",
            "acks=all",
            f"compression.type={codec}",
            "linger.ms=20",
        )
        assert "error" not in out, (codec, out)
        assert len(out["acked"]) == 50
    records = read_back(driver, cluster, name, 200)
    by_partition: dict[int, list[int]] = {}
    for r in records:
        i = int(r["k"][1:])
        assert r["headers"] == {"h": str(i), "n": "x"}
        assert r["len"] == 300 and r["prefix"].startswith(f"v{i}")
        by_partition.setdefault(r["p"], []).append(r["o"])
    for offsets in by_partition.values():  # no duplicates, no gaps
        assert offsets == list(range(len(offsets)))


def test_one_megabyte_record(driver: Driver, cluster: Cluster) -> None:
    size = 1024 * 1024
    name = topic(driver, cluster, "big", "max.message.bytes:2097152", partitions=1)
    out = driver.run("produce", cluster.bootstrap, name, "2", str(size), "acks=all", "max.request.size=4194304")
    assert "error" not in out, out
    assert [o for _, o in out["acked"]] == [0, 1]
    records = read_back(driver, cluster, name, 2)
    assert [(r["o"], r["len"]) for r in records] == [(0, size), (1, size)]
