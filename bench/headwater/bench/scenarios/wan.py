"""Scenario 9: the mirror across a WAN link (issue 22).

A source cluster of one broker whose ``WAN`` listener is advertised through a link
(``headwater lab link serve``, its own process, as the lab's link service), one destination broker,
one ``headwater mirror`` process bootstrapped through the link. The source topic (3 partitions, as
the lab's topics) is filled once with 100-byte records; then, for each one-way delay (0, 20, 40,
80 ms; bandwidth not capped, to see latency alone), the link is set over its control endpoint and a
fresh mirror (the lab's ``fetch.max.wait.ms = 100``; the variants in ``SETTINGS``: the defaults,
without fetching ahead, with 1 MiB fetches, and the settings before issue 22's item 2; its own
group, ``DefaultReplicationPolicy`` with a source alias per delay, so each run writes its own
destination topic) copies the whole topic. Records/s from the first destination
record to the last, as in scenario 7; the ratio is to the same run's 0 ms row.

The issue's goal: at 80 ms round trip (40 ms one way) >= 50 % of LAN throughput and >= 300,000
records/s of 100 B.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.parse

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import Workload, why_not
from headwater.bench.report import Goal, Row
from headwater.bench.scenarios.consume import fill
from headwater.bench.scenarios.mirror import mirror_rate
from headwater.lab.link import control_request
from headwater.testing.cluster import LocalCluster
from headwater.testing.zookeeper import free_port

SIZE = 100
FILL = 3_000_000  # records, full plan (a few seconds per run even with 8 MiB fetches)
QUICK_FILL = 20_000
PARTITIONS = 3
DELAYS_MS = (0, 20, 40, 80)  # one way
QUICK_DELAYS_MS = (0, 40)
MIB = 1 << 20
#: (label, mirror settings): the defaults (8 MiB fetches, fetching ahead with two fetches per
#: partition on the wire); 8 MiB fetches without fetching ahead (each fetch waits for the previous
#: one's acknowledgement, one at a time, as before issue 22's item 2); the consumer's 1 MiB
#: fetches with fetching ahead, with two fetches per partition on the wire and with one (where the
#: link's in-flight bound does not limit, so each mechanism shows); and the mirror's defaults before
#: issue 22's item 2
SETTINGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("defaults (fetch.max.bytes 8 MiB, fetch.max.in.flight 2, fetch.max.buffered.bytes 16 MiB)", {}),
    (
        "fetch.max.in.flight 1, fetch.max.buffered.bytes 0 (no fetching ahead)",
        {"fetch.max.in.flight": "1", "fetch.max.buffered.bytes": "0"},
    ),
    ("fetch.max.bytes 1 MiB (fetching ahead, 2 in flight)", {"fetch.max.bytes": str(MIB)}),
    (
        "fetch.max.bytes 1 MiB, fetch.max.in.flight 1 (fetching ahead)",
        {"fetch.max.bytes": str(MIB), "fetch.max.in.flight": "1"},
    ),
    (
        "before: fetch.max.bytes 1 MiB, fetch.max.in.flight 1, no fetching ahead",
        {"fetch.max.bytes": str(MIB), "fetch.max.in.flight": "1", "fetch.max.buffered.bytes": "0"},
    ),
)
QUICK_SETTINGS = SETTINGS[:1]
GOAL_DELAY_MS = 40  # 80 ms round trip
FETCH_MAX_WAIT_MS = 100


def _set_delay(control: str, delay_ms: int) -> None:
    q = urllib.parse.urlencode({"link": "wan", "delay_ms": delay_ms})
    code, body = control_request(control, "POST", f"/set?{q}")
    if code != 200:
        raise GeneratorError(f"the link refused delay_ms={delay_ms}: {body}")


def _mirror_through(
    bench: Bench,
    source_bootstrap: str,
    source_zk: str,
    dest: Target,
    topic: str,
    alias: str,
    count: int,
    settings: dict[str, str],
) -> float:
    """One mirror run over ``topic`` into ``<alias>.<topic>``; records/s, first to last destination record."""
    name = f"mirror-wan-{alias}"
    props = {
        "clusters": f"{alias}, dst",
        f"{alias}.zookeeper.connect": source_zk,
        f"{alias}.bootstrap.servers": source_bootstrap,
        "dst.bootstrap.servers": dest.bootstrap,
        f"{alias}->dst.enabled": "true",
        f"{alias}->dst.topics": topic,
        "replication.policy.class": "DefaultReplicationPolicy",
        "group.id": f"bench-{name}",
        "emit.heartbeats.enabled": "false",
        # the lab's setting (deploy/compose/mirror.properties): a source connection answers one request
        # at a time, and with the default 500 ms a partition at its log end holds up the others
        "fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
        **settings,
    }
    return mirror_rate(bench, name, props, dest, f"{alias}.{topic}", count, bench.plan.max_seconds * 8 + 180)


def run(bench: Bench) -> list[Row]:
    count = QUICK_FILL if bench.plan.quick else bench.plan.count(FILL)
    delays = QUICK_DELAYS_MS if bench.plan.quick else DELAYS_MS
    variants = QUICK_SETTINGS if bench.plan.quick else SETTINGS
    rows = {
        (label, d): Row(
            "9",
            f"{d} ms one way ({2 * d} ms RTT), 100 B, {count:,} records, {PARTITIONS} partitions",
            f"headwater mirror, {label}",
            primary="records/s",
            reference="issue 22: >= 300,000 rec/s at 80 ms RTT" if d == GOAL_DELAY_MS else "",
            goal=Goal(">= 50 % of the 0 ms run", 0.50, on="ratio") if d == GOAL_DELAY_MS else None,
        )
        for label, _ in variants
        for d in delays
    }
    why = why_not(bench, "rdkafka-c") and why_not(bench, "confluent")
    if why or not bench.zk_connect:
        for r in rows.values():
            r.unavailable = why or "no ZooKeeper"
            bench.add(r)
        return list(rows.values())
    routes: list[tuple[int, int]] = []  # (link port, the broker's WAN listener port)

    def through_link(wan_port: int) -> int:
        routes.append((free_port(), wan_port))
        return routes[-1][0]

    control = f"127.0.0.1:{free_port()}"
    link: subprocess.Popen[bytes] | None = None
    source_zk = f"{bench.zk_connect}/bench-wan-src"
    try:
        with (
            LocalCluster(bench.workdir / "wan-src", size=1, zk_connect=source_zk, wan=through_link) as src,
            LocalCluster(bench.workdir / "wan-dst", size=1, zk_connect=f"{bench.zk_connect}/bench-wan-dst") as dst,
        ):
            cmd = [sys.executable, "-m", "headwater.cli.main", "lab", "link", "serve", "--name", "wan"]
            for listen, target in routes:
                cmd += ["--route", f"127.0.0.1:{listen}=127.0.0.1:{target}"]
            cmd += ["--control", control, "--delay-ms", "0", "--bandwidth-mbit", "0", "--log-level", "WARNING"]
            with open(bench.workdir / "wan-link.log", "ab") as out:
                link = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while True:
                try:
                    control_request(control, "GET", "/status", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline or link.poll() is not None:
                        raise GeneratorError("the link service did not start (see wan-link.log)") from None
                    time.sleep(0.2)
            source = Target("WAN source", src.bootstrap, [b.pid for b in src.brokers], 1, "1")
            dest = Target("mirror destination", dst.bootstrap, [b.pid for b in dst.brokers], 1, "all")
            topic = bench.topic("wan")
            bench.create_topic(source, topic, PARTITIONS)
            fill(bench, source, topic, count, Workload(SIZE))
            for i, (label, settings) in enumerate(variants):
                lan = 0.0
                for d in delays:
                    _set_delay(control, d)
                    bench.log(f"[9] mirror through the link at {d} ms one way, {label}")
                    alias = f"wan{d}ms{i}"
                    rate = _mirror_through(bench, src.wan_bootstrap, source_zk, dest, topic, alias, count, settings)
                    row = rows[(label, d)]
                    row.figure("records/s").add(rate)
                    if d == 0:
                        lan = rate
                    row.ratio_override = rate / lan if lan else None
                    row.baseline = "the same mirror at 0 ms"
                    bench.add(row)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows.values():
            if not r.figures:
                r.unavailable = f"failed: {e}"
                bench.add(r)
    finally:
        if link is not None and link.poll() is None:
            link.terminate()
            try:
                link.wait(30)
            except subprocess.TimeoutExpired:
                link.kill()
                link.wait(10)
    return list(rows.values())
