"""A fault-injecting TCP proxy for multi-broker cluster tests.

Cluster tests run real broker processes on 127.0.0.1. To partition them, every address a
broker dials goes through a :class:`FaultProxy` *route*: a listening socket on a free loopback
port that forwards each accepted connection, byte for byte, to a fixed loopback target port.
Brokers advertise the route's port instead of their own, and each broker's
``zookeeper.connect`` points at a route of its own, so the test can cut

* a broker off from the other brokers (:meth:`FaultProxy.isolate` / :meth:`FaultProxy.heal`),
  while plain clients can still reach it, and
* a broker off from ZooKeeper, or any single route (:meth:`FaultProxy.cut_route` /
  :meth:`FaultProxy.restore_route`).

Source identification
    Connections to a broker carry Kafka request frames::

        int32 size, int16 api_key, int16 api_version, int32 correlation_id,
        int16 client_id_length, client_id bytes, ...

    On routes added with ``kafka=True`` (the default) the proxy buffers the first bytes of each
    accepted connection until that header is complete, reads the client id, then forwards
    everything unchanged. Brokers name their connections after themselves: ``broker-<id>-...``
    (``broker-2-fetcher-1``, ``broker-3-shutdown``) and ``controller-<id>`` for the controller
    running on broker ``<id>``; :func:`broker_id_from_client_id` maps those to the broker id
    and anything else (a null client id, ``console-producer``, ...) to ``None``: a plain
    client. Pass ``source_parser=`` to use another convention. A first frame too short to be
    a request header is forwarded as is, with source ``None``. Routes added with
    ``kafka=False`` (ZooKeeper) are never parsed.

Thread model
    The proxy runs its own asyncio event loop in one daemon thread, started by
    :meth:`FaultProxy.start` and joined by :meth:`FaultProxy.stop` (or the ``with`` block),
    which closes every listening socket and connection first. All proxy state lives on that
    loop; the public methods are synchronous, thread-safe, and run their work on the loop,
    returning once it is done: when :meth:`isolate` returns, the affected connections are
    already closed and any new one is refused. Introspection (:meth:`connections`,
    :meth:`stats`) also works after :meth:`stop`. A proxy is started at most once.

Loopback only
    Routes listen on 127.0.0.1 and connect to 127.0.0.1 only; nothing else is ever bound or
    dialled.

Example::

    with FaultProxy() as proxy:
        port_1 = proxy.add_route("broker-1", broker_1.port)
        zk_1 = proxy.add_route("zk-1", zookeeper.port, kafka=False)
        ...
        proxy.isolate(1, {"broker-1"})   # broker 1 <-/-> brokers 2, 3; clients still reach it
        proxy.heal(1)
        proxy.cut_route("zk-1")          # broker 1 loses its ZooKeeper session
        proxy.restore_route("zk-1")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import re
import struct
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["LOOPBACK", "FaultProxy", "RouteStats", "SourceParser", "broker_id_from_client_id"]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

SourceParser = Callable[[str], int | None]
"""Maps a (non-null) Kafka client id to the id of the broker that sent it, or ``None``."""

_T = TypeVar("_T")

_CLIENT_ID = re.compile(r"(?:broker|controller)-(\d+)(?!\d)")
_HEADER = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
_MIN_HEADER = _HEADER.size - 4  # a request header without its client id bytes
_CHUNK = 64 * 1024
_ids = itertools.count(1)


def broker_id_from_client_id(client_id: str) -> int | None:
    """``broker-2-fetcher-1`` -> 2, ``controller-1`` -> 1, anything else -> ``None`` (a client)."""
    m = _CLIENT_ID.match(client_id)
    return int(m.group(1)) if m else None


def _parse_first_frame(buf: bytes | bytearray) -> tuple[bool, str | None]:
    """``(complete, client_id)`` for the first bytes of a Kafka connection.

    ``complete`` is False while more bytes are needed to read the client id; a null client id
    and bytes that cannot be a request header both give ``(True, None)``.
    """
    if len(buf) >= 4:
        (size,) = struct.unpack_from(">i", buf)
        if size < _MIN_HEADER:
            return True, None
    if len(buf) < _HEADER.size:
        return False, None
    size, _, _, _, n = _HEADER.unpack_from(buf)
    if n < 0:
        return True, None
    if size < _MIN_HEADER + n:
        return True, None
    if len(buf) < _HEADER.size + n:
        return False, None
    return True, bytes(buf[_HEADER.size : _HEADER.size + n]).decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class RouteStats:
    """Counters of one route; bytes are those forwarded (written to the other side)."""

    name: str
    listen_port: int
    target_port: int
    kafka: bool
    cut: bool
    bytes_to_target: int
    bytes_to_client: int
    accepted: int  # connections forwarded to the target
    refused: int  # connections closed by a fault before they were forwarded
    failed: int  # connections whose target could not be reached

    @property
    def bytes_forwarded(self) -> int:
        return self.bytes_to_target + self.bytes_to_client


class _Route:
    def __init__(self, name: str, target_port: int, kafka: bool) -> None:
        self.name = name
        self.target_port = target_port
        self.kafka = kafka
        self.server: asyncio.Server | None = None
        self.listen_port = 0
        self.cut = False
        self.bytes_to_target = 0
        self.bytes_to_client = 0
        self.accepted = 0
        self.refused = 0
        self.failed = 0

    def stats(self) -> RouteStats:
        return RouteStats(
            self.name,
            self.listen_port,
            self.target_port,
            self.kafka,
            self.cut,
            self.bytes_to_target,
            self.bytes_to_client,
            self.accepted,
            self.refused,
            self.failed,
        )


class _Conn:
    """One accepted connection: identified after its first frame, established once forwarding."""

    def __init__(self, route: _Route, client: asyncio.StreamWriter) -> None:
        self.route = route
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.source: int | None = None
        self.identified = False
        self.established = False
        self.closed = False

    def close(self) -> None:
        """Orderly close of both sides (buffered bytes are still flushed)."""
        self.closed = True
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()

    def abort(self) -> None:
        """Drop both sides at once, as a fault does; idempotent."""
        self.closed = True
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()


class FaultProxy:
    """Loopback TCP proxy with routes that can be cut and brokers that can be isolated.

    See the module docstring for the client-id convention and the thread model.
    """

    def __init__(
        self,
        source_parser: SourceParser = broker_id_from_client_id,
        *,
        connect_timeout: float = 5.0,
        call_timeout: float = 10.0,
    ) -> None:
        self.source_parser = source_parser
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._name = f"FaultProxy-{next(_ids)}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = False
        self._stopping = False
        self._routes: dict[str, _Route] = {}
        self._conns: dict[_Conn, None] = {}  # accept order
        self._handlers: set[asyncio.Task[None]] = set()
        self._isolated: dict[int, frozenset[str]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        if self._started:
            raise RuntimeError(f"{self._name} was already started (a proxy is started once)")
        self._started = True
        loop = asyncio.SelectorEventLoop()
        thread = threading.Thread(target=self._run, args=(loop,), name=self._name, daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        return self

    def stop(self) -> None:
        """Close every listening socket and connection, then stop and join the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(self.call_timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self.call_timeout)
            self._loop = None
            if thread.is_alive():
                raise RuntimeError(f"{self._name}: event loop thread did not stop")

    @property
    def running(self) -> bool:
        return self._loop is not None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{self._name} routes={sorted(self._routes)} running={self.running}>"

    # -- routes ----------------------------------------------------------------------------

    def add_route(self, name: str, target_port: int, *, kafka: bool = True) -> int:
        """Listen on a free 127.0.0.1 port forwarding to 127.0.0.1:``target_port``; that port.

        ``kafka=False`` for anything that is not Kafka request frames (ZooKeeper): its
        connections are forwarded without being parsed and have source ``None``.
        """
        if not 0 < target_port < 65536:
            raise ValueError(f"bad target port {target_port}")
        return self._await(self._add_route(name, target_port, kafka))

    def port(self, name: str) -> int:
        """The listening port of route ``name``."""
        return self._call(lambda: self._route(name).listen_port)

    def routes(self) -> list[str]:
        return self._call(lambda: list(self._routes))

    # -- faults ----------------------------------------------------------------------------

    def isolate(self, broker_id: int, routes_of_broker: Iterable[str]) -> int:
        """Cut broker ``broker_id`` off from the other brokers; the number of connections closed.

        ``routes_of_broker`` are the routes leading to that broker. Closed now and refused
        from now on (after their first frame is read): connections whose source is the broker,
        and connections on its routes whose source is another broker. Connections from plain
        clients (source ``None``) to it are left alone. Calling it again replaces the routes.
        """
        routes = frozenset(routes_of_broker)
        return self._call(lambda: self._isolate(broker_id, routes))

    def heal(self, broker_id: int) -> None:
        """Undo :meth:`isolate` for ``broker_id``: new connections are forwarded again."""
        self._call(lambda: self._isolated.pop(broker_id, None))

    def isolated(self) -> dict[int, frozenset[str]]:
        return self._call(lambda: dict(self._isolated))

    def cut_route(self, name: str) -> int:
        """Close every connection on route ``name`` and refuse (accept, then close) new ones.

        Returns the number of connections closed.
        """
        return self._call(lambda: self._cut_route(name))

    def restore_route(self, name: str) -> None:
        """Undo :meth:`cut_route`: new connections on ``name`` are forwarded again."""

        def restore() -> None:
            self._route(name).cut = False

        self._call(restore)

    # -- introspection ---------------------------------------------------------------------

    def connections(self, route: str | None = None) -> list[tuple[str, int | None]]:
        """``(route, source broker id or None)`` of each live forwarded connection, oldest first."""

        def snapshot() -> list[tuple[str, int | None]]:
            if route is not None:
                self._route(route)
            return [
                (c.route.name, c.source)
                for c in self._conns
                if c.established and not c.closed and (route is None or c.route.name == route)
            ]

        return self._call(snapshot)

    def stats(self, route: str) -> RouteStats:
        return self._call(lambda: self._route(route).stats())

    # -- plumbing: calls from the test thread ------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError(f"{self._name} is not running")
        return self._loop

    def _call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the loop thread and return its result (directly when not running)."""
        loop = self._loop
        if loop is None or threading.current_thread() is self._thread:
            return fn()
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:
                    fut.set_exception(e)

        loop.call_soon_threadsafe(run)
        return fut.result(self.call_timeout)

    def _await(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            loop = self._running_loop()
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop).result(self.call_timeout)

    # -- on the loop thread -----------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def _route(self, name: str) -> _Route:
        try:
            return self._routes[name]
        except KeyError:
            raise KeyError(f"{self._name}: no route named {name!r}") from None

    async def _add_route(self, name: str, target_port: int, kafka: bool) -> int:
        if self._stopping:
            raise RuntimeError(f"{self._name} is stopping")
        if name in self._routes:
            raise ValueError(f"{self._name}: route {name!r} already exists")
        route = _Route(name, target_port, kafka)
        self._routes[name] = route  # reserve the name across the await

        async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(route, reader, writer)

        try:
            route.server = await asyncio.start_server(on_accept, LOOPBACK, 0)
        except BaseException:
            del self._routes[name]
            raise
        route.listen_port = int(route.server.sockets[0].getsockname()[1])
        log.debug("%s: route %s 127.0.0.1:%d -> :%d", self._name, name, route.listen_port, target_port)
        return route.listen_port

    def _blocked(self, conn: _Conn) -> bool:
        src = conn.source
        if not conn.identified or src is None:
            return False
        if src in self._isolated:
            return True
        return any(conn.route.name in routes and src != b for b, routes in self._isolated.items())

    def _abort_where(self, pred: Callable[[_Conn], bool]) -> int:
        hit = [c for c in self._conns if not c.closed and pred(c)]
        for c in hit:
            c.abort()
        return len(hit)

    def _isolate(self, broker_id: int, routes: frozenset[str]) -> int:
        for name in routes:
            self._route(name)
        self._isolated[broker_id] = routes
        closed = self._abort_where(self._blocked)
        log.info("%s: isolated broker %d (routes %s): closed %d", self._name, broker_id, sorted(routes), closed)
        return closed

    def _cut_route(self, name: str) -> int:
        route = self._route(name)
        route.cut = True
        closed = self._abort_where(lambda c: c.route is route)
        log.info("%s: cut route %s: closed %d", self._name, name, closed)
        return closed

    async def _handle(self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        conn = _Conn(route, writer)
        self._conns[conn] = None
        try:
            if route.cut or self._stopping:
                route.refused += 1
                return
            first = b""
            if route.kafka:
                buf = bytearray()
                while True:
                    complete, client_id = _parse_first_frame(buf)
                    if complete:
                        break
                    data = await reader.read(_CHUNK)
                    if not data or conn.closed:
                        return
                    buf += data
                first = bytes(buf)
                conn.source = None if client_id is None else self.source_parser(client_id)
            conn.identified = True
            if self._blocked(conn):
                route.refused += 1
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(LOOPBACK, route.target_port), self.connect_timeout
                )
            except (OSError, TimeoutError) as e:
                route.failed += 1
                log.debug("%s: route %s: cannot reach :%d: %s", self._name, route.name, route.target_port, e)
                return
            conn.upstream = up_writer
            if conn.closed:  # a fault struck while connecting
                route.refused += 1
                return
            conn.established = True
            route.accepted += 1
            if first:
                up_writer.write(first)
                route.bytes_to_target += len(first)
            await asyncio.gather(
                self._pump(conn, reader, up_writer, to_target=True),
                self._pump(conn, up_reader, writer, to_target=False),
            )
        finally:
            if not conn.established or self._stopping:
                conn.abort()
            else:
                conn.close()
            del self._conns[conn]
            self._handlers.discard(task)

    async def _pump(
        self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, to_target: bool
    ) -> None:
        route = conn.route
        try:
            while not conn.closed:
                data = await src.read(_CHUNK)
                if not data or conn.closed:
                    break
                dst.write(data)
                if to_target:
                    route.bytes_to_target += len(data)
                else:
                    route.bytes_to_client += len(data)
                await dst.drain()  # back-pressure: stop reading while the other side is behind
        except OSError:  # ConnectionResetError, BrokenPipeError, ...
            pass
        finally:
            conn.close()

    async def _shutdown(self) -> None:
        self._stopping = True
        for route in self._routes.values():
            if route.server is not None:
                route.server.close()
        me = asyncio.current_task()
        for _ in range(100):
            for conn in list(self._conns):
                conn.abort()
            # Accept tasks not yet run see _stopping and close their connection when they run.
            pending = {t for t in asyncio.all_tasks() if t is not me}
            if not pending:
                break
            _, still = await asyncio.wait(pending, timeout=0.1)
            for t in still & self._handlers:
                t.cancel()
        for route in self._routes.values():
            if route.server is not None:
                await route.server.wait_closed()
        for _ in range(3):  # let the transports' connection_lost callbacks close their sockets
            await asyncio.sleep(0)
        log.debug("%s: stopped", self._name)
