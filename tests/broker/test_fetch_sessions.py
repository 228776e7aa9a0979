"""Fetch sessions (KIP-227) on a real broker, through the wire: a full request opens a session,
incremental ones list and get only what changed, epoch errors, closing, and sessionless clients."""

from __future__ import annotations

from typing import Any

from headwater.protocol.apis import CREATE_TOPICS, FETCH, PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.broker.wire import Wire
from tests.harness.broker import BrokerProcess

TOPIC = "sessions"


def _fetch(
    w: Wire,
    session_id: int,
    epoch: int,
    partitions: dict[int, int],
    forgotten: list[int] | None = None,
    max_wait_ms: int = 0,
) -> dict[str, Any]:
    return w.request(
        FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20}
                        for p, off in partitions.items()
                    ],
                }
            ]
            if partitions
            else [],
            "forgotten_topics_data": [{"topic": TOPIC, "partitions": forgotten}] if forgotten else [],
            "rack_id": "",
        },
    )


def _answered(resp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition_index"]: p for t in resp["responses"] for p in t["partitions"]}


def _produce(w: Wire, partition: int, value: bytes) -> None:
    resp = w.request(
        PRODUCE,
        7,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": partition, "records": encode_batch([RecordInput(None, value, 1)])}
                    ],
                }
            ],
        },
    )
    assert resp["responses"][0]["partitions"][0]["error_code"] == 0


def test_fetch_session_lifecycle(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    resp = w.request(
        CREATE_TOPICS,
        3,
        {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1}], "timeout_ms": 10000},
    )
    assert resp["topics"][0]["error_code"] == 0, resp

    # sessionless (librdkafka, kafka-python, aiokafka): every partition, session id 0
    resp = _fetch(w, 0, -1, {0: 0, 1: 0})
    assert resp["error_code"] == 0 and resp["session_id"] == 0 and set(_answered(resp)) == {0, 1}

    # a full request at epoch 0 opens a session and answers every partition
    resp = _fetch(w, 0, 0, {0: 0, 1: 0})
    sid = resp["session_id"]
    assert resp["error_code"] == 0 and sid != 0 and set(_answered(resp)) == {0, 1}

    # nothing changed: an incremental request lists nothing and gets nothing, after max_wait
    resp = _fetch(w, sid, 1, {}, max_wait_ms=200)
    assert resp["error_code"] == 0 and resp["session_id"] == sid and _answered(resp) == {}

    # new records on partition 0 only: the answer carries partition 0 alone, from the kept offset
    _produce(w, 0, b"one")
    resp = _fetch(w, sid, 2, {}, max_wait_ms=5000)
    got = _answered(resp)
    assert set(got) == {0} and got[0]["records"] and got[0]["high_watermark"] == 1

    # a replayed epoch, an unknown session
    assert _fetch(w, sid, 2, {})["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    other = sid + 1 if sid < 0x7FFFFFFF else 1
    assert _fetch(w, other, 1, {})["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # the client moves partition 0 on and forgets partition 1; records on 1 are then not sent
    _produce(w, 1, b"two")
    resp = _fetch(w, sid, 3, {0: 1}, forgotten=[1], max_wait_ms=200)
    assert resp["error_code"] == 0 and _answered(resp) == {}

    # listing partition 1 again: its records come
    resp = _fetch(w, sid, 4, {1: 0}, max_wait_ms=5000)
    got = _answered(resp)
    assert set(got) == {1} and got[1]["records"] and got[1]["high_watermark"] == 1

    # epoch -1 closes the session (the request itself is answered sessionless)
    resp = _fetch(w, sid, -1, {0: 1, 1: 1})
    assert resp["error_code"] == 0 and resp["session_id"] == 0 and set(_answered(resp)) == {0, 1}
    assert _fetch(w, sid, 5, {})["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    w.close()
