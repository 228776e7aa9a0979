"""``__consumer_offsets`` records in Kafka's byte formats, the group -> partition hash, and the pure
group rules (protocol vote, the record a group persists and the group loaded from it)."""

from __future__ import annotations

import struct

import pytest

from headwater.broker.group import formats
from headwater.broker.group.group import Group, GroupState, Member
from headwater.protocol.errors import DecodeError


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_offset_key_and_value_bytes_are_kafkas() -> None:
    assert formats.offset_key("g", "t", 3) == b"\x00\x01" + _str("g") + _str("t") + b"\x00\x00\x00\x03"
    value = formats.offset_value(42, 7, "md", 1_700_000_000_000)
    assert value == b"\x00\x03" + struct.pack(">qi", 42, 7) + _str("md") + struct.pack(">q", 1_700_000_000_000)
    assert formats.group_key("g") == b"\x00\x02" + _str("g")


def test_older_offset_values_decode() -> None:
    v1 = b"\x00\x01" + struct.pack(">q", 5) + _str("m") + struct.pack(">qq", 10, 20)
    assert formats.decode_offset_value(v1) == {
        "offset": 5,
        "leader_epoch": -1,
        "metadata": "m",
        "commit_timestamp": 10,
        "expire_timestamp": 20,
    }
    v0 = b"\x00\x00" + struct.pack(">q", 6) + _str("") + struct.pack(">q", 11)
    assert formats.decode_offset_value(v0)["offset"] == 6
    assert formats.decode_key(b"\x00\x00" + _str("g") + _str("t") + b"\x00\x00\x00\x01") == formats.OffsetKey(
        "g", "t", 1
    )
    with pytest.raises(DecodeError):
        formats.decode_key(b"\x00\x07" + _str("g"))
    with pytest.raises(DecodeError):
        formats.decode_offset_value(b"\x00\x09")


def test_group_value_v0_decodes_and_v3_round_trips() -> None:
    member_v0 = (
        _str("m1")
        + _str("client")
        + _str("/10.0.0.1")
        + struct.pack(">i", 10000)
        + b"\x00\x00\x00\x01S\x00\x00\x00\x01A"
    )
    v0 = (
        b"\x00\x00"
        + _str("consumer")
        + struct.pack(">i", 4)
        + _str("range")
        + _str("m1")
        + b"\x00\x00\x00\x01"
        + member_v0
    )
    got = formats.decode_group_value(v0)
    assert (got["generation"], got["protocol"], got["leader"]) == (4, "range", "m1")
    assert got["members"][0]["rebalance_timeout"] == -1 and got["members"][0]["assignment"] == b"A"
    loaded = Group.from_record("g", 0, got, now=100.0)
    assert loaded.state is GroupState.STABLE and loaded.members["m1"].rebalance_timeout_ms == 10000
    again = formats.decode_group_value(formats.group_value(loaded.to_record(123)))
    assert again["members"][0] | {"rebalance_timeout": -1} == got["members"][0] | {"group_instance_id": None}
    assert (again["generation"], again["current_state_timestamp"]) == (4, 123)


def test_partition_for_is_kafkas_hash() -> None:
    assert formats.java_string_hash("hello") == 99162322
    assert formats.java_string_hash("日本") == 0x65E5 * 31 + 0x672C
    assert formats.java_string_hash("polygenelubricants") == -(2**31)  # Utils.abs maps it to 0
    assert formats.partition_for("polygenelubricants", 50) == 0
    assert formats.partition_for("hello", 50) == 99162322 % 50


def _member(mid: str, *protocols: str) -> Member:
    return Member(mid, None, "c", "/h", 1000, 1000, [(p, b"") for p in protocols])


def test_protocol_vote_among_what_every_member_supports() -> None:
    g = Group("g", 0)
    for m in (_member("a", "roundrobin", "range"), _member("b", "range", "roundrobin"), _member("c", "range")):
        g.add(m)
    assert g.candidate_protocols() == {"range"}
    assert g.select_protocol() == "range"
    assert g.supports("consumer", [("range", b"")]) is False  # no protocol type recorded yet: set on first join
    g.protocol_type = "consumer"
    assert g.supports("consumer", [("sticky", b"")]) is False and g.supports("consumer", [("range", b"")])
    assert g.remove("a") is not None and g.leader_id == "b"
