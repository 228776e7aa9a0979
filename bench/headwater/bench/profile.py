"""``--profile``: where the broker spends its time, by py-spy attached to the broker process.

Extra runs (not counted in any figure, since sampling slows the broker) of the paper's batch-1
workload, Kreps' workload and a kcat read, each with ``py-spy record --pid <broker> --format raw``
(collapsed stacks, one ``frame;frame;... count`` per line). The report lists the functions with the
most samples on top of the stack (self) and, among Headwater's own frames, with the most samples
anywhere in the stack (inclusive).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from headwater.bench.context import Bench, GeneratorError, interrupt_on_exit
from headwater.bench.generators import Workload, estimate_request_size, produce_cmd, why_not
from headwater.bench.scenarios.consume import fill

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
TOP = 12
#: frames every sample passes through (process entry, the connection's task)
_ENTRY = re.compile(r"\(headwater/(cli/main|broker/main)\.py\)|(^|\.)serve \(")


def _short(frame: str) -> str:
    """``append (/work/main/broker/headwater/broker/storage/log.py:123)`` ->
    ``append (headwater/broker/storage/log.py)``; the standard library and site-packages lose
    their prefix too (``asyncio/runners.py``)."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("/headwater/", "/site-packages/", "/lib/python3"):
        at = path.rfind(marker)
        if at >= 0:
            path = path[at + 1 :] if marker == "/headwater/" else path[at + len(marker) :]
            if marker == "/lib/python3":
                path = path.split("/", 1)[-1]
            break
    return f"{m.group('func')} ({path})"


def summarise(raw: str, top: int = TOP) -> dict[str, Any]:
    self_counts: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for f in set(frames):
            if "(headwater/" in f and not _ENTRY.search(f):
                inclusive[f] += count
    if not total:
        return {"samples": 0, "self": [], "inclusive": []}

    def table(c: collections.Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": f, "samples": n, "percent": 100.0 * n / total} for f, n in c.most_common(top)]

    return {"samples": total, "self": table(self_counts), "inclusive": table(inclusive)}


def run(bench: Bench) -> None:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        bench.report.notes.append("--profile: py-spy is not installed (pip install py-spy); no hot spots.")
        return
    assert bench.main is not None
    target = bench.main
    pid = target.pids[0]
    producer = "rdkafka-c" if not why_not(bench, "rdkafka-c") else "confluent"
    workloads = [
        ("produce, paper: 200 B, batch 1", Workload(200, batch=1), 20_000),
        ("produce, Kreps: 100 B, default batching", Workload(100), 3_000_000),
    ]
    for during, w, count in workloads:
        topic = bench.topic("profile")
        out = bench.workdir / f"py-spy-{len(bench.report.hotspots)}.txt"
        try:
            bench.create_topic(target, topic, 1)
            cmd = produce_cmd(bench, producer, target.bootstrap, topic, bench.plan.count(count), w, "1")
            with _spy(py_spy, pid, out):
                bench.produce(target, cmd, w.size, estimate_request_size(w))
        except GeneratorError as e:
            bench.report.notes.append(f"--profile {during}: {e}")
            continue
        _record(bench, f"{during} ({producer})", out)
    if why_not(bench, "kcat"):
        return
    topic = bench.topic("profile-read")
    n = bench.plan.count(3_000_000)
    out = bench.workdir / "py-spy-read.txt"
    try:
        bench.create_topic(target, topic, 1)
        fill(bench, target, topic, n, Workload(100))
        with _spy(py_spy, pid, out):
            bench.consume_kcat(target, topic, n, 100, 1 << 20)
    except GeneratorError as e:
        bench.report.notes.append(f"--profile consume: {e}")
        return
    _record(bench, "consume, 100 B, 1 MiB fetches (kcat)", out)


@contextmanager
def _spy(py_spy: str, pid: int, out: Path) -> Iterator[None]:
    """py-spy sampling ``pid`` for the duration of the block (stopped with SIGINT, then it writes)."""
    cmd = [py_spy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw", "--full-filenames"]
    cmd += ["--output", str(out)]
    with interrupt_on_exit(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)):
        time.sleep(1.0)  # attaching takes a moment
        yield


def _record(bench: Bench, during: str, out: Path) -> None:
    try:
        raw = out.read_text()
    except OSError:
        bench.report.notes.append(f"--profile {during}: py-spy wrote nothing (is ptrace allowed?)")
        return
    summary = summarise(raw)
    summary["during"] = during
    bench.report.hotspots.append(summary)
    bench.log(f"profiled {during}: {summary['samples']} samples")
