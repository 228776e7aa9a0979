"""Typed tables from a real schema registry (Apicurio Registry, ``make registry-deps``).

confluent-kafka's ``AvroSerializer`` (three schema versions: one adds an optional field, one changes
a field's type) and ``JSONSerializer`` write Confluent's wire format into a real broker; the loader
lands each topic's typed table versions, reads back exactly the values sent, puts what does not
decode into the dead-letter table, leaves a topic without a subject binary, and its warehouse-tier
audit counts balance the records sent (dead letters counted as such).
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.loader import job
from headwater.testing import registry as reg
from tests.harness.audit import audit_events, counts_by_window
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

WINDOW_MS = 60_000

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
# v2: a new optional field -> the same table, a nullable column
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
# v3: qty becomes a string -> incompatible -> table version 2
ORDER_V3 = {
    **ORDER_V1,
    "fields": [f if f["name"] != "qty" else {"name": "qty", "type": "string"} for f in ORDER_V2["fields"]],
}
EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "lab",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at_time", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {
            "name": "payload",
            "type": [
                "null",
                "long",
                "string",
                {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "double"}]},
            ],
        },
    ],
}
CLICK = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "n": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "pages": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["user", "n"],
}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[reg.RegistryProcess]:
    why = reg.unavailable()
    if why:
        pytest.skip(why)
    with reg.RegistryProcess(tmp_path_factory.mktemp("registry")) as r:
        yield r


def _headers(i: int, ts: int) -> list[tuple[str, bytes]]:
    return [("origin.dc", b"dc1" if i % 2 else b"dc2"), ("origin.created", str(ts).encode())]


def _plain(v: Any) -> Any:
    """Values as compared: timestamps as naive UTC (Spark writes Parquet timestamps without a zone)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if k != "_version"}
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.UTC).replace(tzinfo=None)
    return v


def _rows(root: Path, table: str) -> list[dict[str, Any]]:
    return sorted(
        ds.dataset(root / table, format="parquet", partitioning="hive").to_table().to_pylist(),
        key=lambda r: (r["partition"], r["offset"]),
    )


def test_typed_tables_schema_versions_dead_letters_and_audit(
    broker_factory: Callable[..., BrokerProcess],
    registry: reg.RegistryProcess,
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="headwater.loader")
    b = broker_factory(0, num_partitions=1, auto_create_topics_enable="true")
    client = SchemaRegistryClient({"url": registry.url})
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    sent: list[tuple[str, int, str]] = []  # (topic, timestamp, dc) of every record, for the audit

    def produce(topic: str, value: bytes | None, i: int) -> None:
        ts = RECENT_MS + i * 1000
        producer.produce(topic, value=value, key=f"k{i}".encode(), timestamp=ts, headers=_headers(i, ts))
        sent.append((topic, ts, "dc1" if i % 2 else "dc2"))

    # Avro: v1, v2 (adds an optional field) and v3 (changes a type; Apicurio Registry has no
    # compatibility rule unless one is configured, so it registers the incompatible version).
    orders: list[dict[str, Any]] = []
    encoded: list[bytes] = []
    ctx = SerializationContext("orders", MessageField.VALUE)
    for version, schema, n in ((1, ORDER_V1, 4), (2, ORDER_V2, 3), (3, ORDER_V3, 3)):
        ser = AvroSerializer(client, json.dumps(schema))
        for _ in range(n):
            i = len(orders)
            order: dict[str, Any] = {
                "id": 1000 + i,
                "item": f"item-{i}",
                "qty": i + 1 if version < 3 else f"{i + 1} boxes",
                "price": decimal.Decimal(f"{i}.{i:02d}"),
                "at": datetime.datetime(2026, 11, 27, 3, i, 0, 123000, tzinfo=datetime.UTC),
                "tags": [f"t{j}" for j in range(i % 3)],
            }
            if version > 1:
                order["note"] = None if i % 2 else f"note {i}"
            orders.append({**order, "_version": version})
            encoded.append(ser(order, ctx))
            produce("orders", encoded[-1], i)
    # What does not decode: no magic byte; a schema id no version of the subject has; a registered
    # schema's id with bytes it does not read.
    v1_id = int.from_bytes(encoded[0][1:5], "big")
    bad = [b"plain text", b"\x00\x00\x00\x7f\xffabc", b"\x00" + v1_id.to_bytes(4, "big") + b"\x02"]
    for value in bad:
        produce("orders", value, len(orders) + len(sent))

    # JSON Schema
    clicks = [
        {"user": f"u{i}", "n": i, "score": i / 4, "ok": i % 2 == 0, "pages": ["/a", f"/p{i}"][: i % 3]}
        for i in range(5)
    ]
    clicks[3].pop("score")  # optional properties may be absent
    jser = JSONSerializer(json.dumps(CLICK), client)
    for i, c in enumerate(clicks):
        produce("clicks", jser(c, SerializationContext("clicks", MessageField.VALUE)), 100 + i)
    # Avro types beyond the simple ones, as Spark's Avro source maps them (tests/loader/test_schemas.py
    # has the cases one by one): a uuid, a time-millis, a local timestamp, a union of several branches.
    eser = AvroSerializer(client, json.dumps(EVENT))
    events = [
        {
            "id": uuid.UUID(int=i + 1),
            "at_time": datetime.time(13, 14, 15, 250_000),
            "local": datetime.datetime(2026, 11, 27, 10, 0, i),
            "payload": [None, 42, "text", {"x": 1.5}][i],
        }
        for i in range(4)
    ]
    for i, e in enumerate(events):
        produce("events", eser(e, SerializationContext("events", MessageField.VALUE)), 300 + i)
    # A topic without a subject: binary columns as today.
    produce("raw", b"\x00just bytes", 200)
    assert producer.flush(60) == 0

    warehouse = tmp_path / "warehouse"
    config = job.parse_config(
        {
            "bootstrap.servers": b.bootstrap,
            "topics": "orders, clicks, events, raw",
            "warehouse.path": str(warehouse),
            "audit.bootstrap.servers": b.bootstrap,
            "audit.window.ms": str(WINDOW_MS),
            "schema.registry.url": registry.url,
        }
    )
    manifest = job._load(spark, config)
    assert manifest is not None
    # the newest-partition line names the directory the rows are in: a table version, not the topic
    newest = {m.split(": ", 2)[2].split("/")[0] for m in caplog.messages if "newest partition loaded" in m}
    assert newest == {"clicks@v1", "events@v1", "orders@v2", "raw"}, caplog.messages
    assert set(manifest["table_partitions"]) == {
        "clicks@v1",
        "events@v1",
        "orders@v1",
        "orders@v2",
        "orders@deadletter",
    }
    assert manifest["tables"] == {
        "clicks": {"clicks@v1": 5},
        "events": {"events@v1": 4},
        "orders": {"orders@v1": 7, "orders@v2": 3, "orders@deadletter": 3},
    }

    # orders@v1: v1 and v2 records, note null for v1's; the values exactly as sent.
    v1 = _rows(warehouse, "orders@v1")
    want = [o for o in orders if o["_version"] < 3]
    assert [_plain(r["value"]) for r in v1] == [_plain({**o, "note": o.get("note")}) for o in want]
    assert [r["key"] for r in v1] == [f"k{i}".encode() for i in range(7)]
    ids = {r["schema_id"] for r in v1}
    assert len(ids) == 2
    v2 = _rows(warehouse, "orders@v2")
    assert [_plain(r["value"]) for r in v2] == [_plain(o) for o in orders[7:]]
    assert all(isinstance(r["value"]["qty"], str) for r in v2)

    dead = _rows(warehouse, "orders@deadletter")
    assert [r["value"] for r in dead] == bad
    assert [r["offset"] for r in dead] == [10, 11, 12]
    assert [r["schema_id"] for r in dead] == [None, 0x7FFF, v1_id]
    assert "magic byte" in dead[0]["reason"]
    assert "not a version of subject orders-value" in dead[1]["reason"]
    assert "does not read the value" in dead[2]["reason"]

    got = _rows(warehouse, "clicks@v1")
    assert [r["value"] for r in got] == [{**c, "score": c.get("score")} for c in clicks]

    got = _rows(warehouse, "events@v1")
    nothing = {"member0": None, "member1": None, "member2": None}
    assert [r["value"] for r in got] == [
        {
            "id": str(uuid.UUID(int=i + 1)),
            "at_time": ((13 * 60 + 14) * 60 + 15) * 1000 + 250,
            "local": datetime.datetime(2026, 11, 27, 10, 0, i),
            "payload": [
                None,
                {**nothing, "member0": 42},
                {**nothing, "member1": "text"},
                {**nothing, "member2": {"x": 1.5}},
            ][i],
        }
        for i in range(4)
    ]

    raw = _rows(warehouse, "raw")
    assert [r["value"] for r in raw] == [b"\x00just bytes"]
    # the decoded records' scratch (written once, then each table from it) is gone with its parent
    assert sorted(p.name for p in warehouse.iterdir() if not p.name.startswith(("_", "."))) == [
        "clicks@v1",
        "events@v1",
        "orders@deadletter",
        "orders@v1",
        "orders@v2",
        "raw",
    ]

    # The audit balances: warehouse-tier counts per topic, window and origin DC are the records
    # sent, dead letters included and said as such.
    events = audit_events(b.bootstrap)
    counted = counts_by_window(events)
    expected: dict[tuple[str, int, str], int] = {}
    for topic, ts, dc in sent:
        k = (topic, ts // WINDOW_MS * WINDOW_MS, dc)
        expected[k] = expected.get(k, 0) + 1
    assert counted == expected
    assert sum(e.get("dead_lettered", 0) for e in events if e["topic"] == "orders") == 3
    assert not any(e.get("dead_lettered") for e in events if e["topic"] != "orders")


@pytest.mark.slow
def test_streaming_load_decodes_typed_tables_and_partitions_by_a_payload_time(
    broker_factory: Callable[..., BrokerProcess], registry: reg.RegistryProcess, tmp_path: Path
) -> None:
    """``headwater load --available-now`` (the streaming load: one query for every topic, each
    micro-batch decoded with mapInArrow) writes the same typed table as the nightly load, and
    ``output.partition.time.field = value:$.at`` reads the decoded Avro ``timestamp-millis`` (hourly
    directories by the payload's time, not the Kafka timestamp); a record that does not decode is
    a dead letter, in the Kafka timestamp's hour. ~60 s (a Spark process of its own)."""
    b = broker_factory(1, num_partitions=1, auto_create_topics_enable="true")
    client = SchemaRegistryClient({"url": registry.url})
    ser = AvroSerializer(client, json.dumps(ORDER_V1))
    ctx = SerializationContext("shipments", MessageField.VALUE)
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    sent = []
    for i in range(6):
        at = datetime.datetime(2026, 11, 27, 3 + i % 3, 10, i, tzinfo=datetime.UTC)  # hours 03, 04, 05
        order = {"id": i, "item": f"i{i}", "qty": i, "price": decimal.Decimal("1.50"), "at": at, "tags": []}
        sent.append(order)
        producer.produce("shipments", value=ser(order, ctx), timestamp=RECENT_MS)
    producer.produce("shipments", value=b"not avro", timestamp=RECENT_MS)
    assert producer.flush(60) == 0

    warehouse = tmp_path / "warehouse"
    props = tmp_path / "loader.properties"
    props.write_text(
        f"bootstrap.servers = {b.bootstrap}\ntopics = shipments\nwarehouse.path = {warehouse}\n"
        f"schema.registry.url = {registry.url}\nspark.master = local[2]\nspark.ui.enabled = false\n"
        "output.partition.granularity = hour\noutput.partition.time.field = value:$.at\n"
        f"stream.checkpoint.location = {tmp_path / 'checkpoint'}\n"
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "load", "-c", str(props), "--available-now"],
        env=env,
        capture_output=True,
        timeout=600,
    )
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == 0, out[-4000:]

    rows = _rows(warehouse, "shipments@v1")
    assert [_plain(r["value"]) for r in rows] == [_plain(o) for o in sent]
    assert [int(r["hour"]) for r in rows] == [3 + i % 3 for i in range(6)]  # hive: hour=03 reads as 3
    assert {str(r["date"]) for r in rows} == {"2026-11-27"}
    dead = _rows(warehouse, "shipments@deadletter")
    kafka_hour = datetime.datetime.fromtimestamp(RECENT_MS / 1000, datetime.UTC)
    assert [(r["value"], str(r["date"]), int(r["hour"])) for r in dead] == [
        (b"not avro", kafka_hour.strftime("%Y-%m-%d"), kafka_hour.hour)
    ]
