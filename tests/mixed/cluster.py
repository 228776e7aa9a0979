"""A mixed cluster: Apache Kafka 2.3.1 brokers and Headwater brokers in one ZooKeeper chroot.

One broker.id space (Kafka 1 and 2, Headwater 3 and 4 by default), one chroot on the session's
ZooKeeper, so one ``/cluster/id`` and one controller for all of them. The Kafka brokers are the
pinned 2.3.1 jars (:class:`headwater.testing.kafka.KafkaBroker`, ``inter.broker.protocol.version``
and ``log.message.format.version`` 2.3) with a small heap; the Headwater brokers are
:class:`tests.harness.broker.BrokerProcess`. Both get the same settings where both have them.

    with MixedCluster(tmp, zookeeper.connect) as mixed:
        mixed.bootstrap               # every broker
        mixed.make_controller(3)      # a Headwater controller (the others paused while it wins)
        mixed.read_replica(2, "t", 0) # broker 2's own copy of t-0, leader or follower
        mixed.kafka_problems()        # ERROR/exception lines of the Kafka brokers' logs

``read_replica`` fetches as Kafka's debugging consumer (replica id -2), which Kafka 2.3 and
Headwater both serve from a follower's log up to its log end offset: each replica is read where
it is, not through its leader. ``kafka_problems`` is what Kafka's own code said about the cluster:
a test fails on any line not in :data:`ALLOWED` (each with its reason).
"""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from headwater.protocol.apis import FETCH
from headwater.protocol.frames import decode_response, encode_request
from headwater.protocol.records.record import Record, iter_batches
from headwater.testing import java
from headwater.testing.cluster import LocalBroker, metadata_broker_ids
from headwater.testing.kafka import KafkaBroker
from headwater.testing.zookeeper import ZooKeeperServer
from headwater.zk import paths
from headwater.zk.controller import decode_controller
from headwater.zk.topics import PartitionState, decode_partition_state
from tests.harness.broker import BrokerProcess

#: Kafka's ``Request.DebuggingConsumerId``: a fetch that may read a follower, up to its log end.
DEBUGGING_CONSUMER_ID = -2
#: The Kafka JVM's heap here (2 cores and little memory shared with other test runs).
KAFKA_HEAP = ["-Xmx448m", "-Xms448m"]

#: Set on every broker, Kafka and Headwater alike.
SETTINGS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": "false",
    # leadership moves only when a test moves it
    "auto.leader.rebalance.enable": "false",
    "controlled.shutdown.retry.backoff.ms": 500,
    "replica.lag.time.max.ms": 10000,
    "zookeeper.session.timeout.ms": 6000,
    "num.partitions": 1,
    "default.replication.factor": 3,
}

#: Lines of the Kafka brokers' logs that are no difference of Headwater's, each with its reason; a
#: regular expression per line.
ALLOWED: dict[str, str] = {
    # a kill -9 or a stop of a broker, or leadership moving away from a follower's leader: the
    # follower's fetcher loses its connection (Kafka logs it at WARN, with the exception)
    r"Connection to node \d+ \(.*\) could not be established": "a broker the test stopped or killed",
    r"Error in response for fetch request .*java\.io\.IOException: Connection to \d+ was disconnected": (
        "the follower's leader was stopped or killed by the test"
    ),
    r"Error sending fetch request .*java\.io\.IOException: Connection to \d+ was disconnected": (
        "the follower's leader was stopped or killed by the test"
    ),
    r"Client session timed out": "the test paused the broker (make_controller) or ZooKeeper was slow",
    r"No meta\.properties file under dir": "a broker's first start (Kafka writes it then)",
    r"Attempting to send response via channel for which there is no open connection": (
        "a client (the writer, a probe of the test) closed its connection before the answer"
    ),
}

#: A line allowed when the same broker's line before it matches the second pattern (``{tp}``: the
#: partition of the first): Kafka's follower meeting a leader that already has the next leader
#: epoch (FENCED_LEADER_EPOCH) parks the partition until its own LeaderAndIsr comes, as it does
#: with a Kafka leader: the controller sends both, in no particular order.
ALLOWED_AFTER: dict[str, tuple[str, str]] = {
    r"Partition (?P<tp>\S+) marked as failed": (
        r"Partition {tp} has an older epoch \(\d+\) than the current leader",
        "the follower's LeaderAndIsr arrived after its leader's (the controller's send order)",
    ),
}

_chroots = itertools.count()


class HeadwaterBroker(BrokerProcess):
    """A Headwater broker of the mixed cluster (a :class:`BrokerProcess` with dotted overrides)."""


class MixedCluster:
    """Kafka brokers ``kafka_ids`` and Headwater brokers ``headwater_ids`` in one chroot of
    ``zk_connect`` (``host:port``). Kafka starts first, so the first controller is a Kafka broker."""

    def __init__(
        self,
        workdir: Path,
        zk_connect: str,
        kafka_ids: Iterable[int] = (1, 2),
        headwater_ids: Iterable[int] = (3, 4),
        *,
        overrides: Mapping[str, object] | None = None,
        chroot: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.chroot = chroot or f"/mixed{next(_chroots)}"
        self.zk_connect = zk_connect + self.chroot
        settings = {**SETTINGS, **(overrides or {})}
        self.kafka: dict[int, KafkaBroker] = {
            i: KafkaBroker(workdir, i, self.zk_connect, settings, heap=KAFKA_HEAP) for i in kafka_ids
        }
        self.headwater: dict[int, LocalBroker] = {
            i: HeadwaterBroker(workdir, i, self.zk_connect, **settings) for i in headwater_ids
        }
        self.zk = KazooClient(hosts=self.zk_connect, timeout=10)
        # Kafka's own ``log.dirs`` lives under kafka-<id>/; Headwater's under broker-<id>-logs
        self._log_marks: dict[int, int] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def ids(self) -> set[int]:
        return set(self.kafka) | set(self.headwater)

    def broker(self, broker_id: int) -> KafkaBroker | LocalBroker:
        return self.kafka.get(broker_id) or self.headwater[broker_id]

    def is_kafka(self, broker_id: int) -> bool:
        return broker_id in self.kafka

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self._running())

    def _running(self) -> list[KafkaBroker | LocalBroker]:
        return [b for i in sorted(self.ids) if (b := self.broker(i)).proc is not None and b.proc.poll() is None]

    def start(self, timeout: float = 120.0) -> MixedCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            root = KazooClient(hosts=self.zk_connect[: -len(self.chroot)], timeout=10)
            root.start(timeout=15)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
            self.zk.start(timeout=15)
            for k in self.kafka.values():  # the JVMs take seconds: all at once, and first
                k.start(wait=False)
            self.wait_for(lambda: self.controller() is not None, timeout, "a Kafka controller")
            for h in self.headwater.values():
                h.start(wait=False)
            for h in self.headwater.values():
                h.wait_ready(timeout)
            self.wait_metadata(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_metadata(self, timeout: float = 60.0, ids: set[int] | None = None) -> None:
        """Until every running broker's Metadata lists ``ids`` (default: every running broker)."""
        want = ids if ids is not None else {b.broker_id for b in self._running()}

        def every() -> bool:
            try:
                return all(metadata_broker_ids("127.0.0.1", b.port) == want for b in self._running())
            except (OSError, ValueError):
                return False

        self.wait_for(every, timeout, f"every broker's metadata to list {sorted(want)}")

    def stop(self) -> None:
        for h in self.headwater.values():
            h.stop(timeout=10)
        for k in self.kafka.values():
            k.stop(timeout=20)
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> MixedCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------------------------

    def kill9(self, broker_id: int) -> None:
        self.broker(broker_id).kill9()

    def restart(self, broker_id: int, timeout: float = 120.0) -> None:
        """Start a stopped or killed broker again on its log directory; wait until every broker
        knows it."""
        b = self.broker(broker_id)
        b.stop(timeout=5)
        b.start(wait=False)
        if isinstance(b, KafkaBroker):
            b.wait_ready({broker_id}, timeout)
        else:
            b.wait_ready(timeout)
        self.wait_metadata(timeout)

    def make_controller(self, broker_id: int, timeout: float = 60.0) -> None:
        """Make ``broker_id`` the controller: the others paused (SIGSTOP, well inside their ZooKeeper
        session), /controller deleted, and when ``broker_id`` holds it the others resumed; they find
        the new controller in /controller when they wake, as after any election they lost."""
        if self.controller() == broker_id:
            return
        others = [b for b in self._running() if b.broker_id != broker_id]
        for b in others:
            b.proc.send_signal(19)  # type: ignore[union-attr]  # SIGSTOP
        try:
            self.zk.delete(paths.CONTROLLER)
            self.wait_for(lambda: self.controller() == broker_id, 5, f"broker {broker_id} to win /controller")
        finally:
            for b in others:
                b.proc.send_signal(18)  # type: ignore[union-attr]  # SIGCONT
        self.wait_metadata(timeout)

    # -- ZooKeeper's view ------------------------------------------------------------------------

    def controller(self) -> int | None:
        try:
            data, _ = self.zk.get(paths.CONTROLLER)
        except Exception:  # NoNodeError: no controller right now
            return None
        return decode_controller(data)

    def state(self, topic: str, partition: int) -> PartitionState:
        data, _ = self.zk.get(paths.partition_state_path(topic, partition))
        return decode_partition_state(topic, partition, data)

    @staticmethod
    def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except Exception as exc:  # a broker or ZooKeeper between states: ask again
                last = exc
            time.sleep(0.2)
        raise AssertionError(
            f"timed out after {timeout:g}s waiting for {what}" + (f" (last: {last!r})" if last else "")
        )

    # -- each replica's own copy -----------------------------------------------------------------

    def read_replica(self, broker_id: int, topic: str, partition: int) -> tuple[list[Record], int]:
        """Every record of ``broker_id``'s replica of the partition (leader or follower) and its log
        end offset, fetched as Kafka's debugging consumer."""
        b = self.broker(broker_id)
        records: list[Record] = []
        offset = 0
        while True:
            part = _fetch(b.port, topic, partition, offset)
            if part["error_code"]:
                raise AssertionError(f"broker {broker_id} answers {topic}-{partition} with error {part['error_code']}")
            raw = part["records"]
            got = 0
            for h, recs in iter_batches(bytes(raw) if raw is not None else b""):
                records += recs
                offset = h.next_offset
                got += 1
            if got == 0:
                return records, offset

    def end_offsets(self, topic: str, partition: int, replicas: Iterable[int]) -> dict[int, int]:
        return {r: self.read_replica(r, topic, partition)[1] for r in replicas}

    def assert_replicas_hold(
        self, topic: str, partition: int, acked: Mapping[int, bytes], replicas: Iterable[int], timeout: float = 60.0
    ) -> int:
        """Every replica's own copy holds every acknowledged record at its offset, and the replicas
        agree record by record (once the followers caught up: waited for); the log end offset."""
        replicas = list(replicas)
        copies: dict[int, list[Record]] = {}

        def converged() -> bool:
            copies.clear()
            for r in replicas:
                copies[r] = self.read_replica(r, topic, partition)[0]
            return len({len(c) for c in copies.values()}) == 1

        self.wait_for(converged, timeout, f"the replicas {replicas} of {topic}-{partition} to hold the same records")
        first = copies[replicas[0]]
        for r in replicas:
            assert [(x.offset, x.value) for x in copies[r]] == [(x.offset, x.value) for x in first], (
                f"broker {r}'s {topic}-{partition} differs from broker {replicas[0]}'s"
            )
            held = {x.offset: x.value for x in copies[r]}
            lost = {o: v for o, v in acked.items() if held.get(o) != v}
            assert not lost, (
                f"broker {r}'s {topic}-{partition} lacks {len(lost)} acknowledged records, e.g. {next(iter(lost.items()))}"
            )
        return first[-1].offset + 1 if first else 0

    # -- what Kafka's code said ------------------------------------------------------------------

    def kafka_log_lines(self) -> Iterator[tuple[int, str]]:
        """Each (broker id, line) of the Kafka brokers' server.log and console output."""
        for i, k in self.kafka.items():
            for f in (k.dir / "server.log", k.output):
                try:
                    text = f.read_text(errors="replace")
                except OSError:
                    continue
                for line in text.splitlines():
                    yield i, line

    def kafka_problems(self, allowed: Mapping[str, str] | None = None) -> list[str]:
        """ERROR and WARN lines (and exception lines) of the Kafka brokers not allowed with a reason."""
        allow = [re.compile(p) for p in {**ALLOWED, **(allowed or {})}]
        out = []
        previous: dict[int, str] = {}
        for i, line in self.kafka_log_lines():
            before, previous[i] = previous.get(i, ""), line
            if not (re.match(r"\[[^\]]*\] (ERROR|WARN|FATAL)", line) or "Exception" in line):
                continue
            if any(a.search(line) for a in allow):
                continue
            if any(
                (m := re.search(p, line)) and re.search(after.format(tp=re.escape(m["tp"])), before)
                for p, (after, _) in ALLOWED_AFTER.items()
            ):
                continue
            out.append(f"kafka-{i}: {line}")
        return list(dict.fromkeys(out))


class AckedWriter:
    """librdkafka (acks=all) writing to ``topics`` on a thread, a record every ``pause_s`` per topic,
    until :meth:`close`; ``acked`` maps (topic, partition) to {offset: value} of what the cluster
    acknowledged; ``failed`` counts the records it did not."""

    def __init__(self, bootstrap: str, topics: list[str], pause_s: float = 0.01, **config: Any) -> None:
        self.topics = topics
        self.pause_s = pause_s
        self.acked: dict[tuple[str, int], dict[int, bytes]] = {}
        self.failed = 0
        self._stop = threading.Event()
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000, **config}
        )
        self.thread = threading.Thread(target=self._run, daemon=True, name="acked-writer")

    def __enter__(self) -> AckedWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_acked(self, n: int, timeout: float = 60.0) -> None:
        """Until ``n`` more records are acknowledged than now: the writer moves."""
        start = self.count()
        MixedCluster.wait_for(lambda: self.count() >= start + n, timeout, f"{n} more acknowledged records")

    def _done(self, err: object, msg: Any) -> None:
        if err is None:
            self.acked.setdefault((msg.topic(), msg.partition()), {})[msg.offset()] = msg.value()
        else:
            self.failed += 1

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for t in self.topics:
                try:
                    self.producer.produce(t, value=f"{t}-{i}".encode(), on_delivery=self._done)
                except BufferError:
                    pass
            i += 1
            self.producer.poll(self.pause_s)
        self.producer.flush(120)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(150)


def _fetch(port: int, topic: str, partition: int, offset: int, timeout: float = 10.0) -> dict[str, Any]:
    """One Fetch v4 of one partition from ``offset`` as the debugging consumer; its partition answer."""
    body = {
        "replica_id": DEBUGGING_CONSUMER_ID,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(FETCH, 4, 1, "headwater-mixed", body))
        size = int.from_bytes(_recv(sock, 4), "big")
        frame = _recv(sock, size)
    _, resp = decode_response(FETCH, 4, memoryview(frame))
    return dict(resp["responses"][0]["partitions"][0])


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return bytes(buf)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[MixedCluster]:
    """Kafka 1, 2 and Headwater 3, 4 for the module; skips without the pinned jars (``make java-deps``)."""
    if java.unavailable() is not None and not java.UNREACHABLE.exists():
        java.fetch()
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with MixedCluster(tmp_path_factory.mktemp("mixed"), zookeeper.connect) as cluster:
        yield cluster
