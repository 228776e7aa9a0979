"""``headwater lab outage``: cut one datacenter's WAN link for a while, heal it, and measure.

The drill behind issue 22's "a DC cut off and back": while the DCs' producers keep writing, it

1. reads the cut DC's log end offsets of every partition its mirror flow copies (from the mirror's
   own ``/metrics``: the partitions of ``headwater_mirror_partition_lag{flow="<dc>->..."}``, once
   each has a ``headwater_mirror_committed_offset``), straight from the DC's brokers (the host
   reaches them without the link);
2. cuts the link through its control endpoint (``drop`` or ``blackhole``) and, halfway through the
   cut, runs the pipeline check (:mod:`headwater.lab.check`) for the *other* datacenters, so their
   latency during the cut is measured, not assumed;
3. reads the cut DC's log end offsets again and heals the link: what was written between the two
   reads is the **backlog**, and backlog / cut length is the **production rate**;
4. waits until the mirror has copied *and committed* every partition up to the heal-time log end
   offset (its committed offsets in ``/metrics``): that moment minus the heal is the **catch-up
   time**, and backlog / catch-up time over the production rate is the **catch-up ratio**
   (issue 22's goal: >= 5x);
5. optionally (``audit_url``) follows the audit service: which statuses the cut DC's windows at the
   aggregate tier showed during the cut (``late`` is right, ``loss`` is not), and whether every
   one of them closed ``complete`` afterwards.

With a produce quota on the mirror at the aggregate cluster (``mirror_quota``: its
``producer_byte_rate``, per broker as Kafka's quotas are), the catch-up cannot be faster than the
quota allows: the drill multiplies it by the aggregate brokers leading the flow's partitions, turns
the backlog into bytes (the mirror's ``headwater_mirror_bytes_total`` over ``_records_total`` for the
flow), and **estimates the catch-up** at the heal: the mirror copies the first
``quota_burst_seconds`` (10: Kafka's ``quota.window.num - 1`` windows) of quota at once, then the
quota (Kafka's Rate: about ``quota x (t + burst)`` by ``t`` seconds after the heal), and the drill's
catch-up is done when the heal-time backlog is copied (what was written after the heal comes after
it), so ``expected = backlog bytes / quota - burst`` and the catch-up ratio is at most about ``quota /
production rate``. The goal ratio becomes the lower of 5x and 80 % of the ratio the expected catch-up
gives. A quota at or below the production rate fails the drill: after its catch-up the mirror falls
behind again (docs/pipeline.md, "The mirror's produce quota", sizes it against the live stream). The
report says how often, and how long in all, the aggregate throttled the mirror during the catch-up
(``headwater_mirror_produce_throttle_time_seconds`` of the flow).

The catch-up time is conservative: it includes the mirror's reconnect to the DC (its ZooKeeper is
reached through the link too) and up to one ``offset.commit.interval.ms``, because "caught up" is
read from what the mirror committed, the state a restarted mirror would resume from.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from headwater.client.cluster import Cluster
from headwater.client.consumer import Consumer
from headwater.client.security import ClientSecurity
from headwater.lab.check import PipelineReport, completeness_rows, run_check, worst_status
from headwater.lab.link import control_request

__all__ = ["CATCH_UP_GOAL", "OutageReport", "flow_partitions", "owned_partitions", "run_outage"]

# Issue 22: after healing, the cut DC's flow catches up at >= 5x the production rate.
CATCH_UP_GOAL = 5.0

TopicPartition = tuple[str, int]


def _scrape(urls: Sequence[str]) -> list[tuple[str, dict[str, str], float]]:
    samples: list[tuple[str, dict[str, str], float]] = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            samples.extend((s.name, dict(s.labels), float(s.value)) for s in family.samples)
    return samples


def flow_partitions(samples: Sequence[tuple[str, dict[str, str], float]], source: str) -> dict[TopicPartition, int]:
    """The committed offsets of every partition of the flows out of ``source`` (``source->*``)."""
    out: dict[TopicPartition, int] = {}
    for name, labels, value in samples:
        if name == "headwater_mirror_committed_offset" and labels.get("flow", "").startswith(f"{source}->"):
            tp = (labels["topic"], int(labels["partition"]))
            out[tp] = max(out.get(tp, -1), int(value))
    return out


def owned_partitions(samples: Sequence[tuple[str, dict[str, str], float]], source: str) -> set[TopicPartition]:
    """The partitions of the flows out of ``source`` the mirror copies (it reports a lag for each)."""
    return {
        (labels["topic"], int(labels["partition"]))
        for name, labels, _ in samples
        if name == "headwater_mirror_partition_lag" and labels.get("flow", "").startswith(f"{source}->")
    }


async def _settled_partitions(
    urls: Sequence[str], source: str, progress: Callable[[str], None], timeout: float = 120.0
) -> list[TopicPartition]:
    """The flow's partitions once the mirror has committed each of them at least once (a copier
    just started has none yet, and "caught up" is read from the commits)."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        samples = await asyncio.to_thread(_scrape, urls)
        owned, committed = owned_partitions(samples, source), flow_partitions(samples, source)
        missing = owned - set(committed)
        if owned and not missing:
            return sorted(owned | set(committed))
        if time.monotonic() > deadline:
            if not owned:
                raise ValueError(f"the mirror's metrics show no partition of a flow from {source!r}")
            names = ", ".join(f"{t}-{p}" for t, p in sorted(missing)[:5])
            raise ValueError(f"the mirror has not committed {len(missing)} of the flow's partitions ({names}, ...)")
        if not said:
            progress(f"outage: waiting for the mirror to commit every partition of the flow from {source}")
            said = True
        await asyncio.sleep(0.5)


def _flow_sum(samples: Sequence[tuple[str, dict[str, str], float]], name: str, source: str) -> float:
    """The sum of ``name`` over the flows out of ``source``."""
    return sum(v for n, labels, v in samples if n == name and labels.get("flow", "").startswith(f"{source}->"))


def _flow_counters(samples: Sequence[tuple[str, dict[str, str], float]], source: str) -> dict[str, float]:
    return {
        name: _flow_sum(samples, f"headwater_mirror_{name}", source)
        for name in (
            "bytes_total",
            "records_total",
            "produce_throttle_time_seconds_count",
            "produce_throttle_time_seconds_sum",
        )
    }


async def _leaders(bootstrap: str, partitions: Sequence[TopicPartition], security: ClientSecurity | None) -> int:
    """How many brokers of the aggregate cluster lead the flow's partitions (the mirror mirrors a
    topic under its own name): Kafka's quotas are per broker."""
    cluster = Cluster(bootstrap, client_id="lab-outage", security=security)
    try:
        await cluster.refresh(sorted({t for t, _ in partitions}))
        return len({cluster.leader(t, p) for t, p in partitions})
    finally:
        await cluster.close()


def _heartbeat_ages(samples: Sequence[tuple[str, dict[str, str], float]]) -> dict[str, float]:
    return {
        labels["flow"]: round(value, 1)
        for name, labels, value in samples
        if name == "headwater_mirror_heartbeat_age_seconds"
    }


async def _log_ends(
    bootstrap: str, partitions: Sequence[TopicPartition], security: ClientSecurity | None
) -> dict[TopicPartition, int]:
    async with Consumer(bootstrap, client_id="lab-outage", security=security) as c:
        ends = await asyncio.gather(*(c.offsets_before(t, p, -1, 1) for t, p in partitions))
    return {tp: int(e[0]) if e else 0 for tp, e in zip(partitions, ends, strict=True)}


def _audit_rows(url: str, topic: str) -> list[dict[str, Any]]:
    return [{**row, "topic": topic} for row in completeness_rows(url, topic)]


def _link_call(control: str, action: str, **query: str) -> tuple[int, dict[str, Any]]:
    return control_request(control, "POST", f"/{action}?{urllib.parse.urlencode(query)}")


@dataclass
class OutageReport:
    link: str
    mode: str
    cut_seconds: float = 0.0
    partitions: int = 0
    backlog_records: int = 0
    uncommitted_at_heal: int = 0
    caught_up: bool = False
    catch_up_seconds: float | None = None
    first_progress_seconds: float | None = None
    heartbeat_age_at_heal: dict[str, float] = field(default_factory=dict)
    others_during_cut: PipelineReport | None = None
    others_error: str = ""
    audit_during_cut: dict[str, int] = field(default_factory=dict)
    audit_after: dict[str, int] = field(default_factory=dict)
    audit_error: str = ""
    # the mirror's produce quota on the aggregate cluster (bytes/s per broker) and what follows from it
    mirror_quota: float | None = None
    quota_brokers: int = 1  # aggregate brokers leading the flow's partitions
    quota_burst_seconds: float = 10.0  # Kafka's (quota.window.num - 1) x quota.window.size.seconds
    record_bytes: float | None = None  # bytes per mirrored record of the flow
    throttled_answers: int = 0  # produce answers with throttle_time_ms during the catch-up
    throttled_seconds: float = 0.0

    @property
    def production_rate(self) -> float:
        return self.backlog_records / self.cut_seconds if self.cut_seconds > 0 else 0.0

    @property
    def quota_rate(self) -> float | None:
        """The quota over the aggregate cluster, bytes/s."""
        return None if self.mirror_quota is None else self.mirror_quota * max(1, self.quota_brokers)

    @property
    def expected_catch_up_seconds(self) -> float | None:
        """With a quota: how long copying the heal-time backlog takes at the quota, its burst first
        (see the module docstring). None without a quota (or without the bytes per record)."""
        q, size = self.quota_rate, self.record_bytes
        if q is None or not size:
            return None
        return max(0.0, self.backlog_records * size / q - self.quota_burst_seconds)

    @property
    def quota_below_production(self) -> bool:
        """The quota cannot keep up with the production rate (the mirror falls ever further behind)."""
        q, size = self.quota_rate, self.record_bytes
        return q is not None and size is not None and size > 0 and q <= self.production_rate * size

    @property
    def goal_ratio(self) -> float:
        """CATCH_UP_GOAL, or with a quota the lower of it and 80 % of the ratio the quota allows."""
        expected = self.expected_catch_up_seconds
        if expected is None or expected <= 0 or self.cut_seconds <= 0:
            return CATCH_UP_GOAL
        return min(CATCH_UP_GOAL, 0.8 * self.cut_seconds / expected)  # backlog / expected / production rate

    @property
    def catch_up_rate(self) -> float | None:
        if not self.catch_up_seconds or not self.backlog_records:
            return None
        return self.backlog_records / self.catch_up_seconds

    @property
    def catch_up_ratio(self) -> float | None:
        rate = self.catch_up_rate
        return rate / self.production_rate if rate is not None and self.production_rate > 0 else None

    @property
    def ok(self) -> bool:
        others_ok = self.others_during_cut is None or self.others_during_cut.ok
        audit_ok = not self.audit_error and not (set(self.audit_during_cut) | set(self.audit_after)) & {
            "loss",
            "duplicates",
        }
        ratio = self.catch_up_ratio
        fast_enough = ratio is None or ratio >= self.goal_ratio
        quota_ok = not self.quota_below_production
        return self.caught_up and others_ok and not self.others_error and audit_ok and fast_enough and quota_ok

    def as_dict(self) -> dict[str, Any]:
        ratio = self.catch_up_ratio
        return {
            "link": self.link,
            "mode": self.mode,
            "ok": self.ok,
            "cut_seconds": round(self.cut_seconds, 1),
            "partitions": self.partitions,
            "backlog_records": self.backlog_records,
            "uncommitted_at_heal": self.uncommitted_at_heal,
            "production_rate": round(self.production_rate, 1),
            "caught_up": self.caught_up,
            "catch_up_seconds": None if self.catch_up_seconds is None else round(self.catch_up_seconds, 1),
            "first_progress_seconds": None
            if self.first_progress_seconds is None
            else round(self.first_progress_seconds, 1),
            "catch_up_rate": None if self.catch_up_rate is None else round(self.catch_up_rate, 1),
            "catch_up_ratio": None if ratio is None else round(ratio, 1),
            "catch_up_goal_ratio": round(self.goal_ratio, 2),
            "mirror_quota": self.mirror_quota,
            "quota_brokers": self.quota_brokers if self.mirror_quota is not None else None,
            "record_bytes": None if self.record_bytes is None else round(self.record_bytes, 1),
            "expected_catch_up_seconds": None
            if self.expected_catch_up_seconds is None
            else round(self.expected_catch_up_seconds, 1),
            "quota_below_production_rate": self.quota_below_production,
            "throttled_answers": self.throttled_answers,
            "throttled_seconds": round(self.throttled_seconds, 1),
            "heartbeat_age_at_heal_s": self.heartbeat_age_at_heal,
            "others_during_cut": None if self.others_during_cut is None else self.others_during_cut.as_dict(),
            "others_error": self.others_error or None,
            "audit_during_cut": self.audit_during_cut,
            "audit_after": self.audit_after,
            "audit_error": self.audit_error or None,
        }

    def text(self) -> str:
        d = self.as_dict()
        lines = [f"outage drill, link {self.link} ({self.mode}): {'OK' if self.ok else 'FAILED'}"]
        lines.append(
            f"  cut {d['cut_seconds']} s: {self.backlog_records} records written into {self.link}"
            f" ({d['production_rate']}/s over {self.partitions} mirrored partitions);"
            f" {self.uncommitted_at_heal} not yet committed by the mirror at the heal;"
            f" heartbeat ages at the heal {self.heartbeat_age_at_heal}"
        )
        if self.caught_up:
            lines.append(
                f"  caught up {d['catch_up_seconds']} s after the heal (first progress after"
                f" {d['first_progress_seconds']} s): {d['catch_up_rate']} records/s,"
                f" {d['catch_up_ratio']}x the production rate (goal >= {self.goal_ratio:.3g}x)"
            )
        else:
            lines.append("  NOT caught up before the timeout")
        if self.mirror_quota is not None:
            lines.append(
                f"  the mirror's produce quota: {self.mirror_quota:g} B/s x {self.quota_brokers} broker(s),"
                f" {d['record_bytes']} B a record: expected catch-up {d['expected_catch_up_seconds']} s;"
                f" throttled {self.throttled_answers} produce answer(s), {d['throttled_seconds']} s in all"
                + (
                    "; the quota is at or below the production rate: the mirror falls behind again"
                    if self.quota_below_production
                    else ""
                )
            )
        if self.others_error:
            lines.append(f"  other datacenters during the cut: {self.others_error}")
        elif self.others_during_cut is not None:
            lines.extend("  during the cut: " + line.strip() for line in self.others_during_cut.text().splitlines())
        if self.audit_error:
            lines.append(f"  audit: {self.audit_error}")
        elif self.audit_during_cut or self.audit_after:
            lines.append(
                f"  audit, {self.link}'s windows at the aggregate tier: during the cut {self.audit_during_cut},"
                f" afterwards {self.audit_after}"
            )
        return "\n".join(lines)


async def run_outage(
    link: str,
    control: str,
    source_bootstrap: str,
    mirror_metrics: Sequence[str],
    *,
    cut_seconds: float,
    mode: str = "blackhole",
    others: dict[str, str] | None = None,
    aggregate: str = "",
    check_records: int = 100,
    audit_url: str | None = None,
    audit_topics: Sequence[str] = ("page-views", "clicks"),
    aggregate_tier: str = "agg",
    timeout: float = 600.0,
    progress: Callable[[str], None] = lambda _: None,
    security: ClientSecurity | None = None,
    mirror_quota: float | None = None,
) -> OutageReport:
    """Cut ``link`` for ``cut_seconds``, heal it, and wait up to ``timeout`` seconds for the mirror
    to catch up (see the module docstring). ``others`` (DC -> bootstrap) are checked during the cut
    against ``aggregate`` with ``check_records`` records each (0: not checked). ``mirror_quota``: the
    mirror's ``producer_byte_rate`` on ``aggregate`` (bytes/s per broker), None when it has none."""
    report = OutageReport(link, mode, mirror_quota=mirror_quota)
    partitions = await _settled_partitions(mirror_metrics, link, progress)
    report.partitions = len(partitions)
    cut_window_ms = int(time.time() * 1000)
    ends_at_cut = await _log_ends(source_bootstrap, partitions, security)
    code, body = await asyncio.to_thread(_link_call, control, "cut", link=link, mode=mode)
    if code != 200:
        raise OSError(f"cutting {link} at {control}: {body.get('error', body)}")
    cut_at = time.monotonic()
    audit_seen: dict[tuple[str, int], set[str]] = {}
    check_task: asyncio.Task[PipelineReport] | None = None
    try:
        progress(f"outage: {link} cut ({mode}) for {cut_seconds:g} s; {len(partitions)} mirrored partitions")
        next_line = cut_at + 10
        while (elapsed := time.monotonic() - cut_at) < cut_seconds:
            if others and aggregate and check_records > 0 and check_task is None and elapsed >= cut_seconds / 2:
                progress(f"outage: checking {', '.join(others)} -> aggregate during the cut")
                check_task = asyncio.create_task(
                    run_check(
                        others,
                        aggregate,
                        records=check_records,
                        rate=max(10.0, check_records / max(1.0, cut_seconds / 4)),
                        timeout=max(30.0, cut_seconds / 2),
                        security=security,
                    )
                )
            if audit_url:
                await _sample_audit(audit_url, audit_topics, link, aggregate_tier, cut_window_ms, audit_seen, report)
            if time.monotonic() >= next_line:
                ages = _heartbeat_ages(await asyncio.to_thread(_scrape, mirror_metrics))
                progress(f"outage: {elapsed:.0f}/{cut_seconds:g} s cut; heartbeat ages {ages}")
                next_line += 10
            await asyncio.sleep(min(1.0, max(0.05, cut_seconds - elapsed)))
        ends_at_heal = await _log_ends(source_bootstrap, partitions, security)
        report.heartbeat_age_at_heal = _heartbeat_ages(await asyncio.to_thread(_scrape, mirror_metrics))
        report.cut_seconds = time.monotonic() - cut_at
    finally:  # whatever stopped the drill, the link is not left cut
        await asyncio.to_thread(_link_call, control, "heal", link=link)
    healed_at = time.monotonic()
    for statuses in audit_seen.values():
        worst = worst_status(statuses)
        report.audit_during_cut[worst] = report.audit_during_cut.get(worst, 0) + 1
    report.backlog_records = sum(ends_at_heal[tp] - ends_at_cut[tp] for tp in partitions)
    at_heal = await asyncio.to_thread(_scrape, mirror_metrics)
    before = flow_partitions(at_heal, link)
    counters_at_heal = _flow_counters(at_heal, link)
    report.uncommitted_at_heal = sum(max(0, ends_at_heal[tp] - before.get(tp, 0)) for tp in partitions)
    progress(f"outage: {link} healed; {report.backlog_records} records to catch up")
    if mirror_quota is not None:
        if counters_at_heal["records_total"] > 0:  # what the flow copied so far: bytes per record
            report.record_bytes = counters_at_heal["bytes_total"] / counters_at_heal["records_total"]
        if aggregate:
            try:
                report.quota_brokers = await _leaders(aggregate, partitions, security)
            except Exception as e:  # the estimate then assumes one broker: the longest catch-up
                progress(f"outage: cannot read the aggregate's leaders ({e}); the quota counted once")
        expected = report.expected_catch_up_seconds
        if expected is not None:
            progress(f"outage: with the mirror's produce quota, expected catch-up {expected:.1f} s")
    next_line = healed_at + 10
    while time.monotonic() - healed_at < timeout:
        now_committed = flow_partitions(await asyncio.to_thread(_scrape, mirror_metrics), link)
        now = time.monotonic()
        if report.first_progress_seconds is None and any(
            now_committed.get(tp, -1) > before.get(tp, -1) for tp in partitions
        ):
            report.first_progress_seconds = now - healed_at
        if all(now_committed.get(tp, -1) >= ends_at_heal[tp] for tp in partitions):
            report.caught_up = True
            report.catch_up_seconds = now - healed_at
            after = _flow_counters(await asyncio.to_thread(_scrape, mirror_metrics), link)
            copied = after["records_total"] - counters_at_heal["records_total"]
            if copied > 0:  # the catch-up's own bytes per record
                report.record_bytes = (after["bytes_total"] - counters_at_heal["bytes_total"]) / copied
            report.throttled_answers = round(
                after["produce_throttle_time_seconds_count"] - counters_at_heal["produce_throttle_time_seconds_count"]
            )
            report.throttled_seconds = (
                after["produce_throttle_time_seconds_sum"] - counters_at_heal["produce_throttle_time_seconds_sum"]
            )
            break
        if now >= next_line:
            # a partition missing from the metrics (its copier restarting) counts from where it was
            left = sum(max(0, ends_at_heal[tp] - now_committed.get(tp, before.get(tp, 0))) for tp in partitions)
            progress(f"outage: {now - healed_at:.0f} s after the heal, {left} records not yet committed")
            next_line += 10
        await asyncio.sleep(0.2)
    if check_task is not None:
        try:
            report.others_during_cut = await check_task
        except Exception as e:
            report.others_error = f"the pipeline check did not finish: {e}"
    if audit_url and report.caught_up:
        await _wait_audit_closed(
            audit_url, audit_topics, link, aggregate_tier, cut_window_ms, int(time.time() * 1000), timeout, report
        )
    return report


async def _sample_audit(
    url: str,
    topics: Sequence[str],
    dc: str,
    tier: str,
    since_ms: int,
    seen: dict[tuple[str, int], set[str]],
    report: OutageReport,
) -> None:
    """Add the statuses the cut DC's windows at ``tier`` that started after the cut show now to
    ``seen`` (window -> every status it has shown)."""
    try:
        rows = [r for t in topics for r in await asyncio.to_thread(_audit_rows, url, t)]
    except Exception as e:
        report.audit_error = f"audit service at {url} did not answer: {e}"
        return
    for r in rows:
        if r["datacenter"] == dc and r["tier"] == tier and int(r["window_start"]) >= since_ms and r["status"] != "open":
            seen.setdefault((r["topic"], int(r["window_start"])), set()).add(r["status"])


async def _wait_audit_closed(
    url: str,
    topics: Sequence[str],
    dc: str,
    tier: str,
    from_ms: int,
    to_ms: int,
    timeout: float,
    report: OutageReport,
) -> None:
    """Wait for every window of the cut (``from_ms``..``to_ms``) of ``dc`` at ``tier`` to be final
    (not open, not pending) and record their statuses."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rows = [
                r
                for t in topics
                for r in await asyncio.to_thread(_audit_rows, url, t)
                if r["datacenter"] == dc and r["tier"] == tier and from_ms <= int(r["window_start"]) <= to_ms
            ]
        except Exception as e:
            report.audit_error = f"audit service at {url} did not answer: {e}"
            return
        if rows and all(r["status"] != "open" and not r.get("pending") for r in rows):
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
            report.audit_after = counts
            return
        if time.monotonic() > deadline:
            report.audit_error = "the cut's windows did not close before the timeout"
            return
        await asyncio.sleep(1.0)
