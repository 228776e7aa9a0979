"""The mirror with many partitions (issue 26; issue 29's resume-scan memory row).

``python -m headwater.bench.mirror_scale [--topics 200] [--partitions 10] [--records-per-partition N] [--json]``

A one-broker source cluster and a one-broker destination cluster (each under its own chroot of one
ZooKeeper), ``--topics`` topics of ``--partitions`` partitions in the source, every partition
filled with ``--records-per-partition`` records of 100 B by librdkafka (confluent-kafka), then one
``headwater mirror`` process copying all of them (a topic regex; the destination topics are created
by the mirror, as in production). Measured:

- start-up: mirror start to the first record in the destination (joining the group, planning every
  topic -- the destination topics are created then --, claiming every partition in ZooKeeper);
- records/s from the first destination record to the last (as bench scenario 7);
- the mirror's peak RSS and CPU seconds over the copy (:class:`ProcessMonitor`);
- a restart: the mirror is killed (``kill -9``) the moment the destination holds everything, so
  the copies of its last few seconds (``offset.commit.interval.ms``, 5 s) are not committed. A
  partition with a committed target offset is resume-scanned (what the target already holds is
  skipped); one without (never committed) is copied again from its committed source offset or
  the start: at-least-once, counted from ZooKeeper right after the kill. Once its session is gone,
  ``--resume-records`` more records are written into every partition and a new mirror process
  starts: time to the first new record and to the last (every partition claimed, its target
  scanned from the committed target offset -- the resume scan -- and copied), peak RSS during it,
  the records the resume scan found already copied (from the mirror's log), and the duplicates in
  the destination (must be exactly the at-least-once re-copies counted at the kill).

Progress goes to stderr; the table (or ``--json``) to stdout. The destination's log end offsets
are read with one ListOffsets request per poll (one broker), not one per partition.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headwater.bench.procmon import ProcessMonitor
from headwater.protocol.apis import LIST_OFFSETS
from headwater.protocol.frames import decode_response, encode_request
from headwater.testing.cluster import LocalCluster
from headwater.testing.wire import read_frame
from headwater.testing.zookeeper import ZooKeeperServer
from headwater.zk.consumers import decode_offset
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import consumer_ids_path, consumer_offset_path, mirror_target_path

SIZE = 100
PREFIX = "scale"
GROUP = "bench-mirror-scale"
#: the mirror's ZooKeeper session timeout (headwater.mirror.group.SESSION_TIMEOUT_S) plus slack
SESSION_GONE_S = 60.0
_SKIPPED = re.compile(r"(\d+) batch\(es\), (\d+) record\(s\) from offset \d+ were already copied")


class ScaleError(RuntimeError):
    pass


@dataclass
class Copy:
    """One mirror process' run."""

    records: int = 0  # records in the destination at the end
    startup_s: float = 0.0  # process start -> first destination record
    copy_s: float = 0.0  # first destination record -> last
    total_s: float = 0.0  # process start -> last destination record
    records_per_s: float = 0.0
    peak_rss_mib: float = 0.0
    cpu_s: float = 0.0
    cpu_pct: float = 0.0  # of one core, over total_s


@dataclass
class Result:
    topics: int
    partitions_per_topic: int
    partitions: int
    records_per_partition: int
    records: int
    create_topics_s: float = 0.0
    fill_s: float = 0.0
    first: Copy = field(default_factory=Copy)
    restart: Copy = field(default_factory=Copy)
    #: at the kill: partitions without a committed target offset, and what the next mirror copies
    #: again of them by design (at-least-once); the others are resume-scanned
    uncommitted_partitions: int = 0
    expected_recopied: int = 0
    resume_records: int = 0
    resume_skipped_records: int = 0  # found in the target by the resume scan, not produced again
    resume_skipped_partitions: int = 0
    duplicates: int = 0  # destination records beyond the source's (after the restart): expected_recopied
    source_total: int = 0
    destination_total: int = 0


def log(msg: str) -> None:
    print(f"[mirror_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the destination's log end offsets ---------------------------------------------------------


class LogEnds:
    """Sum of the high watermarks of many partitions of one broker: one ListOffsets (v1, LATEST)
    per call over a kept connection. A partition the broker does not lead yet counts 0."""

    def __init__(self, bootstrap: str, partitions: dict[str, int]) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.addr = (host, int(port))
        self.partitions = partitions
        self._sock: socket.socket | None = None
        self._correlation = 0

    def total(self) -> int:
        body = {
            "replica_id": -1,
            "topics": [
                {"name": t, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(n)]}
                for t, n in self.partitions.items()
            ],
        }
        for attempt in range(2):
            try:
                if self._sock is None:
                    self._sock = socket.create_connection(self.addr, timeout=30)
                self._correlation += 1
                self._sock.sendall(encode_request(LIST_OFFSETS, 1, self._correlation, "mirror-scale", body))
                frame = read_frame(self._sock)
                break
            except OSError:
                self.close()
                if attempt:
                    raise
        _, answer = decode_response(LIST_OFFSETS, 1, memoryview(frame))
        return sum(
            max(int(p["offset"]), 0) for t in answer["topics"] for p in t["partitions"] if int(p["error_code"]) == 0
        )

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


# -- source set-up ------------------------------------------------------------------------------


def create_topics(bootstrap: str, topics: list[str], partitions: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=60)
    for t, f in futures.items():
        try:
            f.result(timeout)
        except Exception as e:
            raise ScaleError(f"creating {t}: {e}") from None
    deadline = time.monotonic() + timeout
    while True:  # every partition with a leader in the broker's metadata
        md = admin.list_topics(timeout=30).topics
        ready = sum(
            1
            for t in topics
            if t in md
            and md[t].error is None
            and len(md[t].partitions) == partitions
            and all(p.leader >= 0 for p in md[t].partitions.values())
        )
        if ready == len(topics):
            return
        if time.monotonic() > deadline:
            raise ScaleError(f"{ready} of {len(topics)} topics ready after {timeout:.0f}s")
        time.sleep(0.5)


def fill(bootstrap: str, topics: Iterable[str], partitions: int, per_partition: int) -> int:
    """``per_partition`` records of :data:`SIZE` bytes into every partition; returns how many."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "acks": "1",
            "compression.type": "none",
        }
    )
    value = b"x" * SIZE
    n = 0
    for i in range(per_partition):
        for t in topics:
            for p in range(partitions):
                while True:
                    try:
                        producer.produce(t, value, partition=p, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
                n += 1
        if i % 16 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left or errors:
        raise ScaleError(f"fill: {left} record(s) undelivered, errors: {errors}")
    return n


# -- the mirror process ---------------------------------------------------------------------------


def start_mirror(
    workdir: Path, name: str, source_zk: str, source: str, dest_zk: str, dest: str, profile: Path | None
) -> tuple[subprocess.Popen[bytes], Path]:
    config = workdir / f"{name}.properties"
    props = {
        "clusters": "src, dst",
        "src.zookeeper.connect": source_zk,
        "src.bootstrap.servers": source,
        "dst.bootstrap.servers": dest,
        "dst.zookeeper.connect": dest_zk,
        "src->dst.enabled": "true",
        "src->dst.topics": f"{PREFIX}-.*",
        "group.id": GROUP,
        "emit.heartbeats.enabled": "false",
    }
    config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    out_path = workdir / f"{name}.log"
    prefix = [sys.executable]
    if profile is not None:
        prefix += ["-m", "cProfile", "-o", str(profile)]
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(
            [*prefix, "-m", "headwater.cli.main", "mirror", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return proc, out_path


def watch_copy(
    proc: subprocess.Popen[bytes], out: Path, ends: LogEnds, start_total: int, count: int, deadline_s: float
) -> Copy:
    """Wait until the destination holds ``count`` records (it held ``start_total`` when ``proc``
    started); the timings and the process' resources over that time."""
    c = Copy()
    started = time.monotonic()
    first = 0.0
    first_total = start_total
    last_report = started
    with ProcessMonitor(proc.pid, interval=0.1) as mon:
        while True:
            if proc.poll() is not None:
                tail = out.read_text(errors="replace").strip().splitlines()[-3:] or ["no output"]
                raise ScaleError(f"the mirror exited {proc.returncode}: {' | '.join(tail)[:600]}")
            seen = ends.total()
            now = time.monotonic()
            if seen > start_total and not first:
                first, first_total = now, seen
                log(f"first record in the destination {now - started:.2f}s after the mirror started")
            if seen >= count:
                break
            if now - last_report >= 5:
                log(f"  destination holds {seen:,} of {count:,} records ({now - started:.0f}s)")
                last_report = now
            if now - started > deadline_s:
                raise ScaleError(f"the destination holds {seen:,} of {count:,} records after {deadline_s:.0f}s")
            time.sleep(0.1)
    c.records = seen
    c.total_s = now - started
    c.startup_s = first - started
    c.copy_s = now - first
    copied = seen - first_total
    # everything arrived between two looks: the rate over the whole run
    c.records_per_s = copied / c.copy_s if copied > 0 and c.copy_s > 0 else (seen - start_total) / c.total_s
    c.peak_rss_mib = mon.peak_rss / (1 << 20)
    c.cpu_s = mon.cpu
    c.cpu_pct = 100.0 * mon.cpu / c.total_s if c.total_s else 0.0
    return c


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 120.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def expected_recopies(zk_connect: str, group: str, ends: dict[tuple[str, int], int]) -> tuple[int, int]:
    """After the kill: how many records the next mirror copies again by design, and from how many
    partitions. A partition with a committed target offset (``mirror-target``) is resume-scanned:
    nothing copied again. One without (never committed, or committed before its first produce) is
    at-least-once from its committed source offset (or the start): everything the killed mirror
    copied past it is copied again. ``ends``: each partition's source log end at the kill (all of
    it was in the destination)."""
    from kazoo.exceptions import NoNodeError

    from headwater.zk.client import kazoo_client

    zk = kazoo_client(zk_connect, session_timeout_s=10.0)
    zk.start(timeout=30)
    records = partitions = 0
    try:
        for (t, p), end in ends.items():
            if zk.exists(mirror_target_path(group, t, p)) is not None:
                continue
            try:
                path = consumer_offset_path(group, t, p)
                committed = max(decode_offset(path, zk.get(path)[0]), 0)
            except (NoNodeError, ZnodeFormatError):
                committed = 0
            if end > committed:
                records += end - committed
                partitions += 1
    finally:
        zk.stop()
        zk.close()
    return records, partitions


def wait_members_gone(zk_connect: str, group: str, timeout: float) -> float:
    """Wait until the group has no live member (the killed mirror's session expired); seconds."""
    from kazoo.exceptions import NoNodeError

    from headwater.zk.client import kazoo_client

    zk = kazoo_client(zk_connect, session_timeout_s=10.0)
    zk.start(timeout=30)
    started = time.monotonic()
    try:
        while True:
            try:
                members = zk.get_children(consumer_ids_path(group))
            except NoNodeError:
                members = []
            if not members:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise ScaleError(f"the killed mirror is still a member of {group} after {timeout:.0f}s: {members}")
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()


# -- the run --------------------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: Path) -> Result:
    topics = [f"{PREFIX}-{i:04d}" for i in range(args.topics)]
    parts = args.partitions
    r = Result(args.topics, parts, args.topics * parts, args.records_per_partition, 0)
    deadline = args.deadline
    zk = ZooKeeperServer(workdir / "zookeeper")
    zk.start()
    try:
        source_zk, dest_zk = f"{zk.connect}/scale-src", f"{zk.connect}/scale-dst"
        with (
            LocalCluster(workdir / "src", size=1, zk_connect=source_zk) as src,
            LocalCluster(workdir / "dst", size=1, zk_connect=dest_zk) as dst,
        ):
            log(f"source {src.bootstrap}, destination {dst.bootstrap}")
            t0 = time.monotonic()
            create_topics(src.bootstrap, topics, parts, deadline)
            r.create_topics_s = time.monotonic() - t0
            log(f"created {len(topics)} topics x {parts} partitions in {r.create_topics_s:.1f}s")
            t0 = time.monotonic()
            r.records = fill(src.bootstrap, topics, parts, args.records_per_partition)
            r.fill_s = time.monotonic() - t0
            log(f"filled {r.records:,} records of {SIZE} B in {r.fill_s:.1f}s")
            ends = LogEnds(dst.bootstrap, dict.fromkeys(topics, parts))
            source_ends = LogEnds(src.bootstrap, dict.fromkeys(topics, parts))
            try:
                r.source_total = source_ends.total()
                if r.source_total != r.records:
                    raise ScaleError(f"the source holds {r.source_total:,} records, {r.records:,} were written")
                profile = Path(args.profile) if args.profile else None
                proc, out = start_mirror(
                    workdir, "mirror-1", source_zk, src.bootstrap, dest_zk, dst.bootstrap,
                    profile.with_suffix(".first.prof") if profile else None,
                )  # fmt: skip
                log(f"mirror started (pid {proc.pid}), copying {r.partitions:,} partitions")
                try:
                    r.first = watch_copy(proc, out, ends, 0, r.records, deadline)
                finally:
                    # kill -9 (a crash): what it copied since its last commit is left for the resume
                    # scan; a profiled run is stopped cleanly, so cProfile writes its file
                    stop(proc, signal.SIGTERM if profile else signal.SIGKILL)
                log(
                    f"copied {r.first.records:,} records at {r.first.records_per_s:,.0f} records/s; "
                    f"peak RSS {r.first.peak_rss_mib:.0f} MiB; mirror killed"
                )
                r.expected_recopied, r.uncommitted_partitions = expected_recopies(
                    source_zk, GROUP, {(t, p): args.records_per_partition for t in topics for p in range(parts)}
                )
                log(
                    f"at the kill {r.uncommitted_partitions:,} partition(s) had no committed target offset: "
                    f"{r.expected_recopied:,} record(s) to be copied again (at-least-once)"
                )
                gone = wait_members_gone(source_zk, GROUP, SESSION_GONE_S)
                log(f"the killed mirror's session is gone after {gone:.1f}s")
                r.resume_records = fill(src.bootstrap, topics, parts, args.resume_records)
                r.source_total = source_ends.total()
                before = ends.total()
                proc, out = start_mirror(
                    workdir, "mirror-2", source_zk, src.bootstrap, dest_zk, dst.bootstrap,
                    profile.with_suffix(".restart.prof") if profile else None,
                )  # fmt: skip
                log(f"mirror restarted (pid {proc.pid}): {r.resume_records:,} new records to copy")
                try:
                    # what the source holds plus the re-copies counted at the kill; a duplicate
                    # beyond those would come with the last records: look once more a moment later
                    r.restart = watch_copy(proc, out, ends, before, r.source_total + r.expected_recopied, deadline)
                    time.sleep(2.0)
                    r.destination_total = ends.total()
                finally:
                    stop(proc)
                r.duplicates = r.destination_total - r.source_total
                text = out.read_text(errors="replace")
                skipped = [int(m.group(2)) for m in _SKIPPED.finditer(text)]
                r.resume_skipped_records, r.resume_skipped_partitions = sum(skipped), len(skipped)
                log(
                    f"resumed: first new record after {r.restart.startup_s:.2f}s, all after "
                    f"{r.restart.total_s:.2f}s; peak RSS {r.restart.peak_rss_mib:.0f} MiB; "
                    f"{r.duplicates} duplicate(s)"
                )
            finally:
                ends.close()
                source_ends.close()
    finally:
        zk.stop()
    return r


def table(r: Result) -> str:
    f, s = r.first, r.restart
    rows = [
        ("partitions", f"{r.topics} topics x {r.partitions_per_topic} = {r.partitions:,}"),
        ("records copied (100 B)", f"{r.records:,} ({r.records_per_partition:,} a partition)"),
        ("CreateTopics (source, one request)", f"{r.create_topics_s:.1f} s"),
        ("first copy: start-up (start -> first record)", f"{f.startup_s:.2f} s"),
        ("first copy: records/s (first -> last record)", f"{f.records_per_s:,.0f}"),
        ("first copy: start -> last record", f"{f.total_s:.2f} s"),
        ("first copy: mirror peak RSS", f"{f.peak_rss_mib:.0f} MiB"),
        ("first copy: mirror CPU", f"{f.cpu_s:.1f} s ({f.cpu_pct:.0f} % of a core)"),
        (
            "kill -9 at the last record: not committed",
            f"{r.uncommitted_partitions:,} partitions, {r.expected_recopied:,} records (copied again)",
        ),
        ("restart: new records", f"{r.resume_records:,}"),
        ("restart: start -> first new record", f"{s.startup_s:.2f} s"),
        ("restart: start -> every partition caught up", f"{s.total_s:.2f} s"),
        ("restart: mirror peak RSS", f"{s.peak_rss_mib:.0f} MiB"),
        ("restart: mirror CPU", f"{s.cpu_s:.1f} s"),
        (
            "restart: found copied by the resume scan",
            f"{r.resume_skipped_records:,} records in {r.resume_skipped_partitions:,} partitions",
        ),
        (
            "destination vs source",
            f"{r.destination_total:,} / {r.source_total:,} ({r.duplicates:,} duplicates, "
            f"{r.expected_recopied:,} expected)",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m headwater.bench.mirror_scale", description=__doc__.split("\n")[0])
    p.add_argument("--topics", type=int, default=200)
    p.add_argument("--partitions", type=int, default=10, help="partitions a topic")
    p.add_argument("--records-per-partition", type=int, default=1000)
    p.add_argument("--resume-records", type=int, default=10, help="records a partition written before the restart")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds each phase may take")
    p.add_argument("--workdir", help="keep the clusters' files and the mirror logs here (default: a temporary one)")
    p.add_argument("--profile", help="run the mirror under cProfile, writing PROFILE.first.prof / .restart.prof")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = p.parse_args(argv)
    for name in ("topics", "partitions", "records_per_partition", "resume_records"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        result = run(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="mirror-scale-") as tmp:
            result = run(args, Path(tmp))
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ScaleError as e:
        print(f"mirror_scale: {e}", file=sys.stderr)
        sys.exit(1)
