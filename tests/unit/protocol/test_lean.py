"""The lean codec path (headwater.protocol.lean) against the schema interpreter, the source of truth.

For generated Produce and Fetch requests of every version the lean decoders give the interpreter's
dict; for damaged ones they give it too or step aside (None), never a different answer, and never an
answer where the interpreter refuses the input. Produce and Metadata responses encode to the same bytes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.protocol.apis import FETCH, METADATA, PRODUCE
from headwater.protocol.errors import DecodeError
from headwater.protocol.frames import decode_request, decode_request_header, encode_request, encode_response
from headwater.protocol.lean import (
    decode_fetch_request,
    decode_produce_request,
    encode_metadata_response,
    encode_produce_response,
)
from headwater.protocol.primitives import Reader, Writer
from headwater.protocol.schema import Api

PROPS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

I16 = st.integers(-(1 << 15), (1 << 15) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
NAME = st.text(max_size=20)

PRODUCE_REQUESTS = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | NAME,
        "acks": st.sampled_from([-1, 0, 1]),
        "timeout_ms": I32,
        "topics": st.lists(
            st.fixed_dictionaries(
                {
                    "name": NAME,
                    "partitions": st.lists(
                        st.fixed_dictionaries({"partition_index": I32, "records": st.none() | st.binary(max_size=80)}),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    }
)
FETCH_REQUESTS = st.fixed_dictionaries(
    {
        "replica_id": I32,
        "max_wait_ms": I32,
        "min_bytes": I32,
        "max_bytes": I32,
        "isolation_level": st.integers(-128, 127),
        "session_id": I32,
        "session_epoch": I32,
        "topics": st.lists(
            st.fixed_dictionaries(
                {
                    "topic": NAME,
                    "partitions": st.lists(
                        st.fixed_dictionaries(
                            {
                                "partition": I32,
                                "current_leader_epoch": I32,
                                "fetch_offset": I64,
                                "log_start_offset": I64,
                                "partition_max_bytes": I32,
                            }
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
        "forgotten_topics_data": st.lists(
            st.fixed_dictionaries({"topic": NAME, "partitions": st.lists(I32, max_size=4)}), max_size=2
        ),
        "rack_id": NAME,
    }
)


def interpreter(api: Api, version: int, frame: bytes) -> Any:
    """What decode_request would give without the lean path: the body, or 'refused'."""
    try:
        _header, r = decode_request_header(memoryview(frame))
        body = api.request.decode(r, version)
        if r.remaining():
            return "refused"
        return body
    except DecodeError:
        return "refused"


def lean(decoder: Any, version: int, frame: bytes) -> Any:
    _header, r = decode_request_header(memoryview(frame))
    got = decoder(r.buf, r.pos, r.end, version)
    if got is None or got[1] != r.end:
        return None
    return got[0]


def normalise(body: Any) -> Any:
    """Record sets decode as memoryviews; compare their bytes."""
    if isinstance(body, dict):
        return {k: normalise(v) for k, v in body.items()}
    if isinstance(body, list):
        return [normalise(v) for v in body]
    if isinstance(body, memoryview):
        return bytes(body)
    return body


BODY = 10 + len("client")  # where the body starts: the damage goes there, the header stays valid


def frame_of(api: Api, version: int, body: dict[str, Any]) -> bytes:
    return encode_request(api, version, 7, "client", body)[4:]


@PROPS
@given(PRODUCE_REQUESTS, st.integers(0, 7))
def test_produce_requests_decode_as_the_interpreter_does(body: dict[str, Any], version: int) -> None:
    frame = frame_of(PRODUCE, version, body)
    expected = interpreter(PRODUCE, version, frame)
    assert normalise(lean(decode_produce_request, version, frame)) == normalise(expected)
    _, _, decoded = decode_request(memoryview(frame))
    assert normalise(decoded) == normalise(expected)


@PROPS
@given(FETCH_REQUESTS, st.integers(4, 11))
def test_fetch_requests_decode_as_the_interpreter_does(body: dict[str, Any], version: int) -> None:
    frame = frame_of(FETCH, version, body)
    expected = interpreter(FETCH, version, frame)
    assert lean(decode_fetch_request, version, frame) == expected


@PROPS
@given(st.sampled_from(["produce", "fetch"]), PRODUCE_REQUESTS, FETCH_REQUESTS, st.data())
def test_damaged_requests_are_left_to_the_interpreter(
    which: str, produce: dict[str, Any], fetch: dict[str, Any], data: st.DataObject
) -> None:
    api, decoder, body = (
        (PRODUCE, decode_produce_request, produce) if which == "produce" else (FETCH, decode_fetch_request, fetch)
    )
    version = data.draw(st.integers(0, 7) if which == "produce" else st.integers(4, 11))
    frame = bytearray(frame_of(api, version, body))
    if data.draw(st.booleans()):
        del frame[data.draw(st.integers(BODY, len(frame))) :]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            frame[data.draw(st.integers(BODY, len(frame) - 1))] = data.draw(st.integers(0, 255))
    expected = interpreter(api, version, bytes(frame))
    got = lean(decoder, version, bytes(frame))
    if expected == "refused":
        assert got is None  # the interpreter then says what is wrong
    else:
        assert got is None or normalise(got) == normalise(expected)


PRODUCE_RESPONSES = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "name": NAME,
                    "partitions": st.lists(
                        st.fixed_dictionaries(
                            {"partition_index": I32, "error_code": I16, "base_offset": I64},
                            optional={"log_append_time_ms": I64, "log_start_offset": I64},
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    },
    optional={"throttle_time_ms": I32},
)


@PROPS
@given(PRODUCE_RESPONSES, st.integers(0, 7), I32)
def test_produce_responses_encode_as_the_interpreter_does(body: dict[str, Any], version: int, correlation: int) -> None:
    w = Writer()
    w.int32(correlation)
    PRODUCE.response.encode(w, version, body)
    payload = w.getvalue()
    expected = len(payload).to_bytes(4, "big", signed=True) + payload
    assert b"".join(encode_produce_response(correlation, version, body) or []) == expected
    assert b"".join(p for p in encode_response(correlation, PRODUCE, version, body) if isinstance(p, bytes)) == expected


NODES = st.lists(I32, max_size=4)
METADATA_RESPONSES = st.fixed_dictionaries(
    {
        "throttle_time_ms": I32,
        "brokers": st.lists(
            st.fixed_dictionaries({"node_id": I32, "host": NAME, "port": I32, "rack": st.none() | NAME}), max_size=3
        ),
        "cluster_id": st.none() | NAME,
        "controller_id": I32,
        "topics": st.lists(
            st.fixed_dictionaries(
                {
                    "error_code": I16,
                    "name": NAME,
                    "is_internal": st.booleans(),
                    "partitions": st.lists(
                        st.fixed_dictionaries(
                            {
                                "error_code": I16,
                                "partition_index": I32,
                                "leader_id": I32,
                                "leader_epoch": I32,
                                "replica_nodes": NODES,
                                "isr_nodes": NODES,
                                "offline_replicas": NODES,
                            }
                        ),
                        max_size=4,
                    ),
                    "topic_authorized_operations": I32,
                }
            ),
            max_size=3,
        ),
        "cluster_authorized_operations": I32,
    }
)


def _interpreted(api: Api, version: int, correlation: int, body: dict[str, Any]) -> bytes:
    w = Writer()
    w.int32(correlation)
    api.response.encode(w, version, body)
    payload = w.getvalue()
    return len(payload).to_bytes(4, "big", signed=True) + payload


@PROPS
@given(METADATA_RESPONSES, st.integers(0, 8), I32)
def test_metadata_responses_encode_as_the_interpreter_does(
    body: dict[str, Any], version: int, correlation: int
) -> None:
    expected = _interpreted(METADATA, version, correlation, body)
    assert b"".join(encode_metadata_response(correlation, version, body) or []) == expected
    assert (
        b"".join(p for p in encode_response(correlation, METADATA, version, body) if isinstance(p, bytes)) == expected
    )


def test_metadata_fields_left_to_their_defaults_are_the_interpreters() -> None:
    body = {
        "throttle_time_ms": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": 1,
        "topics": [{"error_code": 3, "name": "gone", "is_internal": False, "partitions": []}],
        "cluster_authorized_operations": 0,
    }
    assert encode_metadata_response(1, 8, body) is None  # no topic_authorized_operations: step aside
    parts = encode_response(1, METADATA, 8, body)
    assert b"".join(p for p in parts if isinstance(p, bytes)) == _interpreted(METADATA, 8, 1, body)
    too_long = dict(body, topics=[{**body["topics"][0], "name": "x" * 40_000, "topic_authorized_operations": 0}])
    assert encode_metadata_response(1, 8, too_long) is None


def test_values_that_do_not_fit_are_left_to_the_interpreter() -> None:
    body = {
        "responses": [{"name": "t", "partitions": [{"partition_index": 1 << 40, "error_code": 0, "base_offset": 0}]}]
    }
    assert encode_produce_response(1, 7, body) is None


def test_header_fast_path_matches_field_by_field() -> None:
    for client_id in (None, "", "rdkafka", "ünï"):
        frame = memoryview(encode_request(PRODUCE, 7, 99, client_id, {"acks": 1, "timeout_ms": 5, "topics": []})[4:])
        header, r = decode_request_header(frame)
        slow = Reader(frame)
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            slow.int16(),
            slow.int16(),
            slow.int32(),
            slow.nullable_string(),
        )
        assert r.pos == slow.pos
