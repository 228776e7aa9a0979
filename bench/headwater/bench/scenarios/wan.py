"""Scenario 9: the mirror across a WAN link (issue 22).

A source cluster of one broker whose ``WAN`` listener is advertised through a link
(``headwater lab link serve``, its own process, as the lab's link service), one destination broker,
one ``headwater mirror`` process bootstrapped through the link. The source topic (3 partitions, as
the lab's topics) is filled once with 100-byte records; then the link is set over its control
endpoint and a fresh mirror (the lab's ``fetch.max.wait.ms = 100``; its own group,
``DefaultReplicationPolicy`` with a source alias per copy, so each copy writes its own destination
topic) copies the whole topic. Records/s from the first destination record to the last, as in
scenario 7. Each run (``--runs``, 3 by default) makes these copies, in this order:

- **LAN rows**: 0 ms, no bandwidth cap, once per variant of ``SETTINGS`` (the defaults -- one exact
  fetch at a time since issue 40 --, issue 22's fetching ahead, with 1 MiB fetches, and the settings
  before issue 22's item 2);
- **WAN rows** (issue 40): the mirror as shipped (the defaults) through the lab's link,
  ``LAB_WAN_BANDWIDTH_MBIT`` = 100 Mbit/s per direction (deploy/compose), at 0 ms (the cap alone) and
  20, 40 and 80 ms one way; and at 40 ms (the goal's round trip) once more with issue 22's fetching
  ahead, two fetches in flight (``WAN_VARIANT``: its second fetch overlaps the first, so it carries
  each record ~1.8 times, which the cap makes pay; full plan only). Every variant but the defaults
  names its fetch settings in full, so a row measures the same settings whatever the defaults are.

Each WAN row's ratio is to the **best LAN row of the same run** (the fastest variant at 0 ms, no
cap), median of the runs' ratios with their range (issue 40: a ratio to a cold row of the same
variant flattered); the wire bytes per record (the link's own counter, source broker -> mirror, on
every row) say what the cap allows.

The issue's goal (22): at 80 ms round trip (40 ms one way) >= 50 % of LAN throughput and >= 300,000
records/s of 100 B.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.parse

from headwater.bench import peers
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
DELAYS_MS = (0, 20, 40, 80)  # one way, the WAN rows (at the cap)
QUICK_DELAYS_MS = (40,)
#: the lab's link (deploy/compose/docker-compose.yml, ``LAB_WAN_BANDWIDTH_MBIT``), per direction
CAP_MBIT = 100.0
MIB = 1 << 20
#: (label, mirror settings): the defaults (8 MiB fetches, one exact fetch at a time: each fetch
#: waits for the previous one's acknowledgement, as before issue 22's item 2; the default again since
#: issue 40); issue 22's fetching ahead with 8 MiB fetches, two per partition on the wire; the
#: consumer's 1 MiB fetches with fetching ahead, with two fetches per partition on the wire and with
#: one (where the link's in-flight bound does not limit, so each mechanism shows); and the mirror's
#: defaults before issue 22's item 2
SETTINGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("defaults (fetch.max.bytes 8 MiB, fetch.max.in.flight 1, fetch.max.buffered.bytes 0)", {}),
    (
        "fetch.max.in.flight 2, fetch.max.buffered.bytes 16 MiB (fetching ahead)",
        {"fetch.max.in.flight": "2", "fetch.max.buffered.bytes": str(16 * MIB)},
    ),
    (
        "fetch.max.bytes 1 MiB (fetching ahead, 2 in flight)",
        {"fetch.max.bytes": str(MIB), "fetch.max.in.flight": "2", "fetch.max.buffered.bytes": str(2 * MIB)},
    ),
    (
        "fetch.max.bytes 1 MiB, fetch.max.in.flight 1 (fetching ahead)",
        {"fetch.max.bytes": str(MIB), "fetch.max.in.flight": "1", "fetch.max.buffered.bytes": str(2 * MIB)},
    ),
    (
        "before: fetch.max.bytes 1 MiB, fetch.max.in.flight 1, no fetching ahead",
        {"fetch.max.bytes": str(MIB), "fetch.max.in.flight": "1", "fetch.max.buffered.bytes": "0"},
    ),
)
QUICK_SETTINGS = SETTINGS[:1]
#: the variant measured through the link beside the defaults, at GOAL_DELAY_MS (full plan only)
WAN_VARIANT = SETTINGS[1]
GOAL_DELAY_MS = 40  # 80 ms round trip
FETCH_MAX_WAIT_MS = 100


def _set_link(control: str, delay_ms: int, bandwidth_mbit: float) -> None:
    q = urllib.parse.urlencode({"link": "wan", "delay_ms": delay_ms, "bandwidth_mbit": bandwidth_mbit})
    code, body = control_request(control, "POST", f"/set?{q}")
    if code != 200:
        raise GeneratorError(f"the link refused delay_ms={delay_ms}, bandwidth_mbit={bandwidth_mbit}: {body}")


def _bytes_to_client(control: str) -> int:
    """Bytes the link has carried from the source broker to the mirror so far (its own counter)."""
    code, body = control_request(control, "GET", "/status")
    if code != 200:
        raise GeneratorError(f"the link's status failed: {body}")
    return int(body["bytes_to_client"])


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
    lan_rows = {
        label: Row(
            "9",
            f"LAN: 0 ms, no cap, 100 B, {count:,} records, {PARTITIONS} partitions",
            f"headwater mirror, {label}",
            primary="records/s",
        )
        for label, _ in variants
    }
    wan_rows = {
        d: Row(
            "9",
            f"WAN: {d} ms one way ({2 * d} ms RTT), {CAP_MBIT:g} Mbit/s cap (the lab's), 100 B, {count:,} records",
            f"headwater mirror, {SETTINGS[0][0]}",
            primary="records/s",
            reference="issue 22: >= 300,000 rec/s at 80 ms RTT" if d == GOAL_DELAY_MS else "",
            goal=Goal(">= 50 % of the run's best LAN row", 0.50, on="ratio") if d == GOAL_DELAY_MS else None,
            baseline="the run's best LAN row (median of the runs' ratios)",
        )
        for d in delays
    }
    rows = [*lan_rows.values(), *wan_rows.values()]
    #: (delay, label, settings) of every copy through the link, in order
    wan_copies = [(d, SETTINGS[0][0], SETTINGS[0][1]) for d in delays]
    variant_row: Row | None = None
    if not bench.plan.quick:
        wan_copies.append((GOAL_DELAY_MS, *WAN_VARIANT))
        variant_row = Row(
            "9",
            f"WAN: {GOAL_DELAY_MS} ms one way ({2 * GOAL_DELAY_MS} ms RTT), {CAP_MBIT:g} Mbit/s cap (the lab's), "
            f"100 B, {count:,} records",
            f"headwater mirror, {WAN_VARIANT[0]}",
            primary="records/s",
            baseline="the run's best LAN row (median of the runs' ratios)",
        )
        rows.append(variant_row)
    why = why_not(bench, "rdkafka-c") and why_not(bench, "confluent")
    if why or not bench.zk_connect:
        for r in rows:
            r.unavailable = why or "no ZooKeeper"
            bench.add(r)
        return rows
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
            n = 0
            for run in range(bench.plan.runs):
                best_lan = 0.0
                for label, settings in variants:
                    _set_link(control, 0, 0)
                    bench.log(f"[9] run {run + 1}: mirror at 0 ms, no cap, {label}")
                    n += 1
                    before = _bytes_to_client(control)
                    rate = _mirror_through(bench, src.wan_bootstrap, source_zk, dest, topic, f"lan{n}", count, settings)
                    lan_rows[label].figure("records/s").add(rate)
                    lan_rows[label].figure("wire bytes/record", "B").add((_bytes_to_client(control) - before) / count)
                    best_lan = max(best_lan, rate)
                for d, label, settings in wan_copies:
                    _set_link(control, d, CAP_MBIT)
                    bench.log(f"[9] run {run + 1}: mirror at {d} ms one way, {CAP_MBIT:g} Mbit/s, {label}")
                    n += 1
                    before = _bytes_to_client(control)
                    rate = _mirror_through(bench, src.wan_bootstrap, source_zk, dest, topic, f"wan{n}", count, settings)
                    row = variant_row if variant_row is not None and label == WAN_VARIANT[0] else wan_rows[d]
                    row.figure("records/s").add(rate)
                    row.figure("% of the run's best LAN row", "%").add(100 * rate / best_lan)
                    row.figure("wire bytes/record", "B").add((_bytes_to_client(control) - before) / count)
            for row in rows:
                ratios = row.figures.get("% of the run's best LAN row")
                if ratios:
                    row.ratio_override = ratios.median / 100
                bench.add(row)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows:
            if not r.figures:
                r.unavailable = f"failed: {e}"
                bench.add(r)
    finally:
        if link is not None:
            peers.stop(link)
    return rows
