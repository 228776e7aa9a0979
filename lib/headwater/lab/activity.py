"""Demo activity for the lab: a datacenter's front end writing page views and clicks.

The paper's running example is LinkedIn's activity data, so the lab's traffic looks like it: each
record is keyed by a member id (a skewed draw: a few members are very active, most are not, as on a
real site) and its value is a JSON event of a realistic size — a page view carries the page, the
referrer, the session and the user agent (about 300-450 bytes), a click the element clicked (about
180-250 bytes). Every event is stamped with its send time (``sent_ms``, also the record's CreateTime)
so any consumer can tell how long it took to arrive.

Records go through Headwater's auditing producer (acks=all, idempotent), so the audit service sees
the producer tier of every window, and a produce retried after a broker died (its answer lost, its
records appended) is not appended twice: the datacenter tier's count equals the producer's. The rate is records per second for the whole process, page views four to one
over clicks.

With a schema registry (``schema_registry_url``: a Confluent-compatible API, the lab's Apicurio
Registry), one record in ten is a search instead, written to ``searches`` as Avro in Confluent's
wire format (magic byte 0, the schema's 4-byte id, the Avro body: what confluent-kafka's
``AvroSerializer`` writes), its schema registered under ``searches-value`` at start. The loader,
given the same registry, loads ``searches`` as a typed table (docs/loader.md).
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import random
import socket
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.client.audit import AuditingProducer
from headwater.client.producer import RecordFuture
from headwater.client.security import ClientSecurity
from headwater.service.supervisor import wait_or_stop

__all__ = [
    "SEARCH_SCHEMA",
    "ActivityStats",
    "click",
    "member_id",
    "page_view",
    "register_schema",
    "run_activity",
    "search",
]

log = logging.getLogger("headwater.lab.activity")

PAGE_VIEWS = "page-views"
CLICKS = "clicks"
SEARCHES = "searches"

#: the Avro schema of ``searches`` (subject ``searches-value``)
SEARCH_SCHEMA: dict[str, object] = {
    "type": "record",
    "name": "Search",
    "namespace": "headwater.lab",
    "fields": [
        {"name": "member", "type": "long"},
        {"name": "query", "type": "string"},
        {"name": "results", "type": "int"},
        {"name": "datacenter", "type": "string"},
        {"name": "sent", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
_QUERIES = ("data engineer", "kafka", "product manager remote", "nurse", "python", "sales", "design", "intern")

_PAGES = (
    "/feed",
    "/in/profile",
    "/jobs/search",
    "/jobs/view",
    "/messaging/thread",
    "/company/overview",
    "/groups/discussion",
    "/notifications",
    "/learning/course",
    "/search/results/people",
)
_REFERRERS = ("https://www.google.com/", "https://www.bing.com/", "direct", "email-digest", "/feed", "/notifications")
_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "LinkedInApp/9.30 (Android 15; Pixel 9)",
)
_ELEMENTS = ("like", "comment", "share", "connect", "apply", "follow", "message", "see-more", "ad", "job-card")


def member_id(rng: random.Random, members: int) -> int:
    """A member id in [1, members], skewed like real activity: low ids are drawn far more often."""
    return max(1, min(members, int(members ** rng.random())))


def page_view(rng: random.Random, member: int, datacenter: str, seq: int, sent_ms: int) -> bytes:
    event = {
        "event": "PageViewEvent",
        "member_id": member,
        "page_key": rng.choice(_PAGES),
        "referrer": rng.choice(_REFERRERS),
        "session_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "user_agent": rng.choice(_AGENTS),
        "ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
        "duration_ms": rng.randrange(50, 4000),
        "datacenter": datacenter,
        "seq": seq,
        "sent_ms": sent_ms,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def click(rng: random.Random, member: int, datacenter: str, seq: int, sent_ms: int) -> bytes:
    event = {
        "event": "ClickEvent",
        "member_id": member,
        "page_key": rng.choice(_PAGES),
        "element": rng.choice(_ELEMENTS),
        "position": rng.randrange(1, 50),
        "session_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "datacenter": datacenter,
        "seq": seq,
        "sent_ms": sent_ms,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def search(rng: random.Random, member: int, datacenter: str, sent_ms: int) -> dict[str, object]:
    """A search event (the Avro record of :data:`SEARCH_SCHEMA`)."""
    return {
        "member": member,
        "query": rng.choice(_QUERIES),
        "results": rng.randrange(0, 500),
        "datacenter": datacenter,
        "sent": sent_ms,
    }


def register_schema(url: str, subject: str, schema: dict[str, object], timeout: float = 180.0) -> int:
    """Register ``schema`` (Avro) under ``subject`` in the Confluent-compatible registry at ``url``
    and return its id (the same id when it is registered already); tries again until ``timeout``
    while the registry is not reachable."""
    body = json.dumps({"schemaType": "AVRO", "schema": json.dumps(schema)}).encode()
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(
            f"{url.rstrip('/')}/subjects/{subject}/versions",
            data=body,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return int(json.loads(r.read())["id"])
        except OSError as e:
            if time.monotonic() >= deadline:
                raise OSError(f"registering {subject} at {url}: {e}") from e
            log.info("the schema registry at %s is not answering yet (%s); trying again", url, e)
            time.sleep(3)


def _confluent_avro(schema_id: int, parsed: Any, record: dict[str, object]) -> bytes:
    import fastavro

    out = io.BytesIO()
    out.write(b"\0" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


@dataclass
class ActivityStats:
    """What the process sent and what the cluster acknowledged, per topic."""

    sent: dict[str, int] = field(default_factory=lambda: {PAGE_VIEWS: 0, CLICKS: 0, SEARCHES: 0})
    acked: dict[str, int] = field(default_factory=lambda: {PAGE_VIEWS: 0, CLICKS: 0, SEARCHES: 0})
    failed: int = 0
    last_error: str = ""
    last_ack: float = 0.0


async def run_activity(
    bootstrap: str,
    datacenter: str,
    rate: float,
    stop: asyncio.Event,
    *,
    window_ms: int = 60_000,
    members: int = 100_000,
    report_every: float = 30.0,
    health_file: Path | None = None,
    seed: int | None = None,
    security: ClientSecurity | None = None,
    schema_registry_url: str | None = None,
) -> ActivityStats:
    """Write page views and clicks at ``rate`` records/s until ``stop`` is set; then flush and
    publish the last audit counts. Logs one progress line every ``report_every`` seconds, and
    touches ``health_file`` (when given) whenever records were acknowledged since the last touch.
    With ``schema_registry_url``, one record in ten is an Avro search (``searches``)."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    avro: tuple[int, Any] | None = None
    if schema_registry_url:
        import fastavro

        schema_id = await asyncio.to_thread(register_schema, schema_registry_url, f"{SEARCHES}-value", SEARCH_SCHEMA)
        avro = (schema_id, fastavro.parse_schema(SEARCH_SCHEMA))
        log.info("%s: Avro, schema id %d of %s-value at %s", SEARCHES, schema_id, SEARCHES, schema_registry_url)
    stats = ActivityStats()
    host = socket.gethostname()

    def settled(topic: str, fut: RecordFuture) -> None:
        if fut.cancelled() or fut.exception() is not None:
            stats.failed += 1
            stats.last_error = "cancelled" if fut.cancelled() else str(fut.exception())
        else:
            stats.acked[topic] += 1
            stats.last_ack = time.monotonic()

    producer = AuditingProducer(
        bootstrap,
        datacenter=datacenter,
        host=host,
        application="lab-activity",
        window_ms=window_ms,
        acks="all",
        enable_idempotence=True,  # a retry after a broker's kill -9 must not double a record
        linger_ms=5,
        compression="lz4",
        client_id=f"lab-activity-{datacenter}",
        security=security,
    )
    await producer.start()
    log.info("writing %s and %s into %s (%s) at %g records/s", PAGE_VIEWS, CLICKS, datacenter, bootstrap, rate)
    tick = min(0.1, 1.0 / rate)
    started = last_report = time.monotonic()
    last_acked = 0
    last_touch = 0.0
    budget, budget_at = 0.0, started
    seq = 0
    try:
        while not stop.is_set():
            now = time.monotonic()
            # Records due since the last tick, at most one second's worth: after a stall (a cluster
            # that was away and a full buffer) the rate resumes instead of bursting to catch up.
            budget = min(budget + rate * (now - budget_at), max(rate, 1.0))
            budget_at = now
            for _ in range(int(budget)):
                budget -= 1
                sent_ms = int(time.time() * 1000)
                member = member_id(rng, members)
                draw = rng.random()
                if avro is not None and draw < 0.1:
                    topic, value = SEARCHES, _confluent_avro(*avro, search(rng, member, datacenter, sent_ms))
                elif draw < 0.8:
                    topic, value = PAGE_VIEWS, page_view(rng, member, datacenter, seq, sent_ms)
                else:
                    topic, value = CLICKS, click(rng, member, datacenter, seq, sent_ms)
                fut = await producer.send(topic, value, key=str(member).encode(), timestamp_ms=sent_ms)
                fut.add_done_callback(functools.partial(settled, topic))
                stats.sent[topic] += 1
                seq += 1
            if health_file is not None and stats.last_ack > last_touch:
                health_file.touch()
                last_touch = time.monotonic()
            if now - last_report >= report_every:
                acked = sum(stats.acked.values())
                log.info(
                    "%s: %d page views, %d clicks and %d searches acknowledged; %.1f records/s over the"
                    " last %.0f s; %d in flight; %d failed%s",
                    datacenter,
                    stats.acked[PAGE_VIEWS],
                    stats.acked[CLICKS],
                    stats.acked[SEARCHES],
                    (acked - last_acked) / (now - last_report),
                    now - last_report,
                    seq - acked - stats.failed,
                    stats.failed,
                    f" (last: {stats.last_error})" if stats.failed else "",
                )
                last_report, last_acked = now, acked
            await wait_or_stop(stop, tick)
    finally:
        await producer.close()
    log.info(
        "%s: stopped after %d page views, %d clicks and %d searches acknowledged, %d failed",
        datacenter,
        stats.acked[PAGE_VIEWS],
        stats.acked[CLICKS],
        stats.acked[SEARCHES],
        stats.failed,
    )
    return stats
