"""``headwater lab check``: is the pipeline whole, and how fast is it?

For each source datacenter the check writes tagged records (acks=all) into the topic ``lab-check``
and follows the same topic in the aggregate cluster from the offsets it had before the first send.
A record's latency is the time from just before its send to the moment a fetch from the aggregate
cluster returns it — what a consumer of the aggregate cluster would see — measured by one clock,
this process's. The report gives, per datacenter, how many records arrived (and duplicates), the
latency's p50, p99 and max, and the audit service's status of the last closed windows.

``lab-check`` is created in each source (3 partitions, as many replicas as its acks=all writes need)
when missing, and the check waits for the
mirror to create it in the aggregate cluster before it starts the clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from headwater.client.admin import Admin
from headwater.client.consumer import Consumer, Subscription
from headwater.client.errors import KafkaTimeoutError
from headwater.client.producer import Producer
from headwater.client.security import ClientSecurity
from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CHECK_TOPIC",
    "DatacenterResult",
    "PipelineReport",
    "completeness_rows",
    "ensure_check_topic",
    "percentile",
    "run_check",
    "worst_status",
]

log = logging.getLogger("headwater.lab.check")

CHECK_TOPIC = "lab-check"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values`` (nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least the first
    return ordered[int(rank) - 1]


@dataclass
class DatacenterResult:
    datacenter: str
    sent: int = 0
    acked: int = 0
    arrived: int = 0
    duplicates: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.acked == self.sent and self.arrived == self.acked

    def summary(self) -> dict[str, Any]:
        lat = self.latencies_ms
        return {
            "datacenter": self.datacenter,
            "sent": self.sent,
            "acknowledged": self.acked,
            "arrived": self.arrived,
            "duplicates": self.duplicates,
            "latency_ms": {
                "p50": round(percentile(lat, 50), 1),
                "p99": round(percentile(lat, 99), 1),
                "max": round(max(lat), 1) if lat else None,
            },
        }


@dataclass
class PipelineReport:
    run: str
    datacenters: list[DatacenterResult]
    audit: list[dict[str, Any]]
    audit_error: str = ""
    #: the latency goal: every datacenter's p99 at most this (ms); 0: none (``make lab-check``: 1,000,
    #: issue 22's "DC -> aggregate p99 <= 1 s at 80 ms RTT")
    p99_goal_ms: float = 0.0

    def latency_met(self, d: DatacenterResult) -> bool:
        p99 = percentile(d.latencies_ms, 99)
        return not self.p99_goal_ms or p99 <= self.p99_goal_ms  # nan (no record arrived) is never met

    @property
    def ok(self) -> bool:
        audit_ok = not self.audit_error and all(w["status"] in ("complete", "late") for w in self.audit)
        latency_ok = all(self.latency_met(d) for d in self.datacenters)
        return all(d.complete for d in self.datacenters) and audit_ok and latency_ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "ok": self.ok,
            "datacenters": [
                {**d.summary(), **({"p99_goal_met": self.latency_met(d)} if self.p99_goal_ms else {})}
                for d in self.datacenters
            ],
            "p99_goal_ms": self.p99_goal_ms or None,
            "audit": self.audit,
            "audit_error": self.audit_error or None,
        }

    def text(self) -> str:
        lines = [f"pipeline check {self.run}: {'OK' if self.ok else 'FAILED'}"]
        for d in self.datacenters:
            s = d.summary()
            lat = s["latency_ms"]
            goal = ""
            if self.p99_goal_ms:
                goal = f" (goal p99 <= {self.p99_goal_ms:g} ms: {'met' if self.latency_met(d) else 'MISSED'})"
            lines.append(
                f"  {d.datacenter} -> aggregate: {d.arrived}/{d.acked} acknowledged records arrived"
                f" ({d.sent} sent, {d.duplicates} duplicates); latency p50 {lat['p50']} ms,"
                f" p99 {lat['p99']} ms, max {lat['max']} ms{goal}"
            )
        if self.audit_error:
            lines.append(f"  audit: {self.audit_error}")
        elif not self.audit:
            lines.append("  audit: no closed windows yet")
        for w in self.audit:
            tiers = ", ".join(f"{t} {c}" for t, c in sorted(w["tiers"].items()))
            lines.append(
                f"  audit {w['topic']} window {_clock(w['window_start'])}-{_clock(w['window_end'])} UTC:"
                f" {w['status']} ({tiers})"
            )
        return "\n".join(lines)


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000))


async def ensure_check_topic(
    bootstrap: str,
    topic: str = CHECK_TOPIC,
    partitions: int = 3,
    timeout: float = 120.0,
    security: ClientSecurity | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> None:
    """Make sure ``topic`` exists with enough replicas for the check's acks=all writes: at least the
    cluster's ``min.insync.replicas`` (and 3 where there are 3 brokers). A cluster that lists fewer
    brokers than that (one still starting) is waited for, not given a topic of fewer replicas, whose
    every acks=all write the leader would refuse with NOT_ENOUGH_REPLICAS for good. A check topic
    made that way before (by an older check during a half-started lab, whose volumes were kept) is
    deleted and made again: it can hold no check record (none was ever acknowledged)."""
    deadline = time.monotonic() + timeout
    said = ""

    def say(message: str) -> None:
        nonlocal said
        if message != said:
            progress(message)
            said = message

    async with Admin(bootstrap, security=security) as admin:
        while True:
            await admin.cluster.refresh([topic])
            brokers = sorted(admin.cluster.brokers)
            tm = admin.cluster.topics.get(topic)
            if tm is not None and tm.partitions:
                replicas = min(len(p.replicas) for p in tm.partitions.values())
                entry = (await admin.describe_configs(topic, ["min.insync.replicas"])).get("min.insync.replicas")
                min_isr = int(entry.value) if entry is not None and entry.value else 1
                if replicas >= min_isr:
                    await admin.wait_for_topic(topic, timeout=max(1.0, deadline - time.monotonic()))
                    return
                if len(brokers) >= min_isr:
                    say(
                        f"{topic} in {bootstrap} has {replicas} replica(s), fewer than its min.insync.replicas"
                        f" {min_isr} (made while fewer brokers were up): deleting it and making it again"
                    )
                    await admin.delete_topic(topic)
                    await admin.wait_for_topic(topic, timeout=max(1.0, deadline - time.monotonic()), exists=False)
                    continue
                want = min_isr
            else:
                entry = (
                    (await admin.describe_broker_configs(brokers[0])).get("min.insync.replicas") if brokers else None
                )
                want = max(min(3, len(brokers)), int(entry.value) if entry is not None and entry.value else 1)
                if brokers and len(brokers) >= want:
                    try:
                        await admin.create_topic(topic, partitions, want)
                    except KafkaError as e:
                        # INVALID_REPLICATION_FACTOR: the controller knows fewer live brokers than
                        # the metadata asked listed (a broker just stopped): wait as for too few
                        if e.code is ErrorCode.INVALID_REPLICATION_FACTOR:
                            pass
                        elif e.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                            raise
                        else:
                            continue
                    else:
                        continue
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"{bootstrap} lists {len(brokers)} broker(s), fewer than the {want} replicas {topic}"
                    f" needs (min.insync.replicas), for {timeout:g}s: are its brokers up?"
                )
            say(f"{topic} in {bootstrap}: waiting for {want} brokers (it lists {len(brokers)})")
            await asyncio.sleep(1.0)


async def _produce(
    bootstrap: str,
    result: DatacenterResult,
    run: str,
    records: int,
    rate: float,
    sent_at: dict[str, float],
    security: ClientSecurity | None = None,
) -> None:
    async with Producer(
        bootstrap, acks="all", linger_ms=0, client_id=f"lab-check-{result.datacenter}", security=security
    ) as p:
        futures = []
        started = time.monotonic()
        for seq in range(records):
            await asyncio.sleep(max(0.0, started + seq / rate - time.monotonic()))
            tag = f"{run}/{result.datacenter}/{seq}"
            value = json.dumps({"check": run, "datacenter": result.datacenter, "seq": seq}).encode()
            sent_at[tag] = time.time()
            futures.append(await p.send(CHECK_TOPIC, value, key=tag.encode()))
            result.sent += 1
        for fut in futures:
            try:
                await fut
                result.acked += 1
            except Exception as e:
                log.warning("%s: a check record was not acknowledged: %s", result.datacenter, e)


async def _follow(
    sub: Subscription, run: str, sent_at: dict[str, float], results: dict[str, DatacenterResult], seen: set[str]
) -> None:
    prefix = f"{run}/".encode()
    while True:
        for r in await sub.poll(max_wait_ms=200):
            now = time.time()
            if r.key is None or not r.key.startswith(prefix):
                continue
            tag = r.key.decode()
            dc = results[tag.split("/")[1]]
            if tag in seen:
                dc.duplicates += 1
                continue
            seen.add(tag)
            dc.arrived += 1
            if tag in sent_at:
                dc.latencies_ms.append((now - sent_at[tag]) * 1000)


# Window statuses, worst first: a window (or a set of rows) is shown by its worst.
_WORST_FIRST = ("loss", "duplicates", "unaudited", "late")


def worst_status(statuses: set[str]) -> str:
    """The worst of a window's statuses (``complete`` when none is worse)."""
    return next((s for s in _WORST_FIRST if s in statuses), "complete")


def completeness_rows(url: str, topic: str, opener: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """The audit service's completeness rows of ``topic`` (``GET /api/v1/completeness``)."""
    query = urllib.parse.urlencode({"topic": topic})
    with (opener or urllib.request.urlopen)(f"{url.rstrip('/')}/api/v1/completeness?{query}", timeout=10) as r:
        rows: list[dict[str, Any]] = json.loads(r.read())["rows"]
    return rows


def audit_status(
    url: str, topics: Sequence[str], windows: int = 2, opener: Callable[..., Any] | None = None
) -> list[dict[str, Any]]:
    """The last ``windows`` closed windows of each topic from the audit service's API: status
    (the worst of its rows) and, per tier, the completeness."""
    out: list[dict[str, Any]] = []
    for topic in topics:
        rows = completeness_rows(url, topic, opener)
        by_window: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            by_window.setdefault(int(row["window_start"]), []).append(row)
        # a pending late window (its hop lags: records still on their way) is not closed either
        closed = [
            ws
            for ws, rs in sorted(by_window.items())
            if all(x["status"] != "open" and not x.get("pending") for x in rs)
        ]
        for ws in closed[-windows:]:
            rs = by_window[ws]
            tiers: dict[str, str] = {}
            for tier in sorted({x["tier"] for x in rs}):
                counted = sum(int(x["count"]) for x in rs if x["tier"] == tier)
                expected = sum(int(x["expected"] or 0) for x in rs if x["tier"] == tier)
                tiers[tier] = f"{counted}" if tier == "producer" else f"{100.0 * counted / max(1, expected):.1f}%"
            worst = worst_status({x["status"] for x in rs})
            out.append(
                {
                    "topic": topic,
                    "window_start": ws,
                    "window_end": int(rs[0]["window_end"]),
                    "status": worst,
                    "tiers": tiers,
                }
            )
    return out


async def run_check(
    sources: dict[str, str],
    aggregate: str,
    *,
    records: int = 200,
    rate: float = 50.0,
    timeout: float = 120.0,
    audit_url: str | None = None,
    audit_topics: Sequence[str] = ("page-views", "clicks"),
    progress: Callable[[str], None] = lambda _: None,
    security: ClientSecurity | None = None,
    p99_goal_ms: float = 0.0,
) -> PipelineReport:
    """Write ``records`` tagged records into each source at ``rate`` records/s and wait up to
    ``timeout`` seconds for all of them in the aggregate cluster (every cluster reached with
    ``security``: the lab's operator principal); with ``p99_goal_ms``, the report is not ok when a
    datacenter's p99 is above it."""
    run = uuid.uuid4().hex[:12]
    progress(f"check {run}: making sure {CHECK_TOPIC} exists in {', '.join(sources)}")
    for bootstrap in sources.values():
        await ensure_check_topic(bootstrap, CHECK_TOPIC, 3, timeout, security, progress)
    progress(f"check {run}: waiting for the mirror to create {CHECK_TOPIC} in the aggregate cluster")
    async with Admin(aggregate, security=security) as admin:
        try:
            await admin.wait_for_topic(CHECK_TOPIC, timeout=timeout)
        except KafkaTimeoutError as e:
            raise KafkaTimeoutError(f"{e}: is the mirror running?") from e
    results = {dc: DatacenterResult(dc) for dc in sources}
    sent_at: dict[str, float] = {}
    async with Consumer(aggregate, client_id="lab-check", security=security) as consumer:
        # One follower per partition: a fetch returns as soon as its own partition has data, never
        # held up by another leader's long poll (which would add up to the wait to the latency).
        subs = [
            consumer.follow(CHECK_TOPIC, p, start="latest", max_wait_ms=200)
            for p in await consumer.partitions_for(CHECK_TOPIC)
        ]
        for sub in subs:
            await sub.poll(max_wait_ms=0)  # positions fixed before the first send
        seen: set[str] = set()
        followers = [asyncio.create_task(_follow(sub, run, sent_at, results, seen)) for sub in subs]
        try:
            progress(f"check {run}: writing {records} records into each of {', '.join(sources)} at {rate:g}/s")
            await asyncio.gather(
                *(_produce(b, results[dc], run, records, rate, sent_at, security) for dc, b in sources.items())
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and any(r.arrived < r.acked for r in results.values()):
                for follower in followers:
                    if follower.done():
                        follower.result()  # raises what stopped it
                await asyncio.sleep(0.1)
            # a moment more for duplicates that trail the last record
            await asyncio.sleep(0.5)
        finally:
            for follower in followers:
                follower.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
    audit: list[dict[str, Any]] = []
    audit_error = ""
    if audit_url:
        try:
            audit = await asyncio.to_thread(audit_status, audit_url, audit_topics)
        except Exception as e:
            audit_error = f"audit service at {audit_url} did not answer: {e}"
    return PipelineReport(run, list(results.values()), audit, audit_error, p99_goal_ms)
