"""``headwater audit serve``: one counter per cluster tier, reconciliation, alerts, HTTP.

Every long-lived task runs under :class:`headwater.service.supervisor.Supervisor`: a tier counter
that raises (its store down past its retries, a broker error) is logged at ERROR, counted in
``headwater_audit_task_failures_total{tier}`` and started again from the store's offsets; ``/healthz``
answers 503 while one is restarting, stuck or waiting for the store.

Alerts are an outbox in the store: a window's ``loss`` / ``duplicates`` (or ``resolved`` when a
window alerted before balances after all) and each mirror gap is recorded once, then POSTed to the
webhook until it answers 2xx (concurrently, with a timeout, retried with doubling backoff).

``headwater_audit_replication_latency_seconds{source,tier}``: now minus the newest mirror heartbeat
from datacenter ``source`` the ``tier`` counter has seen (computed when Prometheus scrapes): how far
behind that datacenter's flow into the tier is, growing by one per second while its link is cut.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from headwater.audit import overview
from headwater.audit.config import AuditConfig
from headwater.audit.counter import TierCounter, TopicLimit
from headwater.audit.reconcile import PRODUCER, WAREHOUSE, Completeness, reconcile
from headwater.audit.store import UNAUDITED_DC, Gap, PendingAlert, Store
from headwater.audit.web import make_app
from headwater.client.security import describe
from headwater.service.supervisor import HealthRegistry, Supervisor, Unit

log = logging.getLogger("headwater.audit")

_ALERTING = ("loss", "duplicates")
# headwater_audit_tier_completion_seconds: seconds after a window's end at which a tier reached 100 %
COMPLETION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
ALERT_TIMEOUT_S = 10.0
ALERT_MAX_BACKOFF_MS = 300_000
PRUNE_INTERVAL_S = 3600.0


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


class ReplicationLatency(Collector):
    """``headwater_audit_replication_latency_seconds{source,tier}``, computed at scrape time."""

    def __init__(self, counters: Callable[[], list[TierCounter]], clock: Callable[[], float] = time.time) -> None:
        self.counters = counters
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(
            "headwater_audit_replication_latency_seconds",
            "Now minus the newest mirror heartbeat from the source datacenter seen in the tier's cluster",
            labels=["source", "tier"],
        )
        now = self.clock()
        for c in self.counters():
            for source, newest in sorted(dict(c.heartbeats).items()):
                g.add_metric([source, c.alias], max(now - newest / 1000, 0.0))
        yield g


class AuditService:
    def __init__(self, config: AuditConfig, *, counters: list[TierCounter] | None = None) -> None:
        self.config = config
        self.store = Store(config.store)
        if self.store.migrated:
            log.info("store: schema migrated to version %d (applied %s)", max(self.store.migrated), self.store.migrated)
        self.registry = CollectorRegistry()
        self._bad_events = Counter(
            "headwater_audit_bad_events",
            "__audit records that are not valid events (kept in audit_rejected and skipped), per tier and reason",
            ["tier", "reason"],
            registry=self.registry,
        )
        self._topics_refused = Counter(
            "headwater_audit_topics_refused",
            "Events and audited topics refused because audit.max.topics distinct topic names are tracked",
            registry=self.registry,
        )
        # audit.max.topics: shared by every tier and the metrics' topic labels (review M7/M8)
        self.topic_limit = TopicLimit(config.max_topics, self.store.topics(), self._topics_refused.inc)
        tracked = Gauge(
            "headwater_audit_topics_tracked",
            "Distinct topic names tracked (at most audit.max.topics)",
            registry=self.registry,
        )
        tracked.set_function(lambda: len(self.topic_limit.topics))
        self.counters = counters or [
            TierCounter(
                alias, bootstrap, config, self.store, on_bad_event=self._count_bad, topic_limit=self.topic_limit
            )
            for alias, bootstrap in config.clusters.items()
        ]
        if not config.signing.required:
            log.warning(
                "audit.signing.key is not set: count and gap events on __audit are accepted unsigned, so any "
                'principal allowed to Write __audit can forge them (docs/audit.md, "Signed events")'
            )
        self.health_registry = HealthRegistry()
        self.supervisor = Supervisor("audit", self.health_registry, self.registry, ("tier",), max_backoff_s=10.0)
        self._completeness = Gauge(
            "headwater_audit_completeness",
            "Completeness of the last closed window, per topic and tier (1 = every record)",
            ["topic", "tier"],
            registry=self.registry,
        )
        self._counted = Gauge(
            "headwater_audit_records_counted",
            "Records counted since start, per cluster",
            ["cluster"],
            registry=self.registry,
        )
        self._lag = Gauge(
            "headwater_audit_consumer_lag",
            "High watermark minus counted offset, per cluster",
            ["cluster"],
            registry=self.registry,
        )
        self._rejected = Gauge(
            "headwater_audit_rejected_events", "Malformed count events rejected (all time)", registry=self.registry
        )
        self._alerts_pending = Gauge(
            "headwater_audit_alerts_pending", "Alerts not yet delivered to the webhook", registry=self.registry
        )
        self._completion = Histogram(
            "headwater_audit_tier_completion_seconds",
            "Seconds after a window's end at which a tier's count reached the producers' (100 %), "
            "per topic and tier; observed once per window and datacenter",
            ["topic", "tier"],
            buckets=COMPLETION_BUCKETS,
            registry=self.registry,
        )
        self._behind = Gauge(
            "headwater_audit_tier_behind_seconds",
            "Per topic and tier: seconds since the end of the oldest window whose records are still on their "
            "way (late while the hop's mirror heartbeats lag: a cut link, a stopped mirror); 0 when none",
            ["topic", "tier"],
            registry=self.registry,
        )
        self._pruned = Counter(
            "headwater_audit_pruned_rows",
            "Store rows deleted because they are older than retention.days, per table",
            ["table"],
            registry=self.registry,
        )
        self._behind_shown: set[tuple[str, str]] = set()
        self.replication_latency = ReplicationLatency(lambda: self.counters)
        self.registry.register(self.replication_latency)
        self.http_port: int | None = None

    def _count_bad(self, tier: str, reason: str) -> None:
        self._bad_events.labels(tier, reason).inc()

    # -- reads for the web side ------------------------------------------------------------------

    def watermark(self, tier: str, topic: str) -> int | None:
        """How far ``tier`` has counted ``topic`` (see counter.py); the producer and warehouse tiers:
        how far every cluster's ``__audit`` was read."""
        if tier in (PRODUCER, WAREHOUSE):
            marks = [c.audit_watermark() for c in self.counters]
            return None if not marks or any(m is None for m in marks) else min(m for m in marks if m is not None)
        for c in self.counters:
            if c.alias == tier:
                return c.topic_watermark(topic)
        return None

    def _snapshot(self) -> dict[tuple[str, str], int | None]:
        """The watermarks, read on the event loop (the counters change them there)."""
        out: dict[tuple[str, str], int | None] = {}
        topics = {t for c in self.counters for t, _ in c.watermarks}
        for tier in [PRODUCER, *(c.alias for c in self.counters)]:
            for t in topics:
                out[(tier, t)] = self.watermark(tier, t)
        return out

    def _heartbeats(self) -> dict[tuple[str, str], int]:
        """Per (tier, source datacenter): the heartbeat the windows are judged by (the newest seen, held
        back for grace.ms after a healed cut: TierCounter.held_heartbeats); read on the event loop."""
        return {(c.alias, source): ms for c in self.counters for source, ms in c.held_heartbeats().items()}

    def rows(
        self,
        topic: str | None,
        since: int | None,
        until: int | None,
        marks: dict[tuple[str, str], int | None] | None = None,
        beats: dict[tuple[str, str], int] | None = None,
    ) -> list[Completeness]:
        """Reconciled rows (blocking: runs store queries; call it on a worker thread)."""
        counts = self.store.counts(topic, since, until)
        snapshot = marks if marks is not None else {}
        newest = beats if beats is not None else {}

        def watermark(tier: str, t: str) -> int | None:
            return snapshot.get((PRODUCER if tier == WAREHOUSE else tier, t))

        return reconcile(
            counts,
            list(self.config.clusters),
            self.store.datacenters(),
            self.config.window_ms,
            self.config.grace_ms,
            int(time.time() * 1000),
            self.config.aggregates,
            watermark=watermark,
            warehouse_reach=self.store.warehouse_reach(),
            heartbeat=lambda tier, dc: newest.get((tier, dc)),
        )

    async def rows_async(self, topic: str | None, since: int | None, until: int | None) -> list[Completeness]:
        marks = self._snapshot()
        return await asyncio.to_thread(self.rows, topic, since, until, marks, self._heartbeats())

    async def recent_rows(self, topic: str, windows: int = 40) -> list[Completeness]:
        """The dashboard's rows: the topic's latest ``windows`` windows (not its whole history)."""
        newest = await asyncio.to_thread(self.store.newest_window, topic)
        if newest is None:
            return []
        return await self.rows_async(topic, newest - (windows - 1) * self.config.window_ms, None)

    def stale_tiers(self, now_ms: int | None = None) -> dict[str, str]:
        """Tier -> why its counts cannot be trusted to be current: its counter is restarting, failed,
        stopped, waiting for the store, has counted nothing yet, or its watermark is more than a
        window plus the grace behind the clock (it lags: windows that should have closed cannot).
        The producer tier is stale when any cluster's ``__audit`` is."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        behind_ms = self.config.window_ms + self.config.grace_ms
        out: dict[str, str] = {}
        for c in self.counters:
            unit = self.health_registry.units.get(f"counter {c.alias}")
            if unit is not None and unit.state != "running":
                out[c.alias] = f"counter {unit.state}{': ' + unit.reason if unit.reason else ''}"
            elif c.store_error:
                out[c.alias] = f"store unavailable: {c.store_error}"
            elif not c.watermarks:
                out[c.alias] = "nothing counted yet"
            else:
                oldest = min(c.watermarks.values())
                if now - oldest > behind_ms:
                    out[c.alias] = f"counted up to {(now - oldest) // 1000} s ago (lag {c.lag} records)"
            if c.alias in out and PRODUCER not in out:
                out[PRODUCER] = f"{c.alias}: {out[c.alias]}"
        return out

    async def overview(
        self, hours: int, limit: int = 200, offset: int = 0, gaps_limit: int = 50, gaps_offset: int = 0
    ) -> dict[str, Any]:
        """The overview page's data (see overview.py): the last ``hours`` of every topic."""
        now = int(time.time() * 1000)
        stale = self.stale_tiers(now)
        rows = await self.rows_async(None, now - hours * 3_600_000, None)
        gaps = await asyncio.to_thread(self.store.gaps, None, 10_000)
        alerts = await asyncio.to_thread(self.store.recent_alerts, now - hours * 3_600_000)
        for a in alerts:  # without a webhook an alert is "delivered" once logged: say so
            a["webhook"] = self.config.webhook_url is not None
        return overview.build(
            rows,
            gaps,
            stale,
            now_ms=now,
            hours=hours,
            limit=limit,
            offset=offset,
            gaps_limit=gaps_limit,
            gaps_offset=gaps_offset,
            alerts=alerts,
        )

    async def completions(self, topic: str, since: int, until: int) -> dict[tuple[str, int, str, str], int]:
        return await asyncio.to_thread(self.store.completions, topic, since, until)

    def health(self) -> tuple[bool, str]:
        """Healthy while every unit runs and no counter waits for the store; the text names each tier's
        counter: its state, the offsets it counted (summed over partitions) and its lag."""
        for c in self.counters:
            if c.store_error:
                self.health_registry.set_problem(f"counter {c.alias}", f"store unavailable: {c.store_error}")
            else:
                self.health_registry.clear_problem(f"counter {c.alias}")
        ok, why = self.health_registry.check()
        tiers = []
        for c in self.counters:
            unit = self.health_registry.units.get(f"counter {c.alias}")
            state = unit.state if unit is not None else "not started"
            tiers.append(
                f"{c.alias}: {state}, counted offset {c.counted_offsets}, lag {c.lag}, {c.records_counted} record(s) counted"
            )
        return ok, ("" if ok else why + "\n") + "\n".join(tiers)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        app = make_app(
            self.rows_async,
            lambda: asyncio.to_thread(self.store.topics),
            lambda t, w, dc: asyncio.to_thread(self.store.producer_hosts, t, w, dc),
            self.registry,
            self.health,
            lambda t: asyncio.to_thread(self.store.gaps, t),
            self.recent_rows,
            overview_for=self.overview,
            completions_for=self.completions,
            auth=self.config.http_auth,
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.config.http_host, self.config.http_port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.http_port = sockets[0].getsockname()[1] if sockets else self.config.http_port
        log.info(
            "dashboard on http://%s:%d/ (API /api/v1/completeness, /metrics, /healthz; http.auth=%s)",
            self.config.http_host,
            self.http_port,
            self.config.http_auth.scheme,
        )
        for alias, bootstrap in self.config.clusters.items():
            log.info("cluster %s: %s via %s", alias, describe(self.config.security.get(alias)), bootstrap)
        stuck_s = max(120.0, self.config.fetch_max_wait_ms / 1000 * 20)
        for c in self.counters:
            self.supervisor.start(
                f"counter {c.alias}",
                c.run,
                labels={"tier": c.alias},
                stuck_after_s=stuck_s,
                detail=lambda c=c: f"cluster {c.alias}, counted offset {c.counted_offsets}, lag {c.lag}",  # type: ignore[misc]
            )
        http = ClientSession(timeout=ClientTimeout(total=ALERT_TIMEOUT_S))
        self.supervisor.start("reconcile", self._watch, labels={"tier": "-"})
        self.supervisor.start("alerts", lambda unit: self._deliver_loop(unit, http), labels={"tier": "-"})
        self.supervisor.start("retention", self._prune_loop, labels={"tier": "-"})
        try:
            await stop.wait()
        finally:
            await self.supervisor.stop_all()
            await http.close()
            for c in self.counters:
                await c.close()
            await runner.cleanup()
            self.store.close()

    async def _watch(self, unit: Unit) -> None:
        """Metrics and alerts: every few seconds, reconcile the recent windows."""
        pause = 2.0
        while True:
            await asyncio.sleep(pause)
            started = time.monotonic()
            await self.check()
            unit.progress()
            # A large store (a pass over 24 h of windows took 0.7 s with 1 M count events): stay
            # below ~20 % of a core.
            pause = max(2.0, 5 * (time.monotonic() - started))

    async def check(self) -> int:
        """One reconciliation pass: metrics, and alerts recorded in the outbox; returns how many."""
        for c in self.counters:
            self._counted.labels(c.alias).set(c.records_counted)
            self._lag.labels(c.alias).set(c.lag)
        self._rejected.set(await asyncio.to_thread(self.store.stat, "rejected_events"))
        now = int(time.time() * 1000)
        since = now - 24 * 3600 * 1000
        rows = await self.rows_async(None, since, None)
        alerted = await asyncio.to_thread(self.store.alerted, since)
        last_closed: dict[tuple[str, str], list[Completeness]] = {}
        newest: dict[tuple[str, str], int] = {}
        recorded = 0
        behind: dict[tuple[str, str], float] = {}
        for r in rows:
            if r.pending:
                key = (r.topic, r.tier)
                behind[key] = max(behind.get(key, 0.0), max(now - r.window_end, 0) / 1000)
            if r.status == "open" or r.pending or r.datacenter == UNAUDITED_DC:
                continue  # a pending late window (its hop lags) is not final: no alert, not in the gauge
            key = (r.topic, r.tier)
            if r.window_start > newest.get(key, -1):
                newest[key] = r.window_start
                last_closed[key] = []
            if r.window_start == newest[key]:
                last_closed[key].append(r)
            wkey = (r.topic, r.window_start, r.datacenter, r.tier)
            previous = alerted.get(wkey)
            status = r.status if r.status in _ALERTING else "resolved" if previous in _ALERTING else None
            if status is None or status == previous:
                continue
            payload = json.dumps({"kind": "window", **r.as_json(), "alert": status})
            if await asyncio.to_thread(self.store.record_alert, wkey, status, now, payload):
                recorded += 1
                self._log_alert(r, status)
        for g in await asyncio.to_thread(self.store.unalerted_gaps):
            log.error(
                "AUDIT GAP: topic %s partition %d, tier %s: %s (detected %s)",
                g.topic,
                g.partition,
                g.tier,
                g.describe(),
                _when(g.detected_ms),
            )
            await asyncio.to_thread(self.store.set_gap_payload, g.guid, json.dumps(_gap_json(g)))
            recorded += 1
        # The metrics' topic labels stay bounded (audit.max.topics): only tracked topics are labelled.
        labelled = {t for t in {r.topic for r in rows} if self.topic_limit.admit(t, count=False)}
        behind = {k: v for k, v in behind.items() if k[0] in labelled}
        last_closed = {k: v for k, v in last_closed.items() if k[0] in labelled}
        await self._record_completions([r for r in rows if r.topic in labelled])
        for topic, tier in {*behind, *self._behind_shown}:  # back to 0 once the records arrived
            self._behind.labels(topic, tier).set(behind.get((topic, tier), 0.0))
        self._behind_shown |= set(behind)
        for (topic, tier), rs in last_closed.items():
            expected = sum(r.expected or 0 for r in rs)
            count = sum(r.count for r in rs)
            self._completeness.labels(topic, tier).set(count / expected if expected else 1.0)
        return recorded

    async def _record_completions(self, rows: list[Completeness]) -> None:
        """Tier completion latency: once the producer tier has closed a window (its expected count is
        final) and a tier's count equals it, that tier reached 100 % when the later of the two counts
        was last written; stored once, observed once in the histogram."""
        producers = {(r.topic, r.window_start, r.datacenter): r for r in rows if r.tier == PRODUCER}
        done = await asyncio.to_thread(self.store.completions, None, min((r.window_start for r in rows), default=0))
        found: dict[tuple[str, int, str, str], tuple[int, int]] = {}
        for r in rows:
            p = producers.get((r.topic, r.window_start, r.datacenter))
            key = (r.topic, r.window_start, r.datacenter, r.tier)
            if (
                r.tier == PRODUCER
                or p is None
                or p.status == "open"
                or not p.count
                or r.count != p.count
                or key in done
            ):
                continue
            completed = max(r.updated_ms, p.updated_ms)
            found[key] = (completed, completed - r.window_end)
        if not found:
            return
        recorded = await asyncio.to_thread(self.store.record_completions, found)
        for key in recorded:
            self._completion.labels(key[0], key[3]).observe(max(found[key][1], 0) / 1000)

    def _log_alert(self, r: Completeness, status: str) -> None:
        where = f"topic {r.topic}, window {_when(r.window_start)}, datacenter {r.datacenter}, tier {r.tier}"
        if status == "resolved":
            log.warning(
                "AUDIT RESOLVED: %s: now %s (%d counted, %d sent by the producers); the earlier alert is withdrawn",
                where,
                r.status,
                r.count,
                r.expected or 0,
            )
            return
        what = f"{r.missing} record(s) missing" if r.status == "loss" else f"{r.count - (r.expected or 0)} duplicate(s)"
        log.error(
            "AUDIT %s: %s: %s (%d counted, %d sent by the producers)",
            r.status.upper(),
            where,
            what,
            r.count,
            r.expected or 0,
        )

    async def prune(self, now_ms: int | None = None) -> dict[str, int]:
        """Delete what is older than ``retention.days`` (Store.prune); logs and counts what went."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        before = now - self.config.retention_days * 86_400_000
        deleted = await asyncio.to_thread(self.store.prune, before)
        for table, n in deleted.items():
            self._pruned.labels(table).inc(n)
        if any(deleted.values()):
            log.info(
                "retention: deleted what is older than %s (retention.days %d): %s",
                _when(before),
                self.config.retention_days,
                ", ".join(f"{n} from {t}" for t, n in deleted.items() if n),
            )
        return deleted

    async def _prune_loop(self, unit: Unit) -> None:
        while True:
            await self.prune()
            unit.progress()
            await asyncio.sleep(PRUNE_INTERVAL_S)

    async def _deliver_loop(self, unit: Unit, http: ClientSession) -> None:
        while True:
            await self.deliver(http)
            unit.progress()
            await asyncio.sleep(1.0)

    async def deliver(self, http: ClientSession) -> int:
        """POST the due alerts concurrently; each is marked delivered only on a 2xx. Returns how many were."""
        now = int(time.time() * 1000)
        pending = await asyncio.to_thread(self.store.pending_alerts, now)
        if not self.config.webhook_url:  # the log line was the alert: nothing left to deliver
            for a in pending:
                await asyncio.to_thread(self.store.alert_delivered, a, now, a.payload)
            return 0
        self._alerts_pending.set(len(pending))
        if not pending:
            return 0
        results = await asyncio.gather(*(self._post(http, a) for a in pending))
        delivered = 0
        for a, error in zip(pending, results, strict=True):
            if error is None:
                await asyncio.to_thread(self.store.alert_delivered, a, int(time.time() * 1000), a.payload)
                delivered += 1
            else:
                backoff = min(1000 * 2**a.attempts, ALERT_MAX_BACKOFF_MS)
                log.warning(
                    "alert webhook %s: %s (attempt %d); retrying in %d s",
                    self.config.webhook_url,
                    error,
                    a.attempts + 1,
                    backoff // 1000,
                )
                await asyncio.to_thread(self.store.alert_failed, a, now + backoff, a.payload)
        return delivered

    async def _post(self, http: ClientSession, a: PendingAlert) -> str | None:
        assert self.config.webhook_url is not None
        try:
            async with http.post(
                self.config.webhook_url,
                data=a.payload,
                headers={"Content-Type": "application/json"},
                timeout=ClientTimeout(total=ALERT_TIMEOUT_S),
            ) as resp:
                if 200 <= resp.status < 300:
                    return None
                return f"answered {resp.status}"
        except Exception as e:  # every failure is retried; the reason goes to the log
            return f"{type(e).__name__}: {e}"


def _gap_json(g: Gap) -> dict[str, Any]:
    return {
        "kind": "gap",
        "alert": "gap",
        "guid": g.guid,
        "tier": g.tier,
        "hop": g.hop,
        "datacenter": g.datacenter,
        "topic": g.topic,
        "partition": g.partition,
        "from_offset": g.from_offset,
        "to_offset": g.to_offset,
        "records": g.records,
        "reason": g.reason,
        "detected_ms": g.detected_ms,
        "message": g.describe(),
    }
