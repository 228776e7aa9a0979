"""Broker configuration with Kafka's property names.

Sources, later ones winning: a Java-style ``.properties`` file, environment variables
``KAFKA_<NAME>`` (Confluent's convention: ``_`` → ``.``, ``__`` → ``_``, ``___`` → ``-``, so
``KAFKA_LOG_RETENTION_HOURS`` is ``log.retention.hours``), then ``--override key=value``.
Unknown keys are kept and reported, as Kafka warns about them, and never fail start-up.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headwater.broker.authorizer import AUTHORIZER_CLASSES
from headwater.broker.security import (
    PROTOCOLS,
    ClientSecurity,
    ListenerSecurity,
    SecurityConfigError,
    check_security_properties,
    inter_broker_security,
    is_secret_property,
    is_security_property,
    listener_security,
)
from headwater.broker.storage.log import LogConfig
from headwater.broker.topic_configs import (
    BROKER_DEFAULT_PROPERTIES,
    LIST,
    TOPIC_CONFIG_DEFS,
    check_broker_defaults,
    check_value,
    log_value,
)
from headwater.properties import parse_properties
from headwater.zk.security import PROPERTIES as ZK_SECURITY_PROPERTIES
from headwater.zk.security import ZkSecurity, ZkSecurityError, zk_security

log = logging.getLogger(__name__)

MAX_LONG = 2**63 - 1


class ConfigError(ValueError):
    """A property has a value we cannot use; the message names the property."""


def env_overrides(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith("KAFKA_") or name in ("KAFKA_OPTS", "KAFKA_HEAP_OPTS", "KAFKA_JMX_OPTS"):
            continue
        key = name[len("KAFKA_") :].lower()
        key = key.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")
        out[key] = value
    return out


@dataclass(frozen=True)
class Listener:
    name: str
    host: str  # "" = all interfaces
    port: int

    def url(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(value: str, prop: str) -> list[Listener]:
    out: list[Listener] = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = re.match(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)$", item)
        if not m:
            raise ConfigError(f"{prop}: {item!r} is not NAME://host:port")
        host = m.group(2).strip("[]")
        out.append(Listener(m.group(1).upper(), host, int(m.group(3))))
    names = [lst.name for lst in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{prop}: each listener name must appear once, got {names}")
    return out


@dataclass
class BrokerConfig:
    broker_id: int
    zookeeper_connect: str
    listeners: list[Listener]
    advertised_listeners: list[Listener]
    listener_security_protocol_map: dict[str, str]
    inter_broker_listener_name: str
    log_dirs: list[str]
    broker_rack: str | None = None
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int = 6000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    message_max_bytes: int = 1000012
    socket_request_max_bytes: int = 104857600
    log_retention_check_interval_ms: int = 300000
    log_flush_scheduler_interval_ms: int = MAX_LONG
    log_flush_offset_checkpoint_interval_ms: int = 60000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # also idle idempotent producers' (Kafka 2.3)
    replica_lag_time_max_ms: int = 10000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1000
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replication_quota_window_num: int = 11  # replication throttles' rate samples (KIP-73)
    replication_quota_window_size_seconds: int = 1
    quota_window_num: int = 11  # client quotas' rate samples (KIP-13, broker/quotas.py)
    quota_window_size_seconds: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3  # capped by the live brokers when the topic is created
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 60000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    connection_failed_authentication_delay_ms: int = 100
    authorizer_class_name: str = ""
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    prometheus_port: int | None = None
    prometheus_host: str = "0.0.0.0"
    # connection limits (Kafka 2.3's names and defaults; network.py, sasl.py)
    connections_max_idle_ms: int = 600000
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    max_connections: int = 2**31 - 1
    connections_max_reauth_ms: int = 0
    log_defaults: LogConfig = field(default_factory=LogConfig)
    #: listener name -> its security protocol, TLS and SASL settings (security.py)
    security: dict[str, ListenerSecurity] = field(default_factory=dict)
    #: how this broker's connections to other brokers secure themselves (None: PLAINTEXT)
    inter_broker_security: ClientSecurity | None = None
    #: every property as given (secrets included: never shown, see is_sensitive)
    raw: dict[str, str] = field(default_factory=dict, repr=False)
    unknown: list[str] = field(default_factory=list)
    #: the ZooKeeper SASL login and zookeeper.set.acl (headwater.zk.security)
    zookeeper_security: ZkSecurity = field(default_factory=ZkSecurity)

    def advertised_endpoints(self) -> list[Listener]:
        return self.advertised_listeners


# Property name → (parser). Log defaults are handled separately.
def _int(v: str) -> int:
    return int(v.strip())


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ValueError(f"expected true or false, got {v!r}")
    return s == "true"


_BROKER_PROPS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "broker.id": ("broker_id", _int),
    "broker.rack": ("broker_rack", str),
    "zookeeper.connect": ("zookeeper_connect", str),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int),
    "num.partitions": ("num_partitions", _int),
    "default.replication.factor": ("default_replication_factor", _int),
    "min.insync.replicas": ("min_insync_replicas", _int),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "delete.topic.enable": ("delete_topic_enable", _bool),
    "message.max.bytes": ("message_max_bytes", _int),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", _int),
    "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", _int),
    "replica.high.watermark.checkpoint.interval.ms": ("replica_high_watermark_checkpoint_interval_ms", _int),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _int),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", _int),
    "replication.quota.window.num": ("replication_quota_window_num", _int),
    "replication.quota.window.size.seconds": ("replication_quota_window_size_seconds", _int),
    "quota.window.num": ("quota_window_num", _int),
    "quota.window.size.seconds": ("quota_window_size_seconds", _int),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", _int),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", _int),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", _int),
    "log.cleaner.enable": ("log_cleaner_enable", _bool),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", float),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", _int),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", _int),
    "transaction.state.log.replication.factor": ("transaction_state_log_replication_factor", _int),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _int),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", _int),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _int,
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        _int,
    ),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int),
    "group.max.size": ("group_max_size", _int),
    "connection.failed.authentication.delay.ms": ("connection_failed_authentication_delay_ms", _int),
    "authorizer.class.name": ("authorizer_class_name", str),
    "super.users": ("super_users", lambda v: frozenset(u.strip() for u in v.split(";") if u.strip())),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int),
    "max.connections.per.ip": ("max_connections_per_ip", _int),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", lambda v: _per_ip_overrides(v)),
    "max.connections": ("max_connections", _int),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", _int),
    # not a Kafka property: Kafka exposes metrics over JMX; we serve Prometheus directly
    "prometheus.port": ("prometheus_port", _int),
    "prometheus.host": ("prometheus_host", str),
}


def _per_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs (``hostName:100,127.0.0.1:200``)."""
    out: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in value.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip():
            raise ValueError(f"{item!r} is not host:count")
        n = int(count)
        if n < 0:
            raise ValueError(f"{item!r}: the count must be at least 0")
        out[host.strip().strip("[]")] = n
    return out


_HANDLED_ELSEWHERE = {
    "inter.broker.protocol.version",  # 2.3 only (checked in config_from_props)
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "log.dirs",
    "log.dir",
    "log.segment.bytes",
    "log.roll.ms",
    "log.roll.hours",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.index.interval.bytes",
    "log.cleanup.policy",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms",
    "compression.type",
    "host.name",
    "port",
    "max.incremental.fetch.session.cache.slots",  # replica_manager.py
    "leader.replication.throttled.rate",  # dynamic_config.py (static too, as in Kafka)
    "follower.replication.throttled.rate",
}


#: broker properties whose values may be shown, besides the security ones security.py marks non-secret
_SHOWN = frozenset(_BROKER_PROPS) | _HANDLED_ELSEWHERE | BROKER_DEFAULT_PROPERTIES


#: security-prefixed names that are dynamic broker configs of a non-secret type (a LONG), shown as
#: Kafka shows them although the broker does nothing with them (no GSSAPI login here)
_SHOWN_SECURITY = frozenset({"sasl.kerberos.min.time.before.relogin"})


def is_sensitive(name: str) -> bool:
    """Whether a broker config's value must never be shown (DescribeConfigs, logs), as Kafka 2.3's
    ``AdminManager.createBrokerConfigEntry``: password-type configs and any config whose type is
    unknown. So a value is shown only for a known, non-secret name; anything with ``password``, ``secret`` or ``jaas`` in its name is never shown, whatever the tables say."""
    lowered = name.lower()
    if any(word in lowered for word in ("password", "secret", "jaas")):
        return True
    if name in _SHOWN_SECURITY:
        return False
    if is_security_property(name):
        return is_secret_property(name)
    return name not in _SHOWN


def redacted(configs: dict[str, str]) -> dict[str, str]:
    """``configs`` for a log line: sensitive values replaced by ``[hidden]``."""
    return {k: "[hidden]" if is_sensitive(k) else v for k, v in configs.items()}


def _log_defaults(p: dict[str, str], message_max_bytes: int) -> LogConfig:
    def first(*names: str) -> tuple[str, str] | None:
        for n in names:
            if n in p:
                return n, p[n]
        return None

    kwargs: dict[str, Any] = {"max_message_bytes": message_max_bytes}
    if "log.segment.bytes" in p:
        kwargs["segment_bytes"] = _int(p["log.segment.bytes"])
    roll = first("log.roll.ms", "log.roll.hours")
    if roll:
        kwargs["segment_ms"] = _int(roll[1]) * (1 if roll[0].endswith(".ms") else 3600_000)
    ret = first("log.retention.ms", "log.retention.minutes", "log.retention.hours")
    if ret:
        scale = {"log.retention.ms": 1, "log.retention.minutes": 60_000, "log.retention.hours": 3600_000}[ret[0]]
        v = _int(ret[1])
        kwargs["retention_ms"] = -1 if v < 0 else v * scale
    if "log.retention.bytes" in p:
        kwargs["retention_bytes"] = _int(p["log.retention.bytes"])
    if "log.flush.interval.messages" in p:
        kwargs["flush_interval_messages"] = _int(p["log.flush.interval.messages"])
    if "log.flush.interval.ms" in p:
        kwargs["flush_interval_ms"] = _int(p["log.flush.interval.ms"])
    if "log.index.interval.bytes" in p:
        kwargs["index_interval_bytes"] = _int(p["log.index.interval.bytes"])
    if "log.cleanup.policy" in p:
        kwargs["cleanup_policy"] = p["log.cleanup.policy"].strip()
    if "log.cleaner.min.cleanable.ratio" in p:
        kwargs["min_cleanable_dirty_ratio"] = float(p["log.cleaner.min.cleanable.ratio"])
    if "log.cleaner.min.compaction.lag.ms" in p:
        kwargs["min_compaction_lag_ms"] = _int(p["log.cleaner.min.compaction.lag.ms"])
    if "log.cleaner.delete.retention.ms" in p:
        kwargs["delete_retention_ms"] = _int(p["log.cleaner.delete.retention.ms"])
    if "log.cleaner.max.compaction.lag.ms" in p:
        kwargs["max_compaction_lag_ms"] = _int(p["log.cleaner.max.compaction.lag.ms"])
    if "log.message.timestamp.type" in p:
        kwargs["message_timestamp_type"] = p["log.message.timestamp.type"].strip()
    if "log.message.timestamp.difference.max.ms" in p:
        kwargs["message_timestamp_difference_max_ms"] = _int(p["log.message.timestamp.difference.max.ms"])
    if "compression.type" in p:
        kwargs["compression_type"] = p["compression.type"].strip()
    jitter = first("log.roll.jitter.ms", "log.roll.jitter.hours")
    if jitter:
        kwargs["segment_jitter_ms"] = _int(jitter[1]) * (1 if jitter[0].endswith(".ms") else 3600_000)
    if "log.index.size.max.bytes" in p:
        kwargs["segment_index_bytes"] = _int(p["log.index.size.max.bytes"])
    return LogConfig(**kwargs)


def load_config(
    path: str | None, overrides: list[str] | None = None, environ: dict[str, str] | None = None
) -> BrokerConfig:
    """Build a BrokerConfig from a properties file, the environment and ``key=value`` overrides."""
    props: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    props.update(env_overrides(os.environ if environ is None else environ))
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return config_from_props(props)


def config_from_props(props: dict[str, str]) -> BrokerConfig:
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in props.items():
        if key in _BROKER_PROPS:
            attr, parse = _BROKER_PROPS[key]
            try:
                values[attr] = parse(raw)
            except ValueError as e:
                raise ConfigError(f"{key}={raw!r}: {e}") from None
        elif key in ZK_SECURITY_PROPERTIES:
            pass  # headwater.zk.security reads them below
        elif key not in _HANDLED_ELSEWHERE and key not in BROKER_DEFAULT_PROPERTIES and not is_security_property(key):
            unknown.append(key)
    ibp = props.get("inter.broker.protocol.version", "2.3")
    if not re.fullmatch(r"2\.3(-IV\d+)?(\.\d+)?", ibp.strip()):
        # the inter-broker protocol Headwater speaks to Kafka brokers (docs/operations.md, migrating)
        raise ConfigError(
            f"inter.broker.protocol.version={ibp}: Headwater speaks the 2.3 inter-broker protocol; "
            "set 2.3 on every Kafka broker first (a rolling restart), then replace them"
        )
    if "zookeeper.connect" not in props:
        raise ConfigError("zookeeper.connect is required (for example zookeeper.connect=localhost:2181)")
    values.setdefault("broker_id", 0)
    if values["broker_id"] < 0:
        raise ConfigError("broker.id must be >= 0 (automatic broker id generation is not supported)")

    listeners = parse_listeners(props.get("listeners", "PLAINTEXT://:9092"), "listeners")
    if not listeners:
        raise ConfigError("listeners: at least one listener is required")
    advertised = (
        parse_listeners(props["advertised.listeners"], "advertised.listeners")
        if props.get("advertised.listeners")
        else [Listener(lst.name, lst.host or socket.gethostname(), lst.port) for lst in listeners]
    )
    names = {lst.name for lst in listeners}
    for a in advertised:
        if a.name not in names:
            raise ConfigError(f"advertised.listeners: {a.name} is not one of the listeners {sorted(names)}")
    proto_map: dict[str, str] = {}
    if props.get("listener.security.protocol.map"):
        for item in props["listener.security.protocol.map"].split(","):
            if ":" not in item:
                raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
            n, proto = item.split(":", 1)
            proto_map[n.strip().upper()] = proto.strip().upper()
    try:
        check_security_properties(props, frozenset(names))
    except SecurityConfigError as e:
        raise ConfigError(str(e)) from None
    security: dict[str, ListenerSecurity] = {}
    for lst in listeners:
        proto_map.setdefault(lst.name, lst.name if lst.name in PROTOCOLS else "PLAINTEXT")
        try:
            security[lst.name] = listener_security(props, lst.name, proto_map[lst.name])
        except SecurityConfigError as e:
            raise ConfigError(str(e)) from None
    inter = props.get("inter.broker.listener.name", "").upper() or (
        "PLAINTEXT" if "PLAINTEXT" in names else listeners[0].name
    )
    if inter not in names:
        raise ConfigError(f"inter.broker.listener.name: {inter} is not one of the listeners {sorted(names)}")
    try:
        inter_security = inter_broker_security(security[inter], props)
    except SecurityConfigError as e:
        raise ConfigError(str(e)) from None

    problem = check_broker_defaults(props)
    if problem is not None:
        raise ConfigError(problem)
    dirs_raw = props.get("log.dirs") or props.get("log.dir") or "/tmp/kafka-logs"
    log_dirs = [d.strip() for d in dirs_raw.split(",") if d.strip()]
    try:
        log_defaults = _log_defaults(props, values.get("message_max_bytes", 1000012))
    except ValueError as e:
        raise ConfigError(f"log settings: {e}") from None
    try:  # zookeeper.set.acl (Kafka's default false) and the JAAS Client login
        try:
            set_acl = _bool(props.get("zookeeper.set.acl", "false"))
        except ValueError as e:
            raise ConfigError(f"zookeeper.set.acl: {e}") from None
        zookeeper_security = zk_security(props, set_acl=set_acl)
    except ZkSecurityError as e:
        raise ConfigError(str(e)) from None
    cfg = BrokerConfig(
        zookeeper_security=zookeeper_security,
        listeners=listeners,
        advertised_listeners=advertised,
        listener_security_protocol_map=proto_map,
        inter_broker_listener_name=inter,
        security=security,
        inter_broker_security=inter_security,
        log_dirs=log_dirs,
        log_defaults=log_defaults,
        raw=dict(props),
        unknown=unknown,
        **values,
    )
    if cfg.authorizer_class_name and cfg.authorizer_class_name.strip() not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name={cfg.authorizer_class_name}: only Kafka's ACL authorizer is built "
            f"({' or '.join(AUTHORIZER_CLASSES)})"
        )
    if cfg.max_connections_per_ip < 0 or cfg.max_connections < 0 or cfg.connections_max_reauth_ms < 0:
        raise ConfigError("max.connections.per.ip, max.connections and connections.max.reauth.ms must be at least 0")
    if cfg.max_connections_per_ip == 0 and not cfg.max_connections_per_ip_overrides:
        raise ConfigError(
            "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
        )
    if cfg.message_max_bytes > cfg.socket_request_max_bytes:
        raise ConfigError("message.max.bytes must not exceed socket.request.max.bytes")
    return cfg


# Topic-level configs (/config/topics/<topic>): the table is topic_configs.TOPIC_CONFIG_DEFS.
#: every topic config name Kafka 2.3 knows
ALL_TOPIC_CONFIGS = frozenset(TOPIC_CONFIG_DEFS)
#: topic configs that set a LogConfig field, and which one
TOPIC_CONFIGS: dict[str, str] = {d.name: d.log_attr for d in TOPIC_CONFIG_DEFS.values() if d.log_attr}
#: topic configs read where they are used (min.insync.replicas: Produce) or accepted without effect
OTHER_TOPIC_CONFIGS = frozenset(n for n in TOPIC_CONFIG_DEFS if n not in TOPIC_CONFIGS)
#: which replicas the replication throttles apply to (replication_quota.py; set by reassign-partitions)
THROTTLED_REPLICAS_CONFIGS = frozenset(
    {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)
#: topic configs whose value is a comma-separated list (IncrementalAlterConfigs APPEND / SUBTRACT)
LIST_TOPIC_CONFIGS = (
    frozenset(d.name for d in TOPIC_CONFIG_DEFS.values() if d.type == LIST) | THROTTLED_REPLICAS_CONFIGS
)


def validate_topic_config(configs: dict[str, str], defaults: LogConfig | None = None) -> str | None:
    """An error message for the first invalid topic config, or None.

    Each value is checked with Kafka's rule and message (topic_configs.py), then by building the real
    :class:`LogConfig` the partitions would get, so what is accepted here can never fail later
    inside LeaderAndIsr, Produce or the ISR maintenance.
    """
    for k, v in configs.items():
        problem = check_value(k, v)
        if problem is not None:
            return problem
    try:
        topic_log_config(defaults or LogConfig(), configs)
    except ValueError as e:
        return f"Invalid topic configuration {configs}: {e}"
    return None


def topic_log_config(defaults: LogConfig, overrides: dict[str, str]) -> LogConfig:
    """The broker defaults with a topic's overrides; raises ValueError for a value LogConfig refuses."""
    changes: dict[str, Any] = {TOPIC_CONFIGS[k]: log_value(k, v) for k, v in overrides.items() if k in TOPIC_CONFIGS}
    return dataclasses.replace(defaults, **changes)
