"""N local broker processes on one real ZooKeeper, for benchmarks and ad-hoc experiments.

``LocalCluster`` starts a ZooKeeper (:class:`ZooKeeperServer`) unless given a connect string,
then ``size`` brokers (``python -m headwater.cli.main broker start -c <props>``), each on a free
127.0.0.1 port with its own log directory under ``workdir``. Everything it started is stopped
by pid, in reverse order, when the ``with`` block ends::

    with LocalCluster(tmp, size=3) as cluster:
        cluster.bootstrap   # "127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003"
        cluster.brokers[0].pid

``wan=`` gives every broker a second listener, ``WAN``, advertised at the port the callable returns
for it (a :class:`headwater.lab.link.Link` route to it): a client bootstrapped through the link
(``cluster.wan_bootstrap``) is told the link's addresses and stays on the link, as the mirror does
between datacenters; everything else (the brokers among themselves, local clients) goes direct.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from headwater.protocol.apis import METADATA
from headwater.testing.wire import request
from headwater.testing.zookeeper import ZooKeeperServer, free_port


def metadata_broker_ids(host: str, port: int, timeout: float = 2.0) -> set[int]:
    """The broker ids a broker lists in a Metadata v1 answer (no topics asked)."""
    body = request(host, port, METADATA, 1, {"topics": []}, timeout=timeout)
    return {int(b["node_id"]) for b in body["brokers"]}


class LocalBroker:
    """One broker process; ``overrides`` are Kafka property names (``log.segment.bytes``)."""

    def __init__(
        self,
        workdir: Path,
        broker_id: int,
        zk_connect: str,
        overrides: Mapping[str, object] | None = None,
        wan: Callable[[int], int] | None = None,
    ) -> None:
        self.workdir = workdir
        self.broker_id = broker_id
        self.port = free_port()
        self.log_dir = workdir / f"broker-{broker_id}-logs"
        self.properties: dict[str, object] = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": 6000,
        }
        self.wan_port: int | None = None  # the port advertised for the WAN listener (the link's)
        if wan is not None:
            listen = free_port()
            self.wan_port = wan(listen)
            self.properties.update(
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:{self.port},WAN://127.0.0.1:{listen}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},WAN://127.0.0.1:{self.wan_port}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,WAN:PLAINTEXT",
                    "inter.broker.listener.name": "PLAINTEXT",
                }
            )
        self.properties.update(overrides or {})
        if self.properties.get("prometheus.port") == "auto":  # a port of its own, known here
            self.properties["prometheus.port"] = free_port()
            self.properties["prometheus.host"] = "127.0.0.1"
        self.output = workdir / f"broker-{broker_id}.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None
        self._run_starts_at = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """Its Prometheus endpoint, when started with ``prometheus.port`` (``"auto"``: a free port)."""
        port = self.properties.get("prometheus.port")
        return f"http://127.0.0.1:{port}/metrics" if port not in (None, "auto") else None

    def metric(self, name: str) -> float:
        """The sum of the samples named ``name`` on this broker's /metrics (0 when it has none);
        needs ``prometheus.port``."""
        from prometheus_client.parser import text_string_to_metric_families

        url = self.metrics_url
        if url is None:
            raise RuntimeError(f"broker {self.broker_id} has no prometheus.port")
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"broker {self.broker_id} is not running")
        return self.proc.pid

    def start(self, timeout: float = 30.0, command_prefix: list[str] | None = None, wait: bool = True) -> None:
        """Start and (unless ``wait`` is False) wait until it registered and listens. ``command_prefix``
        wraps the Python command (e.g. a profiler: ``["py-spy", "record", ..., "--"]``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / f"broker-{self.broker_id}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        cmd = [sys.executable, "-m", "headwater.cli.main", "broker", "start", "-c", str(props)]
        if self._out is not None:
            self._out.close()
        self._run_starts_at = self.output.stat().st_size if self.output.exists() else 0
        out = self._out = open(self.output, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*(command_prefix or []), *cmd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until this run of the broker logged "started" and accepts connections."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited {self.proc.returncode}:\n{self.tail()}")
            if "] started" in self._this_run_output() and self.knows_itself():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"broker {self.broker_id} not ready in {timeout:g}s:\n{self.tail()}")

    def knows_itself(self) -> bool:
        """Does the broker answer Metadata listing itself (the controller has told it the cluster)?"""
        try:
            return self.broker_id in metadata_broker_ids("127.0.0.1", self.port)
        except (OSError, ValueError):
            return False

    def _this_run_output(self) -> str:
        try:
            with open(self.output, "rb") as f:
                f.seek(self._run_starts_at)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill9(self) -> None:
        """A hard crash (SIGKILL); the log directory stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process stays, silent (a long GC pause, a stalled VM)."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def tail(self, n: int = 4000) -> str:
        try:
            return self.output.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; returns the exit code."""
        proc, self.proc = self.proc, None
        code: int | None = None
        if proc is not None:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            code = proc.returncode
        out, self._out = self._out, None
        if out is not None:
            out.close()
        return code


class LocalCluster:
    """``size`` brokers (ids 0..size-1) and, unless ``zk_connect`` is given, their own ZooKeeper."""

    def __init__(
        self,
        workdir: Path,
        size: int = 1,
        *,
        zk_connect: str | None = None,
        overrides: Mapping[str, object] | None = None,
        wan: Callable[[int], int] | None = None,
    ) -> None:
        self.workdir = workdir
        self.size = size
        self.wan = wan
        self.overrides = dict(overrides or {})
        # __consumer_offsets needs that many live brokers (Kafka 2.3's rule); fewer than 3 here. A
        # consumer with a group.id creates it: a few partitions for a local cluster, not Kafka's 50
        self.overrides.setdefault("offsets.topic.replication.factor", min(size, 3))
        self.overrides.setdefault("offsets.topic.num.partitions", 3)
        self.zookeeper: ZooKeeperServer | None = None
        self._zk_connect = zk_connect
        self.brokers: list[LocalBroker] = []

    @property
    def zk_connect(self) -> str:
        if self._zk_connect is None:
            raise RuntimeError("the cluster is not started")
        return self._zk_connect

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def wan_bootstrap(self) -> str:
        """The brokers' WAN listeners as advertised (through the link); needs ``wan=``."""
        if self.wan is None:
            raise RuntimeError("the cluster has no WAN listener (LocalCluster(wan=...))")
        return ",".join(f"127.0.0.1:{b.wan_port}" for b in self.brokers)

    def start(self, command_prefix: list[str] | None = None) -> LocalCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self._zk_connect is None:
                self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
                self.zookeeper.start()
                self._zk_connect = self.zookeeper.connect
            for i in range(self.size):
                broker = LocalBroker(self.workdir, i, self._zk_connect, self.overrides, self.wan)
                self.brokers.append(broker)
                broker.start(command_prefix=command_prefix)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()
        self.brokers = []
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
            self._zk_connect = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
