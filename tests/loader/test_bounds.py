"""Bounded catch-up (issue 44, item 4): max.records.per.run and max.duration.per.run.

The sharing of a bound among partitions and the rounds are checked without Spark. Then, against a
real broker and the loader tests' one Spark session:

- a backlog of 5x ``max.records.per.run`` takes five runs, each publishing at most the bound,
  together every record exactly once;
- the 6-hour limit of the ansible unit (``TimeoutStartSec``, ``loader_run_timeout``), reproduced
  on a model clock: reading one record "takes" one minute, and the unit's stop is a guard that
  fails the run once 6 model hours have passed (systemd stops the process wherever it is; the
  loader's first publishing step is after every read, so a run stopped at any point before it
  publishes nothing, as ``test_load.py`` shows with a real SIGKILL). Without bounds a 400-minute
  backlog fails night after night, each night re-planning from the same offsets with more to read;
  with ``max.duration.per.run = 4h`` each night publishes what it read by then and the backlog
  drains. Nothing here depends on the machine's speed: the clock moves only with records read.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer

from headwater.loader import job
from headwater.loader.bounds import RunBounds, parse_bounds, parse_duration_ms, rounds, share
from headwater.loader.job import LoaderConfig, LoaderConfigError, parse_config
from headwater.loader.offsets import OffsetRange
from tests.harness.broker import BrokerProcess

TOPIC = "backlog"


def _r(p: int, start: int, end: int) -> OffsetRange:
    return OffsetRange(TOPIC, p, start, end)


def test_a_bound_is_shared_evenly_and_rounds_cover_the_plan_exactly() -> None:
    plan = [_r(0, 100, 200), _r(1, 5, 15), _r(2, 7, 7), _r(3, 0, 3)]
    # 60 offsets: 20 each would be fair; partitions 1 and 3 need less, their rest goes to partition 0.
    assert share(plan, 60) == [_r(0, 100, 147), _r(1, 5, 15), _r(2, 7, 7), _r(3, 0, 3)]
    assert share(plan, 0) == plan and share(plan, 10_000) == plan
    assert [r.size for r in share([_r(p, 0, 10) for p in range(5)], 7)] == [2, 2, 1, 1, 1]
    for per_round in (1, 7, 50, 113, 1000):
        steps = rounds(plan, per_round)
        assert all(sum(r.size for r in step) <= per_round for step in steps)
        for i, r in enumerate(plan):  # consecutive slices from the start to the end: each offset once
            cuts = [(step[i].start, step[i].end) for step in steps if step[i].size]
            edges = [r.start] + [e for _, e in cuts]
            assert cuts == list(itertools.pairwise(edges)) and edges[-1] == max(r.end, r.start)
    assert len(rounds(plan, 0)) == 1


def test_settings_and_their_errors() -> None:
    assert parse_bounds({}) == RunBounds(0, 0, 10_000_000)
    assert parse_bounds(
        {"max.records.per.run": "5_000_000", "max.duration.per.run": "4h30m", "max.records.per.round": "1000"}
    ) == RunBounds(5_000_000, 16_200_000, 1000)
    assert [parse_duration_ms("d", t) for t in ("90m", "45s", "500ms", "1d", "3600000")] == [
        5_400_000,
        45_000,
        500,
        86_400_000,
        3_600_000,
    ]
    base = {"bootstrap.servers": "b:9092", "topics": "t", "warehouse.path": "/w"}
    for key, value, message in [
        ("max.records.per.run", "-1", "'-1' is not a whole number of records"),
        ("max.records.per.run", "lots", "'lots' is not a whole number"),
        ("max.duration.per.run", "4 hours", "'4 hours' is not a duration"),
        ("max.records.per.round", "0", "0 must be positive"),
    ]:
        with pytest.raises(LoaderConfigError, match=f"^{re.escape(key)}: {re.escape(message)}"):
            parse_config({**base, key: value})


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--max-duration-per-run", "4hours"], "max.duration.per.run: '4hours' is not a duration"),
        (["--max-records-per-run", "-3"], "max.records.per.run: '-3' is not a whole number of records"),
        (["--partition-granularity", "week"], "output.partition.granularity: 'week' is not hour or day"),
        (["--timezone", "Mars/Olympus"], "output.timezone: 'Mars/Olympus' is not an IANA time zone name"),
    ],
)
def test_cli_flags_set_the_properties_and_bad_values_are_one_line_and_exit_code_2(
    tmp_path: Path, flags: list[str], line: str
) -> None:
    """~1 s each (no Spark: the configuration is refused before a session starts)."""
    config = tmp_path / "loader.properties"
    config.write_text(f"bootstrap.servers = 127.0.0.1:1\ntopics = t\nwarehouse.path = {tmp_path / 'wh'}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli.main",
            "load",
            "-c",
            str(config),
            "--override",
            "max.records.per.run=5",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    [printed] = proc.stderr.strip().splitlines()
    assert printed.startswith(f"headwater load: configuration error: {line}"), printed


def _produce(bootstrap: str, per_partition: dict[int, int], first: int = 0) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    sent = set()
    n = itertools.count(first)
    for partition, count in per_partition.items():
        for _ in range(count):
            value = f"r-{next(n)}".encode()
            p.produce(TOPIC, value=value, partition=partition)
            sent.add(value)
    assert p.flush(60) == 0
    return sent


def _loaded(root: Path) -> list[bytes]:
    """Every value a hive reader of the topic sees (committed runs' directories only)."""
    if not (root / TOPIC).exists():
        return []
    return [r["value"] for r in ds.dataset(root / TOPIC, format="parquet", partitioning="hive").to_table().to_pylist()]


def test_a_backlog_of_five_times_max_records_per_run_takes_five_runs_each_record_once(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """~10 s of Spark: five small runs (60 records, 3 partitions), then one with nothing to do."""
    b = broker_factory(0, num_partitions=3, auto_create_topics_enable="true")
    sent = _produce(b.bootstrap, {0: 40, 1: 15, 2: 5})  # uneven: one partition holds most of the backlog
    root = tmp_path / "warehouse"
    bound = 12
    config = LoaderConfig(
        bootstrap=b.bootstrap, topics=[re.compile(TOPIC)], warehouse=str(root), bounds=RunBounds(max_records=bound)
    )
    published = []
    while (manifest := job._load(spark, config)) is not None:
        published.append(manifest)
        assert len(published) <= 5, "more runs than the backlog needs"
    assert [m["records"][TOPIC] for m in published] == [bound] * 5  # each run at (never above) the bound
    assert [m["bounded"] and m["bounded"]["left"] for m in published] == [48, 36, 24, 12, None]
    assert all(m["bounded"]["by"] == "max.records.per.run" for m in published[:4])
    # Each run starts where the one before ended, partition by partition.
    for before, after in itertools.pairwise(published):
        assert {p: r[0] for p, r in after["ranges"][TOPIC].items()} == {
            p: r[1] for p, r in before["ranges"][TOPIC].items()
        }
    loaded = _loaded(root)
    assert len(loaded) == len(sent) and set(loaded) == sent  # every record exactly once
    assert job._resume(job.Warehouse(spark, str(root)))[1] == {TOPIC: {0: 40, 1: 15, 2: 5}}


class ModelClock:
    """Model minutes, in seconds: moves only when records are read (one minute per record)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class UnitLimit:
    """systemd's TimeoutStartSec on the model clock: the run is stopped once ``hours`` have passed
    since the night's start (checked by the loader before each publishing step)."""

    def __init__(self, clock: ModelClock, hours: float) -> None:
        self.clock, self.limit = clock, clock() + hours * 3600

    def check(self) -> None:
        if self.clock() >= self.limit:
            raise TimeoutError("TimeoutStartSec: the unit stopped the load")


def test_a_backlog_beyond_the_units_6_hour_limit_fails_every_night_until_max_duration_per_run_bounds_it(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~15 s of Spark: two failed nights (one read each), then two bounded nights (3 + 2 rounds)."""
    b = broker_factory(0, num_partitions=2, auto_create_topics_enable="true")
    sent = _produce(b.bootstrap, {0: 250, 1: 150})  # 400 records: 400 model minutes > 6 h
    clock = ModelClock()
    reads: list[dict[int, tuple[int, int]]] = []
    real_read = job._read_topic

    def timed_read(spark: Any, config: LoaderConfig, topic: str, mine: list[OffsetRange], plan: Any = None) -> Any:
        reads.append({r.partition: (r.start, r.end) for r in mine})
        clock.now += 60.0 * sum(r.size for r in mine)  # one model minute per record
        return real_read(spark, config, topic, mine, plan)

    monkeypatch.setattr(job, "_read_topic", timed_read)
    root = tmp_path / "warehouse"
    props = {"bootstrap.servers": b.bootstrap, "topics": TOPIC, "warehouse.path": str(root)}

    def night(config: LoaderConfig) -> dict[str, Any] | None:
        return job._load(spark, config, UnitLimit(clock, 6), clock)  # type: ignore[arg-type]

    # Nights 1 and 2, no bounds: each reads the whole backlog from offset 0, is stopped before
    # publishing, and publishes nothing; each day adds to the backlog.
    unbounded = parse_config(props)
    for n in (1, 2):
        with pytest.raises(TimeoutError):
            night(unbounded)
        assert reads[-1] == {0: (0, 250 + 20 * (n - 1)), 1: (0, 150 + 20 * (n - 1))}  # the same start, more to read
        assert _loaded(root) == [] and job.Warehouse(spark, str(root)).manifests() == []
        sent |= _produce(b.bootstrap, {0: 20, 1: 20}, first=1000 * n)  # the next day's records

    # Nights 3 and 4: max.duration.per.run = 4h, rounds of 100 records (100 model minutes).
    bounded = parse_config({**props, "max.duration.per.run": "4h", "max.records.per.round": "100"})
    reads.clear()
    third = night(bounded)  # rounds at 0, 100, 200 minutes; at 300 the 4 hours have passed: publish
    assert third is not None and third["records"] == {TOPIC: 300}
    assert third["bounded"] == {
        "by": "max.duration.per.run",
        "max_records": 0,
        "max_duration_ms": 4 * 3_600_000,
        "planned": 480,
        "left": 180,
    }
    assert [sum(e - s for s, e in r.values()) for r in reads] == [100, 100, 100]
    fourth = night(bounded)  # 180 left: rounds at 0 and 100 minutes, all read
    assert fourth is not None and fourth["records"] == {TOPIC: 180} and fourth["bounded"] is None
    loaded = _loaded(root)
    assert len(loaded) == len(sent) == 480 and set(loaded) == sent
    assert job.Warehouse(spark, str(root)).staging_dirs() == []  # the failed nights' staging is gone
