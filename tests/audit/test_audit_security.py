"""The audit service against an attacker (review security-2026-11-26, M7 and M8).

M7: the dashboard and API are not served unauthenticated beyond loopback unless the operator says
so; completeness queries are bounded in time; /metrics carries a bounded number of topic labels.
M8: count and gap events on ``__audit`` are signed (HMAC-SHA256, ``audit.signing.key``) and an
unsigned or forged one is refused, counted and logged once per producer; the topics an audit
service tracks are capped (``audit.max.topics``).

The store is real SQLite; the HTTP side is the real aiohttp app on a real port (``AuditService.run``,
its clusters unreachable: the HTTP side does not need them) or aiohttp's test server; the counters
read ``__audit`` from a fake ``fetch_raw`` (as test_audit_exact.py does); the end-to-end signing test
runs a real broker, a real AuditingProducer and a plain producer forging events.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from headwater.audit.config import AuditConfigError, parse
from headwater.audit.service import AuditService
from headwater.client.audit import AUDIT_TOPIC, HEADER_SIGNATURE, AuditingProducer, sign_event, verify_event
from headwater.protocol.records.record import RecordInput
from tests.audit.test_audit_exact import FakeFetch, _batch, _config, _counter, _counts, _event, _gap
from tests.audit.test_audit_exact import fetch as fetch  # the fixture: a fake fetch_raw over __audit
from tests.audit.test_audit_http_auth import running

W = 60_000
NOW = int(time.time() * 1000) // W * W
HOUR = 3_600_000
MAX_RANGE_MS = 7 * 24 * HOUR  # web.MAX_RANGE_MS, written out: the test states the bound


def _props(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "clusters": "dc1",
        "dc1.bootstrap.servers": "127.0.0.1:1",
        "window.ms": str(W),
        "grace.ms": "1000",
        "store": f"sqlite:///{tmp_path / 'audit.db'}",
        "http.port": "0",
        **extra,
    }


# -- M7: no unauthenticated dashboard beyond loopback ----------------------------------------------


def test_default_listens_on_loopback_only(tmp_path: Path) -> None:
    config = parse(_props(tmp_path))
    assert config.http_host == "127.0.0.1"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "audit.example.com"])
def test_unauthenticated_beyond_loopback_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(AuditConfigError) as e:
        parse(_props(tmp_path, **{"http.host": host}))
    message = str(e.value)
    assert message.startswith("http.auth: none")
    assert "http.allow.unauthenticated = true" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_unauthenticated_on_loopback_is_allowed(tmp_path: Path, host: str) -> None:
    assert parse(_props(tmp_path, **{"http.host": host})).http_host == host


def test_unauthenticated_beyond_loopback_when_the_operator_says_so(tmp_path: Path) -> None:
    config = parse(_props(tmp_path, **{"http.host": "0.0.0.0", "http.allow.unauthenticated": "true"}))
    assert config.http_host == "0.0.0.0" and not config.http_auth.enabled
    with pytest.raises(AuditConfigError, match=r"http\.allow\.unauthenticated: 'yes' is not true or false"):
        parse(_props(tmp_path, **{"http.host": "0.0.0.0", "http.allow.unauthenticated": "yes"}))


def test_authenticated_beyond_loopback_is_allowed(tmp_path: Path) -> None:
    config = parse(_props(tmp_path, **{"http.host": "0.0.0.0", "http.auth": "bearer", "http.auth.token": "t" * 20}))
    assert config.http_host == "0.0.0.0" and config.http_auth.enabled


def test_the_service_refuses_to_start_unauthenticated_on_every_address(tmp_path: Path) -> None:
    """``headwater audit serve`` itself: exit 2 with a readable line, before listening."""
    config = tmp_path / "audit.properties"
    config.write_text("".join(f"{k} = {v}\n" for k, v in _props(tmp_path, **{"http.host": "0.0.0.0"}).items()))
    done = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "audit", "serve", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "configuration error: http.auth: none" in done.stderr
    assert "Traceback" not in done.stderr


# -- M7: bounded query ranges ----------------------------------------------------------------------


def _service_with_history(tmp_path: Path, **extra: str) -> AuditService:
    """Counts of topic ``t`` now, 12 h ago, 2 days ago and 30 days ago."""
    service = AuditService(parse(_props(tmp_path, **{"http.host": "127.0.0.1", **extra})))
    counts = {("t", NOW - age, "dc1", "producer"): (5, 0) for age in (10 * W, 12 * HOUR, 48 * HOUR, 720 * HOUR)}
    service.store.apply("x", {}, counts, NOW, 0)
    return service


def test_completeness_without_a_range_is_bounded_to_the_last_day(tmp_path: Path) -> None:
    service = _service_with_history(tmp_path)
    calls: list[tuple[str | None, int | None, int | None]] = []
    rows_async = service.rows_async

    async def spy(topic: str | None, since: int | None, until: int | None) -> Any:
        calls.append((topic, since, until))
        return await rows_async(topic, since, until)

    service.rows_async = spy  # type: ignore[method-assign]

    async def scenario() -> None:
        async with running(service) as base, ClientSession() as http:
            async with http.get(f"{base}/api/v1/completeness") as r:
                assert r.status == 200
                windows = {row["window_start"] for row in (await r.json())["rows"]}
            assert windows == {NOW - 10 * W, NOW - 12 * HOUR}  # not 2 or 30 days ago
            async with http.get(f"{base}/api/v1/completeness", params={"topic": "t"}) as r:
                assert {row["window_start"] for row in (await r.json())["rows"]} == windows
            # an explicit range within the maximum: what it asks for
            params = {"topic": "t", "from": str(NOW - 49 * HOUR), "to": str(NOW - 47 * HOUR)}
            async with http.get(f"{base}/api/v1/completeness", params=params) as r:
                assert r.status == 200
                assert {row["window_start"] for row in (await r.json())["rows"]} == {NOW - 48 * HOUR}

    asyncio.run(scenario())
    assert calls and all(since is not None for _, since, _ in calls)
    service.store.close()


@pytest.mark.parametrize(
    "params",
    [
        {"from": "0"},
        {"from": str(NOW - 31 * 24 * HOUR), "to": str(NOW)},
        {"topic": "t", "from": str(NOW - 8 * 24 * HOUR)},
        {"from": str(-(2**61)), "to": str(2**61)},
    ],
)
def test_completeness_beyond_the_maximum_range_answers_400(tmp_path: Path, params: dict[str, str]) -> None:
    service = _service_with_history(tmp_path)

    async def scenario() -> None:
        from tests.audit.test_audit_exact import _app

        async with TestClient(TestServer(_app(service))) as client:
            for path in ("/api/v1/completeness", "/topic"):
                r = await client.get(path, params={"topic": "t", **params})
                text = await r.text()
                assert r.status == 400, (path, params, text)
                assert f"at most {MAX_RANGE_MS // HOUR // 24} days" in text, text
            r = await client.get("/api/v1/completeness", params={"from": str(NOW), "to": str(NOW - 1)})
            assert r.status == 400 and "to: before from" in await r.text()

    asyncio.run(scenario())
    service.store.close()


# -- M7 / M8: bounded topic labels ------------------------------------------------------------------


def test_metrics_topic_labels_are_bounded_by_audit_max_topics(tmp_path: Path) -> None:
    service = AuditService(parse(_props(tmp_path, **{"http.host": "127.0.0.1", "audit.max.topics": "5"})))
    counts = {(f"t{i:02d}", NOW - 10 * W, "dc1", "producer"): (1, 0) for i in range(20)}
    service.store.apply("x", {}, counts, NOW, 0)
    service.store.close()
    service = AuditService(service.config)  # a restart: the store already holds 20 topics
    service.counters[0].watermarks = {**{(f"t{i:02d}", 0): NOW for i in range(20)}, (AUDIT_TOPIC, 0): NOW}
    service.counters[0]._topics_at = 1.0
    asyncio.run(service.check())
    text = generate_latest(service.registry).decode()
    service.store.close()
    labelled = {
        line.split('topic="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("headwater_audit_completeness{")
    }
    assert labelled == {f"t{i:02d}" for i in range(5)}
    assert "headwater_audit_topics_tracked 5.0" in text


# -- M8: signed count and gap events -----------------------------------------------------------------

KEY = "k3y-shared-by-the-producers-and-the-audit"


def _signed(value: bytes, key: str = KEY) -> list[tuple[str, bytes]]:
    return [(HEADER_SIGNATURE, sign_event(value, key.encode()))]


def _round(service: AuditService, fetch: FakeFetch, records: list[RecordInput]) -> list[tuple[str, str]]:
    """One counter round over ``records`` on ``__audit``; the (tier, reason) of every refusal."""
    bad: list[tuple[str, str]] = []

    def on_bad(tier: str, reason: str) -> None:
        bad.append((tier, reason))
        service._count_bad(tier, reason)

    c = _counter(service.config, service.store, on_bad_event=on_bad, topic_limit=service.topic_limit)
    fetch.logs[(AUDIT_TOPIC, 0)] = [_batch(records)]
    c.offsets = {(AUDIT_TOPIC, 0): 0}
    asyncio.run(c._round())
    assert service.store.offsets("dc1") == {(AUDIT_TOPIC, 0): len(records)}  # past every one
    return bad


def test_unsigned_and_forged_count_events_are_refused_counted_and_logged_once_per_producer(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    service = AuditService(_config(tmp_path, clusters="dc1", **{"audit.signing.key": KEY}))
    good = _event(W, 10, "g-good")
    tampered = good.replace(b'"count": 10', b'"count": 99')
    records = [
        RecordInput(b"t", good, NOW, _signed(good)),
        RecordInput(b"t", _event(W, 5, "g-unsigned-1", host="evil"), NOW, []),
        RecordInput(b"t", _event(W, 6, "g-unsigned-2", host="evil"), NOW, []),
        RecordInput(b"t", _event(W, 7, "g-other-key", host="evil"), NOW, _signed(b"x", "another-key-of-16-bytes")),
        RecordInput(b"t", tampered.replace(b"g-good", b"g-tampered"), NOW, _signed(good)),
        RecordInput(b"t", _event(2 * W, 8, "g-garbage-sig"), NOW, [(HEADER_SIGNATURE, b"hmac-sha256=00")]),
    ]
    caplog.set_level(logging.INFO)
    bad = _round(service, fetch, records)
    assert _counts(service.store) == {(W, "dc1", "producer"): 10}  # only the signed event
    assert sorted(r[4] for r in service.store.rejected()) == ["bad signature"] * 3 + ["unsigned"] * 2
    assert sorted(bad) == [("dc1", "bad signature")] * 3 + [("dc1", "unsigned")] * 2
    metric = "headwater_audit_bad_events_total"
    assert service.registry.get_sample_value(metric, {"tier": "dc1", "reason": "unsigned"}) == 2
    assert service.registry.get_sample_value(metric, {"tier": "dc1", "reason": "bad signature"}) == 3
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    # once per producer and reason: evil unsigned, evil badly signed, h badly signed (twice: tampered, garbage)
    assert len(refusals) == 3, refusals
    assert sum("'evil'" in m and "unsigned" in m for m in refusals) == 1
    assert KEY not in caplog.text
    service.store.close()


def test_without_a_key_unsigned_events_are_accepted_and_the_risk_is_logged(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    service = AuditService(_config(tmp_path, clusters="dc1"))
    assert "audit.signing.key is not set" in caplog.text
    value = _event(W, 4, "g-1")
    assert _round(service, fetch, [RecordInput(b"t", value, NOW, []), RecordInput(b"t", value, NOW, [])]) == []
    assert _counts(service.store) == {(W, "dc1", "producer"): 4}
    service.store.close()


def test_exempt_kinds_are_accepted_unsigned_producer_events_never(tmp_path: Path, fetch: FakeFetch) -> None:
    props = {"audit.signing.key": "env:HW_AUDIT_SIGNING_TEST", "audit.signing.exempt": "warehouse"}
    os.environ["HW_AUDIT_SIGNING_TEST"] = KEY
    try:
        service = AuditService(_config(tmp_path, clusters="dc1", **props))
    finally:
        del os.environ["HW_AUDIT_SIGNING_TEST"]
    records = [
        RecordInput(b"t", _event(W, 3, "g-w", tier="warehouse"), NOW, []),
        RecordInput(b"t", _event(W, 3, "g-p"), NOW, []),
        RecordInput(b"t", _gap(), NOW, []),  # gaps are not exempt here
    ]
    bad = _round(service, fetch, records)
    assert _counts(service.store) == {(W, "dc1", "warehouse"): 3}
    assert sorted(bad) == [("dc1", "unsigned"), ("dc1", "unsigned")]
    assert service.store.gaps() == []
    service.store.close()


def test_a_previous_key_is_accepted_during_a_rotation(tmp_path: Path, fetch: FakeFetch) -> None:
    old = "the-old-key-before-the-rotation"
    service = AuditService(
        _config(tmp_path, clusters="dc1", **{"audit.signing.key": KEY, "audit.signing.previous.key": old})
    )
    a, b = _event(W, 1, "g-a"), _event(W, 2, "g-b")
    assert (
        _round(service, fetch, [RecordInput(b"t", a, NOW, _signed(a)), RecordInput(b"t", b, NOW, _signed(b, old))])
        == []
    )
    assert _counts(service.store) == {(W, "dc1", "producer"): 3}
    service.store.close()


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"audit.signing.key": "short"}, "audit.signing.key: shorter than 16 bytes"),
        ({"audit.signing.key": "env:HW_AUDIT_UNSET_KEY"}, "audit.signing.key: environment variable HW_AUDIT_UNSET_KEY"),
        ({"audit.signing.previous.key": KEY}, "audit.signing.previous.key: set without audit.signing.key"),
        ({"audit.signing.key": KEY, "audit.signing.exempt": "producer"}, "audit.signing.exempt: 'producer' is not"),
        ({"audit.signing.exempt": "gap"}, "audit.signing.exempt: set without audit.signing.key"),
        ({"audit.max.topics": "0"}, "audit.max.topics: 0 is below the minimum of 1"),
    ],
)
def test_bad_signing_settings_name_the_property_never_the_key(
    tmp_path: Path, extra: dict[str, str], message: str
) -> None:
    with pytest.raises(AuditConfigError) as e:
        parse(_props(tmp_path, **extra))
    assert message in str(e.value)
    assert KEY not in str(e.value)
    assert KEY not in repr(parse(_props(tmp_path, **{"audit.signing.key": KEY})))


def test_the_producer_signs_each_event_it_publishes() -> None:
    from tests.audit.test_audit_producer_events import FakeProducer

    class Recording(FakeProducer):
        def __init__(self) -> None:
            super().__init__()
            self.fail_next = 0
            self.headers: list[Any] = []

        async def send(self, topic: str, value: bytes, key: Any = None, headers: Any = (), *a: Any) -> Any:
            self.headers.append((value, list(headers)))
            return await super().send(topic, value, key)

    async def scenario() -> Recording:
        fake = Recording()
        p = AuditingProducer(producer=fake, datacenter="dc1", window_ms=W, signing_key=KEY)  # type: ignore[arg-type]
        p._counts[("t", 1)] = 10
        p._counts[("u", 2)] = 3
        assert await p.publish(all_windows=True) == 2
        return fake

    fake = asyncio.run(scenario())
    assert len(fake.headers) == 2
    for value, headers in fake.headers:
        assert headers == [(HEADER_SIGNATURE, sign_event(value, KEY.encode()))]
        assert verify_event(value, headers[0][1], [KEY.encode()])
        assert not verify_event(value + b" ", headers[0][1], [KEY.encode()])
    with pytest.raises(ValueError, match="shorter than 16 bytes"):
        AuditingProducer(producer=FakeProducer(), signing_key="short")  # type: ignore[arg-type]


# -- M8: a cap on the topics tracked -----------------------------------------------------------------


def test_events_beyond_audit_max_topics_are_refused_and_counted(
    tmp_path: Path, fetch: FakeFetch, caplog: pytest.LogCaptureFixture
) -> None:
    service = AuditService(_config(tmp_path, clusters="dc1", **{"audit.max.topics": "3"}))
    records = [RecordInput(b"t", _event(W, 1, f"g-{i}", topic=f"forged-{i}"), NOW, []) for i in range(10)]
    bad = _round(service, fetch, records)
    assert sorted(service.store.topics()) == ["forged-0", "forged-1", "forged-2"]
    assert bad == [("dc1", "too many topics")] * 7
    assert service.registry.get_sample_value("headwater_audit_topics_refused_total") == 7
    assert service.registry.get_sample_value("headwater_audit_topics_tracked") == 3
    assert sum("audit.max.topics (3) reached" in r.getMessage() for r in caplog.records) == 1
    service.store.close()
