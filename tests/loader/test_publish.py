"""Publishing a run, step by step, with a crash injected at each step of the warehouse's file system.

The Spark session here only lends its JVM (Hadoop's FileSystem): the staged "Spark output" is
written with pyarrow, so no Spark job runs. Each case stages one run of two topics, publishes it
through a file system that raises at its k-th change (a create, rename, delete or mkdirs: the
process "dies" there), checks what a reader sees at that instant, then recovers as the next start
does and checks that every record is in the warehouse exactly once and that the next run resumes at
the committed ends.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from headwater.loader import job
from headwater.loader.job import LoaderConfig
from headwater.loader.warehouse import STAGING_PREFIX, Warehouse, run_name

#: topic -> partition -> [start, end)
RANGES = {"page-views": {0: (0, 40), 1: (100, 130)}, "clicks": {0: (7, 27)}}
MUTATING = ("create", "rename", "delete", "mkdirs")


class Crash(Exception):
    """The injected crash: nothing after it runs."""


class FaultyFs:
    """Hadoop's FileSystem, passed through, except that the ``crash_at``-th change raises."""

    def __init__(self, fs: Any, crash_at: int | None = None) -> None:
        self._fs = fs
        self.crash_at = crash_at
        self.changes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if name not in MUTATING:
            return attr

        def call(*args: Any) -> Any:
            self.changes.append(f"{name} {args[0]}")
            if self.crash_at is not None and len(self.changes) == self.crash_at:
                raise Crash(self.changes[-1])
            return attr(*args)

        return call


def _config(root: Path) -> LoaderConfig:
    return LoaderConfig(bootstrap="127.0.0.1:1", topics=[], warehouse=str(root), audit_bootstrap="audit:9092")


def _stage(wh: Warehouse, run: int, token: str) -> dict[str, Any]:
    """Stage run ``run`` as Spark would (two Parquet files per topic) and return its manifest."""
    files: list[list[str]] = []
    for topic, parts in RANGES.items():
        for p, (start, end) in parts.items():
            table = pa.table(
                {
                    "topic": [topic] * (end - start),
                    "partition": pa.array([p] * (end - start), pa.int32()),
                    "offset": pa.array(range(start, end), pa.int64()),
                }
            )
            directory = Path(wh.path(job._staging_of(run, topic, token))) / "date=2026-11-24"
            directory.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, directory / f"part-{p:05d}-{uuid.uuid4()}.c000.snappy.parquet")
        files.extend(job._moves(run, topic, token))
    return {
        "run": run,
        "ranges": {t: {str(p): list(r) for p, r in parts.items()} for t, parts in RANGES.items()},
        "files": files,
        "records": {t: sum(e - s for s, e in parts.values()) for t, parts in RANGES.items()},
        "audit": [{"topic": t, "count": 1} for t in RANGES],
    }


def _visible(root: Path, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row a Parquet reader of ``<warehouse>/<topic>`` sees now."""
    if not (root / topic).exists():
        return []
    rows = ds.dataset(root / topic, format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted((r["partition"], r["offset"]) for r in rows)


def _expected(topic: str) -> list[tuple[int, int]]:
    return sorted((p, o) for p, (s, e) in RANGES[topic].items() for o in range(s, e))


def _publish(wh: Warehouse, config: LoaderConfig, token: str = "first") -> None:
    manifest = _stage(wh, 1, token)
    wh.claim(1, manifest)
    job._publish(wh, 1, manifest, config)


def test_a_crash_at_any_step_of_publishing_loads_every_record_exactly_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(
        job,
        "_send_audit_events",
        lambda bootstrap, events, timeout, security=None, signing_key=None: sent.append(events),
    )

    # A clean publish, to count its steps.
    root = tmp_path / "clean"
    wh = Warehouse(spark, str(root))
    wh.fs = counting = FaultyFs(wh.fs)
    _publish(wh, _config(root))
    steps = len(counting.changes)
    assert steps >= 5, counting.changes

    for k in range(1, steps + 1):
        root = tmp_path / f"crash-{k}"
        wh = Warehouse(spark, str(root))
        # Another loader's live staging for the run after this one: recovery must leave it alone.
        foreign = root / "clicks" / f"{STAGING_PREFIX}{run_name(2)}-elsewhere"
        foreign.mkdir(parents=True)
        real = wh.fs
        wh.fs = faulty = FaultyFs(real, crash_at=k)
        sent.clear()
        with pytest.raises(Crash):
            _publish(wh, _config(root))
        where = f"crash at step {k} ({faulty.changes[-1]})"

        # What a reader sees at the instant of the crash: each topic's part of the run whole or not at all.
        for topic in RANGES:
            assert _visible(root, topic) in ([], _expected(topic)), where
            # A reader of committed runs only sees the run once it is committed.
            assert bool(wh.committed_runs(topic)) == bool(wh.manifests()), where
        # The run happened iff its manifest (.pending or .json) got written.
        happened = bool(wh.manifests(".pending") or wh.manifests())

        # The next start: no fault; it rolls forward whatever the crash interrupted.
        wh.fs = real
        job._recover(wh, _config(root))
        assert not list((root / "_headwater" / "manifests").glob("*.tmp")), where
        if not happened:  # a crash before the manifest: the run never happened
            assert wh.manifests() == [] and job._resume(wh) == (1, {}), where
            assert all(_visible(root, t) == [] for t in RANGES), where
            # Its staging stays (it could be another loader's, live) until a run takes its number.
            assert sorted(run for _, run in wh.staging_dirs()) == [1, 1, 2], where
            _publish(wh, _config(root), token="retry")
        assert wh.staging_dirs() == [(f"clicks/{foreign.name}", 2)], where
        assert wh.manifests() == [1], where
        assert wh.audited(1), where
        assert sent, where  # the audit events went out (again, if the crash came after sending)
        for topic in RANGES:
            assert _visible(root, topic) == _expected(topic), where  # each offset exactly once
        run, reached = job._resume(wh)
        assert (run, reached) == (2, {t: {p: e for p, (_, e) in parts.items()} for t, parts in RANGES.items()}), where
        # A second load that picked the same run number cannot publish over it.
        with pytest.raises(FileExistsError, match="run 1 is published already"):
            wh.claim(1, {})


def test_an_audit_outage_delays_only_the_audit_events(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:  # a port nothing listens on: the audit cluster is down
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    root = tmp_path / "wh"
    wh = Warehouse(spark, str(root))
    config = LoaderConfig(
        bootstrap="127.0.0.1:1", topics=[], warehouse=str(root), audit_bootstrap=dead, audit_timeout_ms=5000
    )
    started = time.monotonic()
    _publish(wh, config)  # the real sender, against the dead cluster: no exception
    job._recover(wh, config)  # the next start, still down: it goes on to load
    assert time.monotonic() - started < 60
    assert wh.manifests() == [1] and not wh.audited(1)
    assert all(_visible(root, t) == _expected(t) for t in RANGES)  # the data is published all the same
    assert "were not sent to" in caplog.text and "the next run sends them" in caplog.text

    # The audit cluster is back: the next start sends the events of every run still unaudited.
    sent: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(
        job,
        "_send_audit_events",
        lambda bootstrap, events, timeout, security=None, signing_key=None: sent.append(events),
    )
    job._recover(wh, config)
    assert wh.audited(1) and sent == [[{"topic": t, "count": 1} for t in RANGES]]


def test_dropping_a_killed_typed_runs_staging_leaves_no_empty_directory(spark: Any, tmp_path: Path) -> None:
    """A typed load killed mid-decode leaves ``<topic>@decoded/_staging-...`` (and maybe a new table
    version's first staging); once a run has taken its number, both go with their directories,
    and a topic directory that holds published runs stays."""
    root = tmp_path / "warehouse"
    wh = Warehouse(spark, str(root))
    _publish(wh, _config(root))  # run 1, published
    killed = [
        root / "orders@decoded" / f"{STAGING_PREFIX}{run_name(1)}-killed" / "_table=1",
        root / "orders@v2" / f"{STAGING_PREFIX}{run_name(1)}-killed" / "date=2026-11-27",
        root / "clicks" / f"{STAGING_PREFIX}{run_name(1)}-killed" / "date=2026-11-27",
    ]
    for d in killed:
        d.mkdir(parents=True)
        pq.write_table(pa.table({"offset": [1]}), d / "part-0.parquet")
    job._drop_staging(wh, 1)
    assert not (root / "orders@decoded").exists() and not (root / "orders@v2").exists()
    assert wh.staging_dirs() == []
    for topic in RANGES:
        assert _visible(root, topic) == _expected(topic)
