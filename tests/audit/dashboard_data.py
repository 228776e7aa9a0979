"""Store-level scenarios for the dashboard tests: counts written into a real SQLite store through
:meth:`Store.apply` (what the tier counters write), served by the real aiohttp app of a real
:class:`AuditService` whose counters are not started (their watermarks set as a counter would)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from headwater.audit.config import parse
from headwater.audit.service import AuditService
from headwater.audit.store import Gap
from headwater.audit.web import make_app
from headwater.client.audit import AUDIT_TOPIC

W = 60_000


def now_window() -> int:
    return int(time.time() * 1000) // W * W


def service(tmp_path: Path) -> AuditService:
    config = parse(
        {
            "clusters": "dc1, dc2, agg",
            "dc1.bootstrap.servers": "127.0.0.1:1",
            "dc2.bootstrap.servers": "127.0.0.1:1",
            "agg.bootstrap.servers": "127.0.0.1:1",
            "window.ms": str(W),
            "grace.ms": "1000",
            "store": f"sqlite:///{tmp_path / 'audit.db'}",
            "http.host": "127.0.0.1",
            "http.port": "0",
        }
    )
    s = AuditService(config)
    caught_up(s)
    return s


def caught_up(s: AuditService, topics: tuple[str, ...] = ("views", "clicks")) -> None:
    """Every counter has counted every topic up to now (what a caught-up counter's watermarks say)."""
    now = int(time.time() * 1000)
    for c in s.counters:
        c.watermarks = {(t, 0): now for t in (*topics, AUDIT_TOPIC)}
        c._topics_at = 1.0


def write(
    s: AuditService,
    topic: str,
    windows: list[int],
    per_dc: int = 1000,
    *,
    tiers: dict[str, dict[str, int]] | None = None,
    updated_ms: int | None = None,
) -> None:
    """For each window: ``per_dc`` records produced in dc1 and dc2, counted at the local tier, agg
    and the warehouse; ``tiers`` overrides a (datacenter -> tier -> count) for the first window."""
    counts: dict[tuple[str, int, str, str], tuple[int, int]] = {}
    events: list[dict[str, Any]] = []  # the producers' count events (they name the datacenters)
    for i, w in enumerate(windows):
        for dc in ("dc1", "dc2"):
            for tier in ("producer", dc, "agg", "warehouse"):
                n = per_dc
                if i == 0 and tiers is not None:
                    n = tiers.get(dc, {}).get(tier, per_dc)
                if tier == "producer":
                    events.append(
                        {
                            "guid": uuid.uuid4().hex,
                            "tier": tier,
                            "topic": topic,
                            "window_start": w,
                            "datacenter": dc,
                            "host": f"{dc}-app1",
                            "application": "web",
                            "count": n,
                        }
                    )
                else:
                    counts[(topic, w, dc, tier)] = (n, 0)
    now = updated_ms if updated_ms is not None else int(time.time() * 1000)
    s.store.apply("test", {}, counts, now, 0, events)


def gap(s: AuditService, topic: str = "views") -> Gap:
    g = Gap("g" * 32, "agg", "dc2->agg", "dc2", topic, 3, 1200, 1500, 300, "source retention", int(time.time() * 1000))
    s.store.apply("dc2", {}, {}, int(time.time() * 1000), 0, gaps=[g])
    return g


def app(s: AuditService) -> web.Application:
    return make_app(
        s.rows_async,
        lambda: asyncio.to_thread(s.store.topics),
        lambda t, w, dc: asyncio.to_thread(s.store.producer_hosts, t, w, dc),
        s.registry,
        s.health,
        lambda t: asyncio.to_thread(s.store.gaps, t),
        s.recent_rows,
        overview_for=s.overview,
        completions_for=s.completions,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)
