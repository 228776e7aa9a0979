"""Avro schemas to typed columns, as Spark's own Avro source maps them (no Spark, no registry: the
decoder is the function Spark's Python workers run on each Arrow batch).

Values are written with fastavro and Confluent's header, decoded by ``schemas.decoder`` and
compared with what was written: logical types the columns hold, those read as their underlying
type (Avro's rule for readers), unions of several branches as ``member<i>`` structs, named types
inside unions, and a value no branch takes dead-lettered with its reason.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from headwater.loader import schemas

SID = 7

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "lab",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at_time", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_time_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "custom", "type": {"type": "string", "logicalType": "no-such-logical-type"}},
        {"name": "n", "type": ["int", "long"]},
        {
            "name": "payload",
            "type": [
                "null",
                "long",
                "string",
                {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "double"}]},
                {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]},
            ],
        },
        {"name": "maybe_point", "type": ["null", "Point"]},
        {"name": "ids", "type": {"type": "array", "items": {"type": "string", "logicalType": "uuid"}}},
        {"name": "by_name", "type": {"type": "map", "values": ["null", "string", "Point"]}},
    ],
}


def _plan(schema: dict[str, Any]) -> schemas.TopicSchemas:
    return schemas.plan_versions(
        "events", "events-value", [{"version": 1, "id": SID, "schema": json.dumps(schema), "schemaType": "AVRO"}]
    )


def _encode(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return b"\x00" + SID.to_bytes(4, "big") + buf.getvalue()


def _decode(plan: schemas.TopicSchemas, values: list[bytes | None]) -> list[dict[str, Any]]:
    batch = pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])
    (out,) = list(schemas.decoder(plan)(iter([batch])))
    return out.to_pylist()


def _event(i: int, payload: Any) -> dict[str, Any]:
    return {
        "id": uuid.UUID(int=i + 1),
        "at_time": datetime.time(13, 14, 15, 250_000),
        "at_time_us": datetime.time(1, 2, 3, 456_789),
        "local": datetime.datetime(2026, 11, 27, 10, 0, i),
        "day": datetime.date(2026, 11, 27),
        "custom": f"c{i}",
        "n": 1 << 40,
        "payload": payload,
        "maybe_point": {"x": 0.5} if i % 2 else None,
        "ids": [uuid.UUID(int=7), uuid.UUID(int=8)],
        "by_name": {"a": "s", "b": None, "c": ("lab.Point", {"x": 2.0})},
    }


def test_column_types_follow_spark_avro() -> None:
    plan = _plan(EVENT)
    value = plan.tables[1].value_type
    types = {value.field(i).name: value.field(i).type for i in range(value.num_fields)}
    assert types["id"] == pa.string()
    assert types["at_time"] == pa.int32()  # time-millis: its int, as Spark reads it
    assert types["at_time_us"] == pa.int64()
    assert types["local"] == pa.timestamp("us")  # no zone: TIMESTAMP_NTZ
    assert types["custom"] == pa.string()  # an unknown logical type: its underlying type
    assert types["n"] == pa.int64()  # [int, long] is a long
    assert types["payload"] == pa.struct(
        [
            pa.field("member0", pa.int64()),
            pa.field("member1", pa.string()),
            pa.field("member2", pa.struct([pa.field("x", pa.float64())])),
            pa.field("member3", pa.string()),
        ]
    )
    assert types["maybe_point"] == pa.struct([pa.field("x", pa.float64())])
    assert types["by_name"] == pa.map_(
        pa.string(), pa.struct([pa.field("member0", pa.string()), pa.field("member1", types["maybe_point"])])
    )


def test_values_decode_to_exactly_what_was_written() -> None:
    payloads: list[Any] = [None, 42, "text", {"x": 1.5}, "GREEN"]
    # fastavro writes a union's record branch from a dict, an enum from its symbol: name the
    # branch for the writer where the value alone is ambiguous ("GREEN" could be a string)
    written = [p if i != 4 else ("lab.Color", p) for i, p in enumerate(payloads)]
    rows = _decode(_plan(EVENT), [_encode(EVENT, _event(i, p)) for i, p in enumerate(written)])
    assert [r["reason"] for r in rows] == [None] * 5
    assert [r["_table"] for r in rows] == [1] * 5
    members: list[dict[str, Any] | None] = [
        None,
        {"member0": 42, "member1": None, "member2": None, "member3": None},
        {"member0": None, "member1": "text", "member2": None, "member3": None},
        {"member0": None, "member1": None, "member2": {"x": 1.5}, "member3": None},
        {"member0": None, "member1": None, "member2": None, "member3": "GREEN"},
    ]
    for i, r in enumerate(rows):
        v = r["v1"]
        assert v["id"] == str(uuid.UUID(int=i + 1))
        assert v["at_time"] == ((13 * 60 + 14) * 60 + 15) * 1000 + 250
        assert v["at_time_us"] == ((1 * 60 + 2) * 60 + 3) * 1_000_000 + 456_789
        assert v["local"] == datetime.datetime(2026, 11, 27, 10, 0, i)
        assert v["day"] == datetime.date(2026, 11, 27)
        assert v["custom"] == f"c{i}"
        assert v["n"] == 1 << 40
        assert v["payload"] == members[i]
        assert v["maybe_point"] == ({"x": 0.5} if i % 2 else None)
        assert v["ids"] == [str(uuid.UUID(int=7)), str(uuid.UUID(int=8))]
        assert v["by_name"] == [
            ("a", {"member0": "s", "member1": None}),
            ("b", None),
            ("c", {"member0": None, "member1": {"x": 2.0}}),
        ]


def test_decimal_and_timestamps_keep_their_types() -> None:
    schema = {
        "type": "record",
        "name": "Money",
        "fields": [
            {
                "name": "amount",
                "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}],
            },
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    at = datetime.datetime(2026, 11, 27, 12, 0, 0, 1, tzinfo=datetime.UTC)
    rows = _decode(_plan(schema), [_encode(schema, {"amount": decimal.Decimal("12.34"), "at": at})])
    assert rows[0]["v1"] == {"amount": decimal.Decimal("12.34"), "at": at}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"no header", "magic byte"),
        (b"\x00\x00\x00\x00\x63rest", "schema id 99 is not a version of subject events-value"),
        (b"\x00" + SID.to_bytes(4, "big") + b"\x02", "does not read the value"),
    ],
)
def test_what_does_not_decode_is_dead_lettered_with_its_reason(raw: bytes, reason: str) -> None:
    good = _encode(EVENT, _event(0, 1))
    rows = _decode(_plan(EVENT), [good, raw])
    assert rows[0]["_table"] == 1
    assert rows[1]["_table"] == 0 and rows[1]["v1"] is None
    assert reason in rows[1]["reason"]


def test_a_union_of_two_records_with_one_name_each() -> None:
    schema = {
        "type": "record",
        "name": "Wrap",
        "fields": [
            {
                "name": "shape",
                "type": [
                    {"type": "record", "name": "Square", "fields": [{"name": "side", "type": "int"}]},
                    {"type": "record", "name": "Circle", "fields": [{"name": "r", "type": "int"}]},
                ],
            }
        ],
    }
    rows = _decode(
        _plan(schema),
        [_encode(schema, {"shape": ("Circle", {"r": 3})}), _encode(schema, {"shape": ("Square", {"side": 2})})],
    )
    assert [r["v1"]["shape"] for r in rows] == [
        {"member0": None, "member1": {"r": 3}},
        {"member0": {"side": 2}, "member1": None},
    ]
