"""FaultProxy with real loopback sockets: forwarding, Kafka source identification, faults, stop."""

from __future__ import annotations

import os
import random
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from headwater.protocol.apis import API_VERSIONS
from headwater.protocol.frames import encode_request
from headwater.testing.faults import FaultProxy, broker_id_from_client_id

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 5.0


# -- helpers -------------------------------------------------------------------------------


class _EchoHandler(socketserver.BaseRequestHandler):
    server: _EchoServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        self.server.conns.append(sock)
        try:
            while data := sock.recv(65536):
                sock.sendall(data)
        except OSError:
            pass


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins the handler threads

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.conns: list[socket.socket] = []

    def stop(self) -> None:
        self.shutdown()
        for sock in self.conns:  # wake the handlers still in recv()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server_close()


@pytest.fixture
def echo_factory() -> Iterator[Callable[[], int]]:
    """Starts echo servers on 127.0.0.1; returns their ports."""
    started: list[tuple[_EchoServer, threading.Thread]] = []

    def make() -> int:
        server = _EchoServer()
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        return int(server.server_address[1])

    yield make
    for server, thread in started:
        server.stop()
        thread.join(TIMEOUT)


@pytest.fixture
def echo(echo_factory: Callable[[], int]) -> int:
    return echo_factory()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy() as p:
        yield p


@pytest.fixture
def sockets() -> Iterator[Callable[[int], socket.socket]]:
    """Client connections to 127.0.0.1, closed at teardown."""
    opened: list[socket.socket] = []

    def connect(port: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        opened.append(s)
        return s

    yield connect
    for s in opened:
        s.close()


def frame(client_id: str | None, correlation_id: int = 7) -> bytes:
    return encode_request(API_VERSIONS, 0, correlation_id, client_id, {})


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        data = sock.recv(min(n - len(buf), 1 << 20))
        if not data:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += data
    return bytes(buf)


def wait_until(cond: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def is_closed(sock: socket.socket) -> bool:
    """Waits for the peer to close (EOF or reset); False if it stays open for TIMEOUT."""
    sock.settimeout(TIMEOUT)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def echoes(sock: socket.socket, payload: bytes = b"ping") -> bool:
    try:
        sock.sendall(payload)
        return recv_exactly(sock, len(payload)) == payload
    except (OSError, AssertionError):
        return False


def kafka_conn(connect: Callable[[int], socket.socket], port: int, client_id: str | None) -> socket.socket:
    """A connection that sent one request frame and got it echoed back (so it is forwarded)."""
    s = connect(port)
    f = frame(client_id)
    s.sendall(f)
    assert recv_exactly(s, len(f)) == f
    return s


# -- forwarding ----------------------------------------------------------------------------


def test_forwards_both_ways(proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]) -> None:
    port = proxy.add_route("echo", echo, kafka=False)
    assert port != echo
    assert proxy.port("echo") == port
    assert proxy.routes() == ["echo"]
    s = sockets(port)
    s.sendall(b"hello")
    assert recv_exactly(s, 5) == b"hello"
    s.sendall(b"world!")
    assert recv_exactly(s, 6) == b"world!"
    assert proxy.connections() == [("echo", None)]
    stats = proxy.stats("echo")
    assert (stats.bytes_to_target, stats.bytes_to_client, stats.accepted) == (11, 11, 1)
    assert stats.bytes_forwarded == 22
    assert (stats.listen_port, stats.target_port, stats.kafka, stats.cut) == (port, echo, False, False)

    s.close()  # closing the client side closes the target side
    wait_until(lambda: proxy.connections() == [])


def test_target_close_closes_client(proxy: FaultProxy, sockets: Callable[[int], socket.socket]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as target:
        port = proxy.add_route("t", target.getsockname()[1], kafka=False)
        s = sockets(port)
        upstream, _ = target.accept()
        upstream.sendall(b"bye")
        upstream.close()
        assert recv_exactly(s, 3) == b"bye"  # bytes sent before the close still arrive
        assert is_closed(s)
        wait_until(lambda: proxy.connections() == [])


def test_large_transfer_is_intact(proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]) -> None:
    port = proxy.add_route("big", echo)  # a Kafka route: everything after the header is passed through
    payload = frame("broker-1-fetcher-0") + random.Random(7).randbytes(4 << 20)
    s = sockets(port)
    sender = threading.Thread(target=s.sendall, args=(payload,))
    sender.start()
    got = recv_exactly(s, len(payload))
    sender.join(TIMEOUT)
    assert got == payload
    stats = proxy.stats("big")
    assert stats.bytes_to_target == stats.bytes_to_client == len(payload)
    assert proxy.connections() == [("big", 1)]


def test_back_pressure_bounds_buffering(proxy: FaultProxy, sockets: Callable[[int], socket.socket]) -> None:
    """A target that never reads stalls the sender instead of filling the proxy's memory."""
    with socket.create_server(("127.0.0.1", 0)) as target:
        port = proxy.add_route("slow", target.getsockname()[1], kafka=False)
        s = sockets(port)
        held, _ = target.accept()
        with held:
            s.setblocking(False)
            chunk = bytes(1 << 20)
            sent, stalls = 0, 0
            while sent < (256 << 20) and stalls < 20:
                try:
                    sent += s.send(chunk)
                    stalls = 0
                except BlockingIOError:
                    stalls += 1
                    time.sleep(0.025)
            assert stalls == 20, f"sent {sent} bytes to a target that reads nothing"
            assert sent < (64 << 20)
            assert proxy.stats("slow").bytes_to_target < (64 << 20)


def test_unreachable_target_closes_client(proxy: FaultProxy, sockets: Callable[[int], socket.socket]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as gone:
        dead_port = gone.getsockname()[1]
    port = proxy.add_route("dead", dead_port, kafka=False)
    assert is_closed(sockets(port))
    wait_until(lambda: proxy.stats("dead").failed == 1)
    assert proxy.connections() == []


# -- source identification -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_id", "source"),
    [
        ("broker-2-fetcher-1", 2),
        ("broker-3-shutdown", 3),
        ("broker-12", 12),
        ("controller-1", 1),
        ("console-producer", None),
        ("my-broker-2", None),
        ("broker-", None),
        ("", None),
    ],
)
def test_broker_id_from_client_id(client_id: str, source: int | None) -> None:
    assert broker_id_from_client_id(client_id) == source


@pytest.mark.parametrize(
    ("client_id", "source"),
    [("broker-2-fetcher-1", 2), ("controller-1", 1), ("console-consumer", None), (None, None)],
)
def test_identifies_source_from_first_frame(
    proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket], client_id: str | None, source: int | None
) -> None:
    port = proxy.add_route("k", echo)
    data = frame(client_id, 1) + frame(client_id, 2)
    s = sockets(port)
    s.sendall(data[:9])  # the header is not complete: nothing forwarded yet
    time.sleep(0.1)
    assert proxy.connections() == []
    assert proxy.stats("k").bytes_to_target == 0
    for i in range(9, len(data), 3):  # the rest in dribbles
        s.sendall(data[i : i + 3])
    assert recv_exactly(s, len(data)) == data  # forwarded unchanged
    assert proxy.connections() == [("k", source)]
    assert proxy.connections("k") == [("k", source)]


def test_short_first_frame_is_forwarded_as_a_client(
    proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]
) -> None:
    port = proxy.add_route("k", echo)
    s = sockets(port)
    junk = b"\x00\x00\x00\x02hi"  # too small to hold a request header
    s.sendall(junk)
    assert recv_exactly(s, len(junk)) == junk
    assert proxy.connections() == [("k", None)]


def test_non_kafka_route_is_not_parsed(proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]) -> None:
    port = proxy.add_route("zk", echo, kafka=False)
    s = sockets(port)
    s.sendall(b"ruok")  # would be an incomplete frame header on a Kafka route
    assert recv_exactly(s, 4) == b"ruok"
    assert proxy.connections() == [("zk", None)]


def test_source_parser_override(echo: int, sockets: Callable[[int], socket.socket]) -> None:
    with FaultProxy(source_parser=lambda cid: 42 if cid == "node-a" else None) as proxy:
        port = proxy.add_route("k", echo)
        kafka_conn(sockets, port, "node-a")
        kafka_conn(sockets, port, "broker-1")
        assert proxy.connections() == [("k", 42), ("k", None)]


# -- faults --------------------------------------------------------------------------------


def test_isolate_and_heal(
    proxy: FaultProxy, echo_factory: Callable[[], int], sockets: Callable[[int], socket.socket]
) -> None:
    to_1 = proxy.add_route("to-1", echo_factory())  # leads to broker 1
    to_2 = proxy.add_route("to-2", echo_factory())  # leads to broker 2
    from_1 = kafka_conn(sockets, to_2, "broker-1-fetcher-0")  # broker 1 -> broker 2
    from_controller_1 = kafka_conn(sockets, to_2, "controller-1")  # broker 1 -> broker 2
    into_1 = kafka_conn(sockets, to_1, "broker-2-fetcher-0")  # broker 2 -> broker 1
    client_to_1 = kafka_conn(sockets, to_1, "console-producer")  # client -> broker 1
    other = kafka_conn(sockets, to_2, "broker-3-fetcher-0")  # broker 3 -> broker 2

    assert proxy.isolate(1, {"to-1"}) == 3
    assert proxy.isolated() == {1: frozenset({"to-1"})}
    assert is_closed(from_1)
    assert is_closed(from_controller_1)
    assert is_closed(into_1)
    assert echoes(client_to_1)
    assert echoes(other)
    assert sorted(proxy.connections(), key=str) == [("to-1", None), ("to-2", 3)]

    # New connections: from broker 1 anywhere, or from any broker into broker 1, are closed
    # after their first frame, which is not forwarded; clients still get through.
    refused_before = proxy.stats("to-2").refused
    for port, client_id in [(to_2, "broker-1-fetcher-1"), (to_1, "broker-3-fetcher-0"), (to_1, "controller-2")]:
        s = sockets(port)
        s.sendall(frame(client_id))
        assert is_closed(s), client_id
    assert proxy.stats("to-2").refused == refused_before + 1
    assert proxy.stats("to-1").refused == 2
    assert echoes(kafka_conn(sockets, to_1, "console-consumer"))
    assert echoes(kafka_conn(sockets, to_2, "broker-2-fetcher-0"))  # broker 2 -> itself: not involved

    proxy.heal(1)
    assert proxy.isolated() == {}
    assert echoes(kafka_conn(sockets, to_2, "broker-1-fetcher-1"))
    assert echoes(kafka_conn(sockets, to_1, "broker-3-fetcher-0"))
    assert echoes(client_to_1)
    proxy.heal(1)  # healing twice is harmless


def test_isolating_two_brokers(
    proxy: FaultProxy, echo_factory: Callable[[], int], sockets: Callable[[int], socket.socket]
) -> None:
    to_1 = proxy.add_route("to-1", echo_factory())
    to_3 = proxy.add_route("to-3", echo_factory())
    proxy.isolate(1, {"to-1"})
    proxy.isolate(2, set())
    s = sockets(to_3)
    s.sendall(frame("broker-2-fetcher-0"))
    assert is_closed(s)
    assert echoes(kafka_conn(sockets, to_3, "broker-4-fetcher-0"))
    s = sockets(to_1)
    s.sendall(frame("broker-4-fetcher-0"))
    assert is_closed(s)
    proxy.heal(1)
    assert echoes(kafka_conn(sockets, to_1, "broker-4-fetcher-0"))
    assert proxy.isolated() == {2: frozenset()}


def test_isolate_checks_route_names(proxy: FaultProxy, echo: int) -> None:
    proxy.add_route("to-1", echo)
    with pytest.raises(KeyError, match="to-9"):
        proxy.isolate(1, {"to-1", "to-9"})
    assert proxy.isolated() == {}


def test_cut_and_restore_route(proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]) -> None:
    zk_1 = proxy.add_route("zk-1", echo, kafka=False)
    zk_2 = proxy.add_route("zk-2", echo, kafka=False)
    a, b, c = sockets(zk_1), sockets(zk_1), sockets(zk_2)
    for s in (a, b, c):
        assert echoes(s, b"ruok")

    assert proxy.cut_route("zk-1") == 2
    assert is_closed(a)
    assert is_closed(b)
    assert echoes(c)
    assert proxy.connections() == [("zk-2", None)]
    assert is_closed(sockets(zk_1))  # accepted, then closed without sending anything
    stats = proxy.stats("zk-1")
    assert stats.cut
    assert stats.refused == 1

    proxy.restore_route("zk-1")
    assert not proxy.stats("zk-1").cut
    d = sockets(zk_1)
    assert echoes(d, b"ruok")
    assert proxy.connections("zk-1") == [("zk-1", None)]


def test_cut_kafka_route_closes_connections_still_being_identified(
    proxy: FaultProxy, echo: int, sockets: Callable[[int], socket.socket]
) -> None:
    port = proxy.add_route("k", echo)
    s = sockets(port)
    s.sendall(frame("broker-1")[:6])
    time.sleep(0.05)
    proxy.cut_route("k")
    assert is_closed(s)


# -- misuse and lifecycle ------------------------------------------------------------------


def test_misuse(echo: int) -> None:
    proxy = FaultProxy()
    with pytest.raises(RuntimeError, match="not running"):
        proxy.add_route("r", echo)
    with proxy:
        proxy.add_route("r", echo)
        with pytest.raises(ValueError, match="already exists"):
            proxy.add_route("r", echo)
        with pytest.raises(ValueError, match="port"):
            proxy.add_route("bad", 0)
        with pytest.raises(KeyError):
            proxy.cut_route("nope")
        with pytest.raises(KeyError):
            proxy.connections("nope")
    with pytest.raises(RuntimeError, match="started once"):
        proxy.start()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_stop_leaves_no_threads_or_sockets() -> None:
    threads_before = set(threading.enumerate())
    fds_before = _open_fds()
    with socket.create_server(("127.0.0.1", 0)) as target:
        target_port = target.getsockname()[1]
        proxy = FaultProxy().start()
        assert any(t.name.startswith("FaultProxy") for t in threading.enumerate())
        k = proxy.add_route("k", target_port)
        z = proxy.add_route("z", target_port, kafka=False)
        forwarded = socket.create_connection(("127.0.0.1", k), timeout=TIMEOUT)
        forwarded.sendall(frame("broker-1-fetcher-0"))
        pending = socket.create_connection(("127.0.0.1", k), timeout=TIMEOUT)
        pending.sendall(frame("broker-2")[:5])  # never identified
        raw = socket.create_connection(("127.0.0.1", z), timeout=TIMEOUT)
        upstream = [target.accept()[0], target.accept()[0]]
        wait_until(lambda: len(proxy.connections()) == 2)

        proxy.stop()
        proxy.stop()  # idempotent
        assert set(threading.enumerate()) == threads_before
        for s in [forwarded, pending, raw, *upstream]:
            assert is_closed(s)
            s.close()
        for port in (k, z):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
        # Introspection still answers after stop.
        assert proxy.connections() == []
        assert proxy.stats("k").accepted == 1
        assert not proxy.running
    assert _open_fds() == fds_before
