"""Stock clients' transactions (KIP-98) against one 3-broker cluster per module: confluent-kafka,
kafka-python, aiokafka and Headwater's own client each run one consume-transform-produce loop
(tests/compat/txn_app.py) with
``send_offsets_to_transaction`` through kill -9 of the transaction coordinator, of an output leader
and of the application; transactional producers commit, abort and are fenced. read_committed
consumers must see every committed record exactly once and no aborted one (a read_uncommitted
consumer checks that the aborted ones were written)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.protocol.apis import FIND_COORDINATOR
from headwater.testing.cluster import LocalCluster
from headwater.testing.zookeeper import ZooKeeperServer
from tests.broker.wire import Wire
from tests.harness.records import read_partitions

OVERRIDES = {
    "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "replica.lag.time.max.ms": 5000,
    # teardown: after a kill -9 the last broker has nowhere to move its partitions; one short try
    "controlled.shutdown.max.retries": 1,
    "controlled.shutdown.retry.backoff.ms": 500,
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[LocalCluster]:
    """One 3-broker cluster for the tests that kill nothing (each uses its own topics and ids)."""
    tmp = tmp_path_factory.mktemp("txn-shared")
    with LocalCluster(tmp, 3, zk_connect=f"{zookeeper.connect}/txn-shared-{time.time_ns()}", overrides=OVERRIDES) as c:
        yield c


def create_topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=3) for n in names])
    for f in futs.values():
        f.result(60)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of the topic a consumer with ``isolation`` sees, reading each partition to its end."""
    return [m.value() for m in read_partitions(bootstrap, topic, range(partitions), isolation, timeout=90)]


def produce_inputs(bootstrap: str, src: str, n: int) -> None:
    """``r0`` .. ``r<n-1>`` to ``src``, alternating between its two partitions (idempotent)."""
    inputs = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        inputs.produce(src, value=f"r{i}".encode(), partition=i % 2)
    assert inputs.flush(30) == 0


def assert_transformed_once(bootstrap: str, src: str, dst: str, group: str, n: int, aborted_rounds: int) -> None:
    """The loop's outcome (:func:`produce_inputs`' ``n`` records in ``src``): a read_committed
    consumer of ``dst`` sees ``T:<value>`` of each input exactly once, the aborted transactions'
    records were written (at least ``aborted_rounds`` of them, seen read_uncommitted), and
    ``group``'s committed offsets are the end of each input partition."""
    committed = read_all(bootstrap, dst, 2, "read_committed")
    assert sorted(committed) == sorted(f"T:r{i}".encode() for i in range(n)), "each input's output exactly once"
    aborted = len(read_all(bootstrap, dst, 2, "read_uncommitted")) - n
    assert aborted >= aborted_rounds, "the aborted transactions' records were written"
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = check.committed([TopicPartition(src, 0), TopicPartition(src, 1)], timeout=30)
    finally:
        check.close()
    assert [o.offset for o in offsets] == [n // 2, n // 2], "the committed transactions' offsets are the group's"


def _leader_of(bootstrap: str, topic: str, partition: int) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    leader: int = meta.topics[topic].partitions[partition].leader
    return leader


def _coordinator(bootstrap: str, key: str, key_type: int = 0) -> int:
    """The broker id coordinating a group (``key_type`` 0) or a transactional id (1), asked of the
    first broker that answers (FindCoordinator; the first one creates the internal topic)."""
    deadline = time.monotonic() + 60
    while True:
        for address in bootstrap.split(","):
            try:
                w = Wire(address, timeout=30)
                try:
                    answer = w.request(FIND_COORDINATOR, 1, {"key": key, "key_type": key_type})
                finally:
                    w.sock.close()
            except OSError:
                continue
            if answer["error_code"] == 0:
                node: int = answer["node_id"]
                return node
        assert time.monotonic() < deadline, f"no coordinator for {key}"
        time.sleep(0.2)


CLIENTS = ["confluent", "kafka-python", "aiokafka"]
FAULTS = ["transaction-coordinator", "output-leader", "application", "group-coordinator"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def healthy(shared: LocalCluster) -> Iterator[LocalCluster]:
    """The shared cluster with its three brokers running and every partition fully in sync, before
    and after the test (which may kill one)."""
    _heal(shared)
    yield shared
    _heal(shared)


def _heal(cluster: LocalCluster) -> None:
    for b in cluster.brokers:
        if b.proc is None or b.proc.poll() is not None:
            b.start(60)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 120
    while True:
        topics = admin.list_topics(timeout=30).topics.values()
        lagging = [
            f"{t.topic}-{p.id}" for t in topics for p in t.partitions.values() if p.leader < 0 or len(p.isrs) < 3
        ]
        if not lagging:
            return
        assert time.monotonic() < deadline, f"partitions not back in sync: {lagging}"
        time.sleep(0.5)


def _start_app(tmp: Path, tag: str, *args: object) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp / f"{tag}.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.compat.txn_app", *map(str, args)],
            cwd=REPO,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, out


def _await_line(proc: subprocess.Popen[bytes], out: Path, line: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while line not in out.read_text(errors="replace").splitlines():
        assert proc.poll() is None, f"the application exited {proc.returncode}:\n{out.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {line!r} in {timeout:g}s:\n{out.read_text()[-3000:]}"
        time.sleep(0.1)


def _await_exit(proc: subprocess.Popen[bytes], out: Path, timeout: float = 200) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    text = out.read_text(errors="replace")
    assert proc.returncode == 0, f"the application exited {proc.returncode}:\n{text[-4000:]}"
    return text


KAFKA_PYTHON_HANGS = pytest.mark.xfail(
    strict=True,
    reason="kafka-python 3.0.12: send_offsets_to_transaction hangs once its transaction coordinator is gone",
)
CASES = [
    pytest.param(client, fault, marks=[KAFKA_PYTHON_HANGS] if (client, fault) == ("kafka-python", FAULTS[0]) else [])
    for client in CLIENTS
    for fault in FAULTS
    # The group coordinator's kill is not run with kafka-python, which hangs there as for its
    # transaction coordinator (above), nor with confluent-kafka: librdkafka #5511 / #5456 (below)
    # hang it in send_offsets_to_transaction past its timeout unless some other broker connection
    # happens to go up or down (it passed most runs and hung once in a full suite, 2026-11-27).
    # aiokafka's and Headwater's clients run it.
    if fault != "group-coordinator" or client not in ("kafka-python", "confluent")
] + [pytest.param("headwater", f) for f in FAULTS]  # Headwater's own client (issue 41)


@pytest.mark.parametrize(("client", "fault"), CASES)
def test_consume_transform_produce_through_kill9(
    healthy: LocalCluster, tmp_path: Path, client: str, fault: str
) -> None:
    """Each stock client's consume-transform-produce loop (tests/compat/txn_app.py, a process of its
    own) through kill -9 of the transaction coordinator, of the leader of an output partition, or of
    the application itself mid-transaction (restarted with the same transactional.id: its
    init_transactions fences the old epoch and aborts the open transaction). Round 2 is aborted on
    purpose. A read_committed consumer sees each input's output exactly once, and the group's
    committed offsets are the end of the input.

    With confluent-kafka and a broker fault the consumer group's coordinator is chosen on another
    broker: librdkafka's send_offsets_to_transaction blocks past its timeout, for as long as no
    other broker changes state, when its cached group coordinator leaves the cluster's metadata
    (confluentinc/librdkafka #5511 and #5456, open; seen here as a test hanging in
    rd_kafka_send_offsets_to_transaction with no TxnOffsetCommit ever sent to the new coordinator).
    Kafka removes a dead broker from its metadata as Headwater does, so that fault is the client's
    to fix.

    kafka-python 3.0.12's send_offsets_to_transaction never returns (it has no timeout) once the
    connection to its transaction coordinator is refused: its sender logs "Got an exception when
    trying to find a node to send a transactional request to. Going to back off and retry" and
    sends nothing more, even after the cluster's metadata no longer names the killed broker (the
    app's faulthandler dump: the main thread in TransactionManager's wait, the sender idle in
    poll). Seen in every run that killed its transaction or group coordinator (7 of 7), also when
    the application went on only after the failover, and the same against Apache Kafka 2.3.1
    (run by hand with headwater.testing.kafka). So its transaction-coordinator case is a
    strict xfail (an XPASS fails: the client was fixed), and for its output-leader case the
    transactional id and the group are chosen with coordinators on other brokers."""
    cluster = healthy
    name = f"{client}-{fault}"
    src, dst, txn_id = f"{name}-in", f"{name}-out", f"{name}-app"
    create_topics(cluster.bootstrap, src, dst)
    n = 400
    produce_inputs(cluster.bootstrap, src, n)

    doomed = -1
    if fault == "transaction-coordinator":
        doomed = _coordinator(cluster.bootstrap, txn_id, 1)
    elif fault == "output-leader":
        doomed = _leader_of(cluster.bootstrap, dst, 0)
    group = f"{name}-group"
    if fault == "group-coordinator":  # the group's coordinator only: the transaction's elsewhere
        doomed = _coordinator(cluster.bootstrap, group)
        txn_id = next(
            t for t in (f"{name}-app-{i}" for i in range(100)) if _coordinator(cluster.bootstrap, t, 1) != doomed
        )
    elif client in ("confluent", "kafka-python") and doomed >= 0:  # librdkafka #5511, kafka-python: above
        group = next(
            g for g in (f"{name}-group-{i}" for i in range(100)) if _coordinator(cluster.bootstrap, g) != doomed
        )
    if client == "kafka-python" and fault == "output-leader":
        txn_id = next(
            t for t in (f"{name}-app-{i}" for i in range(100)) if _coordinator(cluster.bootstrap, t, 1) != doomed
        )
    common = (client, cluster.bootstrap, txn_id, group, src, dst, n // 2, tmp_path, "--abort-round", 2)
    hold_after = "offsets" if fault == "application" else "records"
    hold: tuple[object, ...] = ("--hold-round", 3, "--hold-after", hold_after)
    if (client, fault) == ("kafka-python", FAULTS[0]):
        hold += ("--deadline", 20)  # the strict xfail above: fail soon
    app, out = _start_app(tmp_path, "app", *common, *hold)
    try:
        _await_line(app, out, "OPEN 3")
        if fault == "application":
            app.kill()  # SIGKILL, its transaction open with records written and offsets sent
            app.wait(10)
            app, out = _start_app(tmp_path, "restarted", *common)
        else:
            cluster.brokers[doomed].kill9()
            (tmp_path / "go").touch()
        log = _await_exit(app, out)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
    assert "DONE" in log
    if fault == "transaction-coordinator":
        assert _coordinator(cluster.bootstrap, txn_id, 1) != doomed, "the killed coordinator's role moved"
    elif fault == "output-leader":
        assert _leader_of(cluster.bootstrap, dst, 0) != doomed, "the killed leader's role moved"
    elif fault == "group-coordinator":
        assert _coordinator(cluster.bootstrap, group) != doomed, "the killed coordinator's role moved"
    assert_transformed_once(cluster.bootstrap, src, dst, group, n, aborted_rounds=2 if fault == "application" else 1)


def test_confluent_commits_and_aborts_are_seen_exactly_as_decided(shared: LocalCluster) -> None:
    cluster = shared
    create_topics(cluster.bootstrap, "orders")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "orders-app", "linger.ms": 5})
    p.init_transactions(60)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for t in range(12):
        p.begin_transaction()
        values = [f"t{t}-r{i}".encode() for i in range(25)]
        for i, v in enumerate(values):
            p.produce("orders", value=v, partition=i % 2)
        if t % 3 == 2:
            p.flush(30)  # the aborted records reach the partitions before the abort
            p.abort_transaction(60)
            aborted += values
        else:
            p.commit_transaction(60)
            committed += values
    p.flush(30)
    seen = read_all(cluster.bootstrap, "orders", 2, "read_committed")
    assert sorted(seen) == sorted(committed), "every committed record exactly once, no aborted one"
    everything = read_all(cluster.bootstrap, "orders", 2, "read_uncommitted")
    assert set(aborted) <= set(everything), "the aborted records were written (read_uncommitted sees them)"


def test_a_fenced_confluent_producer_cannot_commit(shared: LocalCluster) -> None:
    cluster = shared
    create_topics(cluster.bootstrap, "fence")
    old = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "fence-app"})
    old.init_transactions(60)
    old.begin_transaction()
    old.produce("fence", value=b"zombie", partition=0)
    old.flush(30)
    new = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "fence-app"})
    new.init_transactions(60)  # aborts the zombie's open transaction and fences it
    new.begin_transaction()
    new.produce("fence", value=b"live", partition=0)
    new.commit_transaction(60)
    with pytest.raises(KafkaException):
        old.commit_transaction(30)
    assert read_all(cluster.bootstrap, "fence", 2, "read_committed") == [b"live"]


def test_aiokafka_transactions_commit_and_abort(shared: LocalCluster) -> None:
    cluster = shared
    import asyncio

    from aiokafka import AIOKafkaProducer

    create_topics(cluster.bootstrap, "aio-out")

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="aio-app")
        await p.start()
        try:
            async with p.transaction():
                for i in range(20):
                    await p.send("aio-out", value=f"c{i}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(20):
                await p.send("aio-out", value=f"a{i}".encode(), partition=i % 2)
            await p.flush()
            await p.abort_transaction()
            async with p.transaction():
                await p.send("aio-out", value=b"c20", partition=0)
        finally:
            await p.stop()

    asyncio.run(run())
    seen = read_all(cluster.bootstrap, "aio-out", 2, "read_committed")
    assert sorted(seen) == sorted(f"c{i}".encode() for i in range(21))
    assert len(read_all(cluster.bootstrap, "aio-out", 2, "read_uncommitted")) == 41
