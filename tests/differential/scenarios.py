"""The scripted scenarios, generated from tables: every API key Headwater serves, at its lowest and
highest version (every version where a request is cheap), with good and bad input.

A scenario is a list of steps run in order on one connection; a step is ``(api, version, body)``
where a value in ``body`` may be a function of the context (``ctx["pid"]``: the producer id the last
InitProducerId gave, ``ctx["member"]`` / ``ctx["generation"]``: the last JoinGroup's). Scenarios run
in list order against both brokers, so state they leave (offsets, groups, configs) is the same on both.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from headwater.protocol.apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    ALTER_CONFIGS,
    API_VERSIONS,
    CONTROLLED_SHUTDOWN,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEADER_AND_ISR,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    STOP_REPLICA,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    UPDATE_METADATA,
    WRITE_TXN_MARKERS,
)
from headwater.protocol.records.record import encode_batch
from headwater.protocol.schema import Api

Ctx = dict[str, Any]
Step = tuple[Api, int, dict[str, Any]]
#: A step whose answer is read until the predicate holds (or 60 s pass): what a retention check does.
UNTIL: dict[str, Callable[[dict[str, Any]], bool]] = {}
#: every record's CreateTime: one value for both brokers, so both logs hold the same bytes; recent, so
#: that no retention check (Kafka's first runs 30 s after start) finds the records past retention.ms
TS = int(time.time()) * 1000

#: Topics the module creates on both brokers before the scenarios: name -> partitions.
TOPICS = {"t1": 1, "t3": 3, "dr": 1, "idem": 1, "cfg": 1, "m2": 1, "tx": 1, "txm": 1}
#: Records produced into these before the scenarios.
SEEDED = ("t1", "dr")


def batch(n: int = 1, size: int = 10, **kw: Any) -> bytes:
    return encode_batch([(f"k{i}".encode(), b"v" * size, TS + i, ()) for i in range(n)], **kw)


def legacy_message(value: bytes) -> bytes:
    """One magic-1 message (offset 0, CreateTime TS, no key), as a v0-v2 producer sends it."""
    body = struct.pack(">bbqi", 1, 0, TS, -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def versions(api: Api, every: bool = False) -> list[int]:
    return list(range(api.min_version, api.max_version + 1)) if every else sorted({api.min_version, api.max_version})


def produce(topic: str, partition: int, records: bytes, acks: int = 1) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout_ms": 10000,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "records": records}]}],
    }


def fetch(topic: str, partition: int, offset: int, leader_epoch: int = -1, max_bytes: int = 1 << 20) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": leader_epoch,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def list_offsets(topic: str, partition: int, timestamp: int, leader_epoch: int = -1) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": leader_epoch,
                        "timestamp": timestamp,
                        "max_num_offsets": 1,
                    }
                ],
            }
        ],
    }


def create_topic(
    name: str, partitions: int = 1, rf: int = 1, configs: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": rf,
                "assignments": kw.pop("assignments", []),
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 10000,
        "validate_only": kw.pop("validate_only", False),
    }


def configs(rtype: int, name: str, keys: list[str] | None) -> dict[str, Any]:
    return {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False,
    }


def alter(rtype: int, name: str, cfg: dict[str, str | None], validate_only: bool = False) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in cfg.items()],
            }
        ],
        "validate_only": validate_only,
    }


def incremental(
    rtype: int, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False
) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }


def join(
    group: str, member: str | Callable[[Ctx], str] = "", protocols: int = 1, session_ms: int = 10000
) -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": 10000,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x02t1\x00\x00\x00\x00"}][:protocols],
    }


def member(ctx: Ctx) -> str:
    return str(ctx.get("member", ""))


def generation(ctx: Ctx) -> int:
    return int(ctx.get("generation", -1))


def pid(ctx: Ctx) -> int:
    return int(ctx.get("pid", -1))


def _bad_records(ctx: Ctx) -> bytes:
    return b"\x00" * 70


SCENARIOS: list[tuple[str, list[Step]]] = []


def add(name: str, *steps: Step) -> None:
    SCENARIOS.append((name, list(steps)))


# --- ApiVersions, Metadata ------------------------------------------------------------------------
for v in versions(API_VERSIONS, every=True):
    add(f"api_versions/v{v}", (API_VERSIONS, v, {}))

for v in versions(METADATA, every=True):
    add(
        f"metadata/known/v{v}",
        (METADATA, v, {"topics": [{"name": "t1"}, {"name": "t3"}], "allow_auto_topic_creation": False}),
    )
    add(
        f"metadata/unknown/v{v}",
        (METADATA, v, {"topics": [{"name": f"nope-md{v}"}], "allow_auto_topic_creation": False}),
    )
    add(
        f"metadata/invalid_name/v{v}",
        (METADATA, v, {"topics": [{"name": "bad/name"}], "allow_auto_topic_creation": False}),
    )
    if v >= 1:  # v0's empty list means every topic: racing the auto-creation v0 makes
        add(f"metadata/no_topics/v{v}", (METADATA, v, {"topics": [], "allow_auto_topic_creation": False}))
    if v >= 1:
        add(
            f"metadata/auto_create/v{v}",
            (METADATA, v, {"topics": [{"name": f"auto-md{v}"}], "allow_auto_topic_creation": True}),
        )

# --- Produce ---------------------------------------------------------------------------------------
for v in versions(PRODUCE, every=True):
    good = batch(2) if v >= 3 else legacy_message(b"legacy")
    add(f"produce/good/v{v}", (PRODUCE, v, produce("t3", 1, good)))
    add(f"produce/acks_all/v{v}", (PRODUCE, v, produce("t3", 2, good, acks=-1)))
    add(f"produce/unknown_topic/v{v}", (PRODUCE, v, produce(f"nope-p{v}", 0, good)))
    add(f"produce/unknown_partition/v{v}", (PRODUCE, v, produce("t1", 9, good)))
    add(f"produce/bad_acks/v{v}", (PRODUCE, v, produce("t3", 1, good, acks=2)))
    add(
        f"produce/too_large/v{v}",
        (PRODUCE, v, produce("t3", 1, batch(1, 1_100_000) if v >= 3 else legacy_message(b"x" * 1_100_000))),
    )
    add(f"produce/invalid_name/v{v}", (PRODUCE, v, produce("bad/name", 0, good)))
    if v >= 3:
        add(f"produce/corrupt/v{v}", (PRODUCE, v, produce("t3", 1, b"\x00" * 70)))
        add(f"produce/compressed_gzip/v{v}", (PRODUCE, v, produce("t3", 0, batch(3, compression=1))))
    else:
        add(f"produce/magic2_on_old_version/v{v}", (PRODUCE, v, produce("m2", 0, batch(1))))  # its own log: no cascade

# --- Fetch, ListOffsets, OffsetForLeaderEpoch ------------------------------------------------------
for v in versions(FETCH, every=True):
    add(f"fetch/from_start/v{v}", (FETCH, v, fetch("t1", 0, 0)))
    add(f"fetch/middle/v{v}", (FETCH, v, fetch("t1", 0, 3)))
    add(f"fetch/at_end/v{v}", (FETCH, v, fetch("t1", 0, 5)))
    add(f"fetch/out_of_range/v{v}", (FETCH, v, fetch("t1", 0, 1000)))
    add(f"fetch/negative_offset/v{v}", (FETCH, v, fetch("t1", 0, -5)))
    add(f"fetch/unknown_topic/v{v}", (FETCH, v, fetch(f"nope-f{v}", 0, 0)))
    add(f"fetch/unknown_partition/v{v}", (FETCH, v, fetch("t1", 7, 0)))
    if v >= 9:
        add(f"fetch/future_leader_epoch/v{v}", (FETCH, v, fetch("t1", 0, 0, leader_epoch=5)))

for v in versions(LIST_OFFSETS, every=True):
    for label, ts in (("latest", -1), ("earliest", -2), ("by_time", TS + 2), ("after_all", TS + 99)):
        add(f"list_offsets/{label}/v{v}", (LIST_OFFSETS, v, list_offsets("t1", 0, ts)))
    add(f"list_offsets/unknown_partition/v{v}", (LIST_OFFSETS, v, list_offsets("t1", 4, -1)))
    add(f"list_offsets/unknown_topic/v{v}", (LIST_OFFSETS, v, list_offsets(f"nope-lo{v}", 0, -1)))
    if v >= 4:
        add(f"list_offsets/future_leader_epoch/v{v}", (LIST_OFFSETS, v, list_offsets("t1", 0, -1, leader_epoch=5)))


def _olep(topic: str, partition: int, epoch: int, current: int = -1) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}],
            }
        ],
    }


for v in versions(OFFSET_FOR_LEADER_EPOCH, every=True):
    add(f"offset_for_leader_epoch/current/v{v}", (OFFSET_FOR_LEADER_EPOCH, v, _olep("t1", 0, 0)))
    add(f"offset_for_leader_epoch/unknown_partition/v{v}", (OFFSET_FOR_LEADER_EPOCH, v, _olep("t1", 3, 0)))
    add(f"offset_for_leader_epoch/unknown_topic/v{v}", (OFFSET_FOR_LEADER_EPOCH, v, _olep("nope-ole", 0, 0)))
    if v >= 2:
        add(f"offset_for_leader_epoch/future_current/v{v}", (OFFSET_FOR_LEADER_EPOCH, v, _olep("t1", 0, 0, current=7)))

# --- DeleteRecords ---------------------------------------------------------------------------------
for v in versions(DELETE_RECORDS):

    def dr(topic: str, partition: int, offset: int) -> dict[str, Any]:
        return {
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
            "timeout_ms": 10000,
        }

    add(
        f"delete_records/good/v{v}",
        (DELETE_RECORDS, v, dr("dr", 0, 1 + v)),
        (LIST_OFFSETS, 1, list_offsets("dr", 0, -2)),
    )
    add(f"delete_records/beyond_hw/v{v}", (DELETE_RECORDS, v, dr("dr", 0, 99)))
    add(f"delete_records/unknown_partition/v{v}", (DELETE_RECORDS, v, dr("dr", 5, 0)))
    add(f"delete_records/unknown_topic/v{v}", (DELETE_RECORDS, v, dr("nope-dr", 0, 0)))

# --- Retention: a topic whose records are all past retention.ms is purged, active segment included
for v in versions(LIST_OFFSETS):
    name = f"purge{v}"
    add(
        f"retention/purge_active_segment/v{v}",
        (CREATE_TOPICS, 2, create_topic(name, configs={"retention.ms": "1000"})),
        (PRODUCE, 7, produce(name, 0, batch(3))),
        (LIST_OFFSETS, v, list_offsets(name, 0, -2)),
    )
    UNTIL[f"retention/purge_active_segment/v{v}"] = lambda r: all(
        p.get("offset", -1) == 3 or 3 in (p.get("old_style_offsets") or [])
        for t in r.get("topics", [])
        for p in t["partitions"]
    )

# --- Topics: CreateTopics, DeleteTopics, CreatePartitions -----------------------------------------
for v in versions(CREATE_TOPICS, every=True):
    add(f"create_topics/good/v{v}", (CREATE_TOPICS, v, create_topic(f"new{v}", 2)))
    add(f"create_topics/exists/v{v}", (CREATE_TOPICS, v, create_topic("t1")))
    add(f"create_topics/zero_partitions/v{v}", (CREATE_TOPICS, v, create_topic(f"zp{v}", 0)))
    add(f"create_topics/rf_too_big/v{v}", (CREATE_TOPICS, v, create_topic(f"rf{v}", 1, rf=3)))
    add(
        f"create_topics/bad_config_value/v{v}",
        (CREATE_TOPICS, v, create_topic(f"bc{v}", configs={"cleanup.policy": "bogus"})),
    )
    add(
        f"create_topics/unknown_config/v{v}",
        (CREATE_TOPICS, v, create_topic(f"uc{v}", configs={"no.such.config": "1"})),
    )
    add(f"create_topics/invalid_name/v{v}", (CREATE_TOPICS, v, create_topic("bad/name")))
    add(
        f"create_topics/assignment_and_count/v{v}",
        (CREATE_TOPICS, v, create_topic(f"ac{v}", 2, assignments=[{"partition_index": 0, "broker_ids": [0]}])),
    )
    if v >= 1:
        add(f"create_topics/validate_only/v{v}", (CREATE_TOPICS, v, create_topic(f"vo{v}", 2, validate_only=True)))

for v in versions(DELETE_TOPICS, every=True):
    add(
        f"delete_topics/good/v{v}",
        (CREATE_TOPICS, 2, create_topic(f"del{v}")),
        (DELETE_TOPICS, v, {"topic_names": [f"del{v}"], "timeout_ms": 10000}),
    )
    add(f"delete_topics/unknown/v{v}", (DELETE_TOPICS, v, {"topic_names": [f"nope-del{v}"], "timeout_ms": 10000}))

for v in versions(CREATE_PARTITIONS):

    def cp(topic: str, count: int, validate: bool = False) -> dict[str, Any]:
        return {
            "topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout_ms": 10000,
            "validate_only": validate,
        }

    add(f"create_partitions/grow/v{v}", (CREATE_PARTITIONS, v, cp("t3", 4 + v)))
    add(f"create_partitions/shrink/v{v}", (CREATE_PARTITIONS, v, cp("t3", 2)))
    add(f"create_partitions/same/v{v}", (CREATE_PARTITIONS, v, cp("t1", 1)))
    add(f"create_partitions/unknown/v{v}", (CREATE_PARTITIONS, v, cp("nope-cp", 3)))
    add(f"create_partitions/validate_only/v{v}", (CREATE_PARTITIONS, v, cp("t1", 9, validate=True)))

# --- Configs ---------------------------------------------------------------------------------------
TOPIC, BROKER = 2, 4
for v in versions(DESCRIBE_CONFIGS, every=True):
    add(
        f"describe_configs/topic_keys/v{v}",
        (DESCRIBE_CONFIGS, v, configs(TOPIC, "t1", ["retention.ms", "cleanup.policy", "max.message.bytes"])),
    )
    add(f"describe_configs/unknown_topic/v{v}", (DESCRIBE_CONFIGS, v, configs(TOPIC, "nope-dc", ["retention.ms"])))
    add(
        f"describe_configs/broker_keys/v{v}",
        (DESCRIBE_CONFIGS, v, configs(BROKER, "0", ["message.max.bytes", "num.partitions"])),
    )
    add(f"describe_configs/other_broker/v{v}", (DESCRIBE_CONFIGS, v, configs(BROKER, "7", ["message.max.bytes"])))
    add(f"describe_configs/bad_broker_name/v{v}", (DESCRIBE_CONFIGS, v, configs(BROKER, "x", ["message.max.bytes"])))
    add(f"describe_configs/unknown_key/v{v}", (DESCRIBE_CONFIGS, v, configs(TOPIC, "t1", ["no.such.config"])))

for v in versions(ALTER_CONFIGS):
    add(f"alter_configs/topic_good/v{v}", (ALTER_CONFIGS, v, alter(TOPIC, "cfg", {"retention.ms": "3600000"})))
    add(f"alter_configs/topic_bad_value/v{v}", (ALTER_CONFIGS, v, alter(TOPIC, "cfg", {"retention.ms": "abc"})))
    add(f"alter_configs/topic_unknown_key/v{v}", (ALTER_CONFIGS, v, alter(TOPIC, "cfg", {"no.such.config": "1"})))
    add(f"alter_configs/unknown_topic/v{v}", (ALTER_CONFIGS, v, alter(TOPIC, "nope-ac", {"retention.ms": "1"})))
    add(
        f"alter_configs/topic_validate_only/v{v}",
        (ALTER_CONFIGS, v, alter(TOPIC, "cfg", {"cleanup.policy": "compact"}, True)),
    )
    add(f"alter_configs/broker_static/v{v}", (ALTER_CONFIGS, v, alter(BROKER, "0", {"zookeeper.connect": "x"}, True)))
    add(
        f"alter_configs/broker_dynamic/v{v}", (ALTER_CONFIGS, v, alter(BROKER, "0", {"log.cleaner.threads": "2"}, True))
    )
    add(
        f"alter_configs/broker_kerberos_relogin/v{v}",
        (ALTER_CONFIGS, v, alter(BROKER, "0", {"sasl.kerberos.min.time.before.relogin": "60000"}, True)),
    )
    add(
        f"alter_configs/broker_bad_value/v{v}",
        (ALTER_CONFIGS, v, alter(BROKER, "0", {"log.cleaner.threads": "x"}, True)),
    )

for v in versions(INCREMENTAL_ALTER_CONFIGS):
    add(
        f"incremental_alter_configs/set/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("retention.bytes", 0, "1048576")])),
    )
    add(
        f"incremental_alter_configs/delete/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("retention.bytes", 1, None)])),
    )
    add(
        f"incremental_alter_configs/append/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("cleanup.policy", 2, "compact")])),
    )
    add(
        f"incremental_alter_configs/subtract/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("cleanup.policy", 3, "compact")])),
    )
    add(
        f"incremental_alter_configs/append_scalar/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("retention.ms", 2, "5")])),
    )
    add(
        f"incremental_alter_configs/bad_op/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("retention.ms", 9, "5")])),
    )
    add(
        f"incremental_alter_configs/bad_value/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "cfg", [("retention.ms", 0, "abc")])),
    )
    add(
        f"incremental_alter_configs/unknown_topic/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(TOPIC, "nope-iac", [("retention.ms", 0, "5")])),
    )
    add(
        f"incremental_alter_configs/broker_kerberos_relogin/v{v}",
        (
            INCREMENTAL_ALTER_CONFIGS,
            v,
            incremental(BROKER, "0", [("sasl.kerberos.min.time.before.relogin", 0, "60000")], True),
        ),
    )
    add(
        f"incremental_alter_configs/broker_dynamic/v{v}",
        (INCREMENTAL_ALTER_CONFIGS, v, incremental(BROKER, "0", [("log.cleaner.threads", 0, "2")], True)),
    )

for v in versions(DESCRIBE_LOG_DIRS):
    add(f"describe_log_dirs/one_topic/v{v}", (DESCRIBE_LOG_DIRS, v, {"topics": [{"topic": "t1", "partitions": [0]}]}))
    add(
        f"describe_log_dirs/unknown/v{v}",
        (DESCRIBE_LOG_DIRS, v, {"topics": [{"topic": "nope-dld", "partitions": [0]}]}),
    )

# --- Groups: from join to leave, and their edge cases --------------------------------------------
for v in versions(FIND_COORDINATOR, every=True):
    add(f"find_coordinator/group/v{v}", (FIND_COORDINATOR, v, {"key": "g-fc", "key_type": 0}))
    if v >= 1:
        add(f"find_coordinator/bad_type/v{v}", (FIND_COORDINATOR, v, {"key": "g-fc", "key_type": 5}))
    add(f"find_coordinator/empty_group/v{v}", (FIND_COORDINATOR, v, {"key": "", "key_type": 0}))

for v in versions(JOIN_GROUP, every=True):
    g = f"g-join{v}"
    steps: list[Step] = [(JOIN_GROUP, v, join(g))]
    if v >= 4:  # KIP-394: the first join is refused with the member id to use
        steps.append((JOIN_GROUP, v, join(g, member)))
    sync_v = min(v, SYNC_GROUP.max_version)
    hb_v = min(v, HEARTBEAT.max_version)
    steps += [
        (
            SYNC_GROUP,
            sync_v,
            {
                "group_id": g,
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "assignments": [{"member_id": member, "assignment": b"\x00\x01\x00\x00\x00\x00"}],
            },
        ),
        (HEARTBEAT, hb_v, {"group_id": g, "generation_id": generation, "member_id": member, "group_instance_id": None}),
        (HEARTBEAT, hb_v, {"group_id": g, "generation_id": 99, "member_id": member, "group_instance_id": None}),
        (
            OFFSET_COMMIT,
            min(v + 2, OFFSET_COMMIT.max_version),
            {
                "group_id": g,
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": "t1",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 3,
                                "committed_leader_epoch": -1,
                                "commit_timestamp": -1,
                                "committed_metadata": "m",
                            }
                        ],
                    }
                ],
            },
        ),
        (
            OFFSET_FETCH,
            min(v, OFFSET_FETCH.max_version),
            {"group_id": g, "topics": [{"name": "t1", "partition_indexes": [0]}]},
        ),
        (DESCRIBE_GROUPS, min(v, DESCRIBE_GROUPS.max_version), {"groups": [g], "include_authorized_operations": False}),
        (DELETE_GROUPS, 0, {"groups_names": [g]}),
        (LEAVE_GROUP, min(v, LEAVE_GROUP.max_version), {"group_id": g, "member_id": member}),
        (LEAVE_GROUP, min(v, LEAVE_GROUP.max_version), {"group_id": g, "member_id": member}),
        (HEARTBEAT, hb_v, {"group_id": g, "generation_id": generation, "member_id": member, "group_instance_id": None}),
        (DESCRIBE_GROUPS, min(v, DESCRIBE_GROUPS.max_version), {"groups": [g], "include_authorized_operations": False}),
        (DELETE_GROUPS, 1, {"groups_names": [g]}),
        (DELETE_GROUPS, 1, {"groups_names": [g]}),
    ]
    add(f"group/join_to_leave/v{v}", *steps)
    add(f"group/tiny_session_timeout/v{v}", (JOIN_GROUP, v, join(f"g-ts{v}", session_ms=1)))
    add(f"group/no_protocols/v{v}", (JOIN_GROUP, v, join(f"g-np{v}", protocols=0)))
    add(f"group/empty_group_id/v{v}", (JOIN_GROUP, v, join("")))
    add(f"group/unknown_member_join/v{v}", (JOIN_GROUP, v, join(f"g-um{v}", "who-is-this")))

for v in versions(HEARTBEAT):
    add(
        f"heartbeat/unknown_group/v{v}",
        (HEARTBEAT, v, {"group_id": "g-none", "generation_id": 1, "member_id": "m", "group_instance_id": None}),
    )
    add(
        f"heartbeat/empty_group/v{v}",
        (HEARTBEAT, v, {"group_id": "", "generation_id": 1, "member_id": "m", "group_instance_id": None}),
    )
for v in versions(SYNC_GROUP):
    add(
        f"sync_group/unknown_group/v{v}",
        (
            SYNC_GROUP,
            v,
            {"group_id": "g-none", "generation_id": 1, "member_id": "m", "group_instance_id": None, "assignments": []},
        ),
    )
for v in versions(LEAVE_GROUP):
    add(f"leave_group/unknown_group/v{v}", (LEAVE_GROUP, v, {"group_id": "g-none", "member_id": "m"}))
for v in versions(LIST_GROUPS, every=True):
    add(f"list_groups/all/v{v}", (LIST_GROUPS, v, {}))
for v in versions(DESCRIBE_GROUPS):
    add(
        f"describe_groups/unknown/v{v}",
        (DESCRIBE_GROUPS, v, {"groups": ["g-none"], "include_authorized_operations": False}),
    )
    add(
        f"describe_groups/empty_id/v{v}", (DESCRIBE_GROUPS, v, {"groups": [""], "include_authorized_operations": False})
    )
for v in versions(DELETE_GROUPS):
    add(f"delete_groups/unknown/v{v}", (DELETE_GROUPS, v, {"groups_names": ["g-none"]}))
for v in versions(OFFSET_COMMIT, every=True):

    def oc(group: str, gen: int, topic: str, partition: int, offset: int = 1) -> dict[str, Any]:
        return {
            "group_id": group,
            "generation_id": gen,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "commit_timestamp": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        }

    add(
        f"offset_commit/simple/v{v}",
        (OFFSET_COMMIT, v, oc(f"g-oc{v}", -1, "t1", 0)),
        (
            OFFSET_FETCH,
            min(v, OFFSET_FETCH.max_version),
            {"group_id": f"g-oc{v}", "topics": [{"name": "t1", "partition_indexes": [0]}]},
        ),
    )
    add(f"offset_commit/unknown_partition/v{v}", (OFFSET_COMMIT, v, oc(f"g-oc{v}", -1, "t1", 6)))
    add(f"offset_commit/unknown_topic/v{v}", (OFFSET_COMMIT, v, oc(f"g-oc{v}", -1, "nope-oc", 0)))
    add(f"offset_commit/generation_without_group/v{v}", (OFFSET_COMMIT, v, oc(f"g-ocg{v}", 4, "t1", 0)))
    add(f"offset_commit/empty_group/v{v}", (OFFSET_COMMIT, v, oc("", -1, "t1", 0)))
for v in versions(OFFSET_FETCH, every=True):
    add(
        f"offset_fetch/unknown_group/v{v}",
        (OFFSET_FETCH, v, {"group_id": "g-none", "topics": [{"name": "t1", "partition_indexes": [0]}]}),
    )
    if v >= 2:
        add(f"offset_fetch/all_topics/v{v}", (OFFSET_FETCH, v, {"group_id": "g-oc7", "topics": None}))

# --- Idempotent producer: sequences and epochs ----------------------------------------------------
for v in versions(INIT_PRODUCER_ID):
    add(
        f"init_producer_id/plain/v{v}",
        (INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout_ms": 60000}),
    )
    add(
        f"init_producer_id/transactional/v{v}",
        (INIT_PRODUCER_ID, v, {"transactional_id": f"tx{v}", "transaction_timeout_ms": 60000}),
    )
    add(
        f"init_producer_id/bad_timeout/v{v}",
        (INIT_PRODUCER_ID, v, {"transactional_id": f"txb{v}", "transaction_timeout_ms": 2_000_000_000}),
    )

for v in (3, 7):

    def pb(seq: int, n: int = 1, epoch: int = 0, p: Callable[[Ctx], int] | int = pid) -> Callable[[Ctx], bytes]:
        def make(ctx: Ctx) -> bytes:
            return batch(n, producer_id=p(ctx) if callable(p) else p, producer_epoch=epoch, base_sequence=seq)

        return make

    init = (INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
    add(
        f"idempotent/in_order/v{v}",
        init,
        (PRODUCE, v, produce("idem", 0, pb(0, 3))),
        (PRODUCE, v, produce("idem", 0, pb(3, 2))),
    )  # type: ignore[arg-type]
    add(
        f"idempotent/duplicate/v{v}",
        init,
        (PRODUCE, v, produce("idem", 0, pb(0, 2))),
        (PRODUCE, v, produce("idem", 0, pb(0, 2))),
    )  # type: ignore[arg-type]
    add(f"idempotent/gap/v{v}", init, (PRODUCE, v, produce("idem", 0, pb(0))), (PRODUCE, v, produce("idem", 0, pb(5))))  # type: ignore[arg-type]
    add(f"idempotent/first_not_zero/v{v}", init, (PRODUCE, v, produce("idem", 0, pb(4))))  # type: ignore[arg-type]
    add(
        f"idempotent/old_epoch/v{v}",
        init,
        (PRODUCE, v, produce("idem", 0, pb(0, epoch=1))),
        (PRODUCE, v, produce("idem", 0, pb(1, epoch=0))),
    )  # type: ignore[arg-type]
    add(f"idempotent/unknown_pid/v{v}", (PRODUCE, v, produce("idem", 0, pb(3, p=987654321))))  # type: ignore[arg-type]
    add(f"idempotent/acks_1/v{v}", init, (PRODUCE, v, produce("idem", 0, pb(0), acks=1)))  # type: ignore[arg-type]

# --- ACLs without an authorizer, SASL on a PLAINTEXT listener -------------------------------------
for v in versions(DESCRIBE_ACLS):
    add(
        f"describe_acls/no_authorizer/v{v}",
        (
            DESCRIBE_ACLS,
            v,
            {
                "resource_type_filter": 1,
                "resource_name_filter": None,
                "pattern_type_filter": 1,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            },
        ),
    )
for v in versions(CREATE_ACLS):
    add(
        f"create_acls/no_authorizer/v{v}",
        (
            CREATE_ACLS,
            v,
            {
                "creations": [
                    {
                        "resource_type": 2,
                        "resource_name": "t1",
                        "resource_pattern_type": 3,
                        "principal": "User:alice",
                        "host": "*",
                        "operation": 3,
                        "permission_type": 3,
                    }
                ]
            },
        ),
    )
for v in versions(DELETE_ACLS):
    add(
        f"delete_acls/no_authorizer/v{v}",
        (
            DELETE_ACLS,
            v,
            {
                "filters": [
                    {
                        "resource_type_filter": 1,
                        "resource_name_filter": None,
                        "pattern_type_filter": 1,
                        "principal_filter": None,
                        "host_filter": None,
                        "operation": 1,
                        "permission_type": 1,
                    }
                ]
            },
        ),
    )
for v in versions(SASL_HANDSHAKE, every=True):
    add(f"sasl_handshake/plaintext_listener/v{v}", (SASL_HANDSHAKE, v, {"mechanism": "PLAIN"}))
for v in versions(SASL_AUTHENTICATE, every=True):
    add(f"sasl_authenticate/plaintext_listener/v{v}", (SASL_AUTHENTICATE, v, {"auth_bytes": b"\x00u\x00p"}))

# --- Leadership, and the controller's APIs sent by a client ---------------------------------------
for v in versions(ELECT_LEADERS):
    add(
        f"elect_leaders/preferred/v{v}",
        (
            ELECT_LEADERS,
            v,
            {"election_type": 0, "topic_partitions": [{"topic": "t1", "partitions": [0]}], "timeout_ms": 10000},
        ),
    )
    add(
        f"elect_leaders/unknown/v{v}",
        (
            ELECT_LEADERS,
            v,
            {"election_type": 0, "topic_partitions": [{"topic": "nope-el", "partitions": [0]}], "timeout_ms": 10000},
        ),
    )
for v in versions(LEADER_AND_ISR):
    add(
        f"leader_and_isr/stale_controller/v{v}",
        (
            LEADER_AND_ISR,
            v,
            {
                "controller_id": 0,
                "controller_epoch": 0,
                "broker_epoch": -1,
                "ungrouped_partition_states": [],
                "topic_states": [],
                "live_leaders": [],
            },
        ),
    )
for v in versions(STOP_REPLICA):
    add(
        f"stop_replica/stale_controller/v{v}",
        (
            STOP_REPLICA,
            v,
            {
                "controller_id": 0,
                "controller_epoch": 0,
                "broker_epoch": -1,
                "delete_partitions": False,
                "ungrouped_partitions": [],
                "topics": [],
            },
        ),
    )
for v in versions(UPDATE_METADATA):
    add(
        f"update_metadata/stale_controller/v{v}",
        (
            UPDATE_METADATA,
            v,
            {
                "controller_id": 0,
                "controller_epoch": 0,
                "broker_epoch": -1,
                "ungrouped_partition_states": [],
                "topic_states": [],
                "live_brokers": [],
            },
        ),
    )
for v in versions(CONTROLLED_SHUTDOWN):
    add(f"controlled_shutdown/unknown_broker/v{v}", (CONTROLLED_SHUTDOWN, v, {"broker_id": 99, "broker_epoch": -1}))

# --- Transactions (KIP-98): the coordinator, markers, the LSO, transactional offsets -------------
# Both brokers run with a one-partition, one-replica __transaction_state (conftest.SETTINGS), which
# the module's fixture has created (FindCoordinator key_type 1) and seen loaded; every scenario has
# its own transactional id, so each starts at epoch 0.


TX0 = [{"name": "tx", "partitions": [0]}]


def txn(tid: str, **more: Any) -> Callable[[Ctx], dict[str, Any]]:
    return lambda ctx: {"transactional_id": tid, "producer_id": pid(ctx), "producer_epoch": 0, **more}


def init_txn(tid: str) -> Step:
    return (INIT_PRODUCER_ID, 1, {"transactional_id": tid, "transaction_timeout_ms": 60000})


def txn_produce(tid: str, seq: int, n: int = 2) -> Callable[[Ctx], dict[str, Any]]:
    def make(ctx: Ctx) -> dict[str, Any]:
        records = batch(n, producer_id=pid(ctx), producer_epoch=0, base_sequence=seq, transactional=True)
        return {**produce("tx", 0, records, acks=-1), "transactional_id": tid}

    return make


def read_committed(topic: str) -> dict[str, Any]:
    return {**fetch(topic, 0, 0), "isolation_level": 1}


def _stable(r: dict[str, Any]) -> bool:
    """The partition's LSO caught up with its high watermark: every marker is in."""
    p = r["responses"][0]["partitions"][0]
    return bool(p["last_stable_offset"] == p["high_watermark"])


for v in versions(FIND_COORDINATOR):
    if v >= 1:
        add(f"find_coordinator/transaction/v{v}", (FIND_COORDINATOR, v, {"key": "txf", "key_type": 1}))
        add(f"find_coordinator/transaction_empty_id/v{v}", (FIND_COORDINATOR, v, {"key": "", "key_type": 1}))

for v in versions(ADD_PARTITIONS_TO_TXN):
    e = min(v, END_TXN.max_version)
    for decision, commit in (("commit", True), ("abort", False)):
        tid = f"tx-{decision}{v}"
        name = f"txn/{decision}/v{v}"
        add(
            name,
            init_txn(tid),
            (ADD_PARTITIONS_TO_TXN, v, txn(tid, topics=TX0)),  # type: ignore[arg-type]
            (PRODUCE, 7, txn_produce(tid, 0)),  # type: ignore[arg-type]
            (END_TXN, e, txn(tid, committed=commit)),  # type: ignore[arg-type]
            (FETCH, 11, read_committed("tx")),
        )
        UNTIL[name] = _stable
    tid = f"tx-err{v}"
    add(
        f"txn/add_partitions_errors/v{v}",
        init_txn(tid),
        (ADD_PARTITIONS_TO_TXN, v, txn(tid, topics=[{"name": "no-such-topic", "partitions": [0]}])),  # type: ignore[arg-type]
        (ADD_PARTITIONS_TO_TXN, v, lambda ctx, t=tid: {**txn(t, topics=TX0)(ctx), "producer_epoch": 5}),  # type: ignore[arg-type]
        (ADD_PARTITIONS_TO_TXN, v, lambda ctx, t=tid: {**txn(t, topics=TX0)(ctx), "producer_id": pid(ctx) + 1000}),  # type: ignore[arg-type]
    )

    # an internal topic is refused whoever asks (Kafka 2.3's KafkaApis), the others not attempted
    tid = f"tx-internal{v}"
    add(
        f"txn/add_partitions_internal_topic/v{v}",
        init_txn(tid),
        (
            ADD_PARTITIONS_TO_TXN,
            v,
            txn(tid, topics=[*TX0, {"name": "__consumer_offsets", "partitions": [0]}]),
        ),  # type: ignore[arg-type]
    )

for v in versions(END_TXN):
    tid = f"tx-end{v}"
    add(
        f"txn/end_errors/v{v}",
        init_txn(tid),
        (END_TXN, v, txn(tid, committed=True)),  # type: ignore[arg-type]  -- nothing open
        (END_TXN, v, lambda ctx, t=tid: {**txn(t, committed=False)(ctx), "producer_epoch": 3}),  # type: ignore[arg-type]
        (END_TXN, v, {"transactional_id": "tx-never", "producer_id": 1, "producer_epoch": 0, "committed": True}),
    )

for v in versions(TXN_OFFSET_COMMIT, every=True):
    a = min(v, ADD_OFFSETS_TO_TXN.max_version)
    tid, group = f"tx-offsets{v}", f"g-txo{v}"
    name = f"txn/offsets/v{v}"
    commit = {
        "group_id": group,
        "topics": [
            {"name": "t1", "partitions": [{"partition_index": 0, "committed_offset": 3, "committed_metadata": "m"}]}
        ],
    }
    add(
        name,
        init_txn(tid),
        (ADD_OFFSETS_TO_TXN, a, txn(tid, group_id=group)),  # type: ignore[arg-type]
        (TXN_OFFSET_COMMIT, v, txn(tid, **commit)),  # type: ignore[arg-type]
        (END_TXN, 1, txn(tid, committed=True)),  # type: ignore[arg-type]
        (OFFSET_FETCH, 5, {"group_id": group, "topics": [{"name": "t1", "partition_indexes": [0]}]}),
    )
    UNTIL[name] = lambda r: r["topics"][0]["partitions"][0]["committed_offset"] == 3
add(
    "txn/offset_commit_unknown_topic/v0",
    init_txn("tx-otu"),
    (ADD_OFFSETS_TO_TXN, 0, txn("tx-otu", group_id="g-otu")),  # type: ignore[arg-type]
    (
        TXN_OFFSET_COMMIT,
        0,
        txn(
            "tx-otu",
            group_id="g-otu",
            topics=[
                {"name": n, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}
                for n in ("t1", "no-such-topic")
            ],
        ),
    ),  # type: ignore[arg-type]
    (END_TXN, 1, txn("tx-otu", committed=False)),  # type: ignore[arg-type]
)
add(
    "txn/add_offsets_errors/v0",
    init_txn("tx-aoe"),
    (ADD_OFFSETS_TO_TXN, 0, txn("tx-aoe", group_id="")),  # type: ignore[arg-type]
    (ADD_OFFSETS_TO_TXN, 0, lambda ctx: {**txn("tx-aoe", group_id="g")(ctx), "producer_epoch": 2}),  # type: ignore[arg-type]
)

for v in versions(WRITE_TXN_MARKERS):
    marker = {
        "producer_id": 4242,
        "producer_epoch": 0,
        "topics": [{"name": "txm", "partition_indexes": [0]}, {"name": "no-such-topic", "partition_indexes": [0]}],
        "coordinator_epoch": 0,
    }
    add(
        f"write_txn_markers/abort_and_commit/v{v}",
        (WRITE_TXN_MARKERS, v, {"markers": [{**marker, "transaction_result": False}]}),
        (WRITE_TXN_MARKERS, v, {"markers": [{**marker, "transaction_result": True}]}),
        (
            LIST_OFFSETS,
            2,  # read_committed, before v4's leader_epoch (an intended difference of its own)
            {
                "replica_id": -1,
                "isolation_level": 1,
                "topics": [
                    {"name": "txm", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
                ],
            },
        ),
    )
