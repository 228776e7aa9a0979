"""The ordering race of a full restart (issue 38, item 0), deterministic.

A follower gets LeaderAndIsr naming a leader whose endpoint it does not know: the controller had
not seen that leader register (so it is not in the request's ``live_leaders``) and this broker's
metadata cache does not list it. Kafka's fetcher picks the leader up as soon as its endpoint is
known; Headwater's follower used to log "leader N has no known endpoint" and never fetch.

The follower is a real ``KafkaBroker`` (not started: the test plays its controller, calling the
LeaderAndIsr and UpdateMetadata handlers in the racing order) with a real log manager; the
"leader" is a listening socket that records the first request frame of each connection, which
is the follower's fetcher introducing itself (client id ``broker-<id>-fetcher-<leader>``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.broker.config import config_from_props
from headwater.broker.handlers import RequestContext, leader_and_isr, update_metadata
from headwater.broker.server import KafkaBroker
from headwater.broker.storage.log_manager import LogManager
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import RequestHeader, decode_request_header
from headwater.protocol.schema import Message

FOLLOWER, LEADER = 1, 2


class LeaderSocket:
    """Accepts connections and keeps the client id of each one's first request."""

    def __init__(self) -> None:
        self.client_ids: list[str | None] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            size = int.from_bytes(await reader.readexactly(4), "big")
            header, _ = decode_request_header(memoryview(await reader.readexactly(size)))
            self.client_ids.append(header.client_id)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def _ctx(api_key: int, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 1, "controller-3"), "PLAINTEXT", "127.0.0.1:1")


def _leader_and_isr(live_leaders: list[Message]) -> Message:
    state = {
        "partition_index": 0,
        "controller_epoch": 1,
        "leader": LEADER,
        "leader_epoch": 4,
        "isr": [LEADER],
        "partition_epoch": 7,
        "replicas": [LEADER, FOLLOWER],
        "is_new": False,
    }
    return {
        "controller_id": 3,
        "controller_epoch": 1,
        "broker_epoch": -1,
        "topic_states": [{"topic_name": "t", "partition_states": [state]}],
        "live_leaders": live_leaders,
    }


def _update_metadata(port: int) -> Message:
    endpoint = {"port": port, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}
    return {
        "controller_id": 3,
        "controller_epoch": 1,
        "broker_epoch": -1,
        "topic_states": [],
        "live_brokers": [{"id": b, "endpoints": [endpoint], "rack": None} for b in (LEADER,)],
    }


async def _until(cond: object, what: str, timeout: float = 30.0) -> None:
    assert callable(cond)
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("endpoint_from", ["live_leaders", "update_metadata_after"])
def test_a_follower_fetches_once_its_leaders_endpoint_is_known(tmp_path: Path, endpoint_from: str) -> None:
    """``live_leaders``: the request names the leader's endpoint, the follower fetches at once.
    ``update_metadata_after``: it does not, and the follower starts fetching on the UpdateMetadata
    that names the leader (the race of a full restart: it used to wait forever)."""

    async def main() -> None:
        leader = LeaderSocket()
        await leader.start()
        config = config_from_props(
            {"broker.id": str(FOLLOWER), "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "logs")}
        )
        broker = KafkaBroker(config)  # never started: no ZooKeeper, no listeners
        broker.log_manager = LogManager([str(tmp_path / "logs")], config.log_defaults)
        try:
            live = [{"broker_id": LEADER, "host_name": "127.0.0.1", "port": leader.port}]
            resp = await leader_and_isr.handle(
                broker, _ctx(4, 2), _leader_and_isr(live if endpoint_from == "live_leaders" else [])
            )
            assert resp["error_code"] == ErrorCode.NONE
            assert [e["error_code"] for e in resp["partition_errors"]] == [ErrorCode.NONE]
            part = broker.replicas.partition("t", 0)
            assert part is not None and part.leader_id == LEADER and not part.is_leader
            if endpoint_from == "update_metadata_after":
                assert ("t", 0) in broker.replicas.fetchers.awaiting
                assert await update_metadata.handle(broker, _ctx(6, 5), _update_metadata(leader.port)) == {
                    "error_code": ErrorCode.NONE
                }
            await _until(
                lambda: f"broker-{FOLLOWER}-fetcher-{LEADER}" in leader.client_ids,
                "the follower's fetcher reaching its leader",
            )
            assert broker.replicas.fetchers.leader_of == {("t", 0): LEADER}
            assert not broker.replicas.fetchers.awaiting
        finally:
            await broker.replicas.stop()
            broker.log_manager.shutdown()
            await leader.stop()

    asyncio.run(main())


def test_a_partition_whose_role_changed_meanwhile_is_not_picked_up(tmp_path: Path) -> None:
    """A partition waiting for leader 2's endpoint that becomes leader itself (a newer LeaderAndIsr)
    before the endpoint is known does not start fetching from 2 when it is."""

    async def main() -> None:
        leader = LeaderSocket()
        await leader.start()
        config = config_from_props(
            {"broker.id": str(FOLLOWER), "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "logs")}
        )
        broker = KafkaBroker(config)
        broker.log_manager = LogManager([str(tmp_path / "logs")], config.log_defaults)
        try:
            await leader_and_isr.handle(broker, _ctx(4, 2), _leader_and_isr([]))
            newer = _leader_and_isr([])
            newer["topic_states"][0]["partition_states"][0].update(leader=FOLLOWER, leader_epoch=5, isr=[FOLLOWER])
            await leader_and_isr.handle(broker, _ctx(4, 2), newer)
            part = broker.replicas.partition("t", 0)
            assert part is not None and part.is_leader
            assert not broker.replicas.fetchers.awaiting
            await update_metadata.handle(broker, _ctx(6, 5), _update_metadata(leader.port))
            assert broker.replicas.fetchers.leader_of == {} and not broker.replicas.fetchers.fetchers
        finally:
            await broker.replicas.stop()
            broker.log_manager.shutdown()
            await leader.stop()

    asyncio.run(main())
