"""The client against in-process fake brokers (no ZooKeeper, no broker process).

The fakes speak the real wire protocol through headwater.protocol's codec, answer from a shared
in-memory state, and can be told to misbehave: wrong versions, errors, silence, closed sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from headwater.client import (
    EARLIEST,
    LATEST,
    Consumer,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    Producer,
    SyncProducer,
    UnknownTopicError,
)
from headwater.client.cluster import Cluster, parse_bootstrap
from headwater.client.connection import BrokerConnection, parse_address
from headwater.protocol.apis import API_BY_KEY, API_VERSIONS, FETCH, LIST_OFFSETS, METADATA, PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_request, encode_response
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.header import read_header, rewrite_offset_and_epoch
from headwater.protocol.records.record import encode_batch, iter_batches
from headwater.protocol.schema import Message

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 20) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


# -- the fake cluster --------------------------------------------------------------------------------


@dataclass
class State:
    """What every fake broker of one fake cluster shares."""

    topics: dict[str, int] = field(default_factory=lambda: {"t": 1})
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    logs: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    requests: list[tuple[int, str, int, Message]] = field(default_factory=list)  # node, api, version, body
    errors: dict[str, list[ErrorCode]] = field(default_factory=dict)  # api name -> next answers' error
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)  # overrides of what we advertise
    silent: set[str] = field(default_factory=set)  # APIs never answered
    close_on: set[str] = field(default_factory=set)  # APIs that make the broker hang up
    delay: dict[str, float] = field(default_factory=dict)
    fetch_limit: int | None = None  # cut every Fetch answer's records to this many bytes

    def leader(self, topic: str, partition: int) -> int:
        return self.leaders.get((topic, partition), 0)

    def end_offset(self, tp: tuple[str, int]) -> int:
        batches = self.logs.get(tp, [])
        return read_header(batches[-1]).next_offset if batches else 0

    def append(self, tp: tuple[str, int], batch: bytes) -> int:
        base = self.end_offset(tp)
        buf = bytearray(batch)
        rewrite_offset_and_epoch(buf, 0, base, 0)
        self.logs.setdefault(tp, []).append(bytes(buf))
        return base

    def seen(self, api: str) -> list[tuple[int, int, Message]]:
        return [(node, v, body) for node, name, v, body in self.requests if name == api]


class FakeBroker:
    def __init__(self, state: State, node_id: int = 0) -> None:
        self.state = state
        self.node_id = node_id
        self.server: asyncio.Server | None = None
        self.port = 0
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.state.ports[self.node_id] = self.port
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self._conns):
            w.close()
        with contextlib.suppress(Exception):
            await self.server.wait_closed()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads ahead (requests are recorded as they arrive) and answers in order, like a broker."""
        self._conns.add(writer)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        responder = asyncio.create_task(self._respond(queue, writer))
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = memoryview(await reader.readexactly(size))
                header, api, body = decode_request(frame)
                self.state.requests.append((self.node_id, api.name, header.api_version, body))
                if api.name in self.state.close_on:
                    break
                queue.put_nowait((header, api, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            responder.cancel()
            self._conns.discard(writer)
            writer.close()

    async def _respond(self, queue: asyncio.Queue[Any], writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                header, api, body = await queue.get()
                if api.name in self.state.silent:
                    continue
                if api.name in self.state.delay:
                    await asyncio.sleep(self.state.delay.pop(api.name))
                answer = self._answer(api.name, header.api_version, body)
                if answer is None:
                    continue
                parts = encode_response(header.correlation_id, api, header.api_version, answer)
                writer.write(b"".join(p for p in parts if isinstance(p, bytes)))
                await writer.drain()

    def _error(self, api: str) -> ErrorCode:
        queue = self.state.errors.get(api)
        return queue.pop(0) if queue else ErrorCode.NONE

    def _answer(self, api: str, version: int, body: Message) -> Message | None:
        s = self.state
        if api == "ApiVersions":
            keys = []
            for key, a in sorted(API_BY_KEY.items()):
                lo, hi = s.versions.get(key, (a.min_version, a.max_version))
                if hi >= 0:
                    keys.append({"api_key": key, "min_version": lo, "max_version": hi})
            return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}
        if api == "Metadata":
            names = sorted(s.topics) if not body["topics"] else [t["name"] for t in body["topics"]]
            topics: list[Message] = []
            for name in names:
                if name not in s.topics:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []})
                    continue
                parts = []
                for p in range(s.topics[name]):
                    leader = s.leader(name, p)
                    parts.append(
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": leader,
                            "leader_epoch": 0,
                            "replica_nodes": [leader],
                            "isr_nodes": [leader],
                            "offline_replicas": [],
                        }
                    )
                topics.append({"error_code": 0, "name": name, "is_internal": False, "partitions": parts})
            brokers = [{"node_id": n, "host": "127.0.0.1", "port": port, "rack": None} for n, port in s.ports.items()]
            return {"brokers": brokers, "controller_id": 0, "cluster_id": "fake", "topics": topics}
        if api == "Produce":
            error = self._error(api)
            responses = []
            for t in body["topics"]:
                parts = []
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    code, base = error, -1
                    if code is ErrorCode.NONE and s.leader(*tp) != self.node_id:
                        code = ErrorCode.NOT_LEADER_FOR_PARTITION
                    if code is ErrorCode.NONE:
                        base = s.append(tp, bytes(p["records"]))
                    parts.append(
                        {"partition_index": tp[1], "error_code": code, "base_offset": base, "log_append_time_ms": -1}
                    )
                responses.append({"name": t["name"], "partitions": parts})
            return None if body["acks"] == 0 else {"responses": responses}
        if api == "Fetch":
            responses = []
            for t in body["topics"]:
                parts = []
                for p in t["partitions"]:
                    tp = (t["topic"], p["partition"])
                    end = s.end_offset(tp)
                    offset = p["fetch_offset"]
                    code = self._error(api)
                    data = b""
                    if code is ErrorCode.NONE and not 0 <= offset <= end:
                        code = ErrorCode.OFFSET_OUT_OF_RANGE
                    if code is ErrorCode.NONE:
                        data = b"".join(b for b in s.logs.get(tp, []) if read_header(b).next_offset > offset)
                        data = data[: s.fetch_limit]
                    parts.append(
                        {
                            "partition_index": tp[1],
                            "error_code": code,
                            "high_watermark": end,
                            "last_stable_offset": end,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "records": data or None,
                        }
                    )
                responses.append({"topic": t["topic"], "partitions": parts})
            return {"error_code": 0, "session_id": 0, "responses": responses}
        if api == "ListOffsets":
            topics = []
            for t in body["topics"]:
                parts = []
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    offset = 0 if p["timestamp"] == EARLIEST else s.end_offset(tp)
                    parts.append(
                        {
                            "partition_index": tp[1],
                            "error_code": self._error(api),
                            "old_style_offsets": [offset],
                            "timestamp": -1,
                            "offset": offset,
                        }
                    )
                topics.append({"name": t["name"], "partitions": parts})
            return {"topics": topics}
        raise AssertionError(f"the fake does not answer {api}")


async def fake_cluster(state: State, nodes: int = 1) -> list[FakeBroker]:
    return [await FakeBroker(state, n).start() for n in range(nodes)]


def with_fakes(
    test: Callable[[State, list[FakeBroker]], Awaitable[T]], state: State | None = None, nodes: int = 1
) -> T:
    async def go() -> T:
        st = state or State()
        brokers = await fake_cluster(st, nodes)
        try:
            return await test(st, brokers)
        finally:
            for b in brokers:
                await b.stop()

    return run(go())


def records_in(state: State, tp: tuple[str, int]) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for batch in state.logs.get(tp, []):
        for _, records in iter_batches(batch):
            out.extend((r.offset, r.key, r.value) for r in records)
    return out


# -- addresses -----------------------------------------------------------------------------------------


def test_parse_address() -> None:
    assert parse_address("h:1") == ("h", 1)
    assert parse_address(" h ") == ("h", 9092)
    assert parse_address("PLAINTEXT://b1:9093") == ("b1", 9093)
    assert parse_address("[::1]:9092") == ("::1", 9092)
    for bad in ("", "h:x", "h:0", "h:70000", ":9092", "[::1"):
        with pytest.raises(ValueError):
            parse_address(bad)
    assert parse_bootstrap("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["a:1"]) == [("a", 1)]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")


# -- connection ----------------------------------------------------------------------------------------


def test_version_choice_is_min_of_both_maxima() -> None:
    state = State(versions={METADATA.key: (0, 5), FETCH.key: (0, 3), PRODUCE.key: (3, 9)})

    async def go(s: State, b: list[FakeBroker]) -> None:
        conn = BrokerConnection("127.0.0.1", b[0].port)
        await conn.connect()
        try:
            assert conn.version_for(METADATA) == 5
            assert conn.version_for(PRODUCE) == PRODUCE.max_version  # ours is lower
            assert conn.version_for(METADATA, max_version=2) == 2
            with pytest.raises(KafkaError) as no_overlap:
                conn.version_for(FETCH)  # we speak v4+, the broker v0-3
            assert no_overlap.value.code is ErrorCode.UNSUPPORTED_VERSION
            with pytest.raises(KafkaError):
                await conn.request(METADATA, {}, version=7)  # above the broker's maximum
            answer = await conn.request(METADATA, {"topics": None})
            assert answer["cluster_id"] == "fake"
            assert s.seen("Metadata") == [(0, 5, s.seen("Metadata")[0][2])]
            assert s.seen("ApiVersions")[0][1] == 0  # the handshake is v0
        finally:
            await conn.close()

    with_fakes(go, state)


def test_api_the_broker_does_not_offer() -> None:
    state = State(versions={LIST_OFFSETS.key: (-1, -1)})

    async def go(s: State, b: list[FakeBroker]) -> None:
        conn = BrokerConnection("127.0.0.1", b[0].port)
        await conn.connect()
        with pytest.raises(KafkaError, match="does not support ListOffsets"):
            conn.version_for(LIST_OFFSETS)
        await conn.close()

    with_fakes(go, state)


def test_requests_are_pipelined_and_matched_in_order() -> None:
    state = State(delay={"Metadata": 0.3})

    async def go(s: State, b: list[FakeBroker]) -> None:
        conn = BrokerConnection("127.0.0.1", b[0].port)
        await conn.connect()
        try:
            # the first answer is slow: the other requests are written before it arrives
            first = asyncio.ensure_future(conn.request(METADATA, {"topics": [{"name": "t"}]}))
            await asyncio.sleep(0.05)
            rest = [asyncio.ensure_future(conn.request(LIST_OFFSETS, _list_body("t", i))) for i in range(5)]
            await asyncio.sleep(0.1)
            assert len(s.seen("ListOffsets")) == 5 and not first.done()
            assert (await first)["topics"][0]["name"] == "t"
            assert [r["topics"][0]["partitions"][0]["partition_index"] for r in await asyncio.gather(*rest)] == list(
                range(5)
            )
        finally:
            await conn.close()

    with_fakes(go, state)


def test_no_response_expected_and_late_answers_dropped() -> None:
    state = State(delay={"Metadata": 0.5})

    async def go(s: State, b: list[FakeBroker]) -> None:
        conn = BrokerConnection("127.0.0.1", b[0].port, request_timeout=0.1)
        await conn.connect()
        try:
            body = {"acks": 0, "timeout_ms": 1000, "topics": []}
            assert await conn.request(PRODUCE, body, expect_response=False) == {}
            with pytest.raises(KafkaTimeoutError, match="Metadata"):
                await conn.request(METADATA, {"topics": None})
            # the late Metadata answer arrives first and is dropped; this one gets its own
            answer = await conn.request(LIST_OFFSETS, _list_body("t", 0), timeout=5)
            assert answer["topics"][0]["name"] == "t"
            assert conn.connected
        finally:
            await conn.close()

    with_fakes(go, state)


def test_connection_errors() -> None:
    async def refused() -> None:
        conn = BrokerConnection("127.0.0.1", 1, connect_timeout=2)
        await conn.connect()

    with pytest.raises(KafkaConnectionError, match=r"127\.0\.0\.1:1"):
        run(refused())

    async def hang_up(s: State, b: list[FakeBroker]) -> None:
        conn = BrokerConnection("127.0.0.1", b[0].port)
        await conn.connect()
        s.close_on.add("Metadata")
        with pytest.raises(KafkaConnectionError, match="closed the connection"):
            await conn.request(METADATA, {"topics": None})
        assert not conn.connected
        with pytest.raises(KafkaConnectionError):
            await conn.request(METADATA, {"topics": None})
        await conn.close()

    with_fakes(hang_up)


def test_cluster_unknown_topic_and_leaders() -> None:
    state = State(topics={"t": 2}, leaders={("t", 1): 1})

    async def go(s: State, b: list[FakeBroker]) -> None:
        cluster = Cluster(f"127.0.0.1:1,{b[0].bootstrap}", unknown_topic_timeout=0.3)
        try:
            assert await cluster.leader_for("t", 0) == 0
            assert await cluster.leader_for("t", 1) == 1
            assert set(cluster.brokers) == {0, 1}
            with pytest.raises(UnknownTopicError, match="'nope'"):
                await cluster.topic_metadata("nope")
            with pytest.raises(UnknownTopicError, match="partition 5"):
                await cluster.leader_for("t", 5)
            conn0 = await cluster.connection(0)
            assert conn0.port == b[0].port and await cluster.connection(0) is conn0
        finally:
            await cluster.close()

    with_fakes(go, state, nodes=2)


def test_bootstrap_unreachable() -> None:
    async def go() -> None:
        cluster = Cluster("127.0.0.1:1,127.0.0.1:2", connect_timeout=1)
        try:
            await cluster.refresh()
        finally:
            await cluster.close()

    with pytest.raises(KafkaConnectionError, match="any bootstrap broker"):
        run(go())


# -- producer ------------------------------------------------------------------------------------------


def test_linger_batches_records_into_one_request() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, linger_ms=100, compression="gzip") as p:
            futures = [await p.send("t", f"v{i}", key=f"k{i}") for i in range(10)]
            metas = await asyncio.gather(*futures)
        assert [(m.topic, m.partition, m.offset) for m in metas] == [("t", 0, i) for i in range(10)]
        produce = s.seen("Produce")
        assert len(produce) == 1
        version, body = produce[0][1], produce[0][2]
        assert version == PRODUCE.max_version and body["acks"] == 1
        batch = bytes(body["topics"][0]["partitions"][0]["records"])
        assert read_header(batch).codec == Codec.GZIP and read_header(batch).records_count == 10
        assert records_in(s, ("t", 0)) == [(i, f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]

    with_fakes(go)


def test_batch_size_splits_and_keeps_order() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, linger_ms=50, batch_size=300) as p:
            futures = [await p.send("t", b"x" * 40 + str(i).encode()) for i in range(30)]
            await p.flush()
            assert [f.result().offset for f in futures] == list(range(30))
        assert len(s.logs[("t", 0)]) > 3  # several batches, one partition
        assert [v for _, _, v in records_in(s, ("t", 0))] == [b"x" * 40 + str(i).encode() for i in range(30)]

    with_fakes(go)


def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader() -> None:
    state = State(topics={"t": 1})

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, retry_backoff_ms=20) as p:
            assert (await p.send_and_wait("t", b"a")).offset == 0
            s.leaders[("t", 0)] = 1  # the leader moves; the producer still believes in broker 0
            metadata_before = len(s.seen("Metadata"))
            meta = await p.send_and_wait("t", b"b")
            assert meta.offset == 1
        assert len(s.seen("Metadata")) > metadata_before
        assert [n for n, _, _ in s.seen("Produce")] == [0, 0, 1]
        assert [v for _, _, v in records_in(s, ("t", 0))] == [b"a", b"b"]

    with_fakes(go, state, nodes=2)


def test_errors_reach_the_futures() -> None:
    state = State(errors={"Produce": [ErrorCode.RECORD_LIST_TOO_LARGE]})

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, retries=2, retry_backoff_ms=10) as p:
            with pytest.raises(KafkaError) as fatal:
                await p.send_and_wait("t", b"a")
            assert fatal.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
            assert len(s.seen("Produce")) == 1  # not retriable: one attempt
            s.errors["Produce"] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 10
            with pytest.raises(KafkaError) as exhausted:
                await p.send_and_wait("t", b"b")
            assert exhausted.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
            assert len(s.seen("Produce")) == 1 + 3  # first try and two retries
            s.errors["Produce"] = [ErrorCode.NOT_ENOUGH_REPLICAS]
            assert (await p.send_and_wait("t", b"c")).offset == 0  # one retry was enough
            with pytest.raises(UnknownTopicError):
                await p.send("t", b"d", partition=3)
            with pytest.raises(KafkaError) as too_big:
                await p.send("t", b"x" * 2_000_000)
            assert too_big.value.code is ErrorCode.MESSAGE_TOO_LARGE
            with pytest.raises(TypeError):
                await p.send("t", 42)
            with pytest.raises(KafkaError) as unencodable:  # a timestamp that does not fit an int64
                await p.send_and_wait("t", b"e", timestamp_ms=2**64)
            assert unencodable.value.code is ErrorCode.CORRUPT_MESSAGE
            assert (await p.send_and_wait("t", b"f")).offset == 1  # the partition is not stuck

    with_fakes(go, state)


def test_acks_zero_gets_no_offsets() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, acks=0) as p:
            metas = [await p.send_and_wait("t", f"v{i}") for i in range(3)]
        assert [m.offset for m in metas] == [-1, -1, -1]
        assert len(records_in(s, ("t", 0))) == 3

    with_fakes(go)


def test_connection_loss_is_retried() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap, retry_backoff_ms=20) as p:
            await p.send_and_wait("t", b"a")
            s.close_on.add("Produce")
            fut = await p.send("t", b"b")
            await asyncio.sleep(0.2)
            s.close_on.clear()
            assert (await fut).offset == 1

    with_fakes(go)


def test_delivery_timeout() -> None:
    state = State(silent={"Produce"})

    async def go(s: State, b: list[FakeBroker]) -> None:
        p = Producer(b[0].bootstrap, request_timeout_ms=100, delivery_timeout_ms=300, retry_backoff_ms=50)
        with pytest.raises(KafkaTimeoutError):
            await asyncio.wait_for(p.send_and_wait("t", b"a"), 10)
        await p.close(timeout=1)

    with_fakes(go, state)


def test_close_sends_what_lingers() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        p = Producer(b[0].bootstrap, linger_ms=60_000)
        fut = await p.send("t", b"late")
        await p.close()
        assert fut.result().offset == 0
        with pytest.raises(KafkaError, match="closed"):
            await p.send("t", b"after")

    with_fakes(go)


def test_keyed_records_go_to_murmur2_partition() -> None:
    from headwater.client.partitioner import murmur2, to_positive

    state = State(topics={"t": 5})

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Producer(b[0].bootstrap) as p:
            for i in range(20):
                key = f"key{i}".encode()
                meta = await p.send_and_wait("t", b"v", key=key)
                assert meta.partition == to_positive(murmur2(key)) % 5

    with_fakes(go, state)


def test_sync_producer() -> None:
    async def go(s: State, b: list[FakeBroker]) -> None:
        def blocking() -> list[int]:
            with SyncProducer(b[0].bootstrap, linger_ms=5) as p:
                futures = [p.send("t", f"v{i}") for i in range(50)]
                p.flush()
                return [f.result(5).offset for f in futures]

        assert await asyncio.to_thread(blocking) == list(range(50))

    with_fakes(go)


# -- consumer ------------------------------------------------------------------------------------------


def _list_body(topic: str, partition: int) -> Message:
    return {
        "replica_id": -1,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
    }


def _seed(state: State, tp: tuple[str, int], values: list[bytes], **kw: Any) -> None:
    state.append(tp, encode_batch([(None, v, 1000 + i, ()) for i, v in enumerate(values)], **kw))


def test_fetch_skips_records_before_the_offset_and_reports_the_high_watermark() -> None:
    state = State()
    _seed(state, ("t", 0), [b"a", b"b", b"c", b"d", b"e"], compression=Codec.LZ4)

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Consumer(b[0].bootstrap) as c:
            records, hw = await c.fetch("t", 0, 2)
            assert [(r.offset, r.value) for r in records] == [(2, b"c"), (3, b"d"), (4, b"e")]
            assert hw == 5 and records[0].timestamp == 1002 and records[0].topic == "t"
            assert (await c.fetch("t", 0, 5)).records == []
            with pytest.raises(OffsetOutOfRangeError) as oor:
                await c.fetch("t", 0, 6)
            assert (oor.value.topic, oor.value.partition, oor.value.offset) == ("t", 0, 6)
            assert oor.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
            many = await c.fetch_many([("t", 0, 0), ("t", 0, 4)])
            assert len(many) == 1  # one entry per partition: the last request wins
            s.fetch_limit = 30  # less than one batch: say so instead of spinning
            with pytest.raises(KafkaError, match="raise max_bytes"):
                await c.fetch("t", 0, 0)
        _, version, body = s.seen("Fetch")[0]
        assert version == FETCH.max_version and body["session_id"] == 0 and body["session_epoch"] == -1

    with_fakes(go, state)


def test_fetch_retries_stale_leaders() -> None:
    state = State(errors={"Fetch": [ErrorCode.NOT_LEADER_FOR_PARTITION]})
    _seed(state, ("t", 0), [b"a"])

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Consumer(b[0].bootstrap, retry_backoff_ms=10) as c:
            assert [r.value for r in (await c.fetch("t", 0, 0)).records] == [b"a"]
        assert len(s.seen("Fetch")) == 2

    with_fakes(go, state)


def test_offsets_before_uses_v0_and_list_offset_v1_plus() -> None:
    state = State()
    _seed(state, ("t", 0), [b"a", b"b", b"c"])

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Consumer(b[0].bootstrap) as c:
            assert await c.offsets_before("t", 0, LATEST, 1) == [3]
            assert await c.offsets_before("t", 0, EARLIEST, 1) == [0]
            assert (await c.list_offset("t", 0, LATEST)).offset == 3
            assert await c.earliest_offset("t", 0) == 0
            s.errors["ListOffsets"] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 20
            with pytest.raises(UnknownTopicError):
                await Consumer(b[0].bootstrap, retries=1, retry_backoff_ms=5).latest_offset("t", 0)
        versions = [v for _, v, _ in s.seen("ListOffsets")]
        assert versions[:2] == [0, 0] and versions[2] == LIST_OFFSETS.max_version

    with_fakes(go, state)


def test_follow_moves_past_control_batches() -> None:
    state = State(topics={"t": 2})
    _seed(state, ("t", 0), [b"a", b"b"])
    _seed(state, ("t", 0), [b"marker"], control=True)
    _seed(state, ("t", 0), [b"c"])
    _seed(state, ("t", 1), [b"z"])

    async def go(s: State, b: list[FakeBroker]) -> None:
        async with Consumer(b[0].bootstrap) as c:
            sub = c.follow("t", start="earliest", max_wait_ms=10)
            got = await sub.poll()
            assert sorted((r.partition, r.value) for r in got) == [(0, b"a"), (0, b"b"), (0, b"c"), (1, b"z")]
            assert sub.positions == {0: 4, 1: 1}
            assert await sub.poll() == []
            _seed(s, ("t", 1), [b"y"])
            assert [r.value async for r in _take(sub, 1)] == [b"y"]
            latest = c.follow("t", 1, start="latest")
            assert await latest.poll(10) == [] and latest.positions == {1: 2}
            with pytest.raises(UnknownTopicError):
                await c.follow("t", 7).poll()
            with pytest.raises(ValueError):
                c.follow("t", start="middle")

    with_fakes(go, state)


async def _take(sub: Any, n: int) -> Any:
    count = 0
    async for record in sub:
        yield record
        count += 1
        if count == n:
            return


# -- CLI helpers ---------------------------------------------------------------------------------------


def test_cli_bootstrap_before_or_after_the_action() -> None:
    from headwater.cli.main import build_parser

    parser = build_parser()
    a = parser.parse_args(["topics", "--bootstrap-server", "h:1", "list"])
    b = parser.parse_args(["topics", "list", "--bootstrap-server", "h:2"])
    c = parser.parse_args(["topics", "list"])
    assert (a.bootstrap_server, b.bootstrap_server, c.bootstrap_server) == ("h:1", "h:2", None)
    d = parser.parse_args(["consume", "-b", "h:3", "--topic", "t", "--from-beginning", "--max-messages", "2"])
    assert d.bootstrap_server == "h:3" and d.from_beginning and d.max_messages == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["consume", "-b", "h", "--topic", "t", "--from-beginning", "--offset", "3"])


def test_cli_formatting_and_parsing() -> None:
    from headwater.cli.console import _format, _start_of
    from headwater.cli.topics import CliError, describe_error, parse_configs
    from headwater.client import ConsumerRecord

    assert parse_configs(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(CliError):
        parse_configs(["novalue"])
    rec = ConsumerRecord("t", 1, 7, 99, b"k", b"v", (("h", b"1"), ("n", None)))
    flags = dict(print_timestamp=False, print_partition=False, print_offset=False, print_headers=False)
    assert _format(rec, argparse.Namespace(**flags, print_key=False), b"\t") == b"v\n"
    assert _format(rec, argparse.Namespace(**flags, print_key=True), b":") == b"k:v\n"
    every = argparse.Namespace(
        print_timestamp=True, print_partition=True, print_offset=True, print_headers=True, print_key=True
    )
    assert _format(rec, every, b"\t") == b"CreateTime:99\tPartition:1\tOffset:7\th:1,n:null\tk\tv\n"
    bare = ConsumerRecord("t", 0, 0, 0, None, None)
    assert _format(bare, every, b"|") == b"CreateTime:0|Partition:0|Offset:0|NO_HEADERS|null|null\n"

    def start(**kw: Any) -> Any:
        return _start_of(argparse.Namespace(**{"from_beginning": False, "offset": None, **kw}))

    assert (start(), start(from_beginning=True), start(offset="12"), start(offset="Earliest")) == (
        "latest",
        "earliest",
        12,
        "earliest",
    )
    for bad in ("-1", "soon"):
        with pytest.raises(CliError):
            start(offset=bad)
    assert describe_error(UnknownTopicError("x")) == "topic 'x' does not exist"
    assert describe_error(KafkaError(ErrorCode.NOT_CONTROLLER)) == "the broker answered NOT_CONTROLLER (41)"
    assert describe_error(KafkaError(ErrorCode.INVALID_CONFIG, "bad")) == "bad (INVALID_CONFIG)"


def test_topic_name_validation() -> None:
    from headwater.client import validate_topic_name

    for good in ("a", "A.b_c-1", "x" * 249):
        validate_topic_name(good)
    for bad in ("", ".", "..", "a b", "a/b", "ü", "x" * 250):
        with pytest.raises(KafkaError) as e:
            validate_topic_name(bad)
        assert e.value.code is ErrorCode.INVALID_TOPIC_EXCEPTION


def test_api_versions_is_importable_for_the_handshake() -> None:
    assert API_VERSIONS.key == 18
