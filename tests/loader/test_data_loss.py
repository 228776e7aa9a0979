"""Retention outruns the loader: failOnDataLoss=true fails with the exact range, false loads the rest
and reports exactly the lost records to the audit as a gap at the warehouse tier (real broker, Spark)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer

from headwater.client.sync import SyncConsumer
from headwater.loader import job
from headwater.loader.job import LoaderConfig
from headwater.loader.offsets import DataLossError
from headwater.loader.warehouse import Warehouse
from tests.harness.audit import audit_events
from tests.harness.broker import BrokerProcess

HOUR_MS = 3_600_000


def _produce(bootstrap: str, first: int, n: int, ts: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(first, first + n):
        p.produce("lossy", value=f"v{i}".encode(), timestamp=ts)
    assert p.flush(60) == 0


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


def test_retention_outrunning_the_loader(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    b = broker_factory(
        0,
        num_partitions=1,
        auto_create_topics_enable="true",
        log_roll_ms=1000,
        log_retention_ms=HOUR_MS,
        log_retention_check_interval_ms=500,
    )
    root = tmp_path / "warehouse"
    wh = Warehouse(spark, str(root))
    # Run 1 loaded offsets [0, 10) of "lossy" (its data files are beside the point here).
    wh.write_manifest(1, {"run": 1, "ranges": {"lossy": {"0": [0, 10]}}, "files": [], "audit": []}, ".json")
    wh.mark_audited(1)
    # Offsets 0-29 are two hours old: retention (one hour) removes them; 30-49 are new.
    _produce(b.bootstrap, 0, 30, int(time.time() * 1000) - 2 * HOUR_MS)
    with SyncConsumer(b.bootstrap) as c:
        _wait(lambda: c.offsets_before("lossy", 0, -2, 1) == [30], 90, "retention to delete offsets 0-29")
    _produce(b.bootstrap, 30, 20, int(time.time() * 1000))

    def config(fail: bool) -> LoaderConfig:
        return LoaderConfig(
            bootstrap=b.bootstrap,
            topics=[re.compile("lossy")],
            warehouse=str(root),
            audit_bootstrap=b.bootstrap,
            fail_on_data_loss=fail,
        )

    # failOnDataLoss=true (the default): the run fails, naming topic, partition and the missing range.
    with pytest.raises(DataLossError, match=r"lossy-0: offsets \[10, 30\) are gone \(20 record\(s\)\)"):
        job._load(spark, config(True))
    assert wh.manifests() == [1] and not (root / "lossy").exists()

    # failOnDataLoss=false: the rest is loaded, the gap is in the manifest and in the audit.
    manifest = job._load(spark, config(False))
    assert manifest is not None and wh.manifests() == [1, 2] and wh.audited(2)
    assert manifest["ranges"] == {"lossy": {"0": [30, 50]}}
    assert [(g["from_offset"], g["to_offset"], g["records"]) for g in manifest["losses"]] == [(10, 30, 20)]
    rows = ds.dataset(root / "lossy", format="parquet", partitioning="hive").to_table().to_pylist()
    assert sorted(r["offset"] for r in rows) == list(range(30, 50))
    events = audit_events(b.bootstrap)
    gaps = [e for e in events if e.get("type") == "gap"]
    assert [(g["tier"], g["hop"], g["topic"], g["partition"], g["from_offset"], g["to_offset"]) for g in gaps] == [
        ("warehouse", "agg->warehouse", "lossy", 0, 10, 30)
    ]
    assert gaps[0]["records"] == 20 and gaps[0]["reason"] == "source retention"
    assert sum(e["count"] for e in events if e.get("type") is None and e["topic"] == "lossy") == 20

    # The data source takes the same option.
    def read(fail: str) -> list[int]:
        df = (
            spark.read.format("headwater")
            .option("kafka.bootstrap.servers", b.bootstrap)
            .option("subscribe", "lossy")
            .option("startingOffsets", json.dumps({"lossy": {"0": 10}}))
            .option("failOnDataLoss", fail)
            .load()
        )
        return sorted(r.offset for r in df.collect())

    with pytest.raises(Exception, match=r"lossy-0: offsets \[10, 30\) are gone"):
        read("true")
    assert read("false") == list(range(30, 50))
