"""N Apache Kafka brokers (the pinned 2.3.1 jars) on the same ZooKeeper machinery as Headwater's.

A test and bench dependency, never a runtime one: the jars are the ``kafka-legacy`` set that
``headwater.testing.java`` fetches once into ``build/java/`` (``make java-deps``). Each broker is
``kafka.Kafka <server.properties>`` as ``kafka-server-start.sh`` runs it (heap ``-Xmx1G -Xms1G``,
G1 with Kafka's flags), log4j writing ``server.log`` in its directory and WARN and above to its
``broker-<id>.out`` (so a failure is readable in the test's output). Each cluster gets its own
ZooKeeper chroot, like :class:`headwater.testing.cluster.LocalCluster` clusters share one server::

    with KafkaCluster(tmp, size=3, zk_connect=zk.connect) as kafka:
        kafka.bootstrap      # "127.0.0.1:40001,..."
        kafka.brokers[0].pid

The settings are the ones Headwater's local clusters use where both have them (offsets topic with
``min(size, 3)`` replicas and 3 partitions, a 6 s ZooKeeper session), with ``inter.broker.protocol.version``
and ``log.message.format.version`` pinned at 2.3, the protocol Headwater speaks.

JDK: the 2.3.1 broker runs on JDK 17 with ZooKeeper's 3.5.9 client (tests/java/pom.xml; 3.4.14, which
2.3.1 ships, cannot connect on JDK 14+). :func:`broker_jdk` picks a JDK 17 first (Temurin 25 is
only taken when no 17 exists) and the readiness wait proves it runs: Metadata from every broker
lists every broker.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from headwater.testing import java
from headwater.testing.cluster import metadata_broker_ids
from headwater.testing.zookeeper import ZooKeeperServer, free_port

#: The classpath set of tests/java/pom.xml holding kafka_2.12-2.3.1 and its dependencies.
JARS = "kafka-legacy"
#: What ``kafka-server-start.sh`` and ``kafka-run-class.sh`` give the broker's JVM.
HEAP = ["-Xmx1G", "-Xms1G"]
JVM_PERFORMANCE = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
#: Pinned to the protocol Headwater speaks (what a 2.3 cluster runs with).
PROTOCOL = {"inter.broker.protocol.version": "2.3", "log.message.format.version": "2.3"}

_LOG4J = """\
# As Kafka's config/log4j.properties, shortened: INFO to server.log, WARN and above to the console
log4j.rootLogger=INFO, file, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Threshold=WARN
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
"""

_chroots = itertools.count()


def broker_jdk() -> Path:
    """The JDK the 2.3.1 broker runs on here: 17 (the oldest installed that is 14+), else any newer."""
    jvm = Path("/usr/lib/jvm")
    for home in sorted(jvm.glob("*17*")) if jvm.exists() else []:
        release = home / "release"
        if (home / "bin" / "java").exists() and release.exists() and 'JAVA_VERSION="17' in release.read_text():
            return home
    return java.java_home(17)


def version() -> str:
    """The broker version of the cached jars (``2.3.1``)."""
    for jar in (java.CACHE / JARS).glob("kafka_*.jar"):
        m = re.match(r"kafka_[\d.]+-([\d.]+)\.jar$", jar.name)
        if m:
            return m.group(1)
    raise FileNotFoundError(f"no kafka_*.jar in {java.CACHE / JARS}: {java.unavailable()}")


class KafkaBroker:
    """One ``kafka.Kafka`` process; ``overrides`` are its server.properties."""

    def __init__(
        self,
        workdir: Path,
        broker_id: int,
        zk_connect: str,
        overrides: Mapping[str, object] | None = None,
        heap: list[str] | None = None,
    ):
        self.workdir = workdir
        #: the JVM's heap flags (Kafka's own 1G unless a test on a small machine asks for less)
        self.heap = list(heap or HEAP)
        self.broker_id = broker_id
        self.port = free_port()
        self.dir = workdir / f"kafka-{broker_id}"
        self.properties: dict[str, object] = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.dir / "logs"),
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": 6000,
            **PROTOCOL,
        }
        self.properties.update(overrides or {})
        self.output = workdir / f"kafka-{broker_id}.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"Kafka broker {self.broker_id} is not running")
        return self.proc.pid

    def command(self) -> list[str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        props = self.dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        log4j = self.dir / "log4j.properties"
        log4j.write_text(_LOG4J.format(log=self.dir / "server.log"))
        return [
            str(broker_jdk() / "bin" / "java"),
            *self.heap,
            *JVM_PERFORMANCE,
            f"-Dlog4j.configuration={log4j.as_uri()}",
            f"-Dkafka.logs.dir={self.dir}",
            "-Dzookeeper.sasl.client=false",
            "-Djava.net.preferIPv4Stack=true",
            "-cp",
            java.classpath(JARS),
            "kafka.Kafka",
            str(props),
        ]

    def start(self, wait: bool = True, timeout: float = 90.0) -> None:
        cmd = self.command()
        if self._out is not None:
            self._out.close()
        self._out = open(self.output, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready({self.broker_id}, timeout)

    def wait_ready(self, ids: set[int], timeout: float = 90.0) -> None:
        """Until this broker's Metadata lists every broker in ``ids``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka broker {self.broker_id} exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if ids <= metadata_broker_ids("127.0.0.1", self.port):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Kafka broker {self.broker_id} not ready in {timeout:g}s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        text = ""
        for f in (self.output, self.dir / "server.log"):
            try:
                text += f"--- {f.name}\n" + f.read_text(errors="replace")[-n:]
            except OSError:
                pass
        return text

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``timeout``; the exit code."""
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


class KafkaCluster:
    """``size`` Apache Kafka brokers (ids 0..size-1) in a chroot of their own, on ``zk_connect`` or on a
    ZooKeeper of their own."""

    def __init__(
        self,
        workdir: Path,
        size: int = 1,
        *,
        zk_connect: str | None = None,
        overrides: Mapping[str, object] | None = None,
        chroot: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.size = size
        self.overrides = dict(overrides or {})
        self.overrides.setdefault("offsets.topic.replication.factor", min(size, 3))
        self.overrides.setdefault("offsets.topic.num.partitions", 3)
        self.chroot = chroot or f"/kafka{os.getpid()}-{next(_chroots)}"
        self.zookeeper: ZooKeeperServer | None = None
        self._zk_connect = zk_connect
        self.brokers: list[KafkaBroker] = []

    @property
    def zk_connect(self) -> str:
        if self._zk_connect is None:
            raise RuntimeError("the cluster is not started")
        return self._zk_connect + self.chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self._zk_connect is None:
                self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper")
                self.zookeeper.start()
                self._zk_connect = self.zookeeper.connect
            self.brokers = [KafkaBroker(self.workdir, i, self.zk_connect, self.overrides) for i in range(self.size)]
            for broker in self.brokers:  # all at once: each JVM takes seconds to start
                broker.start(wait=False)
            ids = {b.broker_id for b in self.brokers}
            for broker in self.brokers:
                broker.wait_ready(ids, timeout)
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

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
