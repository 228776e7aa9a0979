"""The audit over a real pipeline with faults (issue 30's fault test): auditing producers in two DCs,
a real mirror into the aggregate cluster, the audit service on a real PostgreSQL. While records flow
the PostgreSQL server is restarted, the audit process is killed with SIGKILL and started again, and a
malformed count event is produced to ``__audit``: every window ends complete with exact counts at
every tier, the bad event is in the rejected table, and no alert reaches the webhook."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from headwater.client.audit import AUDIT_TOPIC, SyncAuditingProducer
from headwater.client.sync import SyncProducer
from headwater.testing.zookeeper import free_port
from tests.audit.postgres import ContainerPostgres, LocalPostgres, available
from tests.audit.test_audit_pipeline import _get, _healthy
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, wait_for, zk_connect

WINDOW_MS = 2000
GRACE_MS = 20000  # a loaded two-core machine: the mirror may lag this long without a late count


class Webhook:
    """An alert endpoint that records what it is sent."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def postgres() -> Iterator[LocalPostgres | ContainerPostgres]:
    """A real PostgreSQL: the lab's image as a container when an engine and the image are here,
    else Debian's server binaries (one of them: the test is long enough once)."""
    servers = available()
    if not servers:
        pytest.skip(f"neither {ContainerPostgres.IMAGE} with a Docker engine nor Debian's PostgreSQL binaries")
    pg = ContainerPostgres().start() if "container" in servers else LocalPostgres().start()
    try:
        yield pg
    finally:
        pg.cleanup()


def test_windows_end_exact_through_a_store_restart_a_kill_and_a_bad_event(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, postgres: LocalPostgres | ContainerPostgres
) -> None:
    dc1, dc2, agg = cluster_factory(1), cluster_factory(1), cluster_factory(1)
    for c in (dc1, dc2):
        create_topic(c, "orders", partitions=2, rf=1, min_isr=1)
    hook = Webhook()
    mirror = MirrorProcess(
        tmp_path,
        "mirror",
        {
            "clusters": "dc1, dc2, agg",
            "dc1.zookeeper.connect": zk_connect(dc1),
            "dc2.zookeeper.connect": zk_connect(dc2),
            "agg.bootstrap.servers": agg.bootstrap,
            "dc1->agg.enabled": "true",
            "dc2->agg.enabled": "true",
            "topics": "orders",
            "group.id": "m",
            "fetch.max.wait.ms": 100,
            "offset.commit.interval.ms": 500,
        },
    ).start()
    port = free_port()
    audit = MirrorProcess(
        tmp_path,
        "audit",
        {
            "clusters": "dc1, dc2, agg",
            "aggregate.clusters": "agg",
            "dc1.bootstrap.servers": dc1.bootstrap,
            "dc2.bootstrap.servers": dc2.bootstrap,
            "agg.bootstrap.servers": agg.bootstrap,
            "audit.topics": "orders",
            "window.ms": WINDOW_MS,
            "grace.ms": GRACE_MS,
            "store": postgres.dsn,
            "http.host": "127.0.0.1",
            "http.port": port,
            "fetch.max.wait.ms": 100,
            "alert.webhook.url": hook.url,
        },
        command=("audit", "serve"),
    ).start()
    produced = {"dc1": 0, "dc2": 0}
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(dc: str, bootstrap: str) -> None:
        try:
            with SyncAuditingProducer(
                bootstrap,
                datacenter=dc,
                host=f"web-{dc}",
                application="shop",
                window_ms=WINDOW_MS,
                acks="all",
                linger_ms=5,
            ) as p:
                while not stop.is_set():
                    futures = [p.send("orders", f"{dc}-{i}".encode(), key=b"k%d" % i) for i in range(50)]
                    for f in futures:
                        f.result(60)
                    produced[dc] += len(futures)
                    time.sleep(0.2)
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(dc, c.bootstrap)) for dc, c in (("dc1", dc1), ("dc2", dc2))]
    try:
        wait_for(lambda: _healthy(port), 90, "the audit service to answer /healthz", audit)
        for t in threads:
            t.start()
        wait_for(lambda: _get(f"http://127.0.0.1:{port}/api/v1/topics")["topics"], 90, "the first counts", audit)
        with SyncProducer(dc1.bootstrap, acks="all") as p:  # a poison count event
            p.send(AUDIT_TOPIC, b'{"guid": "bad", "tier": "producer", "count": 2e99', key=b"orders").result(60)
        postgres.restart()  # the store goes away and comes back while records flow

        def noticed() -> bool:  # the service hit the restarted store (a counter or the reconciliation pass)
            log = audit.log()
            return "store unavailable" in log or "StoreUnavailable" in log

        wait_for(noticed, 60, "the audit service to hit the restarted store", audit)
        # One connection serves the counters and the reconciliation pass: whichever hit the restart
        # reconnects it; healthy again means every unit runs and no counter waits for the store.
        wait_for(lambda: _healthy(port), 90, "the audit service to recover from the store restart", audit)
        audit.kill9()
        audit.start()
        wait_for(lambda: _healthy(port), 90, "the restarted audit service to answer /healthz", audit)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(120)
        assert not errors, errors
        total = produced["dc1"] + produced["dc2"]

        def settled() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = _get(f"http://127.0.0.1:{port}/api/v1/completeness?topic=orders")["rows"]
            if not rows or any(r["status"] == "open" for r in rows):
                return []
            return rows if sum(r["count"] for r in rows if r["tier"] == "producer") == total else []

        wait_for(settled, 180, "every window of orders to close with the producers' full count", audit)
        rows = settled()
        assert {(r["datacenter"], r["tier"]) for r in rows} == {
            (dc, tier) for dc in ("dc1", "dc2") for tier in ("producer", dc, "agg")
        }
        bad = [r for r in rows if r["status"] != "complete"]
        assert not bad, bad
        for dc in ("dc1", "dc2"):
            for tier in ("producer", dc, "agg"):
                assert sum(r["count"] for r in rows if r["datacenter"] == dc and r["tier"] == tier) == produced[dc]
        import psycopg

        with psycopg.connect(postgres.dsn) as conn:
            rejected = conn.execute("SELECT cluster, topic, reason FROM audit_rejected").fetchall()
        assert rejected == [("dc1", AUDIT_TOPIC, "unparsable")]
        assert _healthy(port)
        assert hook.posts == []  # no false alert reached the webhook
        assert "AUDIT LOSS" not in audit.log() and "AUDIT DUPLICATES" not in audit.log()
    finally:
        stop.set()
        for t in threads:
            if t.is_alive():
                t.join(120)
        audit.stop()
        mirror.stop()
        hook.close()
