"""``headwater load`` end to end: kill -9 of the driver mid-run, rerun, exactly once, audit counts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
from confluent_kafka import Producer

from tests.harness.audit import audit_events, counts_by_window
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

WINDOW_MS = 60_000
BASE_TS = RECENT_MS


def _produce(
    bootstrap: str, topic: str, n: int, start: int = 0, partition: int = -1
) -> dict[bytes, tuple[bytes, list[tuple[str, bytes]], int]]:
    sent = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.codec": "lz4", "acks": "all"})
    for i in range(start, start + n):
        ts = BASE_TS + i * 500  # 120 records per one-minute window
        dc = b"dc1" if i % 3 else b"dc2"
        key, value = f"member-{i % 17}".encode(), f"{topic}-{i}".encode()
        headers = [("origin.host", b"web-1"), ("origin.dc", dc), ("origin.created", str(ts).encode())]
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=partition)
        sent[value] = (key, headers, ts)
    assert p.flush(60) == 0
    return sent


def _load(config: Path, *extra: str, **popen: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "load", "-c", str(config), *extra],
        env=env,
        start_new_session=True,  # the driver, its JVM and Python workers: one process group to kill
        **popen,  # type: ignore[call-overload]
    )


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _warehouse_rows(root: Path, topic: str) -> list[dict[str, object]]:
    if not (root / topic).exists():
        return []
    return ds.dataset(root / topic, format="parquet", partitioning="hive").to_table().to_pylist()


def test_killed_run_then_rerun_loads_every_record_exactly_once(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    b = broker_factory(0, num_partitions=3, auto_create_topics_enable="true")
    sent = _produce(b.bootstrap, "page-views", 1500)
    sent.update(_produce(b.bootstrap, "clicks", 300))
    warehouse = tmp_path / "warehouse"
    config = tmp_path / "loader.properties"
    config.write_text(
        f"bootstrap.servers = {b.bootstrap}\ntopics = page-views, click.*\nwarehouse.path = {warehouse}\n"
        f"spark.master = local[2]\naudit.bootstrap.servers = {b.bootstrap}\naudit.window.ms = {WINDOW_MS}\n"
        "spark.ui.enabled = false\nmin.partitions = 6\n"
    )

    # 1. A run killed (SIGKILL, driver and JVM) while its tasks read: it published nothing.
    log1 = open(tmp_path / "run1.log", "wb")  # noqa: SIM115
    killed = _load(config, "--override", "headwater.test.read.delay.ms=300", stdout=log1, stderr=subprocess.STDOUT)
    _wait(lambda: any(warehouse.glob("*/_staging-*/_temporary")), 180, "tasks writing to staging")
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(30)
    _wait(lambda: _group_gone(killed.pid), 60, "the killed driver's process group to end")
    log1.close()
    assert _warehouse_rows(warehouse, "page-views") == []  # its staging is there, skipped by readers
    assert not list((warehouse / "_headwater" / "manifests").glob("*.json"))

    # 2. The rerun is killed (SIGKILL) while publishing, between its two topics' renames: a reader
    # sees the first topic (clicks) whole and nothing of the second; the run is not committed.
    killer = _load(
        config, "--override", "headwater.test.kill.after=rename:1", stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out2 = killer.communicate(timeout=600)[0].decode(errors="replace")
    assert killer.returncode == -signal.SIGKILL, out2[-4000:]
    with contextlib.suppress(ProcessLookupError):  # its JVM, if it outlived the driver
        os.killpg(killer.pid, signal.SIGKILL)
    _wait(lambda: _group_gone(killer.pid), 60, "the killed driver's process group to end")
    assert "page-views: 1500 record(s)" in out2
    assert len(_warehouse_rows(warehouse, "clicks")) == 300
    assert _warehouse_rows(warehouse, "page-views") == []
    manifests = warehouse / "_headwater" / "manifests"
    assert [p.name for p in manifests.iterdir() if not p.name.startswith(".")] == ["00000000000000000001.pending"]

    # 2b. The next start finishes that publish; then every record is there, once.
    second = _load(config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out2 = second.communicate(timeout=600)[0].decode(errors="replace")
    assert second.returncode == 0, out2[-4000:]
    assert "run 1 was interrupted while publishing: finishing it" in out2
    assert "never published" in out2  # the first killed run's staging was dropped once run 1 committed
    assert "nothing new since run 1" in out2
    assert not list(warehouse.glob("*/_staging-*"))
    for topic, n in (("page-views", 1500), ("clicks", 300)):
        rows = _warehouse_rows(warehouse, topic)
        assert len(rows) == n
        assert len({(r["partition"], r["offset"]) for r in rows}) == n  # each offset exactly once
        for r in rows:
            key, headers, ts = sent[r["value"]]
            assert r["key"] == key and r["topic"] == topic
            assert [(h["key"], h["value"]) for h in r["headers"]] == headers
            assert int(r["timestamp"].timestamp() * 1000) == ts
            assert r["date"] == time.strftime("%Y-%m-%d", time.gmtime(ts / 1000))

    # 3. Nothing new: nothing written.
    files_before = sorted(p for p in warehouse.rglob("*") if p.is_file())
    third = _load(config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out3 = third.communicate(timeout=600)[0].decode(errors="replace")
    assert third.returncode == 0, out3[-4000:]
    assert "nothing new since run 1" in out3
    assert sorted(p for p in warehouse.rglob("*") if p.is_file()) == files_before

    # 4. New records, in one partition only: the next run takes only those (the partitions with
    # nothing new are not read again).
    sent.update(_produce(b.bootstrap, "page-views", 200, start=1500, partition=0))
    fourth = _load(config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out4 = fourth.communicate(timeout=600)[0].decode(errors="replace")
    assert fourth.returncode == 0, out4[-4000:]
    rows = _warehouse_rows(warehouse, "page-views")
    assert len(rows) == 1700 and len({(r["partition"], r["offset"]) for r in rows}) == 1700

    # 5. Warehouse-tier count events in __audit add up, per topic, window and origin DC.
    events = audit_events(b.bootstrap)
    for e in events:
        assert e["tier"] == "warehouse" and e["window_end"] - e["window_start"] == WINDOW_MS
    counted = counts_by_window(events)
    expected: dict[tuple[str, int, str], int] = {}
    for value, (_, headers, ts) in sent.items():
        k = (value.decode().rsplit("-", 1)[0], ts // WINDOW_MS * WINDOW_MS, dict(headers)["origin.dc"].decode())
        expected[k] = expected.get(k, 0) + 1
    assert counted == expected
