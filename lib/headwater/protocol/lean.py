"""A lean codec path for the hottest messages: Produce and Fetch requests, Produce and Metadata
responses (a Metadata answer for every topic of a cluster with 10,000 partitions is 70,000 fields).

The schema interpreter (:mod:`headwater.protocol.schema`) walks field lists and calls a function
per field; for a small Produce request that is most of the ~10 us the broker spends decoding and
encoding. These functions do the same work in straight-line code, for the shapes these messages
take on the wire, and give the exact dict (or bytes) the interpreter would.

The interpreter stays the source of truth. Whatever these functions do not take the ordinary way
-- a null or negative length, a short buffer, bad UTF-8, a value that does not fit its field -- makes
them return None, and the caller runs the interpreter on the same input, so errors and corner cases
are the interpreter's own. ``tests/unit/protocol/test_lean.py`` checks that the two agree on
generated messages of every version and on damaged ones. No I/O here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from headwater.protocol.schema import Message

__all__ = [
    "LEAN_REQUEST_DECODERS",
    "LEAN_RESPONSE_ENCODERS",
    "MetadataTopic",
    "decode_fetch_request",
    "decode_produce_request",
    "encode_metadata_response",
    "encode_produce_response",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_INDEX_LENGTH = struct.Struct(">ii")
_SIZE_CORRELATION = struct.Struct(">ii")
_FETCH_TOP = struct.Struct(">iii")  # replica_id, max_wait_ms, min_bytes
_FETCH_V4 = struct.Struct(">ib")  # max_bytes, isolation_level
_SESSION = struct.Struct(">ii")
_FETCH_PART_V4 = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_FETCH_PART_V5 = struct.Struct(">iqqi")  # + log_start_offset
_FETCH_PART_V9 = struct.Struct(">iiqqi")  # + current_leader_epoch
_PRODUCE_PART_V0 = struct.Struct(">ihq")
_PRODUCE_PART_V2 = struct.Struct(">ihqq")
_PRODUCE_PART_V5 = struct.Struct(">ihqqq")

#: (buffer, start, end, version) -> (message, end position), or None: decode it the schema's way
Decoder = Callable[[memoryview, int, int, int], "tuple[Message, int] | None"]
#: (correlation id, version, body) -> response frame parts (size prefix included), or None
Encoder = Callable[[int, int, Message], "list[bytes] | None"]


def _string(buf: memoryview, p: int, end: int) -> tuple[str, int] | None:
    (n,) = _I16.unpack_from(buf, p)
    p += 2
    if n < 0 or p + n > end:
        return None
    return str(buf[p : p + n], "utf-8"), p + n


def _named_array(buf: memoryview, p: int, end: int) -> tuple[str, int, int] | None:
    """A STRING then an array's int32 count (>= 0): (name, count, position after the count)."""
    got = _string(buf, p, end)
    if got is None:
        return None
    name, p = got
    (count,) = _I32.unpack_from(buf, p)
    return None if count < 0 else (name, count, p + 4)


def decode_produce_request(buf: memoryview, pos: int, end: int, version: int) -> tuple[Message, int] | None:
    """Produce v0-7 request body at ``pos``."""
    try:
        p = pos
        transactional_id: str | None = None
        if version >= 3:
            (n,) = _I16.unpack_from(buf, p)
            p += 2
            if n >= 0:
                if p + n > end:
                    return None
                transactional_id = str(buf[p : p + n], "utf-8")
                p += n
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, p)
        (topic_count,) = _I32.unpack_from(buf, p + 6)
        p += 10
        if topic_count < 0:
            return None
        topics = []
        for _ in range(topic_count):
            head = _named_array(buf, p, end)
            if head is None:
                return None
            name, count, p = head
            partitions = []
            for _ in range(count):
                index, length = _INDEX_LENGTH.unpack_from(buf, p)
                p += 8
                records: memoryview | None = None
                if length >= 0:
                    if p + length > end:
                        return None
                    records = buf[p : p + length]
                    p += length
                partitions.append({"partition_index": index, "records": records})
            topics.append({"name": name, "partitions": partitions})
    except (struct.error, UnicodeDecodeError):
        return None
    if p > end:
        return None
    body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms, "topics": topics}
    return body, p


def decode_fetch_request(buf: memoryview, pos: int, end: int, version: int) -> tuple[Message, int] | None:
    """Fetch v4-11 request body at ``pos`` (the versions we implement)."""
    if not 4 <= version <= 11:
        return None
    try:
        replica_id, max_wait_ms, min_bytes = _FETCH_TOP.unpack_from(buf, pos)
        max_bytes, isolation_level = _FETCH_V4.unpack_from(buf, pos + 12)
        p = pos + 17
        session_id, session_epoch = 0, -1
        if version >= 7:
            session_id, session_epoch = _SESSION.unpack_from(buf, p)
            p += 8
        (topic_count,) = _I32.unpack_from(buf, p)
        p += 4
        if topic_count < 0:
            return None
        part_struct = _FETCH_PART_V9 if version >= 9 else _FETCH_PART_V5 if version >= 5 else _FETCH_PART_V4
        part_size = part_struct.size
        topics = []
        for _ in range(topic_count):
            head = _named_array(buf, p, end)
            if head is None:
                return None
            topic, count, p = head
            if p + count * part_size > end:
                return None
            partitions = []
            for _ in range(count):
                v = part_struct.unpack_from(buf, p)
                p += part_size
                # v9: partition, current_leader_epoch, fetch_offset, log_start_offset, max bytes;
                # v5-8 without the epoch, v4 without the log start offset either (-1 both: the
                # interpreter's defaults)
                if version >= 9:
                    partition, epoch, fetch_offset, log_start, max_bytes_p = v
                elif version >= 5:
                    (partition, fetch_offset, log_start, max_bytes_p), epoch = v, -1
                else:
                    (partition, fetch_offset, max_bytes_p), epoch, log_start = v, -1, -1
                partitions.append(
                    {
                        "partition": partition,
                        "current_leader_epoch": epoch,
                        "fetch_offset": fetch_offset,
                        "log_start_offset": log_start,
                        "partition_max_bytes": max_bytes_p,
                    }
                )
            topics.append({"topic": topic, "partitions": partitions})
        forgotten: list[Message] = []
        if version >= 7:
            (forgotten_count,) = _I32.unpack_from(buf, p)
            p += 4
            if forgotten_count < 0:
                return None
            for _ in range(forgotten_count):
                head = _named_array(buf, p, end)
                if head is None:
                    return None
                topic, count, p = head
                if p + 4 * count > end:
                    return None
                ids = list(struct.unpack_from(f">{count}i", buf, p))
                p += 4 * count
                forgotten.append({"topic": topic, "partitions": ids})
        rack_id = ""
        if version >= 11:
            got = _string(buf, p, end)
            if got is None:
                return None
            rack_id, p = got
    except (struct.error, UnicodeDecodeError):
        return None
    if p > end:
        return None
    body = {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": topics,
        "forgotten_topics_data": forgotten,
        "rack_id": rack_id,
    }
    return body, p


def encode_produce_response(correlation_id: int, version: int, body: Message) -> list[bytes] | None:
    """A Produce v0-7 response frame (size prefix included)."""
    out = bytearray(8)
    try:
        responses: list[Any] = body["responses"]
        out += _I32.pack(len(responses))
        for t in responses:
            name = t["name"].encode("utf-8")
            if len(name) > 0x7FFF:
                return None
            out += _I16.pack(len(name))
            out += name
            partitions = t["partitions"]
            out += _I32.pack(len(partitions))
            for p in partitions:
                if version >= 5:
                    out += _PRODUCE_PART_V5.pack(
                        p["partition_index"],
                        p["error_code"],
                        p["base_offset"],
                        p.get("log_append_time_ms", -1),
                        p.get("log_start_offset", -1),
                    )
                elif version >= 2:
                    out += _PRODUCE_PART_V2.pack(
                        p["partition_index"], p["error_code"], p["base_offset"], p.get("log_append_time_ms", -1)
                    )
                else:
                    out += _PRODUCE_PART_V0.pack(p["partition_index"], p["error_code"], p["base_offset"])
        if version >= 1:
            out += _I32.pack(body.get("throttle_time_ms", 0))
        _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    except (KeyError, TypeError, AttributeError, struct.error, UnicodeEncodeError):
        return None
    return [bytes(out)]


_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_PARTITION_STRUCTS: dict[tuple[int, int, int, int], struct.Struct] = {}


def _partition_struct(version: int, replicas: int, isr: int, offline: int) -> struct.Struct:
    """The packing of one Metadata partition: error_code, partition_index, leader_id, leader_epoch
    (v7+), then replica_nodes, isr_nodes and offline_replicas (v5+), each an array of int32."""
    key = (7 if version >= 7 else 5 if version >= 5 else 0, replicas, isr, offline)
    got = _PARTITION_STRUCTS.get(key)
    if got is None:
        fmt = ">hii" + ("i" if key[0] == 7 else "") + f"i{replicas}ii{isr}i" + (f"i{offline}i" if key[0] >= 5 else "")
        got = _PARTITION_STRUCTS[key] = struct.Struct(fmt)
    return got


def _put_string(out: bytearray, value: object, nullable: bool) -> bool:
    if value is None and nullable:
        out += b"\xff\xff"
        return True
    if not isinstance(value, str):
        return False
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        return False
    out += _I16.pack(len(raw))
    out += raw
    return True


class MetadataTopic(dict[str, Any]):
    """One topic of a Metadata response that its owner never changes once built: the lean encoder
    keeps its encoding per API version in ``encoded`` and reuses it (the broker's handler keeps
    these per topic until its metadata cache changes that topic: handlers/metadata.py). A plain
    dict is encoded afresh each time; the interpreter reads either as the dict it is."""

    __slots__ = ("encoded",)

    def __init__(self, fields: Message) -> None:
        super().__init__(fields)
        self.encoded: dict[int, bytes] = {}


def _metadata_topic(version: int, t: Any) -> bytes | None:
    """One topic of a Metadata v0-8 response (raises on a missing field, as the caller expects)."""
    out = bytearray(_I16.pack(t["error_code"]))
    if not _put_string(out, t["name"], False):
        return None
    if version >= 1:
        out += b"\x01" if t["is_internal"] else b"\x00"
    partitions: list[Any] = t["partitions"]
    out += _I32.pack(len(partitions))
    for p in partitions:
        replicas: list[int] = p["replica_nodes"]
        isr: list[int] = p["isr_nodes"]
        if version >= 5:
            offline: list[int] = p["offline_replicas"]
            packing = _partition_struct(version, len(replicas), len(isr), len(offline))
        else:
            offline = []
            packing = _partition_struct(version, len(replicas), len(isr), 0)
        head: tuple[int, ...] = (p["error_code"], p["partition_index"], p["leader_id"])
        if version >= 7:
            head += (p["leader_epoch"],)
        if version >= 5:
            out += packing.pack(*head, len(replicas), *replicas, len(isr), *isr, len(offline), *offline)
        else:
            out += packing.pack(*head, len(replicas), *replicas, len(isr), *isr)
    if version >= 8:
        out += _I32.pack(t["topic_authorized_operations"])
    return bytes(out)


def encode_metadata_response(correlation_id: int, version: int, body: Message) -> list[bytes] | None:
    """A Metadata v0-8 response frame (size prefix included)."""
    out = bytearray(8)
    try:
        if version >= 3:
            out += _I32.pack(body["throttle_time_ms"])
        brokers: list[Any] = body["brokers"]
        out += _I32.pack(len(brokers))
        for b in brokers:
            out += _I32.pack(b["node_id"])
            if not _put_string(out, b["host"], False):
                return None
            out += _I32.pack(b["port"])
            if version >= 1 and not _put_string(out, b["rack"], True):
                return None
        if version >= 2 and not _put_string(out, body["cluster_id"], True):
            return None
        if version >= 1:
            out += _I32.pack(body["controller_id"])
        topics: list[Any] = body["topics"]
        out += _I32.pack(len(topics))
        for t in topics:
            if type(t) is MetadataTopic:
                block = t.encoded.get(version)
                if block is None:
                    block = _metadata_topic(version, t)
                    if block is None:
                        return None
                    t.encoded[version] = block
            else:
                block = _metadata_topic(version, t)
                if block is None:
                    return None
            out += block
        if version >= 8:
            out += _I32.pack(body["cluster_authorized_operations"])
        _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    except (KeyError, TypeError, AttributeError, struct.error, UnicodeEncodeError):
        return None  # a field left to its default, or a value that does not fit: the interpreter's way
    return [bytes(out)]


LEAN_REQUEST_DECODERS: dict[int, Decoder] = {0: decode_produce_request, 1: decode_fetch_request}
LEAN_RESPONSE_ENCODERS: dict[int, Encoder] = {0: encode_produce_response, 3: encode_metadata_response}
