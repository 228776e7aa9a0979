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
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from headwater.protocol.apis import FETCH
from headwater.protocol.records.record import Record, iter_batches
from headwater.testing import java
from headwater.testing.cluster import LocalBroker, metadata_broker_ids
from headwater.testing.kafka import JARS, KafkaBroker, broker_jdk
from headwater.testing.wire import request
from headwater.testing.zookeeper import ZooKeeperServer
from headwater.zk import paths
from headwater.zk.config import decode_entity_config
from headwater.zk.controller import decode_controller
from headwater.zk.topics import PartitionState, decode_assignment, decode_partition_state
from tests.harness.broker import BrokerProcess

#: Kafka's ``Request.DebuggingConsumerId``: a fetch that may read a follower, up to its log end.
DEBUGGING_CONSUMER_ID = -2
#: The Kafka JVM's heap here (2 cores and little memory shared with other test runs).
KAFKA_HEAP = ["-Xmx448m", "-Xms448m"]

#: Set on every broker, Kafka and Headwater alike.
SETTINGS: dict[str, object] = {
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    # Kafka 2.3 fixes both coordinators' partition counts at start (from ZooKeeper, else these)
    "transaction.state.log.num.partitions": 3,
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

#: Lines of the Kafka brokers' logs that are no difference of Headwater's, each with its reason (a
#: regular expression searched in the line).
ALLOWED: dict[str, str] = {
    r"No meta\.properties file under dir": "a broker's first start (Kafka writes it then)",
    r"Attempting to send response via channel for which there is no open connection": (
        "a client (the writer, a probe of the test) closed its connection before the answer"
    ),
    r"Client was shutdown before response was read": "a follower's fetcher stopped (leader change, shutdown)",
    r"Client session timed out, have not heard from server": "the test paused the broker (make_controller)",
    r"Error for partition \S+ at offset 0 \(kafka\.server\.ReplicaFetcherThread\)": (
        "a new partition's follower fetched before its leader had made the partition (the controller"
        " sends each replica its LeaderAndIsr at once; with UNKNOWN_TOPIC_OR_PARTITION Kafka retries)"
    ),
    r"failed to record follower \d+'s position -1 since the replica is not recognized": (
        "a new replica (a reassignment's) fetched before its leader applied the LeaderAndIsr naming it: the"
        " controller sends both at once, and a Headwater controller reaches itself without a network hop;"
        " Kafka answers empty and the follower fetches again"
    ),
    r"Retrying controlled shutdown after the previous attempt failed": (
        "the last Kafka broker of the cluster stopping at teardown has nowhere to move its leaders"
    ),
}

#: Lines allowed when they concern a broker the test stopped or killed since :meth:`MixedCluster.mark`
#: (``{id}``: that broker's id): its peers and the controller lose their connections to it.
ALLOWED_DOWN: dict[str, str] = {
    r"Connection to node {id} \(.*\) could not be established": "the broker is down",
    r"Connection to 127\.0\.0\.1:\d+ \(id: {id} rack: null\) failed": "the broker is down",
    r"Connection to {id} was disconnected before the response was read": "the broker went down mid-request",
    r"connection to broker \S+ \(id: {id} rack: null\) was unsuccessful": "the controller's link to it",
    r"fails to send request .* to broker \S+ \(id: {id} rack: null\)": "the controller's link to it",
    r"fails to send a request to broker \S+ \(id: {id} rack: null\)": (
        "the controller's send thread to it stopped mid-request (InterruptedException) as the broker left"
    ),
    r"leaderId={id}, fetcherId=\d+\] Error (in response for|sending) fetch request": "a follower of it",
}

#: A line allowed when one of the same broker's 50 lines before it matches the second pattern (``{tp}``: the
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
        #: where each Kafka log file stood at :meth:`mark`, and the brokers downed since
        self._log_marks: dict[Path, int] = {}
        self.downed: set[int] = set()

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
        self.downed.add(broker_id)
        self.broker(broker_id).kill9()

    def stop_broker(self, *broker_ids: int) -> None:
        """SIGTERM to each (at once): a controlled shutdown through whichever controller there is;
        returns when all exited."""
        self.downed.update(broker_ids)
        with ThreadPoolExecutor(len(broker_ids)) as pool:
            list(pool.map(lambda i: self.broker(i).stop(), broker_ids))

    def restart(self, *broker_ids: int, timeout: float = 120.0) -> None:
        """Start stopped or killed brokers again (at once) on their log directories; wait until
        every broker knows them."""
        self.downed.update(broker_ids)
        for i in broker_ids:
            b = self.broker(i)
            b.stop(timeout=5)
            b.start(wait=False)
        for i in broker_ids:
            b = self.broker(i)
            if isinstance(b, KafkaBroker):
                b.wait_ready({i}, timeout)
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

    def kafka_tool(self, main_class: str, *args: str, timeout: float = 120.0) -> str:
        """Run one of Kafka 2.3.1's own admin tools (``kafka.admin.ReassignPartitionsCommand``) from
        the pinned jars, as ``kafka-run-class.sh`` does; its output. Fails on a non-zero exit."""
        cmd = [
            str(broker_jdk() / "bin" / "java"),
            "-Xmx192m",
            # a short-lived command: start fast rather than run fast (C1 only, the serial collector)
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Dzookeeper.sasl.client=false",
            f"-Dlog4j.configuration={self._tool_log4j().as_uri()}",
            "-cp",
            java.classpath(JARS),
            main_class,
            *args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{main_class} {' '.join(args)} exited {proc.returncode}:\n{out}"
        return out

    def _tool_log4j(self) -> Path:
        f = self.workdir / "tools-log4j.properties"
        if not f.exists():
            f.write_text(
                "log4j.rootLogger=WARN, stderr\n"
                "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                "log4j.appender.stderr.Target=System.err\n"
                "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            )
        return f

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

    def assignment(self, topic: str) -> dict[int, list[int]]:
        data, _ = self.zk.get(paths.topic_path(topic))
        return {p: list(r) for p, r in decode_assignment(topic, data).partitions.items()}

    def topic_config(self, topic: str) -> dict[str, str]:
        path = paths.topic_config_path(topic)
        return decode_entity_config(path, self.zk.get(path)[0])

    def broker_config(self, broker_id: int) -> dict[str, str]:
        path = paths.broker_config_path(str(broker_id))
        return decode_entity_config(path, self.zk.get(path)[0]) if self.zk.exists(path) else {}

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

    def mark(self) -> None:
        """From here on, :meth:`kafka_problems` reads only new lines, and allows lines about the
        brokers downed after this."""
        self.downed.clear()
        for k in self.kafka.values():
            for f in (k.dir / "server.log", k.output):
                self._log_marks[f] = f.stat().st_size if f.exists() else 0

    def kafka_log_lines(self) -> Iterator[tuple[int, str]]:
        """Each (broker id, line) of the Kafka brokers' server.log since :meth:`mark`, then what else
        their JVMs printed (the console's lines that are not log4j's: those are in server.log)."""
        for i, k in self.kafka.items():
            for f in (k.dir / "server.log", k.output):
                try:
                    with open(f, "rb") as fh:
                        fh.seek(self._log_marks.get(f, 0))
                        text = fh.read().decode(errors="replace")
                except OSError:
                    continue
                for line in text.splitlines():
                    if f == k.output and re.match(r"\[\d{4}-", line):
                        continue
                    yield i, line

    def kafka_problems(self, allowed: Mapping[str, str] | None = None) -> list[str]:
        """The Kafka brokers' ERROR, WARN and FATAL lines and any line naming an exception, since
        :meth:`mark`, that :data:`ALLOWED`, :data:`ALLOWED_DOWN`, :data:`ALLOWED_AFTER` and
        ``allowed`` (pattern: reason) do not explain. An exception's own line right under a line
        explained is explained with it."""
        allow = [re.compile(p) for p in {**ALLOWED, **(allowed or {})}]
        allow += [re.compile(p.format(id=d)) for p in ALLOWED_DOWN for d in sorted(self.downed)]
        out = []
        previous_explained: dict[int, bool] = {}
        recent: dict[int, deque[str]] = {}
        for i, line in self.kafka_log_lines():
            lines = recent.setdefault(i, deque(maxlen=50))
            explained = self._explained(line, lines, previous_explained.get(i, True), allow)
            previous_explained[i] = explained
            lines.append(line)
            if not explained:
                out.append(f"kafka-{i}: {line}")
        return list(dict.fromkeys(out))

    @staticmethod
    def _explained(line: str, recent: deque[str], before_explained: bool, allow: list[re.Pattern[str]]) -> bool:
        if not (re.match(r"\[[^\]]*\] (ERROR|WARN|FATAL)", line) or "Exception" in line):
            return True  # nothing to explain
        if any(a.search(line) for a in allow):
            return True
        if any(
            (m := re.search(p, line)) and any(re.search(after.format(tp=re.escape(m["tp"])), b) for b in recent)
            for p, (after, _) in ALLOWED_AFTER.items()
        ):
            return True
        # ``java.io.IOException: ...`` printed under the log line it belongs to
        return bool(re.match(r"(java|org|kafka|scala)\.[\w.$]+(: |$)", line)) and before_explained


class AckedWriter:
    """librdkafka (acks=all) writing to ``topics`` on a thread, a record per topic every ``pause_s``
    with at most ``max_in_flight`` unanswered (so that the final flush is short however slow the
    cluster is), until :meth:`close`; ``acked`` maps (topic, partition) to {offset: value} of what the
    cluster acknowledged; ``failed`` counts the records it did not."""

    def __init__(
        self, bootstrap: str, topics: list[str], pause_s: float = 0.01, max_in_flight: int = 100, **config: Any
    ) -> None:
        self.topics = topics
        self.pause_s = pause_s
        self.max_in_flight = max_in_flight
        self.acked: dict[tuple[str, int], dict[int, bytes]] = {}
        self.failed = 0
        self.produced = 0
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
            if self.produced - self.count() - self.failed < self.max_in_flight:
                for t in self.topics:
                    try:
                        self.producer.produce(t, value=f"{t}-{i}".encode(), on_delivery=self._done)
                        self.produced += 1
                    except BufferError:
                        pass
                i += 1
            self.producer.poll(0)
            self._stop.wait(self.pause_s)
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
    resp = request("127.0.0.1", port, FETCH, 4, body, timeout=timeout, client_id="headwater-mixed")
    return dict(resp["responses"][0]["partitions"][0])


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
