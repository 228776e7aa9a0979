"""The producer side of the audit (finding 5 of review audit-2026-11-24): a count event whose send
failed is sent again with the same guid, so the audit (de-duplicating by guid) counts it once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from headwater.client.audit import AuditingProducer

W = 60_000


class FakeProducer:
    """Records every audit event sent; the first send's future fails after 'writing' the event."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []
        self.fail_next = 1

    async def start(self) -> None:
        pass

    async def send(self, topic: str, value: bytes, key: Any = None, *a: Any) -> Any:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.written.append(json.loads(value))
        if self.fail_next:
            self.fail_next -= 1
            fut.set_exception(TimeoutError("delivery timeout (the broker had the event)"))
        else:
            fut.set_result(None)
        return fut

    async def flush(self, timeout: Any = None) -> None:
        pass

    async def close(self, timeout: Any = None) -> None:
        pass


def test_a_count_event_resent_after_a_failed_send_keeps_its_guid() -> None:
    async def scenario() -> list[dict[str, Any]]:
        fake = FakeProducer()
        p = AuditingProducer(producer=fake, datacenter="dc1", window_ms=W)  # type: ignore[arg-type]
        p._counts[("t", 1)] = 10
        assert await p.publish(all_windows=True) == 0
        p._counts[("t", 1)] += 2  # acknowledged meanwhile: a further event
        assert await p.publish(all_windows=True) == 2
        assert p.counts() == {("t", 1): 12}
        return fake.written

    written = asyncio.run(scenario())
    assert [e["count"] for e in written] == [10, 10, 2]
    assert written[0]["guid"] == written[1]["guid"] != written[2]["guid"]
    # The audit, de-duplicating by guid, counts 12.
    assert sum({e["guid"]: e["count"] for e in written}.values()) == 12
