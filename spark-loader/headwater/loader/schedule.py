"""The nightly schedule: ``headwater load -c loader.properties --schedule 02:00``.

The process stays up and starts one load every day at the given UTC time, each in a child process
(``headwater load`` with the same file and overrides), so a run's Spark driver, its JVM and its
memory are gone when it ends, and a failed run is logged and retried the next night without taking
the scheduler down. A run the scheduler would start while another load of the same warehouse runs
on this host (``make lab-load``, or a run that outlasted a day) waits for it: loads of one warehouse
take :func:`headwater.loader.lock.warehouse_lock` first (a ZooKeeper lock across hosts when
``loader.lock.zookeeper.connect`` is set, else a file lock on this host).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

from headwater.loader.lock import warehouse_lock

__all__ = ["next_run", "parse_time", "run_schedule", "warehouse_lock"]

log = logging.getLogger("headwater.loader.schedule")


def parse_time(text: str) -> datetime.time:
    """``HH:MM`` (UTC); ValueError with a readable message otherwise."""
    try:
        hour, minute = (int(x) for x in text.strip().split(":"))
        return datetime.time(hour, minute, tzinfo=datetime.UTC)
    except ValueError:
        raise ValueError(f"--schedule {text!r}: expected HH:MM (UTC), for example 02:00") from None


def next_run(at: datetime.time, now: datetime.datetime) -> datetime.datetime:
    """The first instant at ``at`` (UTC) strictly after ``now``."""
    today = datetime.datetime.combine(now.date(), at.replace(tzinfo=None), tzinfo=datetime.UTC)
    return today if today > now else today + datetime.timedelta(days=1)


def run_child(cmd: Sequence[str], timeout_s: float, child: list[subprocess.Popen[bytes]] | None = None) -> int:
    """Run one load as a child process (its own process group: driver, JVM, Python workers) and
    return its exit code; one that outlasts ``timeout_s`` is stopped (SIGTERM, then SIGKILL after
    60 s) and counts as failed, so a stuck load never blocks the next nights silently."""
    p = subprocess.Popen(list(cmd), start_new_session=True)
    if child is not None:
        child[:] = [p]
    try:
        return p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.error("the nightly load ran longer than %.0f s (loader.run.timeout.ms): stopping it", timeout_s)
        for sig, grace in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 30.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
            try:
                p.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return -1


def run_schedule(at: datetime.time, argv: Sequence[str], run_timeout_s: float = 6 * 3600.0) -> int:
    """Start ``headwater load <argv>`` every day at ``at`` until SIGTERM or SIGINT; returns 0."""
    stop = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        for p in child:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.is_set():
        now = datetime.datetime.now(datetime.UTC)
        when = next_run(at, now)
        log.info("next load at %s UTC (in %s)", when.strftime("%Y-%m-%d %H:%M"), str(when - now).split(".")[0])
        if stop.wait((when - now).total_seconds()):
            break
        cmd = [sys.executable, "-m", "headwater.cli.main", "load", *argv]
        log.info("starting the nightly load: %s", " ".join(cmd))
        started = datetime.datetime.now(datetime.UTC)
        code = run_child(cmd, run_timeout_s, child)
        took = str(datetime.datetime.now(datetime.UTC) - started).split(".")[0]
        if code == 0:
            log.info("nightly load finished in %s", took)
        else:
            log.error("nightly load failed (exit code %d after %s); the next night retries it", code, took)
    log.info("scheduler stopped")
    return 0
