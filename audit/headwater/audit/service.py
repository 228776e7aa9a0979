"""``headwater audit serve``: one counter per cluster tier, reconciliation, alerts, HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client import CollectorRegistry, Gauge

from headwater.audit.config import AuditConfig
from headwater.audit.counter import TierCounter
from headwater.audit.reconcile import Completeness, reconcile
from headwater.audit.store import UNAUDITED_DC, Store
from headwater.audit.web import make_app

log = logging.getLogger("headwater.audit")

_ALERTING = ("loss", "duplicates")


class AuditService:
    def __init__(self, config: AuditConfig) -> None:
        self.config = config
        self.store = Store(config.store)
        self.counters = [
            TierCounter(alias, bootstrap, config, self.store) for alias, bootstrap in config.clusters.items()
        ]
        self.registry = CollectorRegistry()
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
        self.http_port: int | None = None

    # -- reads for the web side ------------------------------------------------------------------

    def rows(self, topic: str | None, since: int | None, until: int | None) -> list[Completeness]:
        counts = self.store.counts(topic, since, until)
        return reconcile(
            counts,
            list(self.config.clusters),
            self.store.datacenters(),
            self.config.window_ms,
            self.config.grace_ms,
            int(time.time() * 1000),
            self.config.aggregates,
        )

    def health(self) -> tuple[bool, str]:
        return True, "; ".join(f"{c.alias}: {c.records_counted} record(s) counted, lag {c.lag}" for c in self.counters)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        app = make_app(self.rows, self.store.topics, self.store.producer_hosts, self.registry, self.health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.config.http_host, self.config.http_port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.http_port = sockets[0].getsockname()[1] if sockets else self.config.http_port
        log.info(
            "dashboard on http://%s:%d/ (API /api/v1/completeness, /metrics, /healthz)",
            self.config.http_host,
            self.http_port,
        )
        tasks = [asyncio.ensure_future(c.run(stop)) for c in self.counters]
        tasks.append(asyncio.ensure_future(self._watch(stop)))
        try:
            await stop.wait()
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)
            await runner.cleanup()
            self.store.close()

    async def _watch(self, stop: asyncio.Event) -> None:
        """Metrics and alerts: every few seconds, reconcile the recent windows."""
        async with ClientSession(timeout=ClientTimeout(total=10)) as http:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), 2.0)
                except TimeoutError:
                    pass
                try:
                    await self._check(http)
                except Exception as e:  # never let one bad pass stop the alerts
                    log.warning("reconciliation pass failed: %s", e)

    async def _check(self, http: ClientSession) -> None:
        for c in self.counters:
            self._counted.labels(c.alias).set(c.records_counted)
            self._lag.labels(c.alias).set(c.lag)
        self._rejected.set(await asyncio.to_thread(self.store.stat, "rejected_events"))
        since = int(time.time() * 1000) - 24 * 3600 * 1000
        rows = await asyncio.to_thread(self.rows, None, since, None)
        last_closed: dict[tuple[str, str], list[Completeness]] = {}
        newest: dict[tuple[str, str], int] = {}
        now = int(time.time() * 1000)
        for r in rows:
            if r.status == "open" or r.datacenter == UNAUDITED_DC:
                continue
            key = (r.topic, r.tier)
            if r.window_start > newest.get(key, -1):
                newest[key] = r.window_start
                last_closed[key] = []
            if r.window_start == newest[key]:
                last_closed[key].append(r)
            if r.status in _ALERTING and await asyncio.to_thread(
                self.store.record_alert, (r.topic, r.window_start, r.datacenter, r.tier), r.status, now
            ):
                await self._alert(http, r)
        for (topic, tier), rs in last_closed.items():
            expected = sum(r.expected or 0 for r in rs)
            count = sum(r.count for r in rs)
            self._completeness.labels(topic, tier).set(count / expected if expected else 1.0)

    async def _alert(self, http: ClientSession, r: Completeness) -> None:
        what = f"{r.missing} record(s) missing" if r.status == "loss" else f"{r.count - (r.expected or 0)} duplicate(s)"
        log.error(
            "AUDIT %s: topic %s, window %s, datacenter %s, tier %s: %s (%d counted, %d sent by the producers)",
            r.status.upper(),
            r.topic,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.window_start / 1000)),
            r.datacenter,
            r.tier,
            what,
            r.count,
            r.expected or 0,
        )
        if self.config.webhook_url:
            try:
                async with http.post(
                    self.config.webhook_url, data=json.dumps(r.as_json()), headers={"Content-Type": "application/json"}
                ) as resp:
                    if resp.status >= 300:
                        log.warning("alert webhook %s answered %d", self.config.webhook_url, resp.status)
            except Exception as e:
                log.warning("alert webhook %s failed: %s", self.config.webhook_url, e)
