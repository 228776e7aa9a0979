"""Signed count events end to end (review security-2026-11-26, M8): a real broker, a real auditing
producer signing its events, a plain producer forging events on ``__audit`` (unsigned, and signed
with a key that is not the audit's), and the real ``headwater audit serve`` process. The audit counts
exactly what the auditing producer sent and refuses the forgeries (its metric and log say so). And
the cap on topic names (``audit.max.topics``) on the topics a tier discovers on a real cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headwater.audit.config import parse
from headwater.audit.service import AuditService
from headwater.client.audit import AUDIT_TOPIC, HEADER_SIGNATURE, SyncAuditingProducer, count_event, sign_event
from headwater.client.sync import SyncProducer
from headwater.testing.zookeeper import free_port
from tests.audit.test_audit_pipeline import _get, _metric
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, wait_for

WINDOW_MS = 2000
KEY = "the-producers-and-the-audit-share-this"


def test_the_audit_counts_signed_events_and_refuses_forged_ones(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    dc1 = cluster_factory(1)
    create_topic(dc1, "views", partitions=2, rf=1, min_isr=1)
    create_topic(dc1, AUDIT_TOPIC, partitions=1, rf=1, min_isr=1)
    (tmp_path / "signing.key").write_text(KEY + "\n")
    port = free_port()
    props: dict[str, Any] = {
        "clusters": "dc1",
        "dc1.bootstrap.servers": dc1.bootstrap,
        "audit.topics": "views",
        "window.ms": WINDOW_MS,
        "grace.ms": 5000,
        "store": f"sqlite:///{tmp_path / 'audit.db'}",
        "http.host": "127.0.0.1",
        "http.port": port,
        "fetch.max.wait.ms": 100,
        "audit.signing.key": f"file:{tmp_path / 'signing.key'}",
    }
    audit = MirrorProcess(tmp_path, "audit", props, command=("audit", "serve")).start()
    try:
        with SyncAuditingProducer(
            dc1.bootstrap, datacenter="dc1", host="web-1", window_ms=WINDOW_MS, acks="all", signing_key=KEY
        ) as p:
            for f in [p.send("views", f"v{i}".encode()) for i in range(300)]:
                f.result(60)
            p.flush()
            sent = p.counts()
        assert sum(sent.values()) == 300
        window = min(w for _, w in sent) * WINDOW_MS
        with SyncProducer(dc1.bootstrap, acks="all") as forger:
            for host, headers in [("forger", []), ("forger-2", "wrong")]:
                e = count_event(
                    topic="views",
                    window_start=window,
                    window_ms=WINDOW_MS,
                    count=1000,
                    datacenter="dc1",
                    host=host,
                    application="x",
                )
                value = json.dumps(e).encode()
                hdrs = [(HEADER_SIGNATURE, sign_event(value, b"not-the-audit-key-at-all"))] if headers else []
                forger.send(AUDIT_TOPIC, value, b"views", hdrs).result(60)

        def refused() -> bool:
            return _metric(port, "headwater_audit_bad_events_total") >= 2

        wait_for(refused, 120, "the audit to refuse both forged events", audit)

        def producer_tier() -> int:
            rows = _get(f"http://127.0.0.1:{port}/api/v1/completeness?topic=views")["rows"]
            return sum(r["count"] for r in rows if r["tier"] == "producer")

        wait_for(lambda: producer_tier() == 300, 120, "the producer tier to count the signed events", audit)
        assert _metric(port, "headwater_audit_bad_events_total") == 2
        log = audit.log()
        assert "refused unsigned count event(s) from datacenter 'dc1' host 'forger'" in log
        assert "refused badly signed count event(s) from datacenter 'dc1' host 'forger-2'" in log
        assert KEY not in log
    finally:
        audit.stop()


def test_audited_topics_beyond_audit_max_topics_are_not_counted(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """The cap also holds for the topics a tier discovers on its cluster; each refused once."""
    dc1 = cluster_factory(1)
    for t in ("a1", "a2", "a3", "a4"):
        create_topic(dc1, t, partitions=1, rf=1, min_isr=1)
    config = parse(
        {
            "clusters": "dc1",
            "dc1.bootstrap.servers": dc1.bootstrap,
            "audit.topics": "a.*",
            "audit.max.topics": "2",
            "store": f"sqlite:///{tmp_path / 'audit.db'}",
        }
    )
    service = AuditService(config)
    counter = service.counters[0]

    async def discover_twice() -> None:
        try:
            await counter._discover()
            await counter._discover()
        finally:
            await counter.close()

    asyncio.run(discover_twice())
    assert len({t for t, _ in counter.offsets}) == 2
    assert service.registry.get_sample_value("headwater_audit_topics_refused_total") == 2
    service.store.close()
