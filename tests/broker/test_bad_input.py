"""Bad input gets Kafka's error code or a closed connection, a log line, and changes nothing on disk."""

from __future__ import annotations

import os
import struct
import time

from headwater.protocol.apis import API_VERSIONS, CREATE_TOPICS, FETCH, LIST_OFFSETS, METADATA, PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.primitives import Reader
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.broker.wire import Wire
from tests.harness.broker import BrokerProcess


def _create(w: Wire, name: str) -> None:
    resp = w.request(
        CREATE_TOPICS,
        3,
        {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000},
    )
    assert resp["topics"][0]["error_code"] == 0, resp


def _produce(w: Wire, topic: str, records: bytes, version: int = 7) -> dict:
    resp = w.request(
        PRODUCE,
        version,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "records": records}]}],
        },
    )
    return resp["responses"][0]["partitions"][0]


def _latest(w: Wire, topic: str) -> int:
    resp = w.request(
        LIST_OFFSETS, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    )
    return int(resp["topics"][0]["partitions"][0]["offset"])


def _segment_bytes(broker: BrokerProcess, topic: str) -> int:
    d = broker.log_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log"))


def test_api_versions_above_max_gets_v0_error_with_ranges(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    w.send_raw(struct.pack(">ihhih", 10, 18, 9, 77, -1))  # ApiVersions v9, correlation id 77
    frame = w.recv_frame()
    cid, body = struct.unpack_from(">i", frame)[0], frame[4:]
    assert cid == 77
    resp = API_VERSIONS.response.decode(Reader(body), 0)
    assert resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    assert keys[18] == (0, 2) and keys[0] == (0, 7) and keys[1] == (4, 11)


def test_corrupt_crc_and_oversized_records_are_refused_and_nothing_is_written(broker_factory: object) -> None:
    assert callable(broker_factory)
    broker = broker_factory(0, message_max_bytes=10_000)
    w = Wire(broker.bootstrap)
    _create(w, "bad-input")
    good = encode_batch([RecordInput(b"k", b"v", 1000)])
    assert _produce(w, "bad-input", good)["error_code"] == 0
    before = _segment_bytes(broker, "bad-input")

    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert _produce(w, "bad-input", bytes(corrupt))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    big = encode_batch([RecordInput(None, os.urandom(20_000), 1000)])
    assert _produce(w, "bad-input", big)["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    truncated = good[:-3]
    assert _produce(w, "bad-input", truncated)["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert _produce(w, "bad-input", b"\x00" * 70, version=3)["error_code"] == ErrorCode.CORRUPT_MESSAGE
    unknown = w.request(
        PRODUCE,
        7,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topics": [{"name": "nope", "partitions": [{"partition_index": 0, "records": good}]}],
        },
    )
    assert unknown["responses"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    assert _segment_bytes(broker, "bad-input") == before
    assert _latest(w, "bad-input") == 1
    log = broker.tail(20000)
    assert "CRC" in log and "MESSAGE_TOO_LARGE" in log


def test_invalid_topic_name(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    resp = w.request(
        CREATE_TOPICS,
        3,
        {"topics": [{"name": "bad/name", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1000},
    )
    assert resp["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "illegal" in resp["topics"][0]["error_message"]
    meta = w.request(METADATA, 8, {"topics": [{"name": "bad/name"}], "allow_auto_topic_creation": True})
    assert meta["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_malformed_frames_close_only_their_connection(broker: BrokerProcess) -> None:
    bystander = Wire(broker.bootstrap)
    assert bystander.request(API_VERSIONS, 2, {})["error_code"] == 0

    oversized = Wire(broker.bootstrap)
    oversized.send_raw(struct.pack(">i", 200 * 1024 * 1024))  # above socket.request.max.bytes
    assert oversized.is_closed()

    garbage = Wire(broker.bootstrap)
    garbage.send_raw(struct.pack(">i", 10) + b"\x00\x03\x00\x08" + b"\xff" * 6)  # Metadata v8, truncated body
    assert garbage.is_closed()

    unknown_key = Wire(broker.bootstrap)
    unknown_key.send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert unknown_key.is_closed()

    fetch_v0 = Wire(broker.bootstrap)  # below our minimum Fetch version
    fetch_v0.send_raw(struct.pack(">ihhih", 10, 1, 0, 1, -1))
    assert fetch_v0.is_closed()

    assert bystander.request(API_VERSIONS, 2, {})["error_code"] == 0
    assert "closing connection" in broker.tail(20000)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_fetch_on_empty_partition_waits_max_wait_and_broker_stays_idle(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    _create(w, "idle")
    assert broker.proc is not None
    cpu_before = _cpu_seconds(broker.proc.pid)
    started = time.monotonic()
    rounds = 3
    for _ in range(rounds):
        resp = w.request(
            FETCH,
            11,
            {
                "replica_id": -1,
                "max_wait_ms": 1000,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "idle",
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                    }
                ],
                "rack_id": "",
            },
        )
        p = resp["responses"][0]["partitions"][0]
        assert p["error_code"] == 0 and p["high_watermark"] == 0 and not p["records"]
    elapsed = time.monotonic() - started
    cpu = _cpu_seconds(broker.proc.pid) - cpu_before
    assert elapsed >= rounds * 0.95, f"answered after {elapsed:.2f}s, before max_wait_ms"
    # A busy loop would burn a whole core for ~3 s; waiting costs next to nothing.
    assert cpu < 0.25 * elapsed, f"broker used {cpu:.2f}s CPU while waiting {elapsed:.2f}s"

    # A produce wakes the waiting fetch before max_wait.
    import threading

    def produce_later() -> None:
        time.sleep(0.3)
        w2 = Wire(broker.bootstrap)
        _produce(w2, "idle", encode_batch([RecordInput(None, b"wake", 5)]))

    t = threading.Thread(target=produce_later)
    t.start()
    started = time.monotonic()
    resp = w.request(
        FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 10000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {"topic": "idle", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
            ],
            "rack_id": "",
        },
    )
    t.join()
    assert time.monotonic() - started < 5
    assert resp["responses"][0]["partitions"][0]["records"]
