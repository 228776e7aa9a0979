"""The mirror and the loader sign the audit events they publish (review M8's follow-up): with
``audit.signing.key`` set, the audit service refuses unsigned events, so the mirror's gap events
and the loader's warehouse-tier events must carry the same HMAC as audited producers' counts."""

from __future__ import annotations

import asyncio
import json

from headwater.client.admin import Admin, NewTopic
from headwater.client.audit import AUDIT_TOPIC, HEADER_SIGNATURE, verify_event
from headwater.client.producer import Producer
from headwater.loader.job import _send_audit_events, parse_config
from headwater.mirror.config import MirrorConfigError, parse
from headwater.mirror.gaps import reporter_for
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter
from tests.harness.broker import BrokerProcess
from tests.mirror.util import read_topic

KEY = b"0123456789abcdef-audit-signing"


def _audit_rows(bootstrap: str) -> list[tuple[bytes, dict[str, bytes]]]:
    return [(v, dict(h)) for _p, _o, _k, v, h, _t in read_topic(bootstrap, AUDIT_TOPIC)]


def test_the_mirror_signs_its_gap_events(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap

    async def main() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic("orders", 1, 1)])
            await admin.wait_for_topic("orders", timeout=30)
            async with Producer(bootstrap, acks="all") as p:
                for i in range(10):
                    await p.send_and_wait("orders", f"v{i}".encode())
            await admin.delete_records({("orders", 0): 5})  # records 0-4 gone: a gap for a mirror at 0
            writer = SourceWriter(admin.cluster, admin)
            try:
                reporter = reporter_for(
                    "dc1",
                    "agg",
                    admin.cluster,
                    writer,
                    MirrorMetrics(),
                    on_data_loss="report",
                    reset_to_latest=False,
                    signing_key=KEY,
                )
                assert await reporter.out_of_range("orders", 0, 0) == 5
            finally:
                await writer.close()

    asyncio.run(main())
    (value, headers), *_ = [r for r in _audit_rows(bootstrap) if json.loads(r[0]).get("type") == "gap"]
    assert json.loads(value)["records"] == 5
    assert verify_event(value, headers.get(HEADER_SIGNATURE), [KEY])
    assert not verify_event(value, headers.get(HEADER_SIGNATURE), [b"another key of sixteen bytes"])


def test_the_loader_signs_its_warehouse_events(broker: BrokerProcess) -> None:
    config = parse_config(
        {
            "bootstrap.servers": broker.bootstrap,
            "topics": "orders",
            "warehouse.path": "/tmp/unused-warehouse",
            "audit.bootstrap.servers": broker.bootstrap,
            "audit.signing.key": KEY.decode(),
        }
    )
    assert config.audit_signing_key == KEY
    assert KEY.decode() not in repr(config)
    event = {"type": "count", "guid": "g1", "topic": "orders", "tier": "warehouse", "count": 3}
    _send_audit_events(broker.bootstrap, [event], 30, None, config.audit_signing_key)
    (value, headers), *_ = [r for r in _audit_rows(broker.bootstrap) if json.loads(r[0]).get("guid") == "g1"]
    assert verify_event(value, headers.get(HEADER_SIGNATURE), [KEY])


def test_a_bad_mirror_signing_key_is_a_config_error_naming_the_property() -> None:
    props = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": "127.0.0.1:1",
        "agg.bootstrap.servers": "127.0.0.1:2",
        "dc1->agg.enabled": "true",
        "audit.signing.key": "short",
    }
    try:
        parse(props)
    except MirrorConfigError as e:
        assert "audit.signing.key" in str(e) and "short" not in str(e).replace("shorter", "")
    else:
        raise AssertionError("a short key was accepted")
    props["audit.signing.key"] = KEY.decode()
    config = parse(props)
    assert config.audit_signing_key == KEY and "audit.signing.key" not in config.unknown
    assert KEY.decode() not in repr(config)
