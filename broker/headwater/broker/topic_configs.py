"""Kafka 2.3's topic-level configs: one table of name, type, Kafka default, validation, the broker
property that supplies the default, and where the value goes (Kafka's ``LogConfig.configDef``).

Everything that accepts, checks or shows a topic config reads this table: CreateTopics and
AlterConfigs / IncrementalAlterConfigs validate with :func:`check_value` (Kafka's messages:
``Invalid value X for configuration N: <why>``; an unknown name: ``Unknown topic config name: N``),
:func:`~headwater.broker.config.topic_log_config` builds a partition's
:class:`~headwater.broker.storage.log.LogConfig` from the entries with a ``log_attr``, and
DescribeConfigs lists every entry with its source (docs/configuration.md has the table for
operators, with what Headwater does with each config).

To add a config: one :class:`TopicConfigDef` in :data:`TOPIC_CONFIG_DEFS` (kept in name order).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from headwater.broker.storage.validator import COMPRESSION_TYPES, TIMESTAMP_TYPES

MAX_LONG = 2**63 - 1
INT_MAX = 2**31 - 1
_DAY_MS = 24 * 3600 * 1000

#: Kafka's ConfigDef types, as DescribeConfigs v3 would name them
INT, LONG, DOUBLE, BOOLEAN, STRING, LIST = "INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST"

#: message.format.version values Kafka 2.3 knows (ApiVersion); "2.3.0" and "0.10.2.1" name the same
_API_VERSIONS = frozenset(
    [
        "0.8.0",
        "0.8.1",
        "0.8.2",
        "0.9.0",
        "0.10.0-IV0",
        "0.10.0-IV1",
        "0.10.0",
        "0.10.1-IV0",
        "0.10.1-IV1",
        "0.10.1-IV2",
        "0.10.1",
        "0.10.2-IV0",
        "0.10.2",
        "0.11.0-IV0",
        "0.11.0-IV1",
        "0.11.0-IV2",
        "0.11.0",
        "1.0-IV0",
        "1.0",
        "1.1-IV0",
        "1.1",
        "2.0-IV0",
        "2.0-IV1",
        "2.0",
        "2.1-IV0",
        "2.1-IV1",
        "2.1-IV2",
        "2.1",
        "2.2-IV0",
        "2.2-IV1",
        "2.2",
        "2.3-IV0",
        "2.3-IV1",
        "2.3",
    ]
)
_THROTTLED_REPLICA = re.compile(r"^[0-9]+:[0-9]+$")


def _parse_check(kind: str, value: str) -> str | None:
    """Kafka's ConfigDef.parseType message for a value that is not of ``kind``, or None."""
    v = value.strip()
    if kind in (INT, LONG):
        try:
            n = int(v)
        except ValueError:
            return f"Not a number of type {kind}"
        limit = INT_MAX if kind == INT else MAX_LONG
        if not -limit - 1 <= n <= limit:
            return f"Not a number of type {kind}"
    elif kind == DOUBLE:
        try:
            float(v)
        except ValueError:
            return "Not a number of type DOUBLE"
    elif kind == BOOLEAN and v.lower() not in ("true", "false"):
        return "Expected value to be either true or false"
    return None


def at_least(minimum: float) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if float(value) >= minimum else f"Value must be at least {minimum}"

    return check


def between(low: float, high: float) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        n = float(value)
        if n < low:
            return f"Value must be at least {low}"
        return None if n <= high else f"Value must be no more than {high}"

    return check


def one_of(*valid: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in valid else f"String must be one of: {', '.join(valid)}"

    return check


def list_of(*valid: str) -> Callable[[str], str | None]:
    """Kafka's ValidList: every comma-separated item one of ``valid`` (and at least one item)."""

    def check(value: str) -> str | None:
        items = [s.strip() for s in value.split(",")]
        if not value.strip() or any(i not in valid for i in items):
            return f"String must be one of: {', '.join(valid)}"
        return None

    return check


def _api_version(value: str) -> str | None:
    parts = value.strip().split(".")
    key = ".".join(parts[: 3 if value.startswith("0.") else 2])
    return None if key in _API_VERSIONS else f"Version `{value}` is not a valid version"


def _throttled_replicas(name: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        items = [s.strip() for s in value.split(",")]
        if value.strip() in ("", "*") or all(_THROTTLED_REPLICA.match(i) for i in items):
            return None
        return (
            f"{name} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )

    return check


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: str
    #: Kafka's default, as DescribeConfigs shows it when neither topic nor broker sets it
    default: str
    #: the broker property that supplies the default (Kafka's synonym), or None
    broker_synonym: str | None
    #: a check of a value already of ``type``: Kafka's reason it is invalid, or None
    validator: Callable[[str], str | None] | None = None
    #: the :class:`LogConfig` field the value sets (None: read from the topic's configs where used)
    log_attr: str | None = None


def _d(
    name: str,
    type_: str,
    default: object,
    synonym: str | None,
    validator: Callable[[str], str | None] | None = None,
    log_attr: str | None = None,
) -> TopicConfigDef:
    return TopicConfigDef(
        name, type_, str(default).lower() if type_ == BOOLEAN else str(default), synonym, validator, log_attr
    )


TOPIC_CONFIG_DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _d("cleanup.policy", LIST, "delete", "log.cleanup.policy", list_of("compact", "delete"), "cleanup_policy"),
        _d("compression.type", STRING, "producer", "compression.type", one_of(*COMPRESSION_TYPES), "compression_type"),
        _d("delete.retention.ms", LONG, _DAY_MS, "log.cleaner.delete.retention.ms", at_least(0), "delete_retention_ms"),
        _d("file.delete.delay.ms", LONG, 60000, "log.segment.delete.delay.ms", at_least(0)),
        _d("flush.messages", LONG, MAX_LONG, "log.flush.interval.messages", at_least(0), "flush_interval_messages"),
        _d("flush.ms", LONG, MAX_LONG, "log.flush.interval.ms", at_least(0), "flush_interval_ms"),
        _d(
            "follower.replication.throttled.replicas",
            LIST,
            "",
            None,
            _throttled_replicas("follower.replication.throttled.replicas"),
        ),
        _d("index.interval.bytes", INT, 4096, "log.index.interval.bytes", at_least(0), "index_interval_bytes"),
        _d(
            "leader.replication.throttled.replicas",
            LIST,
            "",
            None,
            _throttled_replicas("leader.replication.throttled.replicas"),
        ),
        _d(
            "max.compaction.lag.ms",
            LONG,
            MAX_LONG,
            "log.cleaner.max.compaction.lag.ms",
            at_least(1),
            "max_compaction_lag_ms",
        ),
        _d("max.message.bytes", INT, 1000012, "message.max.bytes", at_least(0), "max_message_bytes"),
        _d("message.downconversion.enable", BOOLEAN, True, "log.message.downconversion.enable"),
        _d("message.format.version", STRING, "2.3-IV1", "log.message.format.version", _api_version),
        _d(
            "message.timestamp.difference.max.ms",
            LONG,
            MAX_LONG,
            "log.message.timestamp.difference.max.ms",
            at_least(0),
            "message_timestamp_difference_max_ms",
        ),
        _d(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            "log.message.timestamp.type",
            one_of(*TIMESTAMP_TYPES),
            "message_timestamp_type",
        ),
        _d(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            0.5,
            "log.cleaner.min.cleanable.ratio",
            between(0.0, 1.0),
            "min_cleanable_dirty_ratio",
        ),
        _d("min.compaction.lag.ms", LONG, 0, "log.cleaner.min.compaction.lag.ms", at_least(0), "min_compaction_lag_ms"),
        _d("min.insync.replicas", INT, 1, "min.insync.replicas", at_least(1)),
        _d("preallocate", BOOLEAN, False, "log.preallocate"),
        _d("retention.bytes", LONG, -1, "log.retention.bytes", None, "retention_bytes"),
        _d("retention.ms", LONG, 7 * _DAY_MS, "log.retention.ms", at_least(-1), "retention_ms"),
        _d("segment.bytes", INT, 1 << 30, "log.segment.bytes", at_least(14), "segment_bytes"),
        _d(
            "segment.index.bytes", INT, 10 * 1024 * 1024, "log.index.size.max.bytes", at_least(0), "segment_index_bytes"
        ),
        _d("segment.jitter.ms", LONG, 0, "log.roll.jitter.ms", at_least(0), "segment_jitter_ms"),
        _d("segment.ms", LONG, 7 * _DAY_MS, "log.roll.ms", at_least(1), "segment_ms"),
        _d("unclean.leader.election.enable", BOOLEAN, False, "unclean.leader.election.enable"),
    )
}


#: broker properties that also supply a topic config's default, beside ``broker_synonym``, in
#: Kafka's order of precedence (the first one set wins)
_MORE_SYNONYMS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker properties that supply ``name``'s default (Kafka's DescribeConfigs synonyms)."""
    d = TOPIC_CONFIG_DEFS[name]
    return _MORE_SYNONYMS.get(name, (d.broker_synonym,) if d.broker_synonym else ())


#: broker properties that are only topic defaults (the broker's config parsing accepts them)
BROKER_DEFAULT_PROPERTIES = frozenset(p for n in TOPIC_CONFIG_DEFS for p in broker_synonyms(n))


def check_value(name: str, value: str, shown_as: str | None = None) -> str | None:
    """Kafka's error message for ``name=value`` as a topic config, or None when it is valid.
    ``shown_as`` names the property in the message (a broker property supplying the default)."""
    d = TOPIC_CONFIG_DEFS.get(name)
    if d is None:
        return f"Unknown topic config name: {name}"
    why = _parse_check(d.type, value)
    if why is None and d.validator is not None:
        why = d.validator(value.strip() if d.type in (INT, LONG, DOUBLE, BOOLEAN) else value)
    return None if why is None else f"Invalid value {value} for configuration {shown_as or name}: {why}"


def check_broker_defaults(props: dict[str, str]) -> str | None:
    """The first broker property that supplies a topic config's default and is invalid by that
    topic config's rule (``log.message.timestamp.type=WallClock``), as Kafka refuses it at start-up."""
    for name in TOPIC_CONFIG_DEFS:
        for prop in broker_synonyms(name):
            if prop in props and not prop.endswith((".hours", ".minutes")):
                problem = check_value(name, props[prop], shown_as=prop)
                if problem is not None:
                    return problem
    return None


def log_value(name: str, value: str) -> object:
    """A valid value converted to its :class:`LogConfig` field's type."""
    d = TOPIC_CONFIG_DEFS[name]
    if d.type in (INT, LONG):
        return int(value.strip())
    if d.type == DOUBLE:
        return float(value.strip())
    if d.type == BOOLEAN:
        return value.strip().lower() == "true"
    return value.strip() if d.type == LIST else value
