"""Streaming with a checkpoint, the Spark driver killed -9 and restarted: every record exactly once.

Real subprocess drivers (their own JVM), a real broker. Neither driver registers the data source by
hand: Spark finds ``format("headwater")`` through ``pyspark_headwater``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

DRIVER = Path(__file__).with_name("stream_driver.py")


def _produce(bootstrap: str, topic: str, n: int) -> dict[bytes, tuple[bytes, list[tuple[str, bytes]], int]]:
    sent = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(n):
        ts = RECENT_MS + i * 500
        key, value = f"member-{i % 17}".encode(), f"{topic}-{i}".encode()
        headers = [("origin.dc", b"dc1" if i % 3 else b"dc2"), ("origin.created", str(ts).encode())]
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=i % 3)
        sent[value] = (key, headers, ts)
    assert p.flush(60) == 0
    return sent


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait(60)

    def gone() -> bool:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            return True
        return False

    _wait(gone, 60, "the killed driver's process group to end")


def _sink_rows(out: Path) -> list[dict[str, object]]:
    """The rows of the files Spark's file sink committed (its _spark_metadata log): a killed batch's
    files are left in the directory but never committed, as Spark's own readers see it."""
    files: set[str] = set()
    for log in sorted((out / "_spark_metadata").iterdir(), key=lambda p: p.name):
        if not log.name.split(".")[0].isdigit():
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"].removeprefix("file://"))
    return [r for f in sorted(files) for r in pq.read_table(f).to_pylist()]


def _check_exactly_once(
    rows: list[dict[str, object]], sent: dict[bytes, tuple[bytes, list[tuple[str, bytes]], int]], topic: str
) -> None:
    assert len(rows) == len(sent), f"{len(rows)} rows for {len(sent)} records"
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(sent)  # no offset twice
    for r in rows:
        value = r["value"]
        assert isinstance(value, bytes)
        key, headers, ts = sent[value]
        assert r["key"] == key and r["topic"] == topic
        assert [(h["key"], h["value"]) for h in r["headers"]] == headers  # type: ignore[attr-defined]
        assert int(r["timestamp"].timestamp() * 1000) == ts  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two Spark drivers, each its own JVM
def test_readstream_killed_mid_stream_then_restarted_writes_every_record_once(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    b = broker_factory(0, num_partitions=3, auto_create_topics_enable="true")
    sent = _produce(b.bootstrap, "stream-kill", 600)
    out, ck = tmp_path / "out", tmp_path / "ck"
    args = [sys.executable, str(DRIVER), b.bootstrap, "stream-kill", str(out), str(ck), "maxOffsetsPerTrigger=100"]

    # 1. Batches of at most 100 offsets, each task slowed; killed (SIGKILL: driver, JVM, workers) once
    # a batch is committed and a later one is planned in the checkpoint but not committed.
    log1 = open(tmp_path / "driver1.log", "wb")  # noqa: SIM115
    first = subprocess.Popen(
        [*args, "headwater.test.read.delay.ms=1500"],
        env=_env(),
        start_new_session=True,
        stdout=log1,
        stderr=subprocess.STDOUT,
    )

    def mid_batch() -> bool:
        done = {p.name for p in (ck / "commits").glob("[0-9]*")} if (ck / "commits").exists() else set()
        planned = {p.name for p in (ck / "offsets").glob("[0-9]*")} if (ck / "offsets").exists() else set()
        return bool(done) and bool(planned - done)

    try:
        _wait(mid_batch, 300, "a committed batch and a later one in flight")
    finally:
        _kill_group(first)
        log1.close()
    committed = sorted(int(p.name) for p in (ck / "commits").glob("[0-9]*"))
    assert committed and committed[-1] < 5, committed  # 600 offsets need 6 batches: it was mid-stream
    assert len(_sink_rows(out)) < 600

    # 2. The restart re-runs the batch in flight from the checkpoint and goes on: every record once.
    second = subprocess.run(args, env=_env(), capture_output=True, timeout=600, start_new_session=True)
    assert second.returncode == 0, second.stdout.decode(errors="replace")[-4000:]
    assert b"caught up" in second.stdout
    _check_exactly_once(_sink_rows(out), sent, "stream-kill")


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two Spark drivers, each its own JVM
def test_continuous_load_killed_after_publishing_then_restarted_loads_every_record_once(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """``headwater load --available-now``: killed -9 right after a run's manifest is committed and before
    Spark records the batch as done; the restart re-runs that batch, finds it published and goes on."""
    b = broker_factory(0, num_partitions=3, auto_create_topics_enable="true")
    sent = _produce(b.bootstrap, "page-views", 500)
    warehouse, config = tmp_path / "warehouse", tmp_path / "loader.properties"
    config.write_text(
        f"bootstrap.servers = {b.bootstrap}\ntopics = page-.*\nwarehouse.path = {warehouse}\n"
        "spark.master = local[2]\nspark.ui.enabled = false\nmaxOffsetsPerTrigger = 200\n"
    )
    cmd = [sys.executable, "-m", "headwater.cli.main", "load", "-c", str(config), "--available-now"]
    killed = subprocess.Popen(
        [*cmd, "--override", "headwater.test.kill.after=commit"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out1 = killed.communicate(timeout=900)[0].decode(errors="replace")
    assert killed.returncode == -signal.SIGKILL, out1[-4000:]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(killed.pid, signal.SIGKILL)  # its JVM, if it outlived the driver
    manifests = warehouse / "_headwater" / "manifests"
    assert sorted(p.name for p in manifests.glob("*.json")) == ["00000000000000000001.json"]
    assert not list((warehouse / "_headwater" / "checkpoint" / "commits").glob("[0-9]*"))  # Spark never knew

    again = subprocess.run(cmd, env=_env(), capture_output=True, timeout=900, start_new_session=True)
    out2 = again.stdout.decode(errors="replace") + again.stderr.decode(errors="replace")
    assert again.returncode == 0, out2[-4000:]
    assert "batch 0: nothing new for the warehouse (published already)" in out2
    runs = sorted(p.name for p in manifests.glob("*.json"))
    assert len(runs) == 3, runs  # 500 offsets in runs of at most 200
    for name in runs:
        m = json.loads((manifests / name).read_text())
        assert sum(e - s for parts in m["ranges"].values() for s, e in parts.values()) <= 200
    rows = ds.dataset(warehouse / "page-views", format="parquet", partitioning="hive").to_table().to_pylist()
    _check_exactly_once(rows, sent, "page-views")
