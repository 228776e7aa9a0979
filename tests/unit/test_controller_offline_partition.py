"""The controller's half of the full-restart race (issue 38, item 0), deterministic.

A partition whose recorded leader (broker 2, alone in its ISR) has not registered when the
controller takes over is offline: its live replica (broker 1) is told of leader 2 without an
endpoint (``live_leaders`` names only brokers the controller has seen). When broker 2 registers,
Kafka's controller elects the offline partition again (OfflinePartition -> OnlinePartition: a new
leader epoch, LeaderAndIsr to every replica), so broker 1 hears of its leader again, this time
with the endpoint. Headwater's controller used to skip it (its leader was alive again), and
broker 1 was never told where to fetch from.

A real ZooKeeper and a real ``Controller``; the brokers' inter-broker endpoints are one listening
socket that answers the controller's requests and keeps each (broker, api key, body).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from headwater.broker.config import config_from_props
from headwater.broker.controller.controller import Controller
from headwater.broker.metadata_cache import MetadataCache
from headwater.broker.metrics import BrokerMetrics
from headwater.broker.zk import ZooKeeper, to_json
from headwater.protocol.apis import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from headwater.protocol.frames import decode_request, encode_response
from headwater.zk import paths as zkpaths
from headwater.zk.paths import partition_state_path

ANSWERS: dict[int, Any] = {
    LEADER_AND_ISR.key: (LEADER_AND_ISR, {"error_code": 0, "partition_errors": []}),
    UPDATE_METADATA.key: (UPDATE_METADATA, {"error_code": 0}),
    STOP_REPLICA.key: (STOP_REPLICA, {"error_code": 0, "partition_errors": []}),
}


class Brokers:
    """One socket per broker id standing in for its inter-broker listener."""

    def __init__(self) -> None:
        self.received: list[tuple[int, int, dict[str, Any]]] = []
        self.ports: dict[int, int] = {}
        self.servers: list[asyncio.Server] = []

    async def listen(self, broker_id: int) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    header, api, body = decode_request(memoryview(await reader.readexactly(size)))
                    self.received.append((broker_id, api.key, body))
                    answer_api, answer = ANSWERS[api.key]
                    for part in encode_response(header.correlation_id, answer_api, header.api_version, answer):
                        writer.write(bytes(part))  # type: ignore[arg-type]
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.servers.append(server)
        self.ports[broker_id] = server.sockets[0].getsockname()[1]
        return self.ports[broker_id]

    def leader_and_isr(self, broker_id: int) -> list[dict[str, Any]]:
        return [body for b, key, body in self.received if b == broker_id and key == LEADER_AND_ISR.key]

    async def close(self) -> None:
        for s in self.servers:
            s.close()
            await s.wait_closed()


async def _until(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.05)


def test_an_offline_partition_is_elected_again_when_its_leader_returns(zk_connect: str) -> None:
    async def main() -> None:
        zk = ZooKeeper(zk_connect, 6000, 30000)
        await zk.start()
        brokers = Brokers()
        try:
            for b in (1, 2):
                await brokers.listen(b)

            async def register(b: int) -> None:
                registration = {"version": 4, "endpoints": [f"PLAINTEXT://127.0.0.1:{brokers.ports[b]}"]}
                await zk.call(zk.client.create, zkpaths.broker_path(b), to_json(registration), ephemeral=True)

            await register(1)
            await zk.call(
                zk.client.create, zkpaths.topic_path("t"), to_json({"version": 1, "partitions": {"0": [2, 1]}})
            )
            state = {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 5, "isr": [2]}
            await zk.create_many([(partition_state_path("t", 0), to_json(state))], makepath=True)

            host = SimpleNamespace(
                broker_id=1,
                config=config_from_props({"zookeeper.connect": zk_connect, "broker.id": "1"}),
                cache=MetadataCache(zk),
                metrics=BrokerMetrics(),
                zk=zk,
                stopping=asyncio.Event(),
            )
            controller = Controller(host)  # type: ignore[arg-type]
            controller.start()
            try:

                async def told_of_leader_2_without_endpoint() -> bool:
                    return any(
                        r["live_leaders"] == [] and r["topic_states"][0]["partition_states"][0]["leader"] == 2
                        for r in brokers.leader_and_isr(1)
                    )

                await _until(told_of_leader_2_without_endpoint, "broker 1 told of leader 2 (not alive yet)")
                assert ("t", 0) in controller.ctx.offline

                await register(2)  # the recorded leader returns

                async def reelected() -> bool:
                    got = await zk.get_json(partition_state_path("t", 0))
                    return got is not None and got[0]["leader_epoch"] == 6

                await _until(reelected, "a new leader epoch for t-0")
                got = await zk.get_json(partition_state_path("t", 0))
                assert got is not None and got[0]["leader"] == 2 and got[0]["isr"] == [2]

                async def told_with_endpoint() -> bool:
                    return any(
                        r["topic_states"][0]["partition_states"][0]["leader_epoch"] == 6
                        and {"broker_id": 2, "host_name": "127.0.0.1", "port": brokers.ports[2]} in r["live_leaders"]
                        for r in brokers.leader_and_isr(1)
                    )

                await _until(told_with_endpoint, "broker 1 told of leader 2 with its endpoint")
                assert ("t", 0) not in controller.ctx.offline
            finally:
                await controller.stop()
        finally:
            await brokers.close()
            await zk.stop()

    asyncio.run(main())
