"""Event-time partitioning (issue 44, item 2): output.partition.granularity, output.timezone and
output.partition.time.field.

The settings' checks need no Spark; the column tests run the partitioning on in-memory rows in
the session's Spark (no broker); the last test loads a real broker's topic twice, hourly by
``origin.created``, with late records, and checks every row's directory and the manifests' lists of
hours. Spark is the loader tests' one session (tests/loader/conftest.py).
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer

from headwater.client.audit import HEADER_CREATED
from headwater.loader import job
from headwater.loader.job import LoaderConfig, LoaderConfigError, parse_config
from headwater.loader.partitioning import PartitionSpec, parse_partitioning
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

UTC = datetime.UTC
BASE = datetime.datetime(2026, 11, 27, 9, 30, tzinfo=UTC)  # the Kafka timestamp of the in-memory rows


def _ms(t: datetime.datetime) -> int:
    return int(t.timestamp() * 1000)


def test_settings_default_to_the_daily_utc_layout_and_bad_values_name_the_property() -> None:
    assert parse_partitioning({}) == PartitionSpec("day", "UTC", "timestamp")
    assert parse_partitioning(
        {
            "output.partition.granularity": "HOUR",
            "output.timezone": "Europe/Berlin",
            "output.partition.time.field": "origin.created",  # a bare header name
        }
    ) == PartitionSpec("hour", "Europe/Berlin", "header:origin.created")
    assert parse_partitioning({"output.partition.time.field": "value:$.meta.ts"}).time_field == "value:$.meta.ts"
    base = {"bootstrap.servers": "b:9092", "topics": "t", "warehouse.path": "/w"}
    for key, value, message in [
        ("output.partition.granularity", "week", "'week' is not hour or day"),
        ("output.timezone", "Mars/Olympus", "'Mars/Olympus' is not an IANA time zone name"),
        ("output.partition.time.field", "value:created", "is not timestamp, header:<name>"),
        ("output.partition.time.field", "header:", "is not timestamp, header:<name>"),
    ]:
        with pytest.raises(LoaderConfigError, match=f"^{re.escape(key)}: .*{re.escape(message)}"):
            parse_config({**base, key: value})


def _rows(spark: Any, rows: list[tuple[int, bytes | None, list[tuple[str, bytes]]]]) -> Any:
    """Rows of the data source's schema: (Kafka timestamp ms, value, headers)."""
    from headwater.loader.source import SCHEMA

    data = [
        (
            None,
            value,
            "t",
            0,
            i,
            datetime.datetime.fromtimestamp(ts / 1000, UTC),
            0,
            [{"key": k, "value": v} for k, v in headers],
        )
        for i, (ts, value, headers) in enumerate(rows)
    ]
    return spark.createDataFrame(data, SCHEMA)


def _dirs(spec: PartitionSpec, df: Any) -> list[str]:
    out = spec.add_columns(df).orderBy("offset").collect()
    return [f"{r['date']}/{r['hour']}" if spec.granularity == "hour" else r["date"] for r in out]


def test_event_time_from_a_header_a_json_field_or_the_kafka_timestamp(spark: Any) -> None:
    """2.3 s of Spark on a loaded machine (one collect per case)."""
    late = _ms(BASE - datetime.timedelta(hours=5))
    created = [
        [(HEADER_CREATED, str(late).encode())],  # a late record: its own (earlier) hour
        [(HEADER_CREATED, b"x"), (HEADER_CREATED, str(_ms(BASE) + 3_600_000).encode())],  # the last one wins
        [(HEADER_CREATED, b"not a number"), ("origin.dc", b"dc1")],  # does not parse: the Kafka timestamp
        [],  # absent: the Kafka timestamp
    ]
    df = _rows(spark, [(_ms(BASE), b"{}", h) for h in created])
    hourly = PartitionSpec("hour", "UTC", "header:origin.created")
    assert _dirs(hourly, df) == ["2026-11-27/04", "2026-11-27/10", "2026-11-27/09", "2026-11-27/09"]
    assert _dirs(PartitionSpec("hour", "UTC", "timestamp"), df) == ["2026-11-27/09"] * 4
    assert _dirs(PartitionSpec("day", "UTC", "header:origin.created"), df) == ["2026-11-27"] * 4

    values = [
        {"e": {"created": _ms(BASE) - 7_200_000}},  # a number: ms since the epoch
        {"e": {"created": str(_ms(BASE) - 3_600_000)}},  # a decimal string: ms too
        {"e": {"created": "2026-11-26T23:15:00Z"}},  # ISO-8601
        {"e": {"created": "yesterday"}},  # does not parse: the Kafka timestamp
        {"e": {}},  # absent
    ]
    df = _rows(spark, [(_ms(BASE), json.dumps(v).encode(), []) for v in values] + [(_ms(BASE), b"\xff{", [])])
    assert _dirs(PartitionSpec("hour", "UTC", "value:$.e.created"), df) == [
        "2026-11-27/07",
        "2026-11-27/08",
        "2026-11-26/23",
        "2026-11-27/09",
        "2026-11-27/09",
        "2026-11-27/09",  # not JSON at all
    ]


def test_a_typed_topics_event_time_is_read_from_its_decoded_struct(spark: Any) -> None:
    """value:<path> on a typed topic (issue 44): the field of the row's table version's decoded
    struct (``v<n>``), whatever its type in that version; a dead letter (``_table`` 0) or a version
    without the field lands by its Kafka timestamp. 1 s of Spark."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from headwater.loader.source import SCHEMA

    created = _ms(BASE) - 7_200_000
    schema = StructType.fromDDL(
        f"{SCHEMA}, _table int, v1 struct<e: struct<created: bigint>>, "
        "v2 struct<e: struct<created: string>, at: timestamp>, v3 struct<e: struct<created: boolean>>"
    )
    ts = datetime.datetime.fromtimestamp(_ms(BASE) / 1000, UTC)
    head = [None, None, "t", 0]
    rows = [
        (*head, 0, ts, 0, [], 1, {"e": {"created": created}}, None, None),  # ms since the epoch
        (*head, 1, ts, 0, [], 2, None, {"e": {"created": "2026-11-26T23:15:00Z"}, "at": None}, None),  # ISO
        (*head, 2, ts, 0, [], 2, None, {"e": {"created": str(created)}, "at": None}, None),  # decimal ms
        (*head, 3, ts, 0, [], 2, None, {"e": None, "at": None}, None),  # absent: the Kafka timestamp
        (*head, 4, ts, 0, [], 0, None, None, None),  # a dead letter: the Kafka timestamp
        (*head, 5, ts, 0, [], 3, None, None, {"e": {"created": True}}),  # not a time's type
    ]
    df = spark.createDataFrame(rows, schema)
    typed = [
        (1, pa.struct([("e", pa.struct([("created", pa.int64())]))])),
        (2, pa.struct([("e", pa.struct([("created", pa.string())])), ("at", pa.timestamp("us", tz="UTC"))])),
        (3, pa.struct([("e", pa.struct([("created", pa.bool_())]))])),
    ]
    spec = PartitionSpec("hour", "UTC", "value:$.e.created")
    got = spec.add_columns(df, typed).orderBy("offset").collect()
    assert [f"{r['date']}/{r['hour']}" for r in got] == [
        "2026-11-27/07",
        "2026-11-26/23",
        "2026-11-27/07",
        "2026-11-27/09",
        "2026-11-27/09",
        "2026-11-27/09",
    ]
    # a path a struct cannot have (brackets) reads nothing: every row by its Kafka timestamp
    got = PartitionSpec("hour", "UTC", "value:$['e']").add_columns(df, typed).collect()
    assert {r["hour"] for r in got} == {"09"}


def test_dates_and_hours_are_local_to_output_timezone(spark: Any) -> None:
    """0.8 s of Spark."""
    instants = [
        BASE,  # 04:30 in New York (EST)
        datetime.datetime(2026, 11, 27, 3, 0, tzinfo=UTC),  # 22:00 the day before in New York
        # The night Berlin leaves summer time: 00:30Z is 02:30 CEST, 01:30Z is 02:30 CET (the repeated hour).
        datetime.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime.datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    ]
    df = _rows(spark, [(_ms(t), None, []) for t in instants])
    assert _dirs(PartitionSpec("hour", "America/New_York"), df)[:2] == ["2026-11-27/04", "2026-11-26/22"]
    assert _dirs(PartitionSpec("hour", "Europe/Berlin"), df)[2:] == ["2026-10-25/02", "2026-10-25/02"]
    assert _dirs(PartitionSpec("day", "America/New_York"), df)[:2] == ["2026-11-27", "2026-11-26"]


def _produce(bootstrap: str, topic: str, created_ms: list[int], first: int) -> dict[bytes, int]:
    """One record per creation time (Kafka timestamp: now); returns value -> origin.created."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    sent = {}
    for i, ms in enumerate(created_ms, first):
        value = f"{topic}-{i}".encode()
        p.produce(topic, value=value, headers=[("origin.dc", b"dc1"), (HEADER_CREATED, str(ms).encode())])
        sent[value] = ms
    assert p.flush(60) == 0
    return sent


def _hour_dir(ms: int) -> str:
    t = datetime.datetime.fromtimestamp(ms / 1000, UTC)
    return f"date={t:%Y-%m-%d}/hour={t:%H}"


def test_hourly_load_by_origin_created_puts_late_records_in_their_own_hour_and_the_manifest_lists_the_hours(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """~8 s: one broker, two runs of one topic (2 partitions, 44 records)."""
    b = broker_factory(0, num_partitions=2, auto_create_topics_enable="true")
    topic = "clicks"
    hour = 3_600_000
    # Run 1: records created over three hours, and two created 5 and 30 hours earlier (late).
    first = [RECENT_MS - 2 * hour + i * 270_000 for i in range(40)] + [RECENT_MS - 5 * hour, RECENT_MS - 30 * hour]
    sent = _produce(b.bootstrap, topic, first, 0)
    root = tmp_path / "warehouse"
    config = parse_config(
        {
            "bootstrap.servers": b.bootstrap,
            "topics": topic,
            "warehouse.path": str(root),
            "output.partition.granularity": "hour",
            "output.partition.time.field": "header:origin.created",
            "audit.dashboard.url": "http://127.0.0.1:8080/",
        }
    )
    caplog.set_level(logging.INFO, "headwater.loader")
    one = job._load(spark, config)
    assert one is not None
    assert one["partitions"] == {topic: sorted({_hour_dir(ms) for ms in first})}
    assert one["partitioning"] == {"granularity": "hour", "timezone": "UTC", "time_field": "header:origin.created"}
    # The log links the newest hour loaded to the audit dashboard's page of the topic from that hour.
    newest = max(first) // hour * hour
    assert (
        f"run 1: newest partition loaded: {topic}/run=00000000000000000001/{_hour_dir(newest)} "
        f"(audit dashboard: http://127.0.0.1:8080/topic?topic={topic}&from={newest})"
    ) in caplog.messages

    # Run 2: only late records, into hours run 1 wrote already (and one it did not).
    late = [RECENT_MS - 2 * hour + 60_000, RECENT_MS - 30 * hour + 1, RECENT_MS - 50 * hour]
    sent.update(_produce(b.bootstrap, topic, late, len(first)))
    two = job._load(spark, config)
    assert two is not None and two["records"] == {topic: 3}
    assert two["partitions"] == {topic: sorted({_hour_dir(ms) for ms in late})}

    # Every record once, in the directory of its origin.created hour.
    seen: dict[bytes, str] = {}
    for f in sorted((root / topic).glob("run=*/date=*/hour=*/*.parquet")):
        for r in ds.dataset(f, format="parquet").to_table(columns=["value"]).to_pylist():
            assert r["value"] not in seen
            seen[r["value"]] = "/".join(f.parts[-3:-1])
    assert seen == {v: _hour_dir(ms) for v, ms in sent.items()}
    # A reader of one hour sees both runs' records of it (hive columns date and hour).
    table = ds.dataset(root / topic, format="parquet", partitioning="hive").to_table()
    h = datetime.datetime.fromtimestamp((RECENT_MS - 30 * hour) / 1000, UTC)
    rows = [r for r in table.to_pylist() if r["date"] == f"{h:%Y-%m-%d}" and int(r["hour"]) == h.hour]
    assert sorted(r["run"] for r in rows) == [1, 2]


def test_the_default_layout_is_daily_by_kafka_timestamp(spark: Any) -> None:
    """What every earlier run wrote: date= of the Kafka timestamp in UTC, no hour column."""
    config = LoaderConfig(bootstrap="b:1", topics=[], warehouse="/w")
    df = _rows(spark, [(_ms(BASE), None, [(HEADER_CREATED, str(_ms(BASE) - 86_400_000).encode())])])
    out = config.partitioning.add_columns(df)
    assert config.partitioning.columns == ("date",) and "hour" not in out.columns
    assert [r["date"] for r in out.collect()] == ["2026-11-27"]
