"""Flexible versions (KIP-482) as CreateTopics v5 uses them: compact strings and arrays, tagged
fields, request header v2 and response header v1, checked against kafka-python's encoder and
decoder (another implementation), and unknown tagged fields skipped."""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from headwater.protocol.apis import ALL_APIS, CREATE_TOPICS
from headwater.protocol.frames import decode_request, decode_response, encode_request, encode_response
from headwater.protocol.schema import Message


def _kp_request(version: int) -> bytes:
    t = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(
        version=version,
        topics=[
            t(
                name="orders",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[],
                configs=[t.CreatableTopicConfig(name="retention.ms", value="1000")],
            )
        ],
        timeout_ms=5000,
        validate_only=True,
    )
    req.with_header(correlation_id=7, client_id="kp")
    return bytes(req.encode(header=True))


def test_a_v5_request_from_kafka_python_decodes() -> None:
    header, api, body = decode_request(memoryview(_kp_request(5)))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (19, 5, 7, "kp")
    assert api is CREATE_TOPICS
    topic = body["topics"][0]
    assert (topic["name"], topic["num_partitions"], topic["replication_factor"]) == ("orders", -1, -1)
    assert topic["configs"] == [{"name": "retention.ms", "value": "1000"}]
    assert (body["timeout_ms"], body["validate_only"]) == (5000, True)
    # v4 is the classic encoding of the same fields
    assert decode_request(memoryview(_kp_request(4)))[2] == body


def _response(configs: list[Message] | None) -> Message:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "orders",
                "error_code": 0,
                "error_message": None,
                "num_partitions": 3,
                "replication_factor": 2,
                "configs": configs,
            }
        ],
    }


def test_a_v5_response_decodes_in_kafka_python_and_round_trips() -> None:
    configs = [
        {"name": "retention.ms", "value": "1000", "read_only": False, "config_source": 1, "is_sensitive": False},
        {"name": "flush.ms", "value": None, "read_only": True, "config_source": 5, "is_sensitive": True},
    ]
    frame = b"".join(p for p in encode_response(9, CREATE_TOPICS, 5, _response(configs)) if isinstance(p, bytes))
    got = CreateTopicsResponse.decode(frame[4:], version=5, header=True).to_dict()
    topic = got["topics"][0]
    assert (topic["name"], topic["num_partitions"], topic["replication_factor"]) == ("orders", 3, 2)
    assert [(c["name"], c["value"], c["config_source"], c["is_sensitive"]) for c in topic["configs"]] == [
        ("retention.ms", "1000", 1, False),
        ("flush.ms", None, 5, True),
    ]
    assert decode_response(CREATE_TOPICS, 5, memoryview(frame[4:])) == (9, _response(configs))
    # null configs (a compact array of length 0) round-trip too
    frame = b"".join(p for p in encode_response(9, CREATE_TOPICS, 5, _response(None)) if isinstance(p, bytes))
    assert decode_response(CREATE_TOPICS, 5, memoryview(frame[4:]))[1]["topics"][0]["configs"] is None


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = bytearray(encode_request(CREATE_TOPICS, 5, 3, "c", {"topics": [], "timeout_ms": 10})[4:])
    # The request header's tagged fields follow client_id: one field, tag 9, three bytes.
    at = 2 + 2 + 4 + 2 + 1
    assert frame[at] == 0
    frame[at : at + 1] = bytes([1, 9, 3]) + b"abc"
    # ...and the body's top-level tagged fields are its last byte: one field, tag 0, one byte.
    frame[-1:] = bytes([1, 0, 1, 0x7F])
    header, _, body = decode_request(memoryview(bytes(frame)))
    assert (header.correlation_id, header.client_id, body["timeout_ms"]) == (3, "c", 10)


def test_only_create_topics_v5_is_flexible() -> None:
    """The snapshot is Kafka 2.3 (no flexible versions) but for CreateTopics v5."""
    assert [api.name for api in ALL_APIS if api.flexible_since is not None] == ["CreateTopics"]
    assert CREATE_TOPICS.is_flexible(5) and not CREATE_TOPICS.is_flexible(4)
