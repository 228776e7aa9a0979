"""The broker: ZooKeeper registration, the metadata cache, local partitions, and request dispatch.

Start-up order: connect to ZooKeeper, load (and if needed recover) the logs, bind the
listeners, register ``/brokers/ids/<id>``, watch the cluster. Shut-down runs it backwards and
leaves a clean-shutdown marker in every log dir.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

from headwater.broker import zk as zkpaths
from headwater.broker.config import BrokerConfig, Listener, topic_log_config
from headwater.broker.handlers import HANDLERS, RequestContext, api_versions_fallback
from headwater.broker.metadata_cache import MetadataCache, PartitionInfo
from headwater.broker.network import CloseConnection, Connection, Response, SocketServer
from headwater.broker.partition import Partition
from headwater.broker.purgatory import Purgatory
from headwater.broker.storage.clock import Clock, SystemClock
from headwater.broker.storage.fs import FileSystem, OsFileSystem
from headwater.broker.storage.log_manager import LogManager
from headwater.broker.zk import ZooKeeper
from headwater.protocol.errors import DecodeError
from headwater.protocol.frames import UnsupportedRequest, decode_request, encode_response

log = logging.getLogger(__name__)


class BrokerIdInUse(RuntimeError):
    pass


class KafkaBroker:
    def __init__(self, config: BrokerConfig, fs: FileSystem | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.fs = fs or OsFileSystem()
        self.clock = clock or SystemClock()
        self.zk = ZooKeeper(
            config.zookeeper_connect, config.zookeeper_session_timeout_ms, config.zookeeper_connection_timeout_ms
        )
        self.cache = MetadataCache(self.zk)
        self.purgatory = Purgatory()
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.log_manager: LogManager | None = None
        self.server = SocketServer(config.listeners, self.handle_frame, config.socket_request_max_bytes)
        self._tasks: list[asyncio.Task[Any]] = []
        self.cluster_id = "headwater"
        self.stopping = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.zk.start()
        self.cluster_id = await self._cluster_id()
        cfg = self.config
        self.log_manager = await asyncio.to_thread(
            lambda: LogManager(
                cfg.log_dirs,
                cfg.log_defaults,
                self.fs,
                self.clock,
                retention_check_interval_ms=cfg.log_retention_check_interval_ms,
                flush_scheduler_interval_ms=cfg.log_flush_scheduler_interval_ms,
                flush_offset_checkpoint_interval_ms=cfg.log_flush_offset_checkpoint_interval_ms,
            )
        )
        await self.server.start()
        await self._register()
        self.zk.add_state_listener(self._on_zk_state)
        self.cache.on_partition_change = self._on_partition_change
        self.cache.on_topic_deleted = self._on_topic_deleted
        self.cache.on_topic_config = self._on_topic_config
        self.cache.start()
        self._tasks.append(asyncio.ensure_future(self._log_maintenance()))
        log.info("[KafkaServer id=%d] started (cluster %s)", self.broker_id, self.cluster_id)

    async def stop(self) -> None:
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        await self.server.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.log_manager is not None:
            await asyncio.to_thread(self.log_manager.shutdown)
        await self.zk.stop()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)

    async def _cluster_id(self) -> str:
        import base64
        import json
        import uuid

        got = await self.zk.get_json("/cluster/id")
        if got and isinstance(got[0], dict) and got[0].get("id"):
            return str(got[0]["id"])
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            await self.zk.call(
                self.zk.client.create, "/cluster/id", json.dumps({"version": "1", "id": new_id}).encode(), makepath=True
            )
            return new_id
        except Exception:
            got = await self.zk.get_json("/cluster/id")
            return str(got[0]["id"]) if got and isinstance(got[0], dict) else new_id

    def advertised(self) -> list[Listener]:
        """Advertised listeners with port 0 replaced by the port actually bound."""
        out = []
        for a in self.config.advertised_listeners:
            port = a.port or self.server.bound_ports.get(a.name, 0)
            out.append(Listener(a.name, a.host, port))
        return out

    def registration(self) -> dict[str, Any]:
        adv = self.advertised()
        plain = next((a for a in adv if a.name == "PLAINTEXT"), None)
        value: dict[str, Any] = {
            "listener_security_protocol_map": dict(self.config.listener_security_protocol_map),
            "endpoints": [a.url() for a in adv],
            "jmx_port": -1,
            "host": plain.host if plain else None,
            "port": plain.port if plain else -1,
            "timestamp": str(int(time.time() * 1000)),
            "version": 4,
        }
        if self.config.broker_rack:
            value["rack"] = self.config.broker_rack
        return value

    async def _register(self) -> None:
        path = zkpaths.broker_path(self.broker_id)
        # A previous incarnation killed with -9 keeps its ephemeral node until its session
        # expires; wait that long before concluding that another live broker has this id.
        deadline = time.monotonic() + self.config.zookeeper_session_timeout_ms / 1000.0 + 2.0
        warned = False
        while True:
            if await self.zk.create_ephemeral(path, self.registration()):
                log.info("registered broker %d at %s with %s", self.broker_id, path, self.registration()["endpoints"])
                return
            if time.monotonic() > deadline:
                got = await self.zk.get_json(path)
                holder = got[0].get("endpoints") if got and isinstance(got[0], dict) else "?"
                raise BrokerIdInUse(
                    f"broker.id={self.broker_id} is already registered in ZooKeeper at {path} by another live broker "
                    f"(endpoints {holder}). Give each broker a unique broker.id."
                )
            if not warned:
                log.warning(
                    "%s exists; waiting up to zookeeper.session.timeout.ms=%d for a previous session to expire",
                    path,
                    self.config.zookeeper_session_timeout_ms,
                )
                warned = True
            await asyncio.sleep(0.5)

    def _on_zk_state(self, state: str) -> None:
        log.info("ZooKeeper session state: %s", state)
        if state == "CONNECTED" and self.zk.session_id() is not None:
            self._tasks.append(asyncio.ensure_future(self._reregister_if_needed()))

    async def _reregister_if_needed(self) -> None:
        path = zkpaths.broker_path(self.broker_id)
        exists = await self.zk.call(self.zk.client.exists, path)
        if exists is None:
            log.info("re-registering broker %d after a new ZooKeeper session", self.broker_id)
            await self.zk.create_ephemeral(path, self.registration())

    async def _log_maintenance(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            if self.log_manager is not None:
                try:
                    self.log_manager.tick()
                except Exception:
                    log.exception("log maintenance failed")

    # -- partitions ------------------------------------------------------------------------------

    def _on_partition_change(self, info: PartitionInfo) -> None:
        key = (info.topic, info.partition)
        part = self.partitions.get(key)
        if info.leader == self.broker_id:
            assert self.log_manager is not None
            topic = self.cache.topics.get(info.topic)
            cfg = topic_log_config(self.config.log_defaults, topic.config if topic else {})
            log_ = self.log_manager.get_log(info.topic, info.partition) or self.log_manager.create_log(
                info.topic, info.partition, cfg
            )
            if part is None:
                part = self.partitions[key] = Partition(info.topic, info.partition, self.broker_id)
            part.become_leader(log_, info.leader_epoch, info.isr)
            self.purgatory.notify(key)
        elif part is not None:
            part.become_non_leader(info.leader, info.leader_epoch)
            self.purgatory.notify(key)

    def _on_topic_config(self, topic: str) -> None:
        info = self.cache.topics.get(topic)
        if self.log_manager is not None and info is not None:
            self.log_manager.update_topic_config(topic, topic_log_config(self.config.log_defaults, info.config))

    def _on_topic_deleted(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            del self.partitions[key]
            self.purgatory.notify(key)
        if self.log_manager is not None:
            for p in self.log_manager.partitions_of(topic):
                self.log_manager.delete_log(topic, p)
                log.info("deleted log %s-%d", topic, p)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # -- requests -------------------------------------------------------------------------------

    async def handle_frame(self, conn: Connection, frame: memoryview) -> Response:
        try:
            header, api, body = decode_request(frame)
        except UnsupportedRequest as e:
            if e.header.api_key == 18:
                return api_versions_fallback(e.header.correlation_id)
            raise CloseConnection(f"{e.message} (client {e.header.client_id!r})") from None
        except DecodeError as e:
            raise CloseConnection(f"malformed request: {e}") from None
        handler = HANDLERS[api.key]
        try:
            response = await handler(self, RequestContext(header, conn.listener.name, conn.peer), body)
        except CloseConnection:
            raise
        except Exception as e:
            log.exception("error handling %s v%d from %s", api.name, header.api_version, conn.peer)
            raise CloseConnection(f"internal error in {api.name}: {e!r}") from None
        if response is None:
            return None
        return encode_response(header.correlation_id, api, header.api_version, response)


def local_hostname() -> str:
    return socket.gethostname()
