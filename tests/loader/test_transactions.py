"""Transactions in the warehouse (issue 41): the loader reads read_committed.

A transactional producer (confluent-kafka) writes committed and aborted transactions interleaved
with plain records into an aggregate topic, and leaves one transaction open. The first run loads
exactly the committed and plain records below the open transaction (its ranges end at the last
stable offset: the plain records after it wait too); once it commits, the next run loads the rest
and ends past the last marker. No aborted record reaches the Parquet, and the warehouse-tier
counts sent to the audit are those of the loaded (committed) records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from headwater.client.sync import SyncConsumer
from headwater.loader import job
from headwater.loader.job import LoaderConfig
from tests.harness.broker import BrokerProcess
from tests.harness.transactions import committed_view, stored_log, write_transactions

TOPIC = "orders"


def _warehouse(root: Path) -> list[tuple[int, bytes]]:
    rows = ds.dataset(root / TOPIC, format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted((int(r["offset"]), bytes(r["value"])) for r in rows)


def _warehouse_counts(bootstrap: str) -> int:
    total = 0
    with SyncConsumer(bootstrap) as c:
        for p in c.partitions_for("__audit"):
            offset = 0
            while records := c.fetch("__audit", p, offset, max_wait_ms=100).records:
                for r in records:
                    e = json.loads(r.value or b"{}")
                    if e.get("type") is None and e.get("tier") == "warehouse" and e.get("topic") == TOPIC:
                        total += int(e["count"])
                offset = records[-1].offset + 1
    return total


def test_loads_committed_and_plain_records_only_and_an_open_transaction_waits_for_its_commit(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    b = broker_factory(0, num_partitions=1, auto_create_topics_enable="true", transaction_state_log_num_partitions=3)
    plain, txn = write_transactions(b.bootstrap, TOPIC, 1, txn_id="loader-app")
    log, _ = stored_log(b.bootstrap, TOPIC, 0)
    assert any(v.startswith(b"abort-") for _, v in log)  # the aborted data is in the topic
    lso = next(o for o, v in log if v.startswith(b"open-"))
    root = tmp_path / "warehouse"
    config = LoaderConfig(
        bootstrap=b.bootstrap, topics=[re.compile(TOPIC)], warehouse=str(root), audit_bootstrap=b.bootstrap
    )

    first = job._load(spark, config)
    assert first is not None and first["ranges"] == {TOPIC: {"0": [0, lso]}}  # ends at the last stable offset
    assert [v for _, v in _warehouse(root)] == committed_view(log, below=lso)

    txn.commit_transaction(60)
    log, end = stored_log(b.bootstrap, TOPIC, 0)
    second = job._load(spark, config)
    assert second is not None and second["ranges"] == {TOPIC: {"0": [lso, end]}}  # past the last marker
    loaded = _warehouse(root)
    assert [v for _, v in loaded] == committed_view(log)  # in offset order, each once, no aborted record
    assert [o for o, _ in loaded] == [o for o, v in log if not v.startswith(b"abort-")]
    assert first["records"][TOPIC] + second["records"][TOPIC] == len(loaded)
    assert _warehouse_counts(b.bootstrap) == len(loaded)  # the audit's warehouse tier: committed records only
    assert job._load(spark, config) is None  # nothing new: no stall before the markers
    plain.flush(10)
