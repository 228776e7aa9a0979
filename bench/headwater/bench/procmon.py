"""Resident memory and CPU time of a process, from ``/proc`` (Linux), sampled by a thread."""

from __future__ import annotations

import os
import threading
from types import TracebackType

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (its threads included)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after its closing ')' are fixed.
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


class ProcessMonitor:
    """While the ``with`` block runs: the process' peak RSS (sampled every ``interval`` s) and the
    CPU seconds it used. Reading after the block: ``cpu``, ``peak_rss``, ``end_rss``."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.cpu = 0.0
        self.peak_rss = 0
        self.end_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=f"procmon-{pid}", daemon=True)
        self._cpu0 = 0.0

    def _sample(self) -> None:
        while True:
            try:
                self.peak_rss = max(self.peak_rss, rss_bytes(self.pid))
            except OSError:
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> ProcessMonitor:
        self._cpu0 = cpu_seconds(self.pid)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.cpu = cpu_seconds(self.pid) - self._cpu0
            self.end_rss = rss_bytes(self.pid)
            self.peak_rss = max(self.peak_rss, self.end_rss)
        except OSError:
            pass
