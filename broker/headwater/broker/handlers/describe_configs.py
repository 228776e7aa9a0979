"""DescribeConfigs (key 32), v0-2.

- TOPIC resources (type 2): every topic-level config with its effective value: the topic's
  override (source DYNAMIC_TOPIC_CONFIG) or the broker's default (STATIC_BROKER_CONFIG when
  set in the broker's properties, else DEFAULT_CONFIG). Unknown topic:
  UNKNOWN_TOPIC_OR_PARTITION.
- BROKER resources (type 4) for this broker's id: the properties it was started with
  (STATIC_BROKER_CONFIG, read-only unless dynamic) and every dynamic broker config with its
  effective value and source (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
  STATIC_BROKER_CONFIG, DEFAULT_CONFIG; dynamic_config.py); ``""`` the cluster-wide dynamic
  defaults; another broker's id gets INVALID_REQUEST. Sensitive values (passwords) are null.
- ``configuration_keys`` null means all; synonyms (v1+) list the override then the default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker import dynamic_config
from headwater.broker.config import OTHER_TOPIC_CONFIGS, TOPIC_CONFIGS
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices

TOPIC = 2
BROKER = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# topic config -> the broker property that supplies its default
_BROKER_SYNONYM = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "message.timestamp.type": "log.message.timestamp.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
}


def _topic_defaults(broker: HandlerServices) -> dict[str, str]:
    d = broker.config.log_defaults
    c = broker.config
    return {
        "segment.bytes": str(d.segment_bytes),
        "segment.ms": str(d.segment_ms),
        "retention.ms": str(d.retention_ms),
        "retention.bytes": str(d.retention_bytes),
        "flush.messages": str(d.flush_interval_messages),
        "flush.ms": str(d.flush_interval_ms if d.flush_interval_ms is not None else 2**63 - 1),
        "index.interval.bytes": str(d.index_interval_bytes),
        "max.message.bytes": str(d.max_message_bytes),
        "min.insync.replicas": str(c.min_insync_replicas),
        "unclean.leader.election.enable": str(c.unclean_leader_election_enable).lower(),
        "cleanup.policy": d.cleanup_policy,
        "compression.type": "producer",
        "message.timestamp.type": "CreateTime",
        "delete.retention.ms": str(d.delete_retention_ms),
        "min.cleanable.dirty.ratio": str(d.min_cleanable_dirty_ratio),
        "min.compaction.lag.ms": str(d.min_compaction_lag_ms),
        "file.delete.delay.ms": "60000",
        "message.timestamp.difference.max.ms": str(2**63 - 1),
    }


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
        if rtype == TOPIC:
            info = broker.cache.topics.get(rname)
            if info is None:
                out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out["error_message"] = f"Topic {rname} does not exist"
                continue
            defaults = _topic_defaults(broker)
            for name in sorted(set(TOPIC_CONFIGS) | OTHER_TOPIC_CONFIGS):
                if keys is not None and name not in keys:
                    continue
                override = info.config.get(name)
                prop = _BROKER_SYNONYM.get(name)
                static = prop is not None and prop in broker.config.raw
                default_source = STATIC_BROKER_CONFIG if static else DEFAULT_CONFIG
                synonyms = []
                if override is not None:
                    synonyms.append({"name": name, "value": override, "source": DYNAMIC_TOPIC_CONFIG})
                synonyms.append({"name": prop or name, "value": defaults.get(name), "source": default_source})
                out["configs"].append(
                    {
                        "name": name,
                        "value": override if override is not None else defaults.get(name),
                        "read_only": False,
                        "is_default": override is None and not static,
                        "config_source": DYNAMIC_TOPIC_CONFIG if override is not None else default_source,
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
