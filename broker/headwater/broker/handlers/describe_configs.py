"""DescribeConfigs (key 32), v0-2.

- TOPIC resources (type 2): every Kafka 2.3 topic-level config (topic_configs.py) with its
  effective value: the topic's override (source DYNAMIC_TOPIC_CONFIG) or the broker's default,
  from the strongest broker layer that sets one of its broker properties: this broker's dynamic
  config (DYNAMIC_BROKER_CONFIG, ``/config/brokers/<id>``), the cluster-wide dynamic default
  (DYNAMIC_DEFAULT_BROKER_CONFIG, ``/config/brokers/<default>``), server.properties
  (STATIC_BROKER_CONFIG, e.g. ``log.retention.hours`` for retention.ms), else DEFAULT_CONFIG with
  Kafka's default. Unknown topic: UNKNOWN_TOPIC_OR_PARTITION.
- BROKER resources (type 4) for this broker's id: the properties it was started with
  (STATIC_BROKER_CONFIG, read-only unless dynamic) and every dynamic broker config with its
  effective value and source (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
  STATIC_BROKER_CONFIG, DEFAULT_CONFIG; dynamic_config.py); ``""`` the cluster-wide dynamic
  defaults; another broker's id gets INVALID_REQUEST. As Kafka 2.3's AdminManager, a config of
  password type or of a type the broker does not know (JAAS configs, ``ssl.key.password``, secrets
  under ``listener.name.*``, unknown names: config.is_sensitive) is ``is_sensitive`` with a null
  value and null synonyms.
- With an authorizer, as Kafka 2.3's KafkaApis: DescribeConfigs on the Topic (TOPIC) or on the
  Cluster (BROKER), else that resource alone gets TOPIC_AUTHORIZATION_FAILED /
  CLUSTER_AUTHORIZATION_FAILED with no configs (checked before the topic's existence, so a
  principal cannot probe which topics exist). DescribeConfigs is implied by AlterConfigs.
- ``configuration_keys`` null means all; synonyms (v1+) list, as Kafka does, the topic override,
  the broker properties set in each layer (dynamic broker, dynamic default, static), then Kafka's
  default (under the broker property's name).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.broker import dynamic_config
from headwater.broker.config_admin import read_topic_overrides
from headwater.broker.dynamic_config import DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG
from headwater.broker.topic_configs import MAX_LONG, TOPIC_CONFIG_DEFS, broker_synonyms
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

TOPIC = 2
BROKER = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = dynamic_config.STATIC_BROKER_CONFIG
DEFAULT_CONFIG = dynamic_config.DEFAULT_CONFIG


@dataclass(frozen=True)
class TopicDefault:
    """Where a topic config's value comes from when the topic has no override of its own."""

    value: str  # the effective value (the broker's live LogConfig / settings)
    source: int  # config_source of the strongest broker layer setting it, else DEFAULT_CONFIG
    #: (broker property, value, source) of every broker layer that sets one of its synonyms,
    #: strongest first: this broker's dynamic config, the cluster default, server.properties
    synonyms: tuple[tuple[str, str, int], ...]


def _broker_layers(broker: HandlerServices) -> tuple[tuple[dict[str, str], int], ...]:
    dyn = broker.dynamic_config
    dynamic = dynamic_config.DYNAMIC_BROKER_CONFIGS
    return (
        ({k: v for k, v in dyn.per_broker.items() if k in dynamic}, DYNAMIC_BROKER_CONFIG),
        ({k: v for k, v in dyn.cluster_default.items() if k in dynamic}, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (broker.config.raw, STATIC_BROKER_CONFIG),
    )


def topic_defaults(broker: HandlerServices) -> dict[str, TopicDefault]:
    """Each topic config's default on this broker, with its source as Kafka 2.3's AdminManager
    reports it: every synonym in the broker's dynamic config, then in the cluster-wide dynamic
    default, then in server.properties (e.g. ``log.retention.ms`` set with kafka-configs
    ``--entity-default`` makes a topic's ``retention.ms`` DYNAMIC_DEFAULT_BROKER_CONFIG)."""
    c = broker.config
    d = c.log_defaults  # server.properties with the dynamic layers applied (dynamic_config.py)
    layers = _broker_layers(broker)
    out: dict[str, TopicDefault] = {}
    for name, spec in TOPIC_CONFIG_DEFS.items():
        props = broker_synonyms(name)
        synonyms = tuple(
            (prop, layer[prop].strip(), source) for layer, source in layers for prop in props if prop in layer
        )
        if spec.log_attr is not None:
            v = getattr(d, spec.log_attr)
            value = str(MAX_LONG if v is None else v)  # flush.ms: None = never
        elif name == "min.insync.replicas":
            value = str(c.min_insync_replicas)
        elif name == "unclean.leader.election.enable":
            value = str(c.unclean_leader_election_enable).lower()
        else:
            value = synonyms[0][1] if synonyms else spec.default
        out[name] = TopicDefault(value, synonyms[0][2] if synonyms else DEFAULT_CONFIG, synonyms)
    return out


def topic_config_entries(broker: HandlerServices, overrides: dict[str, str]) -> list[Message]:
    """Every topic config of a topic with these overrides as CreateTopics v5 returns them (KIP-525):
    name, effective value, read_only, config_source, is_sensitive."""
    out: list[Message] = []
    for name, default in sorted(topic_defaults(broker).items()):
        override = overrides.get(name)
        out.append(
            {
                "name": name,
                "value": override if override is not None else default.value,
                "read_only": False,
                "config_source": DYNAMIC_TOPIC_CONFIG if override is not None else default.source,
                "is_sensitive": False,
            }
        )
    return out


def _denied(broker: HandlerServices, ctx: RequestContext, rtype: int, rname: str) -> ErrorCode | None:
    """The authorization error for describing this resource's configs, or None when allowed."""
    az = broker.authorizer
    if az is None:
        return None
    if rtype == TOPIC and not az.allowed(ctx, "DescribeConfigs", "Topic", rname):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype == BROKER and not az.allowed(ctx, "DescribeConfigs", "Cluster", CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


#: how long a describe waits for the config znode before answering from the broker's metadata
ZK_READ_TIMEOUT_S = 5.0


async def _topic_overrides(broker: HandlerServices, topic: str, cached: Mapping[str, str]) -> Mapping[str, str] | None:
    """The topic's overrides as ZooKeeper holds them now, as Kafka 2.3's AdminManager reads them on
    every DescribeConfigs: an alteration made through any broker shows at once, not after this
    broker's ``/config/changes`` notification. None: the topic is gone. ZooKeeper unreachable (or
    slower than ZK_READ_TIMEOUT_S): the overrides this broker last applied (the answer stays served through an outage)."""
    if not broker.zk.client.connected:
        return cached
    try:
        overrides, _ = await asyncio.wait_for(read_topic_overrides(broker.zk, topic), ZK_READ_TIMEOUT_S)
    except KafkaError as e:
        if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        return cached
    except Exception:  # ZooKeeper unreachable, slow, or its session lost
        return cached
    return overrides


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    results = []
    for res in request["resources"]:
        rtype, rname, keys = res["resource_type"], res["resource_name"], res["configuration_keys"]
        out: Message = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
            "configs": [],
        }
        results.append(out)
        denied = _denied(broker, ctx, rtype, rname)
        if denied is not None:
            out["error_code"] = denied
            continue
        if rtype == TOPIC:
            info = broker.cache.topics.get(rname)
            if info is None:
                out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out["error_message"] = f"Topic {rname} does not exist"
                continue
            overrides = await _topic_overrides(broker, rname, info.config)
            if overrides is None:
                out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out["error_message"] = f"Topic {rname} does not exist"
                continue
            defaults = topic_defaults(broker)
            for name in sorted(TOPIC_CONFIG_DEFS):
                if keys is not None and name not in keys:
                    continue
                override = overrides.get(name)
                default = defaults[name]
                synonyms = []
                if override is not None:
                    synonyms.append({"name": name, "value": override, "source": DYNAMIC_TOPIC_CONFIG})
                synonyms.extend({"name": p, "value": v, "source": src} for p, v, src in default.synonyms)
                synonyms.append(
                    {
                        "name": broker_synonyms(name)[0] if broker_synonyms(name) else name,
                        "value": TOPIC_CONFIG_DEFS[name].default,
                        "source": DEFAULT_CONFIG,
                    }
                )
                out["configs"].append(
                    {
                        "name": name,
                        "value": override if override is not None else default.value,
                        "read_only": False,
                        "is_default": override is None and default.source == DEFAULT_CONFIG,
                        "config_source": DYNAMIC_TOPIC_CONFIG if override is not None else default.source,
                        "is_sensitive": False,
                        "synonyms": synonyms if request["include_synonyms"] else [],
                    }
                )
        elif rtype == BROKER and rname in ("", str(broker.broker_id)):
            out["configs"] = dynamic_config.describe(broker.dynamic_config, rname, keys, request["include_synonyms"])
        else:
            out["error_code"] = ErrorCode.INVALID_REQUEST
            out["error_message"] = f"Unsupported resource type {rtype} / name {rname!r}"
    return {"throttle_time_ms": 0, "results": results}
