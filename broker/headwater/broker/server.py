"""The broker: ZooKeeper registration, the controller, the replica manager, and request dispatch.

Start-up: connect to ZooKeeper, load (and if needed recover) the logs, bind the listeners,
register ``/brokers/ids/<id>``, then take part in the controller election; the controller
tells this broker which partitions it leads or follows (LeaderAndIsr) and what the cluster
looks like (UpdateMetadata).

Shut-down (SIGTERM) is controlled, as in Kafka: ask the controller to move leadership away
(ControlledShutdown, retried), then stop serving, stop fetchers, give up the controller role,
flush and close the logs (leaving a clean-shutdown marker), and close the ZooKeeper session.

ZooKeeper session loss: the broker stops acting as leader, follower and controller at once;
when kazoo has a new session it re-registers (a new broker epoch), and the controller, seeing
a bounced broker, tells it its roles again.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError

from headwater.broker.authorizer import Authorizer, Refused, authorize
from headwater.broker.broker_client import BrokerConnection, BrokerConnectionError
from headwater.broker.config import BrokerConfig, Listener, topic_log_config
from headwater.broker.controller.controller import Controller
from headwater.broker.credential_cache import CredentialCache
from headwater.broker.dynamic_config import FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE, DynamicBrokerConfig
from headwater.broker.group.coordinator import GroupCoordinator
from headwater.broker.handlers import HANDLERS, api_versions_fallback
from headwater.broker.metadata_cache import MetadataCache
from headwater.broker.metrics import BrokerMetrics
from headwater.broker.network import (
    ClientConnection,
    CloseConnection,
    ConnectionLimits,
    RequestHandler,
    Response,
    SocketServer,
)
from headwater.broker.producer_ids import ProducerIdManager
from headwater.broker.purgatory import Purgatory
from headwater.broker.quotas import QUOTA_API_KEYS, ClientQuotas
from headwater.broker.replica_manager import ReplicaManager
from headwater.broker.replication_quota import ReplicationQuota
from headwater.broker.request import RequestContext
from headwater.broker.sasl import SaslGate
from headwater.broker.storage import broker_metadata
from headwater.broker.storage.cleaner import CleanStats
from headwater.broker.storage.clock import Clock, SystemClock
from headwater.broker.storage.fs import FileSystem, OsFileSystem
from headwater.broker.storage.log import LogConfig
from headwater.broker.storage.log_manager import LogManager
from headwater.broker.txn.coordinator import TransactionCoordinator
from headwater.broker.zk import ZooKeeper
from headwater.protocol.apis import CONTROLLED_SHUTDOWN
from headwater.protocol.errors import DecodeError, ErrorCode
from headwater.protocol.frames import UnsupportedRequest, decode_request, encode_response
from headwater.scram import ScramCredential
from headwater.zk import cluster as zkcluster
from headwater.zk import paths as zkpaths
from headwater.zk.json import ZnodeFormatError
from headwater.zk.notifications import encode_log_dir_event

log = logging.getLogger(__name__)


class BrokerIdInUse(RuntimeError):
    pass


class KafkaBroker:
    def __init__(self, config: BrokerConfig, fs: FileSystem | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.broker_epoch = -1
        self.fs = fs or OsFileSystem()
        self.clock = clock or SystemClock()
        self.zk = ZooKeeper(
            config.zookeeper_connect,
            config.zookeeper_session_timeout_ms,
            config.zookeeper_connection_timeout_ms,
            security=config.zookeeper_security,
        )
        self.metrics = BrokerMetrics()
        self.cache = MetadataCache(self.zk)
        self.purgatory = Purgatory()
        self.replicas = ReplicaManager(self)
        self.controller = Controller(self)
        self.groups = GroupCoordinator(self)
        self.txns = TransactionCoordinator(self)
        self.producer_ids = ProducerIdManager(self.zk, self.broker_id)
        self.log_manager: LogManager | None = None
        #: dynamic broker configs (/config/brokers/<id> and <default>), applied live
        self.dynamic_config = DynamicBrokerConfig(config, self.zk, self._on_log_defaults)
        #: replication throttles (KIP-73): what this broker sends as leader / fetches as follower
        self.leader_quota = self._replication_quota("leader", LEADER_THROTTLED_RATE)
        self.follower_quota = self._replication_quota("follower", FOLLOWER_THROTTLED_RATE)
        self.metrics.leader_replication_rate.set_function(self.leader_quota.rate)
        self.metrics.follower_replication_rate.set_function(self.follower_quota.rate)
        #: client quotas (KIP-13/55/124): /config/users and /config/clients, applied live
        self.quotas = ClientQuotas(
            self.zk,
            config.quota_window_num,
            config.quota_window_size_seconds,
            producer_default=_static_quota(config.raw.get("quota.producer.default")),
            consumer_default=_static_quota(config.raw.get("quota.consumer.default")),
            on_new_sensor=self.metrics.quota_sensor,
        )
        #: ACLs (authorizer.class.name); None: every request is allowed and nothing is checked
        self.authorizer = (
            Authorizer(self.zk, config.super_users, config.allow_everyone_if_no_acl_found)
            if config.authorizer_class_name
            else None
        )
        #: SCRAM credentials (Kafka's CredentialCache), refreshed by /config/changes notifications
        self.credentials = CredentialCache(self.zk)
        exempt, quota_clock = self.quotas.exempt, self.quotas.clock
        self.metrics.exempt_request_time.set_function(lambda: exempt.measure(quota_clock()))
        # the one watch on /config/changes also tells the client quotas (users/..., clients/...)
        self.credentials.listeners.append(self.quotas.configs.on_change_notification)
        first_handlers: dict[str, RequestHandler] = {}
        ssl_contexts = {}
        for name, sec in config.security.items():
            if sec.ssl is not None:
                ssl_contexts[name] = sec.ssl.server_context(name)
            if sec.uses_sasl:
                gate = SaslGate(
                    sec,
                    self.handle_frame,
                    self._scram_credential,
                    config.connection_failed_authentication_delay_ms / 1000.0,
                    self.metrics.count_authentication,
                    reauth_ms=config.connections_max_reauth_ms,
                )
                first_handlers[name] = gate.handle
        limits = ConnectionLimits(
            connections_max_idle_ms=config.connections_max_idle_ms,
            max_connections_per_ip=config.max_connections_per_ip,
            max_connections_per_ip_overrides=dict(config.max_connections_per_ip_overrides),
            max_connections=config.max_connections,
            inter_broker_listener=config.inter_broker_listener_name,
        )
        self.server = SocketServer(
            config.listeners, self.handle_frame, config.socket_request_max_bytes, first_handlers, ssl_contexts, limits
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self.cluster_id = "headwater"
        self.stopping = asyncio.Event()
        self._session_lost = False
        self._metadata_waiters: set[asyncio.Future[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.zk.start()
        self.cluster_id = await self._cluster_id()
        cfg = self.config
        # meta.properties: a dir of another broker or cluster stops the start (Kafka's check)
        await asyncio.to_thread(broker_metadata.check_log_dirs, self.fs, cfg.log_dirs, self.broker_id, self.cluster_id)
        self.log_manager = await asyncio.to_thread(
            lambda: LogManager(
                cfg.log_dirs,
                cfg.log_defaults,
                self.fs,
                self.clock,
                retention_check_interval_ms=cfg.log_retention_check_interval_ms,
                flush_scheduler_interval_ms=cfg.log_flush_scheduler_interval_ms,
                flush_offset_checkpoint_interval_ms=cfg.log_flush_offset_checkpoint_interval_ms,
                high_watermark_checkpoint_interval_ms=cfg.replica_high_watermark_checkpoint_interval_ms,
                cleaner_io_bytes_per_second=cfg.log_cleaner_io_max_bytes_per_second,
                producer_id_expiration_ms=cfg.transactional_id_expiration_ms,
            )
        )
        online = [d for d in self.log_manager.log_dirs if d not in self.log_manager.offline_dirs]
        await asyncio.to_thread(broker_metadata.write_missing, self.fs, online, self.broker_id, self.cluster_id)
        self.log_manager.high_watermark_of = self.replicas.high_watermark_of  # retention stops at the HW
        self.log_manager.on_cleaned = self._count_cleaning
        self.log_manager.on_dir_failure = self._on_log_dir_failure
        if self.authorizer is not None:
            await self.authorizer.start()
        # before the listeners: the first login finds its user; on every broker, as its watch on
        # /config/changes also feeds the client quotas
        await self.credentials.start()
        await self.server.start()
        if cfg.prometheus_port is not None:
            port = self.metrics.serve(cfg.prometheus_port, cfg.prometheus_host)
            log.info("Prometheus metrics on http://%s:%d/metrics", cfg.prometheus_host, port)
        self.cache.on_topic_config = self._on_topic_config
        self.cache.on_controller_change = self.controller.on_controller_change
        self.cache.start()
        self.dynamic_config.start()
        await self.quotas.start()
        await self._register()
        self.zk.add_state_listener(self._on_zk_state)
        self.replicas.start()
        self.groups.start()
        self.txns.start()
        self.controller.start()
        self._spawn(self._log_maintenance())
        if cfg.log_cleaner_enable:
            self._spawn(self._log_cleaner())
        log.info("[KafkaServer id=%d] started (cluster %s)", self.broker_id, self.cluster_id)

    async def stop(self) -> None:
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        self.stopping.set()
        if self.config.controlled_shutdown_enable and self.broker_epoch >= 0:
            await self._controlled_shutdown()
        await self.server.stop()
        await self.credentials.stop()
        await self.groups.stop()
        await self.txns.stop()
        await self.replicas.stop()
        await self.controller.resign_and_release()
        await self.controller.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.log_manager is not None:
            await asyncio.to_thread(self.log_manager.shutdown)
        await self.zk.stop()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _cluster_id(self) -> str:
        try:
            return zkcluster.decode_cluster_id((await self.zk.call(self.zk.client.get, zkpaths.CLUSTER_ID))[0])
        except (NoNodeError, ZnodeFormatError):
            pass
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            await self.zk.call(
                self.zk.client.create, zkpaths.CLUSTER_ID, zkcluster.encode_cluster_id(new_id), makepath=True
            )
            return new_id
        except Exception:
            try:  # another broker created it first
                return zkcluster.decode_cluster_id((await self.zk.call(self.zk.client.get, zkpaths.CLUSTER_ID))[0])
            except (NoNodeError, ZnodeFormatError):
                return new_id

    async def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """From this broker's cache (credential_cache.py): a login reads nothing from ZooKeeper; a
        changed or deleted user applies to the next login once its change notification arrived."""
        return self.credentials.get(user, mechanism)

    def advertised(self) -> list[Listener]:
        """Advertised listeners with port 0 replaced by the port actually bound."""
        return [
            Listener(a.name, a.host, a.port or self.server.bound_ports.get(a.name, 0))
            for a in self.config.advertised_listeners
        ]

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
                stat = await self.zk.call(self.zk.client.exists, path)
                self.broker_epoch = stat.czxid if stat is not None else -1
                log.info(
                    "registered broker %d at %s with %s (broker epoch %d)",
                    self.broker_id,
                    path,
                    self.registration()["endpoints"],
                    self.broker_epoch,
                )
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
        if state == KazooState.LOST and self.stopping.is_set():
            return  # the broker closed its own session at the end of a shutdown: nothing is lost
        if state == KazooState.LOST:
            self._session_lost = True
            self.replicas.on_session_lost()
            self.controller.on_session_lost()
        elif state == KazooState.CONNECTED and self._session_lost and not self.stopping.is_set():
            self._session_lost = False
            self._spawn(self._on_new_session())

    async def _on_new_session(self) -> None:
        try:
            await self._register()
        except BrokerIdInUse as e:
            log.error("%s", e)
            return
        self.controller.on_session_reconnected()

    def _count_cleaning(self, stats: CleanStats) -> None:
        m = self.metrics
        m.cleanings.inc()
        m.cleaner_bytes_read.inc(stats.bytes_read)
        m.cleaner_bytes_written.inc(stats.bytes_written)
        m.cleaner_records_removed.inc(stats.records_removed)
        m.cleaner_last_clean_seconds.set(stats.seconds)

    def _on_log_dir_failure(self, log_dir: str, tps: list[tuple[str, int]]) -> None:
        """A log dir failed (KIP-112): its partitions go offline here, and the controller hears of it
        through ``/log_dir_event_notification`` (it then asks this broker which replicas are offline)."""
        self.replicas.handle_log_dir_failure(log_dir, tps)

        async def notify() -> None:
            value = encode_log_dir_event(self.broker_id)
            for attempt in range(10):
                (result,) = await self.zk.create_many(
                    [(zkpaths.LOG_DIR_EVENT_PREFIX, value)], makepath=True, sequence=True
                )
                if not isinstance(result, Exception):
                    log.info("log dir %s failed: notified the controller (%s)", log_dir, result)
                    return
                log.warning("cannot notify the controller of the failed log dir %s: %s", log_dir, result)
                await asyncio.sleep(min(2**attempt * 0.1, 2.0))

        self._spawn(notify())

    async def _log_cleaner(self) -> None:
        """Compaction: one compacted log every log.cleaner.backoff.ms (see storage/cleaner.py)."""
        while True:
            await asyncio.sleep(self.config.log_cleaner_backoff_ms / 1000.0)
            if self.log_manager is not None:
                await self.log_manager.clean_one()

    async def _log_maintenance(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            if self.log_manager is not None:
                try:
                    self.log_manager.tick()
                except Exception:
                    log.exception("log maintenance failed")

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker before it stops serving."""
        cfg = self.config
        for attempt in range(1, cfg.controlled_shutdown_max_retries + 1):
            controller_id = self.cache.controller_id
            remaining: list[Any] | None = None
            try:
                if controller_id == self.broker_id:
                    remaining = await self.controller.controlled_shutdown(self.broker_id, self.broker_epoch)
                elif controller_id >= 0 and controller_id in self.cache.brokers:
                    host, port = self.cache.brokers[controller_id].endpoints[cfg.inter_broker_listener_name]
                    conn = BrokerConnection(
                        host, port, f"broker-{self.broker_id}-shutdown", security=cfg.inter_broker_security
                    )
                    try:
                        resp = await conn.request(
                            CONTROLLED_SHUTDOWN,
                            {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch},
                            timeout_s=30,
                        )
                    finally:
                        conn.close()
                    if resp["error_code"] == ErrorCode.NONE:
                        remaining = resp["remaining_partitions"]
            except (BrokerConnectionError, KeyError) as e:
                log.info("controlled shutdown attempt %d failed: %s", attempt, e)
            if remaining is not None and not remaining:
                log.info("controlled shutdown succeeded")
                return
            log.info(
                "controlled shutdown attempt %d/%d: %s partition(s) still led here; retrying in %d ms",
                attempt,
                cfg.controlled_shutdown_max_retries,
                "?" if remaining is None else len(remaining),
                cfg.controlled_shutdown_retry_backoff_ms,
            )
            await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000.0)
        log.warning("controlled shutdown did not complete; shutting down anyway")

    # -- partitions and metadata ---------------------------------------------------------------------

    def _replication_quota(self, kind: str, rate_config: str) -> ReplicationQuota:
        return ReplicationQuota(
            self.broker_id,
            kind,
            lambda: self.dynamic_config.rate(rate_config),
            self.cache.config_of,
            samples=self.config.replication_quota_window_num,
            window_s=self.config.replication_quota_window_size_seconds,
        )

    def _on_log_defaults(self, defaults: LogConfig) -> None:
        """A dynamic broker config changed the topic-config defaults: every log without its own
        override of a key takes the new value (retention, segment size, ... at their next use)."""
        if self.log_manager is None:
            return
        self.log_manager.default_config = defaults
        for topic in sorted({t for (t, _), _log in self.log_manager.all_logs()}):
            self.log_manager.update_topic_config(topic, topic_log_config(defaults, self.cache.config_of(topic)))

    def _on_topic_config(self, topic: str) -> None:
        if self.log_manager is not None and self.log_manager.partitions_of(topic):
            self.log_manager.update_topic_config(
                topic, topic_log_config(self.config.log_defaults, self.cache.config_of(topic))
            )

    def metadata_changed(self) -> None:
        for fut in list(self._metadata_waiters):
            if not fut.done():
                fut.set_result(None)
        self._metadata_waiters.clear()
        if self.controller.active:
            self.metrics.offline_partitions.set(
                sum(1 for s in self.controller.ctx.states.values() if s.leader not in self.controller.ctx.brokers)
            )

    async def wait_for_metadata(self, timeout_s: float) -> None:
        """Until the next UpdateMetadata (or the timeout)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._metadata_waiters.add(fut)
        try:
            await asyncio.wait_for(fut, max(timeout_s, 0))
        except TimeoutError:
            pass
        finally:
            self._metadata_waiters.discard(fut)

    # -- requests -------------------------------------------------------------------------------

    async def handle_frame(self, conn: ClientConnection, frame: memoryview) -> Response:
        started = time.perf_counter()
        # request quotas (KIP-124): what this request costs the loop, from decoding to encoding, its
        # waits left out (network.LoopTime clocks the connection's task)
        loop_time = conn.loop_time
        quotas = self.quotas
        busy_at = loop_time.now() if quotas.clocked and loop_time.running else None
        try:
            header, api, body = decode_request(frame)
        except UnsupportedRequest as e:
            if e.header.api_key == 18:
                return api_versions_fallback(e.header.correlation_id)
            raise CloseConnection(f"{e.message} (client {e.header.client_id!r})") from None
        except DecodeError as e:
            raise CloseConnection(f"malformed request: {e}") from None
        handler = HANDLERS[api.key]
        ctx = RequestContext(header, conn.listener.name, conn.peer, conn.principal)
        post = None
        if self.authorizer is not None:
            try:
                denied, body, post = authorize(self.authorizer, api.key, ctx, body)
            except Refused as e:
                raise CloseConnection(f"{api.name}: {e}") from None
            if denied is not None:  # answered, and counted against the client's quotas as Kafka does
                refusal = encode_response(header.correlation_id, api, header.api_version, denied)
                if busy_at is None and not (quotas.measures_bytes and api.key in QUOTA_API_KEYS):
                    return refusal
                return quotas.after_request(
                    conn,
                    header.client_id,
                    api.key,
                    body,
                    denied,
                    len(frame),
                    refusal,
                    lambda r: encode_response(header.correlation_id, api, header.api_version, r),
                    None if busy_at is None else loop_time.now() - busy_at,
                )
        try:
            response = await handler(self, ctx, body)
            if post is not None and response is not None:
                response = post(response)
        except CloseConnection:
            raise
        except Exception as e:
            log.exception("error handling %s v%d from %s", api.name, header.api_version, conn.peer)
            raise CloseConnection(f"internal error in {api.name}: {e!r}") from None
        handled = time.perf_counter()
        count, latency = self.metrics.request_children(api.name, header.api_version)
        count.inc()
        latency.observe(handled - started)
        parts = None if response is None else encode_response(header.correlation_id, api, header.api_version, response)
        own_s = None if busy_at is None else loop_time.now() - busy_at
        # client quotas (only while some are set): throttle_time_ms, and a mute
        if own_s is not None or (quotas.measures_bytes and api.key in QUOTA_API_KEYS):
            parts = quotas.after_request(
                conn,
                header.client_id,
                api.key,
                body,
                response,
                len(frame),
                parts,
                lambda r: encode_response(header.correlation_id, api, header.api_version, r),
                own_s,
            )
        return parts


def _static_quota(value: str | None) -> float | None:
    """``quota.producer.default`` / ``quota.consumer.default`` (Kafka 2.3, deprecated): unset is unlimited."""
    if value is None or int(value) >= 2**63 - 1:
        return None
    return float(value)
