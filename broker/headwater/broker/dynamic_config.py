"""Dynamic broker configs (``kafka-configs --entity-type brokers``), as Kafka 2.3's DynamicBrokerConfig.

ZooKeeper layout (Kafka's):

- ``/config/brokers/<id>``: one broker's overrides, ``{"version":1,"config":{"k":"v",...}}``;
- ``/config/brokers/<default>``: the cluster-wide defaults, same format;
- ``/config/changes/config_change_NNNNNNNNNN``: ``{"version":2,"entity_path":"brokers/<id>"}`` (or
  ``brokers/<default>``), written in the same transaction as the config.

A config's value is the first of: this broker's override (DYNAMIC_BROKER_CONFIG), the cluster
default (DYNAMIC_DEFAULT_BROKER_CONFIG), ``server.properties`` (STATIC_BROKER_CONFIG), the built-in
default (DEFAULT_CONFIG). Each broker watches its own znode and ``<default>`` and applies a change
live (:class:`DynamicBrokerConfig`): the ``log.*`` topic-config defaults reach every log of a topic
without its own override at once (retention at the next check), ``message.max.bytes`` the next
produce, the replication throttle rates the replica fetcher and the leader's Fetch answers.

Only the names in :data:`DYNAMIC_BROKER_CONFIGS` may be set; anything else (a static-only config
such as ``broker.id`` or ``log.dirs``, an unknown name) or a value that does not parse is refused
with INVALID_CONFIG before anything is stored, as are values :class:`LogConfig` refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from headwater.broker.config import _log_defaults, is_sensitive, redacted
from headwater.broker.zk import ZooKeeper, from_json
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.zk import config as zkconfig
from headwater.zk.paths import CONFIG_BROKERS, CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, broker_config_path

if TYPE_CHECKING:
    from headwater.broker.config import BrokerConfig
    from headwater.broker.storage.log import LogConfig

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
MAX_LONG = 2**63 - 1

# DescribeConfigs config_source values
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"


def _long(minimum: int) -> Callable[[str], Any]:
    def parse(v: str) -> int:
        n = int(v.strip())
        if n < minimum:
            raise ValueError(f"Value must be at least {minimum}")
        return n

    return parse


def _ratio(v: str) -> float:
    x = float(v)
    if not 0.0 <= x <= 1.0:
        raise ValueError("Value must be between 0 and 1")
    return x


def _bool(v: str) -> bool:
    if v.strip().lower() not in ("true", "false"):
        raise ValueError("Expected value to be true or false")
    return v.strip().lower() == "true"


def _policy(v: str) -> str:
    items = [x.strip() for x in v.split(",")]
    if not items or not set(items) <= {"delete", "compact"}:
        raise ValueError("String must be a list of: delete, compact")
    return v


@dataclass(frozen=True)
class DynamicConfig:
    name: str
    parse: Callable[[str], Any]  # raises ValueError for a bad value
    default: str  # Kafka 2.3's built-in default, shown as DEFAULT_CONFIG


#: The broker configs Kafka 2.3 lets kafka-configs change live and Headwater applies. Kafka's
#: others (thread pools, listeners, SSL keystores, log.cleaner.threads, num.replica.fetchers) are
#: static here: one cleaner task and one fetcher per source broker, whatever the setting.
DYNAMIC_BROKER_CONFIGS: dict[str, DynamicConfig] = {
    c.name: c
    for c in (
        DynamicConfig(LEADER_THROTTLED_RATE, _long(0), str(MAX_LONG)),
        DynamicConfig(FOLLOWER_THROTTLED_RATE, _long(0), str(MAX_LONG)),
        DynamicConfig("message.max.bytes", _long(0), "1000012"),
        DynamicConfig("min.insync.replicas", _long(1), "1"),
        DynamicConfig("unclean.leader.election.enable", _bool, "false"),
        DynamicConfig("log.retention.ms", _long(-1), "604800000"),
        DynamicConfig("log.retention.bytes", _long(-1), "-1"),
        DynamicConfig("log.segment.bytes", _long(14), "1073741824"),
        DynamicConfig("log.roll.ms", _long(1), "604800000"),
        DynamicConfig("log.cleanup.policy", _policy, "delete"),
        DynamicConfig("log.flush.interval.messages", _long(1), str(MAX_LONG)),
        DynamicConfig("log.flush.interval.ms", _long(0), str(MAX_LONG)),
        DynamicConfig("log.index.interval.bytes", _long(0), "4096"),
        DynamicConfig("log.cleaner.min.cleanable.ratio", _ratio, "0.5"),
        DynamicConfig("log.cleaner.delete.retention.ms", _long(0), "86400000"),
        DynamicConfig("log.cleaner.min.compaction.lag.ms", _long(0), "0"),
        DynamicConfig("log.cleaner.backoff.ms", _long(0), "15000"),
        # Kafka 2.3 updates it live with the other SASL listener configs (KIP-226); stored and
        # described here, with no effect (Headwater has no Kerberos login to renew)
        DynamicConfig("sasl.kerberos.min.time.before.relogin", _long(0), "60000"),
    )
}

#: dynamic names that are defaults of topic configs (the log manager's LogConfig)
_LOG_CONFIG_NAMES = {n for n in DYNAMIC_BROKER_CONFIGS if n.startswith("log.") and n != "log.cleaner.backoff.ms"} | {
    "message.max.bytes"
}


def entity_name(broker_id: int | None) -> str:
    return DEFAULT_ENTITY if broker_id is None else str(broker_id)


def config_path(entity: str) -> str:
    return broker_config_path(entity)


def validate(overrides: Mapping[str, str], static: Mapping[str, str]) -> str | None:
    """An error message for the first config that may not be set dynamically or does not parse."""
    for name, value in overrides.items():
        spec = DYNAMIC_BROKER_CONFIGS.get(name)
        if spec is None:
            return f"Cannot update these configs dynamically: {{{name}}} (not a dynamic broker config)"
        try:
            spec.parse(value)
        except ValueError as e:
            return f"Invalid value {value} for configuration {name}: {e}"
    try:
        merged = {**static, **overrides}
        _log_defaults(merged, int(merged.get("message.max.bytes", "1000012")))
    except ValueError as e:
        return f"Invalid broker configuration {dict(overrides)}: {e}"
    return None


async def read_overrides(zk: ZooKeeper, entity: str) -> tuple[dict[str, str], int | None]:
    """The entity's stored overrides and the znode's version (None: no znode)."""
    got = await zk.get_json(config_path(entity))
    if got is None:
        return {}, None
    value, stat = got
    return _config_of(value), stat.version


async def write_overrides(
    zk: ZooKeeper, entity: str, overrides: dict[str, str], version: int | None, static: Mapping[str, str]
) -> None:
    """Validate, then store the entity's complete overrides with a change notification (one
    transaction, conditional on ``version``); raises KafkaError, nothing stored on any error."""
    problem = validate(overrides, static)
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
    await zk.call(zk.client.ensure_path, CONFIG_BROKERS)
    await zk.call(zk.client.ensure_path, CONFIG_CHANGES)
    data = zkconfig.encode_entity_config(overrides)
    tx = zk.client.transaction()
    if version is None:
        tx.create(config_path(entity), data)
    else:
        tx.set_data(config_path(entity), data, version=version)
    tx.create(CONFIG_CHANGE_PREFIX, zkconfig.encode_change("brokers", entity), sequence=True)
    results = await zk.call(tx.commit)
    failures = [r for r in results if isinstance(r, Exception)]
    if any(isinstance(r, BadVersionError | NoNodeError | NodeExistsError) for r in failures):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"The configs of brokers/{entity} changed meanwhile; describe them and retry"
        )
    if failures:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper refused the config change: {failures[0]!r}")


def _config_of(value: Any) -> dict[str, str]:
    cfg = value.get("config") if isinstance(value, dict) else None
    return {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}


class DynamicBrokerConfig:
    """This broker's view of its dynamic configs, kept current by ZooKeeper watches.

    ``on_log_defaults`` is called (on the event loop) after the topic-config defaults changed, so
    the broker can hand every log its new LogConfig. All state is touched on the event loop only.
    """

    def __init__(
        self,
        config: BrokerConfig,
        zk: ZooKeeper,
        on_log_defaults: Callable[[LogConfig], None] = lambda _c: None,
    ) -> None:
        self.config = config
        self.zk = zk
        self.static: dict[str, str] = dict(config.raw)
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        self.on_log_defaults = on_log_defaults
        self._static_attrs = {
            "message_max_bytes": config.message_max_bytes,
            "min_insync_replicas": config.min_insync_replicas,
            "unclean_leader_election_enable": config.unclean_leader_election_enable,
            "log_cleaner_backoff_ms": config.log_cleaner_backoff_ms,
        }

    def start(self) -> None:
        self.zk.watch_data(config_path(str(self.config.broker_id)), self._on_broker, persistent=True)
        self.zk.watch_data(config_path(DEFAULT_ENTITY), self._on_default, persistent=True)

    def _on_broker(self, data: bytes | None, stat: Any) -> None:
        self.per_broker = _config_of(from_json(data)) if stat is not None else {}
        self._apply()

    def _on_default(self, data: bytes | None, stat: Any) -> None:
        self.cluster_default = _config_of(from_json(data)) if stat is not None else {}
        self._apply()

    # -- values ----------------------------------------------------------------------------------

    def value_and_source(self, name: str) -> tuple[str | None, int]:
        if name in self.per_broker:
            return self.per_broker[name], DYNAMIC_BROKER_CONFIG
        if name in self.cluster_default:
            return self.cluster_default[name], DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.static:
            return self.static[name], STATIC_BROKER_CONFIG
        spec = DYNAMIC_BROKER_CONFIGS.get(name)
        return (spec.default if spec else None), DEFAULT_CONFIG

    def synonyms(self, name: str) -> list[tuple[str | None, int]]:
        """(value, source) of every layer that sets ``name``, strongest first (DescribeConfigs v1+)."""
        out: list[tuple[str | None, int]] = []
        for layer, source in (
            (self.per_broker, DYNAMIC_BROKER_CONFIG),
            (self.cluster_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, STATIC_BROKER_CONFIG),
        ):
            if name in layer:
                out.append((layer[name], source))
        spec = DYNAMIC_BROKER_CONFIGS.get(name)
        if spec is not None:
            out.append((spec.default, DEFAULT_CONFIG))
        return out

    def rate(self, name: str) -> int:
        """A replication throttle rate in bytes/s (MAX_LONG: unthrottled)."""
        value, _ = self.value_and_source(name)
        try:
            return int(value) if value is not None else MAX_LONG
        except ValueError:
            return MAX_LONG

    def _effective(self) -> dict[str, str]:
        """server.properties with the dynamic layers on top (dynamic names only)."""
        merged = dict(self.static)
        for layer in (self.cluster_default, self.per_broker):
            merged.update({k: v for k, v in layer.items() if k in DYNAMIC_BROKER_CONFIGS})
        return merged

    # -- applying ----------------------------------------------------------------------------------

    def _apply(self) -> None:
        merged = self._effective()
        cfg = self.config
        try:
            message_max_bytes = int(merged.get("message.max.bytes", self._static_attrs["message_max_bytes"]))
            defaults = _log_defaults(merged, message_max_bytes)
            min_isr = int(merged.get("min.insync.replicas", self._static_attrs["min_insync_replicas"]))
            unclean = (
                _bool(merged["unclean.leader.election.enable"])
                if "unclean.leader.election.enable" in merged
                else bool(self._static_attrs["unclean_leader_election_enable"])
            )
            backoff = int(merged.get("log.cleaner.backoff.ms", self._static_attrs["log_cleaner_backoff_ms"]))
        except ValueError as e:  # written by another tool without validation: keep what we have
            log.error(
                "ignoring invalid dynamic broker configs %s: %s",
                redacted({**self.cluster_default, **self.per_broker}),
                e,
            )
            return
        log_changed = defaults != cfg.log_defaults
        cfg.message_max_bytes = message_max_bytes
        cfg.min_insync_replicas = min_isr
        cfg.unclean_leader_election_enable = unclean
        cfg.log_cleaner_backoff_ms = backoff
        cfg.log_defaults = defaults
        log.info(
            "[DynamicConfig broker=%d] dynamic configs now: broker %s, cluster default %s",
            cfg.broker_id,
            redacted(self.per_broker),
            redacted(self.cluster_default),
        )
        if log_changed:
            self.on_log_defaults(defaults)


def describe(
    dyn: DynamicBrokerConfig, resource_name: str, keys: list[str] | None, include_synonyms: bool
) -> list[dict[str, Any]]:
    """DescribeConfigs' entries for a BROKER resource: this broker's id lists its static properties
    and every dynamic config with its effective value and source; ``""`` (the cluster default
    entity) lists the cluster-wide dynamic defaults only.

    As Kafka 2.3's AdminManager, a password-type config or one whose type is unknown (a JAAS config,
    ``ssl.key.password``, any ``listener.name.*`` secret, a name this broker does not know) is
    ``is_sensitive`` with a null value and null synonyms (config.is_sensitive)."""
    if resource_name == "":
        names = sorted(dyn.cluster_default)
    else:
        names = sorted(set(dyn.static) | set(DYNAMIC_BROKER_CONFIGS) | set(dyn.per_broker))
    out = []
    for name in names:
        if keys is not None and name not in keys:
            continue
        hidden = is_sensitive(name)
        if resource_name == "":
            value: str | None = dyn.cluster_default[name]
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
            layers: list[tuple[str | None, int]] = [(value, source)]
        else:
            value, source = dyn.value_and_source(name)
            layers = list(dyn.synonyms(name))
        out.append(
            {
                "name": name,
                "value": None if hidden else value,
                "read_only": name not in DYNAMIC_BROKER_CONFIGS,
                "is_default": source == DEFAULT_CONFIG,
                "config_source": source,
                "is_sensitive": hidden,
                "synonyms": [{"name": name, "value": None if hidden else v, "source": s} for v, s in layers]
                if include_synonyms
                else [],
            }
        )
    return out
