"""The mirror's configuration and partition assignment: pure, no processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater.mirror.config import MirrorConfigError, parse
from headwater.mirror.group import assign

BASE = {
    "clusters": "dc1, dc2, agg",
    "dc1.zookeeper.connect": "zk1:2181/dc1",
    "dc2.zookeeper.connect": "zk2:2181",
    "dc2.bootstrap.servers": "dc2-b1:9092",
    "agg.bootstrap.servers": "agg-b1:9092",
    "dc1->agg.enabled": "true",
    "dc1->agg.topics": "page-views, clicks.*       # comma-separated regexes",
    "dc2->agg.enabled": "true",
}


def test_mm2_file_parses_into_flows() -> None:
    c = parse(BASE)
    assert [f.name for f in c.flows] == ["dc1->agg", "dc2->agg"]
    dc1, dc2 = c.flows
    assert dc1.matches("page-views") and dc1.matches("clicks.eu") and not dc1.matches("orders")
    assert dc2.matches("orders") and not dc2.matches("__audit")  # topics.exclude defaults to __.*
    assert c.clusters["dc1"].bootstrap == "zk://zk1:2181/dc1"  # bootstrap from ZooKeeper when not given
    assert c.clusters["dc2"].bootstrap == "dc2-b1:9092"
    assert c.target_topic(dc1, "page-views") == "page-views"
    assert c.group_for(dc1) == "headwater-mirror"


def test_one_exact_fetch_at_a_time_by_default_and_fetching_ahead_when_asked() -> None:
    c = parse(BASE)
    assert (c.fetch_max_in_flight, c.max_buffered_bytes) == (1, 0)  # issue 40: one exact fetch at a time
    assert c.end_offsets_refresh_interval_ms == 5000  # the lag's end offsets, read independently of the copy
    mib = 1024 * 1024
    assert parse({**BASE, "fetch.max.in.flight": "2"}).max_buffered_bytes == 16 * mib  # twice fetch.max.bytes
    ahead = parse({**BASE, "fetch.max.buffered.bytes": str(mib), "end.offsets.refresh.interval.ms": "1000"})
    assert (ahead.fetch_max_in_flight, ahead.max_buffered_bytes, ahead.end_offsets_refresh_interval_ms) == (
        1,
        mib,
        1000,
    )


def test_default_replication_policy_prefixes_the_source_alias_and_fqcn_is_accepted() -> None:
    c = parse({**BASE, "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"})
    assert c.target_topic(c.flows[0], "page-views") == "dc1.page-views"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dc1->dc3.enabled": "true"}, "dc1->dc3.enabled: cluster 'dc3' is not in clusters"),
        ({"dc9.bootstrap.servers": "x:1"}, "dc9.bootstrap.servers: cluster 'dc9' is not in clusters"),
        ({"dc1->agg.topics": "clicks.(*"}, "dc1->agg.topics: 'clicks.(*' is not a valid regex"),
        ({"replication.policy.class": "MyPolicy"}, "replication.policy.class: 'MyPolicy'"),
        ({"clusters": ""}, "clusters: no cluster aliases"),
        ({"dc1->agg.enabled": "yes"}, "dc1->agg.enabled: 'yes' is not true or false"),
        ({"metrics.port": "http"}, "metrics.port: 'http' is not an integer"),
        ({"end.offsets.refresh.interval.ms": "50"}, "end.offsets.refresh.interval.ms: 50 is below the minimum of 100"),
    ],
)
def test_bad_configuration_is_one_clear_line(change: dict[str, str], message: str) -> None:
    with pytest.raises(MirrorConfigError) as info:
        parse({**BASE, **change})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_exits_2_with_one_line_before_starting_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "mirror.properties"
    cfg.write_text(
        "clusters = dc1, agg\ndc1.zookeeper.connect = 127.0.0.1:1\nagg.bootstrap.servers = 127.0.0.1:1\n"
        "dc1->nowhere.enabled = true\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "headwater mirror: configuration error: dc1->nowhere.enabled: cluster 'nowhere' is not in clusters (dc1, agg)"
    ]


def test_assignment_covers_every_partition_once_and_moves_only_what_must() -> None:
    parts = [(t, p) for t in ("a", "b", "c") for p in range(8)]
    two = {m: assign(parts, ["m1", "m2"], m) for m in ("m1", "m2")}
    assert two["m1"] | two["m2"] == set(parts) and not two["m1"] & two["m2"]
    three = {m: assign(parts, ["m1", "m2", "m3"], m) for m in ("m1", "m2", "m3")}
    assert set().union(*three.values()) == set(parts)
    # m3 joining takes partitions only from the others; nothing moves between m1 and m2
    assert three["m1"] <= two["m1"] and three["m2"] <= two["m2"]
    assert three["m3"] == (two["m1"] - three["m1"]) | (two["m2"] - three["m2"])
