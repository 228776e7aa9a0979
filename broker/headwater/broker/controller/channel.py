"""The controller's channel to every live broker: one queue and one sender task per broker.

Requests to one broker leave in the order they were queued (LeaderAndIsr before the
UpdateMetadata that follows it). A request that fails because the connection broke is retried
on a new connection while the broker is still registered; the channel to a broker that left is
closed and its queue dropped. Retried however it failed, as Kafka's controller does: a broker cut
off by a network fault also just closes connections, and a dropped LeaderAndIsr would leave it with
stale roles (tried, and the nemesis test's partition round caught it). So handlers must answer, not
fail: LeaderAndIsr reports a partition it cannot apply as that partition's error (issue 9, defect 2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from headwater.broker.broker_client import BrokerConnection, BrokerConnectionError
from headwater.broker.security import ClientSecurity
from headwater.protocol.schema import Api, Message

log = logging.getLogger(__name__)

#: Controller requests are small and answered at once; one unanswered this long is retried on a
#: new connection (Kafka's controller.socket.timeout.ms is 30 s; we retry sooner).
REQUEST_TIMEOUT_S = 10.0


class BrokerChannel:
    def __init__(
        self, broker_id: int, host: str, port: int, client_id: str, security: ClientSecurity | None = None
    ) -> None:
        self.broker_id = broker_id
        self.conn = BrokerConnection(host, port, client_id, security=security)
        self.queue: asyncio.Queue[tuple[Api, Message, Callable[[Message], None] | None]] = asyncio.Queue()
        self.closed = False
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        # ``closed`` is checked as well as cancellation: on Python 3.11 ``wait_for`` can swallow a
        # cancel that lands as its inner future completes (gh-86296), and this loop retries fast.
        while not self.closed:
            api, body, on_response = await self.queue.get()
            backoff = 0.1
            while not self.closed:
                try:
                    response = await self.conn.request(api, body, timeout_s=REQUEST_TIMEOUT_S)
                    break
                except BrokerConnectionError as e:
                    log.info("controller: %s to broker %d failed (%s); retrying", api.name, self.broker_id, e)
                    self.conn.close()
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
            else:
                return
            if on_response is not None:
                try:
                    on_response(response)
                except Exception:
                    log.exception(
                        "controller: handling the %s response from broker %d failed", api.name, self.broker_id
                    )

    def send(self, api: Api, body: Message, on_response: Callable[[Message], None] | None = None) -> None:
        self.queue.put_nowait((api, body, on_response))

    async def close(self) -> None:
        self.closed = True
        self.task.cancel()
        self.conn.close()
        await asyncio.wait([self.task], timeout=5)


class ControllerChannel:
    def __init__(self, client_id: str, security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security
        self.channels: dict[int, BrokerChannel] = {}

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        if broker_id not in self.channels:
            self.channels[broker_id] = BrokerChannel(broker_id, host, port, self.client_id, self.security)

    async def remove_broker(self, broker_id: int) -> None:
        ch = self.channels.pop(broker_id, None)
        if ch is not None:
            await ch.close()

    def send(
        self, broker_id: int, api: Api, body: Message, on_response: Callable[[Message], None] | None = None
    ) -> None:
        ch = self.channels.get(broker_id)
        if ch is not None:
            ch.send(api, body, on_response)

    async def close(self) -> None:
        for bid in list(self.channels):
            await self.remove_broker(bid)
