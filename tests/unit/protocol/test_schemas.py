"""Schema declarations and property round-trips (hypothesis) for every API x version x direction."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.protocol import frames
from headwater.protocol.apis import (
    ALL_APIS,
    API_BY_KEY,
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
)
from headwater.protocol.errors import DecodeError, ErrorCode
from headwater.protocol.primitives import FileRegion, Reader, Writer
from headwater.protocol.schema import Api, Array, Field, Primitive, Struct

# --- a hypothesis strategy for any Struct at any version -------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False),
    "string": _TEXT,
    "nullable_string": st.none() | _TEXT,
    "bytes": st.binary(max_size=24),
    "nullable_bytes": st.none() | st.binary(max_size=24),
    "records": st.none() | st.binary(max_size=64),
}


@functools.cache
def values(struct: Struct, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts holding exactly the fields of ``struct`` present at ``version``."""
    return st.fixed_dictionaries({f.name: _values_of(f.type, version) for f in struct.fields_at(version)})


def _values_of(t: Primitive | Array | Struct, version: int) -> st.SearchStrategy[Any]:
    if isinstance(t, Primitive):
        return _PRIMITIVES[t.name]
    if isinstance(t, Struct):
        return values(t, version)
    items = st.lists(_values_of(t.of, version), max_size=3)
    if t.nullable_since is not None and version >= t.nullable_since:
        return st.none() | items
    return items


def expected(struct: Struct, version: int, value: dict[str, Any]) -> dict[str, Any]:
    """What decoding ``value`` must give: every schema field, absent ones at their default."""
    return {
        f.name: _expected_of(f.type, version, value[f.name]) if f.present_in(version) else f.default_value()
        for f in struct.fields
    }


def _expected_of(t: Primitive | Array | Struct, version: int, v: Any) -> Any:
    if isinstance(t, Struct):
        return expected(t, version, v)
    if isinstance(t, Array):
        return None if v is None else [_expected_of(t.of, version, x) for x in v]
    return bytes(v) if isinstance(v, memoryview) else v


def plain(v: Any) -> Any:
    """Decoded values with memoryviews turned into bytes, for readable comparisons."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


CASES = [
    pytest.param(api, version, kind, id=f"{api.name}-v{version}-{kind}")
    for api in ALL_APIS
    for version in range(api.min_version, api.max_version + 1)
    for kind in ("request", "response")
]


def _struct(api: Api, kind: str) -> Struct:
    return api.request if kind == "request" else api.response


def _encode(struct: Struct, version: int, value: dict[str, Any]) -> bytes:
    w = Writer()
    struct.encode(w, version, value)
    return w.getvalue()


def _decode(struct: Struct, version: int, data: bytes) -> dict[str, Any]:
    r = Reader(data)
    out = struct.decode(r, version)
    assert r.remaining() == 0, "decoder left bytes unread"
    return out


# --- the advertised snapshot -----------------------------------------------------------------

KAFKA_2_3 = {
    0: (0, 7),
    1: (4, 11),  # 2.3.0: 0-11 (see docs/protocol.md)
    2: (0, 5),
    3: (0, 8),
    4: (0, 2),
    5: (0, 1),
    6: (0, 5),
    7: (1, 2),  # 2.3.0: 0-2; v0 has a non-standard request header
    8: (0, 7),
    9: (0, 5),
    10: (0, 2),
    11: (0, 5),
    12: (0, 3),
    13: (0, 2),
    14: (0, 3),
    15: (0, 3),
    16: (0, 2),
    18: (0, 2),
    19: (0, 5),  # v4-5 from Kafka 2.4: KIP-464 (-1 = broker default), KIP-525 (v5, flexible)
    20: (0, 3),
    21: (0, 1),
    22: (0, 1),
    23: (0, 3),
    24: (0, 1),  # the transaction APIs (KIP-98), as Kafka 2.3.0 advertises them
    25: (0, 1),
    26: (0, 1),
    27: (0, 0),
    28: (0, 2),
    32: (0, 2),
    33: (0, 1),
    35: (0, 1),
    37: (0, 1),
    42: (0, 1),
    43: (0, 1),  # ElectLeaders as in 2.4 (2.3: ElectPreferredLeaders v0, same bytes)
    17: (0, 1),
    29: (0, 1),
    30: (0, 1),
    31: (0, 1),
    36: (0, 1),
    44: (0, 0),
}


def test_registry_advertises_the_kafka_2_3_snapshot() -> None:
    got = {api.key: (api.min_version, api.max_version) for api in ALL_APIS}
    assert got == KAFKA_2_3
    assert [api.key for api in ALL_APIS] == sorted(KAFKA_2_3)
    assert len({api.key for api in ALL_APIS}) == len(ALL_APIS)
    assert all(API_BY_KEY[api.key] is api for api in ALL_APIS)


@pytest.mark.parametrize(
    ("api", "key", "name"),
    [
        (PRODUCE, 0, "Produce"),
        (FETCH, 1, "Fetch"),
        (LIST_OFFSETS, 2, "ListOffsets"),
        (METADATA, 3, "Metadata"),
        (LEADER_AND_ISR, 4, "LeaderAndIsr"),
        (STOP_REPLICA, 5, "StopReplica"),
        (UPDATE_METADATA, 6, "UpdateMetadata"),
        (CONTROLLED_SHUTDOWN, 7, "ControlledShutdown"),
        (OFFSET_FOR_LEADER_EPOCH, 23, "OffsetForLeaderEpoch"),
        (CREATE_TOPICS, 19, "CreateTopics"),
        (DELETE_TOPICS, 20, "DeleteTopics"),
        (DESCRIBE_CONFIGS, 32, "DescribeConfigs"),
    ],
)
def test_module_constants(api: Api, key: int, name: str) -> None:
    assert (api.key, api.name) == (key, name)


def _walk(struct: Struct, path: str = "") -> list[tuple[str, Field]]:
    out = []
    for f in struct.fields:
        out.append((f"{path}{f.name}", f))
        t = f.type.of if isinstance(f.type, Array) else f.type
        if isinstance(t, Struct):
            out.extend(_walk(t, f"{path}{f.name}."))
    return out


@pytest.mark.parametrize("api", ALL_APIS, ids=lambda a: a.name)
def test_declarations_are_well_formed(api: Api) -> None:
    versions = range(api.min_version, api.max_version + 1)
    for struct in (api.request, api.response):
        for path, f in _walk(struct):
            assert re.fullmatch(r"[a-z][a-z0-9_]*", f.name), path
            assert f.until is None or f.since <= f.until, path
            # a field that no advertised version carries is a declaration mistake
            assert any(f.present_in(v) for v in versions), f"{api.name}: {path} exists in no supported version"
            if isinstance(f.type, Array) and f.type.nullable_since is not None:
                assert f.type.nullable_since <= api.max_version, path
        for _, f in [("", Field("_", struct)), *_walk(struct)]:
            t = f.type.of if isinstance(f.type, Array) else f.type
            if isinstance(t, Struct):
                names = [g.name for g in t.fields]
                assert len(names) == len(set(names)), f"duplicate field names in {api.name}: {names}"


# --- property round-trips --------------------------------------------------------------------


@pytest.mark.parametrize(("api", "version", "kind"), CASES)
@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip(api: Api, version: int, kind: str, data: st.DataObject) -> None:
    struct = _struct(api, kind)
    value = data.draw(values(struct, version))
    encoded = _encode(struct, version, value)
    assert plain(_decode(struct, version, encoded)) == expected(struct, version, value)
    # and the decoded message encodes back to the very same bytes
    assert _encode(struct, version, _decode(struct, version, encoded)) == encoded


@pytest.mark.parametrize(("api", "version", "kind"), CASES)
def test_missing_keys_take_defaults(api: Api, version: int, kind: str) -> None:
    struct = _struct(api, kind)
    assert plain(_decode(struct, version, _encode(struct, version, {}))) == struct.default_value()


@pytest.mark.parametrize(
    ("api", "version"),
    [pytest.param(api, v, id=f"{api.name}-v{v}") for api in ALL_APIS for v in (api.min_version, api.max_version)],
)
@settings(max_examples=8, deadline=None, database=None)
@given(data=st.data())
def test_request_frames_roundtrip(api: Api, version: int, data: st.DataObject) -> None:
    value = data.draw(values(api.request, version))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    client_id = data.draw(st.none() | _TEXT)
    raw = frames.encode_request(api, version, correlation_id, client_id, value)
    (frame,) = frames.FrameDecoder(1 << 20).feed(raw)
    header, got_api, body = frames.decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api.key,
        version,
        correlation_id,
        client_id,
    )
    assert got_api is api
    assert plain(body) == expected(api.request, version, value)


@pytest.mark.parametrize(
    ("api", "version"),
    [pytest.param(api, v, id=f"{api.name}-v{v}") for api in ALL_APIS for v in (api.min_version, api.max_version)],
)
@settings(max_examples=8, deadline=None, database=None)
@given(data=st.data())
def test_response_frames_roundtrip(api: Api, version: int, data: st.DataObject) -> None:
    value = data.draw(values(api.response, version))
    parts = frames.encode_response(12345, api, version, value)
    raw = b"".join(p for p in parts if isinstance(p, bytes))
    (frame,) = frames.FrameDecoder(1 << 20).feed(raw)
    correlation_id, body = frames.decode_response(api, version, frame)
    assert correlation_id == 12345
    assert plain(body) == expected(api.response, version, value)


# --- version-specific behaviour --------------------------------------------------------------


def test_metadata_topics_null_only_from_v1() -> None:
    req = METADATA.request
    assert _decode(req, 1, b"\xff\xff\xff\xff")["topics"] is None
    assert _decode(req, 4, b"\xff\xff\xff\xff\x01")["topics"] is None
    with pytest.raises(DecodeError):
        _decode(req, 0, b"\xff\xff\xff\xff")
    with pytest.raises(ValueError):
        _encode(req, 0, {"topics": None})
    # v0: empty array (= all topics); allow_auto_topic_creation defaults to true before v4
    assert _decode(req, 0, b"\x00\x00\x00\x00") == {
        "topics": [],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def test_array_length_other_than_minus_one_is_refused() -> None:
    with pytest.raises(DecodeError):
        _decode(METADATA.request, 1, b"\xff\xff\xff\xfe")


def test_list_offsets_v0_is_the_multi_offset_form() -> None:
    partition = {"partition_index": 1, "timestamp": -1, "max_num_offsets": 5}
    v0 = _encode(LIST_OFFSETS.request, 0, {"topics": [{"name": "t", "partitions": [partition]}]})
    v1 = _encode(LIST_OFFSETS.request, 1, {"topics": [{"name": "t", "partitions": [partition]}]})
    assert len(v0) == len(v1) + 4
    assert _decode(LIST_OFFSETS.request, 0, v0)["topics"][0]["partitions"][0]["max_num_offsets"] == 5
    assert _decode(LIST_OFFSETS.request, 1, v1)["topics"][0]["partitions"][0]["max_num_offsets"] == 1  # default
    resp = {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "old_style_offsets": [7, 3]}]}]}
    got = _decode(LIST_OFFSETS.response, 0, _encode(LIST_OFFSETS.response, 0, resp))["topics"][0]["partitions"][0]
    assert got["old_style_offsets"] == [7, 3]
    assert (got["offset"], got["timestamp"], got["leader_epoch"]) == (-1, -1, -1)


def test_fetch_v4_request_defaults_for_later_fields() -> None:
    body = {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1024,
        "isolation_level": 1,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 9, "partition_max_bytes": 99}]}],
    }
    got = _decode(FETCH.request, 4, _encode(FETCH.request, 4, body))
    assert (got["session_id"], got["session_epoch"], got["forgotten_topics_data"], got["rack_id"]) == (0, -1, [], "")
    part = got["topics"][0]["partitions"][0]
    assert (part["current_leader_epoch"], part["log_start_offset"], part["fetch_offset"]) == (-1, -1, 9)


def test_fetch_versions_below_4_are_unsupported() -> None:
    raw = frames.encode_request(FETCH, 4, 1, "c", {})
    frame = bytearray(raw[4:])
    frame[2:4] = (3).to_bytes(2, "big")  # claim v3
    with pytest.raises(frames.UnsupportedRequest) as info:
        frames.decode_request(memoryview(bytes(frame)))
    assert info.value.code is ErrorCode.UNSUPPORTED_VERSION
    assert info.value.header.api_version == 3


def test_fetch_response_aborted_transactions_nullable() -> None:
    part = {"partition_index": 0, "aborted_transactions": None, "records": None}
    resp = {"responses": [{"topic": "t", "partitions": [part]}]}
    got = _decode(FETCH.response, 4, _encode(FETCH.response, 4, resp))
    assert got["responses"][0]["partitions"][0]["aborted_transactions"] is None
    assert got["responses"][0]["partitions"][0]["records"] is None


def test_records_decode_zero_copy_and_encode_file_regions() -> None:
    batch = b"\x00" * 61
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "records": batch}]}]}
    raw = frames.encode_request(PRODUCE, 3, 1, None, {"acks": 1, "timeout_ms": 1, **body})
    (frame,) = frames.FrameDecoder(1 << 20).feed(raw)
    _, _, got = frames.decode_request(frame)
    records = got["topics"][0]["partitions"][0]["records"]
    assert isinstance(records, memoryview) and records.obj is frame.obj and bytes(records) == batch

    class _File:
        def fileno(self) -> int:
            return 99

    region = FileRegion(_File(), 4096, 1000)
    part = {"partition_index": 0, "high_watermark": 5, "aborted_transactions": None, "records": region}
    parts = frames.encode_response(7, FETCH, 11, {"responses": [{"topic": "t", "partitions": [part]}]})
    assert region in parts
    head = parts[0]
    assert isinstance(head, bytes)
    total = sum(p.size if isinstance(p, FileRegion) else len(p) for p in parts)
    assert int.from_bytes(head[:4], "big") == total - 4
    before = parts[parts.index(region) - 1]
    assert isinstance(before, bytes) and before[-4:] == (1000).to_bytes(4, "big")


def test_out_of_range_values_fail_as_value_error() -> None:
    with pytest.raises(ValueError, match="throttle_time_ms"):
        _encode(METADATA.response, 3, {"throttle_time_ms": 2**31})
    with pytest.raises(ValueError, match="acks"):
        _encode(PRODUCE.request, 3, {"acks": 1 << 15})
    with pytest.raises(ValueError, match="error_code"):
        _encode(DELETE_TOPICS.response, 1, {"responses": [{"name": "t", "error_code": "x"}]})


def test_describe_configs_v0_vs_v1_config_entry() -> None:
    entry = {
        "name": "k",
        "value": None,
        "read_only": True,
        "is_default": True,
        "config_source": 5,
        "is_sensitive": False,
    }
    result = {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t", "configs": [entry]}
    v0 = _decode(DESCRIBE_CONFIGS.response, 0, _encode(DESCRIBE_CONFIGS.response, 0, {"results": [result]}))
    v1 = _decode(DESCRIBE_CONFIGS.response, 1, _encode(DESCRIBE_CONFIGS.response, 1, {"results": [result]}))
    c0, c1 = v0["results"][0]["configs"][0], v1["results"][0]["configs"][0]
    assert (c0["is_default"], c0["config_source"], c0["synonyms"]) == (True, -1, [])
    assert (c1["is_default"], c1["config_source"]) == (False, 5)
    req = _decode(DESCRIBE_CONFIGS.request, 0, b"\x00\x00\x00\x01\x02\x00\x01t\xff\xff\xff\xff")
    assert req["resources"][0]["configuration_keys"] is None


# --- the controller APIs and OffsetForLeaderEpoch ----------------------------------------------


def test_leader_and_isr_partition_states_move_under_topics_in_v2() -> None:
    state = {"topic_name": "t", "partition_index": 1, "leader": 2, "leader_epoch": 3, "isr": [2], "replicas": [2]}
    v1 = _decode(LEADER_AND_ISR.request, 1, _encode(LEADER_AND_ISR.request, 1, {"ungrouped_partition_states": [state]}))
    assert v1["topic_states"] == [] and v1["broker_epoch"] == -1
    (got,) = v1["ungrouped_partition_states"]
    assert (got["topic_name"], got["partition_index"], got["is_new"]) == ("t", 1, False)
    body = {"broker_epoch": 9, "topic_states": [{"topic_name": "t", "partition_states": [state]}]}
    v2 = _decode(LEADER_AND_ISR.request, 2, _encode(LEADER_AND_ISR.request, 2, body))
    assert v2["ungrouped_partition_states"] == [] and v2["broker_epoch"] == 9
    (got,) = v2["topic_states"][0]["partition_states"]
    assert got["topic_name"] == "" and got["leader_epoch"] == 3  # the name is the topic's from v2
    # v1 adds is_new: one byte per partition state
    assert (
        len(_encode(LEADER_AND_ISR.request, 0, {"ungrouped_partition_states": [state]}))
        == len(_encode(LEADER_AND_ISR.request, 1, {"ungrouped_partition_states": [state]})) - 1
    )


def test_update_metadata_v0_brokers_have_one_host_and_port() -> None:
    broker = {"id": 1, "v0_host": "h", "v0_port": 9092, "endpoints": [{"port": 1, "host": "x", "security_protocol": 0}]}
    v0 = _decode(UPDATE_METADATA.request, 0, _encode(UPDATE_METADATA.request, 0, {"live_brokers": [broker]}))
    assert v0["live_brokers"] == [{"id": 1, "v0_host": "h", "v0_port": 9092, "endpoints": [], "rack": None}]
    v1 = _decode(UPDATE_METADATA.request, 1, _encode(UPDATE_METADATA.request, 1, {"live_brokers": [broker]}))
    (got,) = v1["live_brokers"]
    assert (got["v0_host"], got["v0_port"]) == ("", 0)
    assert got["endpoints"] == [{"port": 1, "host": "x", "listener": "", "security_protocol": 0}]


def test_stop_replica_v0_is_ungrouped() -> None:
    body = {"ungrouped_partitions": [{"topic_name": "t", "partition_index": 0}], "topics": [{"name": "u"}]}
    v0 = _decode(STOP_REPLICA.request, 0, _encode(STOP_REPLICA.request, 0, body))
    assert (v0["ungrouped_partitions"], v0["topics"], v0["broker_epoch"]) == (body["ungrouped_partitions"], [], -1)
    v1 = _decode(STOP_REPLICA.request, 1, _encode(STOP_REPLICA.request, 1, body))
    assert (v1["ungrouped_partitions"], v1["topics"]) == ([], [{"name": "u", "partition_indexes": []}])


def test_controlled_shutdown_v0_is_not_offered() -> None:
    raw = frames.encode_request(CONTROLLED_SHUTDOWN, 1, 5, "c", {"broker_id": 1})
    frame = bytearray(raw[4:])
    frame[2:4] = (0).to_bytes(2, "big")  # claim v0
    with pytest.raises(frames.UnsupportedRequest) as info:
        frames.decode_request(memoryview(bytes(frame)))
    assert info.value.code is ErrorCode.UNSUPPORTED_VERSION
    assert (info.value.header.api_key, info.value.header.correlation_id) == (7, 5)


def test_offset_for_leader_epoch_defaults() -> None:
    body = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 4}]}]}
    got = _decode(OFFSET_FOR_LEADER_EPOCH.request, 0, _encode(OFFSET_FOR_LEADER_EPOCH.request, 0, body))
    assert got["replica_id"] == -2  # a "debug" consumer, Kafka's default
    assert got["topics"][0]["partitions"][0]["current_leader_epoch"] == -1
    resp = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "end_offset": 10}]}]}
    back = _decode(OFFSET_FOR_LEADER_EPOCH.response, 0, _encode(OFFSET_FOR_LEADER_EPOCH.response, 0, resp))
    assert back["topics"][0]["partitions"][0]["leader_epoch"] == -1 and back["throttle_time_ms"] == 0
