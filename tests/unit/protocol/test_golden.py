"""Golden bytes: our schemas against kafka-python's two independent encoders, plus hand-checked hex.

kafka-python 3.x ships two protocol implementations: the hand-written ``kafka.protocol.old``
classes (one class per version, Kafka 2.x era) and JSON-driven ``ApiMessage`` classes built
from Apache Kafka's newer message definitions. For every API and version that we and either of
them implement, the same message must encode to identical bytes, and each side must decode the
other's bytes to the same values.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import pytest

from headwater.protocol import frames
from headwater.protocol.apis import (
    ALL_APIS,
    API_BY_KEY,
    API_VERSIONS,
    CONTROLLED_SHUTDOWN,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    FETCH,
    LEADER_AND_ISR,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    STOP_REPLICA,
    UPDATE_METADATA,
    WRITE_TXN_MARKERS,
)
from headwater.protocol.primitives import Reader, Writer
from headwater.protocol.schema import Api, Array, Primitive, Struct

kafka_protocol = pytest.importorskip("kafka.protocol")

# kafka-python 3.x loads its JSON with importlib.resources' deprecated read_text/open_text
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning")

# --- kafka-python's classes for each API key ---------------------------------------------------

_OLD_MODULES = {  # key -> (module, request list, response list)
    0: ("produce", "ProduceRequest", "ProduceResponse"),
    1: ("fetch", "FetchRequest", "FetchResponse"),
    2: ("list_offsets", "ListOffsetsRequest", "ListOffsetsResponse"),
    3: ("metadata", "MetadataRequest", "MetadataResponse"),
    18: ("api_versions", "ApiVersionsRequest", "ApiVersionsResponse"),
    19: ("admin", "CreateTopicsRequest", "CreateTopicsResponse"),
    20: ("admin", "DeleteTopicsRequest", "DeleteTopicsResponse"),
    22: ("init_producer_id", "InitProducerIdRequest", "InitProducerIdResponse"),
    23: ("offset_for_leader_epoch", "OffsetForLeaderEpochRequest", "OffsetForLeaderEpochResponse"),
    32: ("admin", "DescribeConfigsRequest", "DescribeConfigsResponse"),
    8: ("commit", "OffsetCommitRequest", "OffsetCommitResponse"),
    9: ("commit", "OffsetFetchRequest", "OffsetFetchResponse"),
    10: ("find_coordinator", "FindCoordinatorRequest", "FindCoordinatorResponse"),
    11: ("group", "JoinGroupRequest", "JoinGroupResponse"),
    12: ("group", "HeartbeatRequest", "HeartbeatResponse"),
    13: ("group", "LeaveGroupRequest", "LeaveGroupResponse"),
    14: ("group", "SyncGroupRequest", "SyncGroupResponse"),
    15: ("admin", "DescribeGroupsRequest", "DescribeGroupsResponse"),
    16: ("admin", "ListGroupsRequest", "ListGroupsResponse"),
    42: ("admin", "DeleteGroupsRequest", "DeleteGroupsResponse"),
    29: ("admin", "DescribeAclsRequest", "DescribeAclsResponse"),
    30: ("admin", "CreateAclsRequest", "CreateAclsResponse"),
    31: ("admin", "DeleteAclsRequest", "DeleteAclsResponse"),
    17: ("sasl_handshake", "SaslHandshakeRequest", "SaslHandshakeResponse"),
    36: ("sasl_authenticate", "SaslAuthenticateRequest", "SaslAuthenticateResponse"),
    37: ("admin", "CreatePartitionsRequest", "CreatePartitionsResponse"),
    33: ("admin", "AlterConfigsRequest", "AlterConfigsResponse"),
    21: ("admin", "DeleteRecordsRequest", "DeleteRecordsResponse"),
    35: ("admin", "DescribeLogDirsRequest", "DescribeLogDirsResponse"),
    43: ("admin", "ElectLeadersRequest", "ElectLeadersResponse"),
    24: ("add_partitions_to_txn", "AddPartitionsToTxnRequest", "AddPartitionsToTxnResponse"),
    25: ("add_offsets_to_txn", "AddOffsetsToTxnRequest", "AddOffsetsToTxnResponse"),
    26: ("end_txn", "EndTxnRequest", "EndTxnResponse"),
    28: ("txn_offset_commit", "TxnOffsetCommitRequest", "TxnOffsetCommitResponse"),
}
_NEW_MODULES = {
    0: "kafka.protocol.producer",
    1: "kafka.protocol.consumer",
    2: "kafka.protocol.consumer",
    3: "kafka.protocol.metadata",
    18: "kafka.protocol.metadata",
    19: "kafka.protocol.admin",
    20: "kafka.protocol.admin",
    22: "kafka.protocol.producer",
    23: "kafka.protocol.consumer",
    32: "kafka.protocol.admin",
    8: "kafka.protocol.consumer",
    9: "kafka.protocol.consumer",
    10: "kafka.protocol.metadata",
    11: "kafka.protocol.consumer",
    12: "kafka.protocol.consumer",
    13: "kafka.protocol.consumer",
    14: "kafka.protocol.consumer",
    15: "kafka.protocol.admin",
    16: "kafka.protocol.admin",
    42: "kafka.protocol.admin",
    29: "kafka.protocol.admin",
    30: "kafka.protocol.admin",
    31: "kafka.protocol.admin",
    17: "kafka.protocol.sasl",
    36: "kafka.protocol.sasl",
    37: "kafka.protocol.admin",
    33: "kafka.protocol.admin",
    44: "kafka.protocol.admin",
    21: "kafka.protocol.admin",
    35: "kafka.protocol.admin",
    43: "kafka.protocol.admin",
    24: "kafka.protocol.producer",
    25: "kafka.protocol.producer",
    26: "kafka.protocol.producer",
    28: "kafka.protocol.producer",
}
# The controller APIs: kafka-python (a client) has no encoder for them, so their goldens are the
# hand-checked hex dumps below, which must cover every request and response structure.
_NO_KAFKA_PYTHON = {
    LEADER_AND_ISR.key,
    STOP_REPLICA.key,
    UPDATE_METADATA.key,
    CONTROLLED_SHUTDOWN.key,
    WRITE_TXN_MARKERS.key,  # kafka-python's JSON has v1+ only
}


# kafka-python's hand-written CreatePartitionsRequest nests count and assignment in a
# "new_partitions" struct (same bytes, other shape): its JSON-driven class is the reference there.
_OLD_CLASS_OTHER_SHAPE = {37, 44}  # 44 IncrementalAlterConfigs: no hand-written class at all

# kafka-python's ListGroupsRequest_v2 says API_VERSION = 1 (its schema is v0's, which is right).
# Its AlterConfigsResponse list holds AlterConfigsRequest_v1 where the v1 response belongs.
_OLD_CLASS_MISNUMBERED = {(16, "request", 2), (33, "response", 1)}

# kafka-python's DescribeLogDirsRequest_v0 declares ``partitions`` as one int32, not an array of
# them (Kafka's v0 and v1 are the same bytes: its JSON class checks v1, where it is right).
_OLD_CLASS_WRONG = {(35, "request", 0)}


def _old_class(api: Api, kind: str, version: int) -> Any:
    """kafka-python's per-version Struct class (``kafka.protocol.old`` in 3.x, top level in 2.x)."""
    if api.key not in _OLD_MODULES:
        return None
    module_name, req, resp = _OLD_MODULES[api.key]
    for package in ("kafka.protocol.old", "kafka.protocol"):
        try:
            module = importlib.import_module(f"{package}.{module_name}")
        except ImportError:
            continue
        classes = getattr(module, req if kind == "request" else resp, None)
        if isinstance(classes, list):
            return classes[version] if version < len(classes) else None
    return None


def _new_class(api: Api, kind: str, version: int) -> Any:
    """kafka-python 3.x's JSON-driven class, when its JSON's validVersions include ``version``."""
    if api.key not in _NEW_MODULES:
        return None
    try:
        module = importlib.import_module(_NEW_MODULES[api.key])
    except ImportError:
        return None
    cls = getattr(module, f"{api.name}{kind.capitalize()}", None)
    if cls is None or not hasattr(cls, "_json"):
        return None
    low, high = (int(x) for x in cls._json["validVersions"].split("-"))
    flexible = cls._json.get("flexibleVersions", "none")
    theirs_flexible = flexible != "none" and version >= int(flexible.rstrip("+"))
    # a flexible version is compared only where ours is flexible too (CreateTopics v5)
    if not low <= version <= high or theirs_flexible != api.is_flexible(version):
        return None
    return cls


# --- seeded random messages from our schemas ---------------------------------------------------

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_WORDS = ["", "t", "topic-1", "größe", "日本語", "x" * 40, "__consumer_offsets"]


def sample(struct: Struct, version: int, rng: random.Random) -> dict[str, Any]:
    return {f.name: _sample(f.type, version, rng) for f in struct.fields_at(version)}


def _sample(t: Primitive | Array | Struct, version: int, rng: random.Random) -> Any:
    if isinstance(t, Struct):
        return sample(t, version, rng)
    if isinstance(t, Array):
        if t.nullable_since is not None and version >= t.nullable_since and rng.random() < 0.25:
            return None
        return [_sample(t.of, version, rng) for _ in range(rng.choice((0, 1, 1, 2, 3)))]
    name = t.name
    if name in _INT_BITS:
        bits = _INT_BITS[name]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return rng.choice((lo, hi, 0, -1, 1, rng.randint(lo, hi)))
    if name == "bool":
        return rng.random() < 0.5
    if name in ("nullable_string", "nullable_bytes", "records") and rng.random() < 0.25:
        return None
    if name in ("string", "nullable_string"):
        return rng.choice(_WORDS)
    return rng.randbytes(rng.choice((0, 1, 7, 61)))


def expected(struct: Struct, version: int, value: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for f in struct.fields:
        if not f.present_in(version):
            out[f.name] = f.default_value()
        elif isinstance(f.type, Struct):
            out[f.name] = expected(f.type, version, value[f.name])
        elif isinstance(f.type, Array) and isinstance(f.type.of, Struct) and value[f.name] is not None:
            out[f.name] = [expected(f.type.of, version, x) for x in value[f.name]]
        else:
            out[f.name] = value[f.name]
    return out


def plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return bytes(v) if isinstance(v, memoryview) else v


def encode(struct: Struct, version: int, value: dict[str, Any], flexible: bool = False) -> bytes:
    w = Writer()
    struct.encode(w, version, value, flexible)
    return w.getvalue()


def decode(struct: Struct, version: int, data: bytes, flexible: bool = False) -> dict[str, Any]:
    r = Reader(data)
    out = struct.decode(r, version, flexible)
    assert r.remaining() == 0
    return out


# --- conversion to / from kafka-python's value shapes ------------------------------------------


def to_old(t: Primitive | Array | Struct, old_type: Any, v: Any, version: int) -> Any:
    """Our value as the nested tuples/lists kafka-python's old Schema types take and return."""
    if isinstance(t, Struct):
        fields = t.fields_at(version)
        if not hasattr(old_type, "names"):  # old classes flatten a one-field struct, e.g. Metadata topics
            assert len(fields) == 1
            return to_old(fields[0].type, old_type, v[fields[0].name], version)
        assert len(fields) == len(old_type.fields), ([f.name for f in fields], old_type.names)
        return tuple(to_old(f.type, ot, v[f.name], version) for f, ot in zip(fields, old_type.fields))
    if isinstance(t, Array):
        return None if v is None else [to_old(t.of, old_type.array_of, x, version) for x in v]
    if getattr(old_type, "__name__", "") == "BitField":
        return to_bits(v)
    return bytes(v) if isinstance(v, memoryview) else v


# kafka-python turns Metadata v8's authorized-operations int32s into a set of bit numbers
# (None for the "not requested" value -2**31).
def to_bits(v: int) -> set[int] | None:
    bits = {i for i in range(32) if (v & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def from_bits(bits: set[int] | None) -> int:
    v = sum(1 << b for b in ({31} if bits is None else bits))
    return v - (1 << 32) if v >= 1 << 31 else v


def _is_bitfield(kf: Any) -> bool:
    return getattr(kf, "type_str", None) == "bitfield"


def to_new(struct: Struct, kp_struct: Any, version: int, v: dict[str, Any]) -> dict[str, Any]:
    """Our value as keyword arguments for a kafka-python ApiMessage / DataContainer."""
    fields = struct.fields_at(version)
    kp_fields = kp_struct.untagged_fields(version)
    assert len(fields) == len(kp_fields), ([f.name for f in fields], [k.name for k in kp_fields])
    out = {}
    for f, kf in zip(fields, kp_fields):
        x = v[f.name]
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            elem = f.type.of
            x = None if x is None else [kf.data_class(**to_new(elem, kf, version, e)) for e in x]
        elif isinstance(f.type, Array):
            x = None if x is None else list(x)
        elif _is_bitfield(kf):
            x = to_bits(x)
        else:
            assert isinstance(f.type, Primitive), "no nested single structs in our 2.3 schemas"
        out[kf.name] = x
    return out


def from_new(struct: Struct, kp_struct: Any, version: int, obj: Any) -> dict[str, Any]:
    """A decoded kafka-python object as our message dict (absent fields at their default)."""
    out = {f.name: f.default_value() for f in struct.fields}
    for f, kf in zip(struct.fields_at(version), kp_struct.untagged_fields(version)):
        x = getattr(obj, kf.name)
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct) and x is not None:
            x = [from_new(f.type.of, kf, version, e) for e in x]
        elif isinstance(f.type, Array) and x is not None:
            x = list(x)
        elif _is_bitfield(kf):
            x = from_bits(x)
        out[f.name] = bytes(x) if isinstance(x, memoryview) else x
    return out


# --- golden comparisons --------------------------------------------------------------------------

_SAMPLES = 24
CASES = [
    pytest.param(api, version, kind, id=f"{api.name}-v{version}-{kind}")
    for api in ALL_APIS
    for version in range(api.min_version, api.max_version + 1)
    for kind in ("request", "response")
]


def _struct(api: Api, kind: str) -> Struct:
    return api.request if kind == "request" else api.response


def _samples(api: Api, version: int, kind: str, seed: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = [sample(_struct(api, kind), version, rng) for _ in range(_SAMPLES)]
    if api is API_VERSIONS and kind == "response" and version > 0:
        # clients read any ApiVersions body with a non-zero error as v0 (see the test below)
        for value in out:
            value["error_code"] = 0
    return out


def test_every_api_version_has_a_kafka_python_reference() -> None:
    """Both encoders exist for the versions we expect, so the golden tests below are not vacuous."""
    missing = [
        (api.name, v, kind)
        for api in ALL_APIS
        if api.key not in _NO_KAFKA_PYTHON
        for v in range(api.min_version, api.max_version + 1)
        for kind in ("request", "response")
        # the hand-written class, else (a newer API, or another shape) the JSON-driven one
        if (_old_class(api, kind, v) if api.key not in _OLD_CLASS_OTHER_SHAPE else None) is None
        and _new_class(api, kind, v) is None
    ]
    assert missing == []
    assert _new_class(PRODUCE, "request", 3) is not None
    assert _new_class(FETCH, "response", 11) is not None
    assert _new_class(METADATA, "request", 0) is not None
    assert _new_class(OFFSET_FOR_LEADER_EPOCH, "request", 3) is not None
    assert all(_old_class(API_BY_KEY[key], "request", 1) is None for key in _NO_KAFKA_PYTHON)


@pytest.mark.parametrize(("api", "version", "kind"), CASES)
def test_bytes_match_kafka_python_old_classes(api: Api, version: int, kind: str) -> None:
    old_cls = _old_class(api, kind, version)
    if old_cls is None:
        pytest.skip("kafka-python has no hand-written class for this version")
    if (api.key, kind, version) in _OLD_CLASS_MISNUMBERED:
        pytest.skip("kafka-python's class for this version declares another version number")
    if (api.key, kind, version) in _OLD_CLASS_WRONG:
        pytest.skip("kafka-python's class for this version has a wrong field type")
    if api.key in _OLD_CLASS_OTHER_SHAPE:
        pytest.skip("kafka-python's hand-written class has another shape; its JSON-driven class is checked")
    assert api.key == old_cls.API_KEY and version == old_cls.API_VERSION
    struct = _struct(api, kind)
    for value in _samples(api, version, kind, f"{api.key}/{version}/{kind}"):
        as_old = to_old(struct, old_cls.SCHEMA, value, version)
        theirs = old_cls(*as_old).encode()
        ours = encode(struct, version, value)
        assert ours == theirs
        assert plain(decode(struct, version, theirs)) == expected(struct, version, value)
        back = old_cls.decode(ours)
        assert tuple(getattr(back, n) for n in old_cls.SCHEMA.names) == as_old


@pytest.mark.parametrize(("api", "version", "kind"), CASES)
def test_bytes_match_kafka_python_json_classes(api: Api, version: int, kind: str) -> None:
    cls = _new_class(api, kind, version)
    if cls is None:
        pytest.skip("outside kafka-python's JSON validVersions (the old classes cover it)")
    assert api.key == cls.API_KEY
    struct = _struct(api, kind)
    for value in _samples(api, version, kind, f"json/{api.key}/{version}/{kind}"):
        theirs = cls[version](**to_new(struct, cls._struct, version, value)).encode()
        flexible = api.is_flexible(version)
        ours = encode(struct, version, value, flexible)
        assert ours == theirs
        assert plain(decode(struct, version, theirs, flexible)) == expected(struct, version, value)
        assert from_new(struct, cls._struct, version, cls.decode(ours, version=version)) == expected(
            struct, version, value
        )


# Our field names are the snake_case names of Apache Kafka's newest message JSON (which
# kafka-python's JSON classes carry), except Produce, where we keep Kafka 2.3's names.
_NAME_EXCEPTIONS = {
    (0, "request", "topics"): "topic_data",
    (0, "request", "partitions"): "partition_data",
    (0, "request", "partition_index"): "index",
    (0, "response", "partitions"): "partition_responses",
    (0, "response", "partition_index"): "index",
    # kafka-python's own patch of its Metadata JSON (MetadataResponse.json_patch)
    (3, "response", "topic_authorized_operations"): "authorized_operations",
    (3, "response", "cluster_authorized_operations"): "authorized_operations",
    # Kafka 3.7's OffsetCommit JSON (KIP-848) renamed the field; Kafka 2.3's is generation_id
    (8, "request", "generation_id"): "generation_id_or_member_epoch",
    # Kafka 3.6's AddPartitionsToTxn JSON (KIP-890, batched v4) prefixes the v0-3 fields; ours are 2.3's
    (24, "request", "transactional_id"): "v3_and_below_transactional_id",
    (24, "request", "producer_id"): "v3_and_below_producer_id",
    (24, "request", "producer_epoch"): "v3_and_below_producer_epoch",
    (24, "request", "topics"): "v3_and_below_topics",
    (24, "response", "results"): "results_by_topic_v3_and_below",
}


def _names(struct: Struct, kp_struct: Any, version: int, key: tuple[int, str]) -> list[tuple[str, str]]:
    pairs = []
    for f, kf in zip(struct.fields_at(version), kp_struct.untagged_fields(version)):
        pairs.append((_NAME_EXCEPTIONS.get((*key, f.name), f.name), kf.name))
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            pairs.extend(_names(f.type.of, kf, version, key))
    return pairs


@pytest.mark.parametrize(("api", "version", "kind"), CASES)
def test_field_names_follow_kafka_json(api: Api, version: int, kind: str) -> None:
    cls = _new_class(api, kind, version)
    if cls is None:
        pytest.skip("outside kafka-python's JSON validVersions")
    pairs = _names(_struct(api, kind), cls._struct, version, (api.key, kind))
    assert [ours for ours, _ in pairs] == [theirs for _, theirs in pairs]


# --- hand-checked hex, written field by field from the protocol spec ------------------------------


def hexdump(text: str) -> str:
    """Hex digits from a commented dump: ``#`` starts a comment, whitespace is ignored."""
    return "".join("".join(line.split("#", 1)[0].split()) for line in text.splitlines()).lower()


_GOLDEN = [
    pytest.param(
        PRODUCE,
        3,
        "request",
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "records": b"\x01\x02"}]}],
        },
        """
        ffff                # transactional_id null
        ffff                # acks -1
        00007530            # timeout_ms 30000
        00000001 0001 74    # topics[1] name "t"
        00000001 00000000   # partitions[1] partition_index 0
        00000002 0102       # records: 2 bytes
        """,
        id="Produce-v3-request",
    ),
    pytest.param(
        PRODUCE,
        7,
        "response",
        {
            "responses": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 2,
                            "error_code": 0,
                            "base_offset": 10,
                            "log_append_time_ms": -1,
                            "log_start_offset": 0,
                        }
                    ],
                }
            ],
            "throttle_time_ms": 0,
        },
        """
        00000001 0001 74        # responses[1] name "t"
        00000001 00000002 0000  # partitions[1] index 2, error 0
        000000000000000a        # base_offset 10
        ffffffffffffffff        # log_append_time_ms -1
        0000000000000000        # log_start_offset 0
        00000000                # throttle_time_ms
        """,
        id="Produce-v7-response",
    ),
    pytest.param(
        FETCH,
        4,
        "request",
        {
            "replica_id": -1,
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": 0,
            "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1048576}]}
            ],
        },
        """
        ffffffff            # replica_id -1
        000001f4            # max_wait_ms 500
        00000001            # min_bytes 1
        03200000            # max_bytes 50 MiB
        00                  # isolation_level read_uncommitted
        00000001 0001 74    # topics[1] "t"
        00000001 00000000   # partitions[1] partition 0
        0000000000000005    # fetch_offset 5
        00100000            # partition_max_bytes 1 MiB
        """,
        id="Fetch-v4-request",
    ),
    pytest.param(
        FETCH,
        11,
        "request",
        {
            "replica_id": -1,
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 5,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1048576,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [{"topic": "u", "partitions": [3]}],
            "rack_id": "r",
        },
        """
        ffffffff 000001f4 00000001 03200000   # replica_id, max_wait_ms, min_bytes, max_bytes
        01                                    # isolation_level read_committed
        00000000 ffffffff                     # session_id 0, session_epoch -1
        00000001 0001 74                      # topics[1] "t"
        00000001 00000000                     # partitions[1] partition 0
        ffffffff                              # current_leader_epoch -1
        0000000000000005                      # fetch_offset 5
        ffffffffffffffff                      # log_start_offset -1
        00100000                              # partition_max_bytes
        00000001 0001 75 00000001 00000003    # forgotten_topics_data[1] "u" partitions [3]
        0001 72                               # rack_id "r"
        """,
        id="Fetch-v11-request",
    ),
    pytest.param(
        FETCH,
        11,
        "response",
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "high_watermark": 3,
                            "last_stable_offset": 3,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": b"",
                        }
                    ],
                }
            ],
        },
        """
        00000000 0000 00000000   # throttle_time_ms, error_code, session_id
        00000001 0001 74         # responses[1] "t"
        00000001 00000000 0000   # partitions[1] partition_index 0, error_code 0
        0000000000000003         # high_watermark 3
        0000000000000003         # last_stable_offset 3
        0000000000000000         # log_start_offset 0
        ffffffff                 # aborted_transactions null
        ffffffff                 # preferred_read_replica -1
        00000000                 # records: empty
        """,
        id="Fetch-v11-response",
    ),
    pytest.param(
        LIST_OFFSETS,
        0,
        "request",
        {
            "replica_id": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}],
        },
        """
        ffffffff            # replica_id -1
        00000001 0001 74    # topics[1] "t"
        00000001 00000000   # partitions[1] partition_index 0
        ffffffffffffffff    # timestamp -1 (latest)
        00000001            # max_num_offsets 1
        """,
        id="ListOffsets-v0-request",
    ),
    pytest.param(
        LIST_OFFSETS,
        0,
        "response",
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0, "old_style_offsets": [42]}]}]},
        """
        00000001 0001 74            # topics[1] "t"
        00000001 00000000 0000      # partitions[1] partition_index 0, error_code 0
        00000001 000000000000002a   # old_style_offsets [42]
        """,
        id="ListOffsets-v0-response",
    ),
    pytest.param(
        LIST_OFFSETS,
        5,
        "request",
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 1, "current_leader_epoch": 4, "timestamp": -2}]}
            ],
        },
        """
        ffffffff 01         # replica_id -1, isolation_level 1
        00000001 0001 74    # topics[1] "t"
        00000001 00000001   # partitions[1] partition_index 1
        00000004            # current_leader_epoch 4
        fffffffffffffffe    # timestamp -2 (earliest)
        """,
        id="ListOffsets-v5-request",
    ),
    pytest.param(
        METADATA,
        0,
        "request",
        {"topics": [{"name": "a"}]},
        "00000001 0001 61  # topics[1] name 'a'",
        id="Metadata-v0-request",
    ),
    pytest.param(METADATA, 1, "request", {"topics": None}, "ffffffff  # topics null = all", id="Metadata-v1-all"),
    pytest.param(
        METADATA,
        8,
        "request",
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": False,
        },
        """
        00000000   # topics [] = none
        00         # allow_auto_topic_creation false
        01         # include_cluster_authorized_operations true
        00         # include_topic_authorized_operations false
        """,
        id="Metadata-v8-request",
    ),
    pytest.param(
        METADATA,
        1,
        "response",
        {
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "t",
                    "is_internal": False,
                    "partitions": [
                        {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
                    ],
                }
            ],
        },
        """
        00000001                          # brokers[1]
        00000001 0001 68 00002384 ffff    #   node_id 1, host "h", port 9092, rack null
        00000001                          # controller_id 1
        00000001 0000 0001 74 00          # topics[1] error_code 0, name "t", is_internal false
        00000001 0000 00000000 00000001   #   partitions[1] error_code 0, partition_index 0, leader_id 1
        00000001 00000001                 #   replica_nodes [1]
        00000001 00000001                 #   isr_nodes [1]
        """,
        id="Metadata-v1-response",
    ),
    pytest.param(
        CREATE_TOPICS,
        1,
        "request",
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "k", "value": None}],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        },
        """
        00000001 0001 74          # topics[1] name "t"
        00000003 0001             # num_partitions 3, replication_factor 1
        00000000                  # assignments []
        00000001 0001 6b ffff     # configs[1] name "k", value null
        000003e8 00               # timeout_ms 1000, validate_only false
        """,
        id="CreateTopics-v1-request",
    ),
    pytest.param(
        CREATE_TOPICS,
        2,
        "response",
        {"throttle_time_ms": 0, "topics": [{"name": "t", "error_code": 36, "error_message": "exists"}]},
        """
        00000000                 # throttle_time_ms
        00000001 0001 74 0024    # topics[1] "t", error_code 36 TOPIC_ALREADY_EXISTS
        0006 657869737473        # error_message "exists"
        """,
        id="CreateTopics-v2-response",
    ),
    pytest.param(
        DELETE_TOPICS,
        0,
        "request",
        {"topic_names": ["a", "b"], "timeout_ms": 1000},
        """
        00000002 0001 61 0001 62   # topic_names ["a", "b"]
        000003e8                   # timeout_ms 1000
        """,
        id="DeleteTopics-v0-request",
    ),
    pytest.param(
        DELETE_TOPICS,
        3,
        "response",
        {"throttle_time_ms": 5, "responses": [{"name": "a", "error_code": 73}]},
        """
        00000005                     # throttle_time_ms 5
        00000001 0001 61 0049        # responses[1] "a", error_code 73 TOPIC_DELETION_DISABLED
        """,
        id="DeleteTopics-v3-response",
    ),
    pytest.param(
        DESCRIBE_CONFIGS,
        0,
        "request",
        {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]},
        """
        00000001 02 0001 74   # resources[1] type 2 (topic), name "t"
        ffffffff              # configuration_keys null = all
        """,
        id="DescribeConfigs-v0-request",
    ),
    pytest.param(
        DESCRIBE_CONFIGS,
        1,
        "request",
        {
            "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": ["a"]}],
            "include_synonyms": True,
        },
        """
        00000001 04 0001 31   # resources[1] type 4 (broker), name "1"
        00000001 0001 61      # configuration_keys ["a"]
        01                    # include_synonyms true
        """,
        id="DescribeConfigs-v1-request",
    ),
    pytest.param(
        DESCRIBE_CONFIGS,
        1,
        "response",
        {
            "throttle_time_ms": 0,
            "results": [
                {
                    "error_code": 0,
                    "error_message": None,
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [
                        {
                            "name": "k",
                            "value": "v",
                            "read_only": False,
                            "config_source": 1,
                            "is_sensitive": False,
                            "synonyms": [{"name": "k", "value": "v", "source": 1}],
                        }
                    ],
                }
            ],
        },
        """
        00000000                   # throttle_time_ms
        00000001 0000 ffff         # results[1] error_code 0, error_message null
        02 0001 74                 #   resource_type 2, resource_name "t"
        00000001 0001 6b 0001 76   #   configs[1] name "k", value "v"
        00 01 00                   #     read_only false, config_source 1, is_sensitive false
        00000001 0001 6b 0001 76   #     synonyms[1] name "k", value "v"
        01                         #       source 1
        """,
        id="DescribeConfigs-v1-response",
    ),
    # --- controller APIs: kafka-python has no encoder for them --------------------------------
    pytest.param(
        LEADER_AND_ISR,
        0,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [
                {
                    "topic_name": "t",
                    "partition_index": 0,
                    "controller_epoch": 2,
                    "leader": 1,
                    "leader_epoch": 5,
                    "isr": [1, 2],
                    "partition_epoch": 7,
                    "replicas": [1, 2],
                }
            ],
            "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 9092}],
        },
        """
        00000001 00000002          # controller_id 1, controller_epoch 2
        00000001 0001 74           # ungrouped_partition_states[1] topic_name "t"
        00000000 00000002          #   partition_index 0, controller_epoch 2
        00000001 00000005          #   leader 1, leader_epoch 5
        00000002 00000001 00000002 #   isr [1, 2]
        00000007                   #   partition_epoch (zk version) 7
        00000002 00000001 00000002 #   replicas [1, 2]
        00000001                   # live_leaders[1]
        00000001 0001 68 00002384  #   broker_id 1, host_name "h", port 9092
        """,
        id="LeaderAndIsr-v0-request",
    ),
    pytest.param(
        LEADER_AND_ISR,
        1,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [
                {
                    "topic_name": "t",
                    "partition_index": 3,
                    "controller_epoch": 2,
                    "leader": 2,
                    "leader_epoch": 0,
                    "isr": [2],
                    "partition_epoch": 0,
                    "replicas": [2],
                    "is_new": True,
                }
            ],
            "live_leaders": [],
        },
        """
        00000001 00000002          # controller_id 1, controller_epoch 2
        00000001 0001 74           # ungrouped_partition_states[1] topic_name "t"
        00000003 00000002          #   partition_index 3, controller_epoch 2
        00000002 00000000          #   leader 2, leader_epoch 0
        00000001 00000002          #   isr [2]
        00000000                   #   partition_epoch 0
        00000001 00000002          #   replicas [2]
        01                         #   is_new true
        00000000                   # live_leaders []
        """,
        id="LeaderAndIsr-v1-request",
    ),
    pytest.param(
        LEADER_AND_ISR,
        2,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "broker_epoch": 16,
            "topic_states": [
                {
                    "topic_name": "t",
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": 2,
                            "leader": 1,
                            "leader_epoch": 5,
                            "isr": [1],
                            "partition_epoch": 7,
                            "replicas": [1, 2],
                            "is_new": False,
                        }
                    ],
                }
            ],
            "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 9092}],
        },
        """
        00000001 00000002          # controller_id 1, controller_epoch 2
        0000000000000010           # broker_epoch 16
        00000001 0001 74           # topic_states[1] topic_name "t"
        00000001                   #   partition_states[1] (no topic_name from v2)
        00000000 00000002          #     partition_index 0, controller_epoch 2
        00000001 00000005          #     leader 1, leader_epoch 5
        00000001 00000001          #     isr [1]
        00000007                   #     partition_epoch 7
        00000002 00000001 00000002 #     replicas [1, 2]
        00                         #     is_new false
        00000001                   # live_leaders[1]
        00000001 0001 68 00002384  #   broker_id 1, host_name "h", port 9092
        """,
        id="LeaderAndIsr-v2-request",
    ),
    pytest.param(
        LEADER_AND_ISR,
        2,
        "response",
        {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 0, "error_code": 56}]},
        """
        0000                          # error_code 0
        00000001 0001 74 00000000     # partition_errors[1] topic_name "t", partition_index 0
        0038                          #   error_code 56 KAFKA_STORAGE_ERROR
        """,
        id="LeaderAndIsr-v2-response",
    ),
    pytest.param(
        STOP_REPLICA,
        0,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "delete_partitions": True,
            "ungrouped_partitions": [
                {"topic_name": "t", "partition_index": 0},
                {"topic_name": "t", "partition_index": 1},
            ],
        },
        """
        00000001 00000002     # controller_id 1, controller_epoch 2
        01                    # delete_partitions true
        00000002              # ungrouped_partitions[2]
        0001 74 00000000      #   "t" 0
        0001 74 00000001      #   "t" 1
        """,
        id="StopReplica-v0-request",
    ),
    pytest.param(
        STOP_REPLICA,
        1,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "broker_epoch": 16,
            "delete_partitions": False,
            "topics": [{"name": "t", "partition_indexes": [0, 1]}],
        },
        """
        00000001 00000002              # controller_id 1, controller_epoch 2
        0000000000000010               # broker_epoch 16
        00                             # delete_partitions false
        00000001 0001 74               # topics[1] name "t"
        00000002 00000000 00000001     #   partition_indexes [0, 1]
        """,
        id="StopReplica-v1-request",
    ),
    pytest.param(
        STOP_REPLICA,
        1,
        "response",
        {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 1, "error_code": 6}]},
        """
        0000                               # error_code 0
        00000001 0001 74 00000001 0006     # partition_errors[1] "t" 1, error 6 NOT_LEADER_FOR_PARTITION
        """,
        id="StopReplica-v1-response",
    ),
    pytest.param(
        UPDATE_METADATA,
        0,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [
                {
                    "topic_name": "t",
                    "partition_index": 0,
                    "controller_epoch": 2,
                    "leader": 1,
                    "leader_epoch": 5,
                    "isr": [1],
                    "zk_version": 7,
                    "replicas": [1],
                }
            ],
            "live_brokers": [{"id": 1, "v0_host": "h", "v0_port": 9092}],
        },
        """
        00000001 00000002                    # controller_id 1, controller_epoch 2
        00000001 0001 74                     # ungrouped_partition_states[1] topic_name "t"
        00000000 00000002 00000001 00000005  #   partition_index 0, controller_epoch 2, leader 1, leader_epoch 5
        00000001 00000001                    #   isr [1]
        00000007                             #   zk_version 7
        00000001 00000001                    #   replicas [1]
        00000001 00000001 0001 68 00002384   # live_brokers[1] id 1, v0_host "h", v0_port 9092
        """,
        id="UpdateMetadata-v0-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        1,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [],
            "live_brokers": [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "security_protocol": 0}]}],
        },
        """
        00000001 00000002          # controller_id 1, controller_epoch 2
        00000000                   # ungrouped_partition_states []
        00000001 00000001          # live_brokers[1] id 1
        00000001 00002384 0001 68  #   endpoints[1] port 9092, host "h"
        0000                       #     security_protocol 0 PLAINTEXT
        """,
        id="UpdateMetadata-v1-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        2,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [],
            "live_brokers": [
                {"id": 1, "endpoints": [{"port": 9092, "host": "h", "security_protocol": 0}], "rack": None},
                {"id": 2, "endpoints": [], "rack": "r"},
            ],
        },
        """
        00000001 00000002 00000000  # controller_id 1, controller_epoch 2, ungrouped_partition_states []
        00000002                    # live_brokers[2]
        00000001                    #   id 1
        00000001 00002384 0001 68   #   endpoints[1] port 9092, host "h"
        0000                        #     security_protocol 0
        ffff                        #   rack null
        00000002 00000000 0001 72   #   id 2, endpoints [], rack "r"
        """,
        id="UpdateMetadata-v2-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        3,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [],
            "live_brokers": [
                {
                    "id": 1,
                    "endpoints": [{"port": 9093, "host": "h", "listener": "SSL", "security_protocol": 1}],
                    "rack": None,
                }
            ],
        },
        """
        00000001 00000002 00000000  # controller_id 1, controller_epoch 2, ungrouped_partition_states []
        00000001 00000001           # live_brokers[1] id 1
        00000001 00002385 0001 68   #   endpoints[1] port 9093, host "h"
        0003 53534c 0001            #     listener "SSL", security_protocol 1 SSL
        ffff                        #   rack null
        """,
        id="UpdateMetadata-v3-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        4,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [
                {
                    "topic_name": "t",
                    "partition_index": 0,
                    "controller_epoch": 2,
                    "leader": 1,
                    "leader_epoch": 5,
                    "isr": [1],
                    "zk_version": 7,
                    "replicas": [1, 2],
                    "offline_replicas": [2],
                }
            ],
            "live_brokers": [],
        },
        """
        00000001 00000002                    # controller_id 1, controller_epoch 2
        00000001 0001 74                     # ungrouped_partition_states[1] topic_name "t"
        00000000 00000002 00000001 00000005  #   partition_index 0, controller_epoch 2, leader 1, leader_epoch 5
        00000001 00000001                    #   isr [1]
        00000007                             #   zk_version 7
        00000002 00000001 00000002           #   replicas [1, 2]
        00000001 00000002                    #   offline_replicas [2]
        00000000                             # live_brokers []
        """,
        id="UpdateMetadata-v4-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        5,
        "request",
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "broker_epoch": 16,
            "topic_states": [
                {
                    "topic_name": "t",
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": 2,
                            "leader": 1,
                            "leader_epoch": 5,
                            "isr": [1],
                            "zk_version": 7,
                            "replicas": [1],
                            "offline_replicas": [],
                        }
                    ],
                }
            ],
            "live_brokers": [
                {
                    "id": 1,
                    "endpoints": [{"port": 9092, "host": "h", "listener": "L", "security_protocol": 0}],
                    "rack": "r",
                }
            ],
        },
        """
        00000001 00000002                    # controller_id 1, controller_epoch 2
        0000000000000010                     # broker_epoch 16
        00000001 0001 74                     # topic_states[1] topic_name "t"
        00000001                             #   partition_states[1] (no topic_name from v5)
        00000000 00000002 00000001 00000005  #     partition_index 0, controller_epoch 2, leader 1, leader_epoch 5
        00000001 00000001                    #     isr [1]
        00000007                             #     zk_version 7
        00000001 00000001                    #     replicas [1]
        00000000                             #     offline_replicas []
        00000001 00000001                    # live_brokers[1] id 1
        00000001 00002384 0001 68            #   endpoints[1] port 9092, host "h"
        0001 4c 0000                         #     listener "L", security_protocol 0
        0001 72                              #   rack "r"
        """,
        id="UpdateMetadata-v5-request",
    ),
    pytest.param(
        UPDATE_METADATA,
        5,
        "response",
        {"error_code": 11},
        "000b  # error 11 STALE_CONTROLLER_EPOCH",
        id="UpdateMetadata-v5-response",
    ),
    pytest.param(
        CONTROLLED_SHUTDOWN,
        1,
        "request",
        {"broker_id": 3},
        "00000003  # broker_id 3",
        id="ControlledShutdown-v1-request",
    ),
    pytest.param(
        CONTROLLED_SHUTDOWN,
        2,
        "request",
        {"broker_id": 3, "broker_epoch": 42},
        "00000003 000000000000002a  # broker_id 3, broker_epoch 42",
        id="ControlledShutdown-v2-request",
    ),
    pytest.param(
        CONTROLLED_SHUTDOWN,
        2,
        "response",
        {"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 2}]},
        """
        0000                          # error_code 0
        00000001 0001 74 00000002     # remaining_partitions[1] "t" 2
        """,
        id="ControlledShutdown-v2-response",
    ),
    pytest.param(
        OFFSET_FOR_LEADER_EPOCH,
        3,
        "request",
        {
            "replica_id": 2,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 6, "leader_epoch": 4}]}],
        },
        """
        00000002                     # replica_id 2 (a follower)
        00000001 0001 74             # topics[1] topic "t"
        00000001 00000000            #   partitions[1] partition 0
        00000006 00000004            #     current_leader_epoch 6, leader_epoch 4
        """,
        id="OffsetForLeaderEpoch-v3-request",
    ),
    pytest.param(
        OFFSET_FOR_LEADER_EPOCH,
        1,
        "response",
        {
            "topics": [
                {"topic": "t", "partitions": [{"error_code": 0, "partition": 0, "leader_epoch": 3, "end_offset": 100}]}
            ],
        },
        """
        00000001 0001 74             # topics[1] topic "t" (no throttle_time_ms before v2)
        00000001 0000 00000000       #   partitions[1] error_code 0, partition 0
        00000003 0000000000000064    #     leader_epoch 3, end_offset 100
        """,
        id="OffsetForLeaderEpoch-v1-response",
    ),
    # WriteTxnMarkers v0 (Kafka 2.3; kafka-python's JSON starts at v1): inter-broker
    pytest.param(
        WRITE_TXN_MARKERS,
        0,
        "request",
        {
            "markers": [
                {
                    "producer_id": 5,
                    "producer_epoch": 2,
                    "transaction_result": True,
                    "topics": [{"name": "t", "partition_indexes": [0, 3]}],
                    "coordinator_epoch": 7,
                }
            ]
        },
        """
        00000001                     # markers[1]
        0000000000000005 0002 01     #   producer_id 5, producer_epoch 2, transaction_result true (commit)
        00000001 0001 74             #   topics[1] name "t"
        00000002 00000000 00000003   #     partition_indexes [0, 3]
        00000007                     #   coordinator_epoch 7
        """,
        id="WriteTxnMarkers-v0-request",
    ),
    pytest.param(
        WRITE_TXN_MARKERS,
        0,
        "response",
        {
            "markers": [
                {
                    "producer_id": 5,
                    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 52}]}],
                }
            ]
        },
        """
        00000001 0000000000000005    # markers[1] producer_id 5
        00000001 0001 74             #   topics[1] name "t"
        00000001 00000000 0034       #     partitions[1] 0: error 52 TRANSACTION_COORDINATOR_FENCED
        """,
        id="WriteTxnMarkers-v0-response",
    ),
]


@pytest.mark.parametrize(("api", "version", "kind", "value", "golden"), _GOLDEN)
def test_hand_checked_hex(api: Api, version: int, kind: str, value: dict[str, Any], golden: str) -> None:
    struct = _struct(api, kind)
    assert encode(struct, version, value).hex() == hexdump(golden)
    assert plain(decode(struct, version, bytes.fromhex(hexdump(golden)))) == expected(struct, version, value)


def test_controller_apis_have_hand_checked_hex_for_every_request_version() -> None:
    """kafka-python cannot check these: every request version and the response must have a golden."""
    covered = set()
    for param in _GOLDEN:
        api, version, kind = param.values[:3]
        assert isinstance(api, Api)
        covered.add((api.key, version, kind))
    for key in _NO_KAFKA_PYTHON:
        controller_api = API_BY_KEY[key]
        versions = range(controller_api.min_version, controller_api.max_version + 1)
        for v in versions:
            assert (key, v, "request") in covered, (controller_api.name, v)
        assert any((key, v, "response") in covered for v in versions), controller_api.name


def test_hand_checked_frames() -> None:
    raw = frames.encode_request(METADATA, 1, 7, "c", {"topics": None})
    assert raw.hex() == hexdump(
        """
        0000000f    # size 15
        0003 0001   # api_key 3, api_version 1
        00000007    # correlation_id 7
        0001 63     # client_id "c"
        ffffffff    # topics null
        """
    )
    parts = frames.encode_response(7, DELETE_TOPICS, 1, {"responses": [{"name": "a", "error_code": 0}]})
    assert b"".join(p for p in parts if isinstance(p, bytes)).hex() == hexdump(
        """
        00000011              # size 17
        00000007              # correlation_id 7 (response header v0)
        00000000              # throttle_time_ms
        00000001 0001 61 0000 # responses[1] "a", error_code 0
        """
    )


def test_api_versions_error_reply_is_read_as_v0_by_clients() -> None:
    """The fallback rule: a request above our max gets a v0-format body with error 35."""
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
    v0 = encode(API_VERSIONS.response, 0, body)
    assert v0.hex() == hexdump("0023  00000001 0012 0000 0002  # error 35, api_keys[1] (18, 0, 2)")
    for version in (1, 2):
        old_cls = _old_class(API_VERSIONS, "response", version)
        if old_cls is not None:
            got = old_cls.decode(v0)
            assert (got.error_code, [tuple(k) for k in got.api_keys]) == (35, [(18, 0, 2)])
        new_cls = _new_class(API_VERSIONS, "response", version)
        if new_cls is not None:
            got = new_cls.decode(v0, version=version)
            assert got.error_code == 35
            assert [(k.api_key, k.min_version, k.max_version) for k in got.api_keys] == [(18, 0, 2)]
