"""The Java side of Kafka against Headwater: Java programs (``tests/java/src``) and Kafka's own tools,
driven as processes whose stdout is the protocol (one JSON object per line for our programs).

The pinned jars come from ``headwater.testing.java`` (``make java-deps``); without them (Maven Central
unreachable) every test here skips with that one line as the reason. Each module shares one 3-broker
cluster (``cluster``) to keep the run short.
"""

from __future__ import annotations

import collections
import itertools
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.testing import java
from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster

SRC = Path(__file__).parent / "src"
#: client version (as the tests name it) -> the classpath set of tests/java/pom.xml
CLIENTS = {"2.3.1": "clients-legacy", "4.x": "clients-newest"}
_chroots = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/java/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.java)


@pytest.fixture(scope="session")
def java_deps() -> None:
    """The pinned jars, fetched now when `make java-deps` did not run; else the Java tests skip."""
    if java.unavailable() is not None and not java.UNREACHABLE.exists():
        java.fetch()
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest,
    java_deps: None,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeperServer,
) -> Iterator[Cluster]:
    """One 3-broker cluster per module; a module's ``CLUSTER_OVERRIDES`` (broker properties) apply."""
    overrides = dict(getattr(request.module, "CLUSTER_OVERRIDES", {}))
    chroot = f"/java{next(_chroots)}"
    c = Cluster(tmp_path_factory.mktemp("java-cluster"), "127.0.0.1", zookeeper.port, chroot, 3, **overrides)
    c.start()
    yield c
    c.close()


class Driver:
    """``tests/java/src/Driver.java`` compiled against one client version."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.set = CLIENTS[version]
        self.classes = java.compile_sources(sorted(SRC.glob("Driver.java")), self.set)

    def command(self, *args: str) -> list[str]:
        return java.java_command("Driver", list(args), self.set, extra=[self.classes])

    def run(self, *args: str, timeout: float = 120) -> dict[str, Any]:
        """Run one command; its last JSON line."""
        return self.run_all(*args, timeout=timeout)[-1]

    def run_all(self, *args: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Run one command (in this version's ``Driver serve`` JVM, started once per session); every
        JSON line it printed (at least one)."""
        server = _SERVERS.get(self.version)
        if server is None or server.proc.poll() is not None:
            server = _SERVERS[self.version] = Server(self.command("serve"))
        return server.run(args, timeout)

    def admin(self, bootstrap: str, op: str, *args: str) -> dict[str, Any]:
        return self.run("admin", bootstrap, op, *args)

    def member(self, bootstrap: str, topic: str, group: str, *configs: str) -> Member:
        return Member(self.command("member", bootstrap, topic, group, *configs))


class Server:
    """``Driver serve``: one JVM running the commands it is sent, one at a time (the JVM's start and
    the client's class loading paid once, not once a command)."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        self.lock = threading.Lock()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _read(stream: Any, put: Callable[[str], None]) -> None:
        for line in stream:
            put(line)

    def run(self, args: tuple[str, ...], timeout: float) -> list[dict[str, Any]]:
        assert all("\t" not in a and "\n" not in a for a in args), args
        with self.lock:
            self.stderr.clear()
            assert self.proc.stdin is not None
            self.proc.stdin.write("\t".join(args) + "\n")
            self.proc.stdin.flush()
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + timeout
            while True:
                try:
                    line = self.lines.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                except queue.Empty:
                    if time.monotonic() < deadline and self.proc.poll() is None:
                        continue
                    self.close()
                    raise AssertionError(
                        f"Driver {args[:3]}: no answer in {timeout:.0f}s (exit {self.proc.poll()}):\n"
                        + "".join(self.stderr)[-4000:]
                    ) from None
                if not line.startswith("{"):
                    continue
                event = dict(json.loads(line))
                if "served" not in event:
                    out.append(event)
                    continue
                assert event["served"] and out, (
                    f"Driver {args[:3]} failed: {event.get('trace', '')[-4000:]}" + ("".join(self.stderr)[-2000:])
                )
                return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)


#: version -> its ``Driver serve`` process (closed at the end of the session)
_SERVERS: dict[str, Server] = {}


@pytest.fixture(scope="session", autouse=True)
def _driver_servers() -> Iterator[None]:
    yield
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


class Member:
    """A long-running group member: its events (JSON lines) in a queue, commands on its stdin."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.history: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 90, what: str = "an event"
    ) -> dict[str, Any]:
        """The first event from now on (or already queued) satisfying ``pred``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.history.append(event)
            if pred(event):
                return event
        raise AssertionError(f"no {what} in {timeout}s (exit {self.proc.poll()}):\n{''.join(self.stderr)[-3000:]}")

    def assignment(self, timeout: float = 90) -> list[int]:
        return list(self.wait(lambda e: e["event"] == "assigned", timeout, "assignment")["partitions"])

    def send(self, command: str, timeout: float = 60) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        word = command.split()[0]
        if word == "position":
            return self.wait(lambda e: e["event"] == "position", timeout, "position")
        return self.wait(lambda e: e["event"] == "done" and e["command"] == word, timeout, f"ack of {command}")

    def close(self) -> None:
        """``exit`` on stdin and its end (a program that only waits for end of input exits too)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("exit\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="session", params=sorted(CLIENTS))
def driver(request: pytest.FixtureRequest, java_deps: None) -> Driver:
    return Driver(request.param)
