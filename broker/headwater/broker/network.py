"""Listeners and connections: bytes in, frames to the request handler, responses out in order.

One reader task per connection. Requests of a connection are handled one at a time and
answered in the order they arrived, as Kafka does (it mutes a channel while a request is in
flight); pipelined requests wait in the socket buffer. Response parts that are
:class:`FileRegion` s (Fetch record data) leave with ``os.sendfile`` straight from the
segment file: zero copy. The frame size is checked against ``socket.request.max.bytes``
before a buffer of that size exists.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable

from headwater.broker.config import Listener
from headwater.protocol.errors import DecodeError
from headwater.protocol.frames import FrameDecoder, FrameTooLarge
from headwater.protocol.primitives import FileRegion

log = logging.getLogger(__name__)

Response = list[bytes | FileRegion] | None
#: (connection, frame) -> response parts, or None for no response (acks=0), or raises
#: CloseConnection.
RequestHandler = Callable[["Connection", memoryview], Awaitable[Response]]


class CloseConnection(Exception):
    """Raised by a request handler to close the connection (what Kafka does for bad requests)."""


class Connection:
    """One client connection: receives frames in place, answers them in order.

    Writing: a response is written with a plain non-blocking ``send`` when the socket takes it
    (no future, no task); only the part the kernel refuses is left to an asynchronous drain.
    Responses produced in one turn of the event loop (pipelined requests answered without
    waiting) are coalesced into one ``send``: they are queued and flushed when the connection
    has no more buffered requests to answer, or as soon as the loop gets to run (a handler that
    waits lets the queued responses go first).
    """

    def __init__(
        self, sock: socket.socket, listener: Listener, handler: RequestHandler, max_request_bytes: int
    ) -> None:
        self.sock = sock
        self.listener = listener
        self.handler = handler
        self.decoder = FrameDecoder(max_request_bytes)
        try:
            peer = sock.getpeername()
            self.peer = f"{peer[0]}:{peer[1]}"
        except OSError:
            self.peer = "?"
        self.closed = False
        self._out: list[bytes] = []  # queued response bytes, in order
        self._flush_scheduled = False
        self._drain: asyncio.Task[None] | None = None  # sends what the socket did not take at once

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        sock = self.sock
        decoder = self.decoder
        try:
            while True:
                room = decoder.buffer()
                try:
                    n = sock.recv_into(room)
                except BlockingIOError:
                    n = await loop.sock_recv_into(sock, room)
                del room
                if not n:
                    return
                try:
                    frames = decoder.received(n)
                except FrameTooLarge as e:
                    log.warning(
                        "closing connection from %s on %s: %s (socket.request.max.bytes)",
                        self.peer,
                        self.listener.name,
                        e,
                    )
                    return
                except DecodeError as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    return
                for frame in frames:
                    try:
                        response = await self.handler(self, frame)
                    except CloseConnection as e:
                        log.warning("closing connection from %s: %s", self.peer, e)
                        return
                    if response is not None:
                        await self.send(response)
                self._flush()  # the answers to one read's requests leave together
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
        except asyncio.CancelledError:
            raise
        finally:
            self._flush()  # what is queued goes if the socket takes it now; nothing waits here
            self.close()

    async def send(self, parts: list[bytes | FileRegion]) -> None:
        """Queue a response; record data (FileRegions) leaves with ``sendfile`` after what precedes it."""
        for part in parts:
            if isinstance(part, FileRegion):
                await self.flush()
                await self._sendfile(part)
            else:
                self._out.append(part)
        if self._out and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write the queued bytes now, as far as the socket takes them; never waits."""
        self._flush_scheduled = False
        if self._drain is not None or not self._out or self.closed:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as e:
            log.debug("connection from %s ended while writing: %s", self.peer, e)
            self.close()
            return
        if sent < len(data):
            self._drain = asyncio.ensure_future(self._drain_rest(memoryview(data)[sent:]))

    async def _drain_rest(self, rest: memoryview) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(self.sock, rest)
            while self._out:
                data = b"".join(self._out)
                self._out.clear()
                await loop.sock_sendall(self.sock, data)
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended while writing: %s", self.peer, e)
            self.close()
        finally:
            self._drain = None

    async def flush(self) -> None:
        """Until every queued byte is with the kernel."""
        self._flush()
        while self._drain is not None:
            await asyncio.wait({self._drain})  # never raises: a failed drain closes the connection
            self._flush()
        if self.closed:
            raise ConnectionError(f"connection from {self.peer} closed")

    async def _sendfile(self, region: FileRegion) -> None:
        loop = asyncio.get_running_loop()
        fd_out = self.sock.fileno()
        fd_in = region.file.fileno()
        offset = region.position
        remaining = region.size
        while remaining > 0:
            try:
                sent = os.sendfile(fd_out, fd_in, offset, remaining)
            except BlockingIOError:
                await _writable(loop, self.sock)
                continue
            if sent == 0:
                # The file ended early (truncated underneath us): the frame can't be completed.
                raise ConnectionError(f"segment ended {remaining} bytes early while sending to {self.peer}")
            offset += sent
            remaining -= sent

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._out.clear()
            if self._drain is not None:
                self._drain.cancel()
            try:
                self.sock.close()
            except OSError:
                pass


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


class SocketServer:
    """Accepts connections on every configured listener."""

    def __init__(self, listeners: list[Listener], handler: RequestHandler, max_request_bytes: int) -> None:
        self.listeners = listeners
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self._servers: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[Connection] = set()
        self.bound_ports: dict[str, int] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for lst in self.listeners:
            infos = socket.getaddrinfo(lst.host or None, lst.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, _, _, _, addr = infos[0]
            if not lst.host:  # all interfaces, dual-stack where possible
                family, addr = (
                    (socket.AF_INET6, ("::", lst.port)) if socket.has_ipv6 else (socket.AF_INET, ("", lst.port))
                )
            srv = socket.socket(family, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and not lst.host:
                srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            try:
                srv.bind(addr)
            except OSError as e:
                srv.close()
                raise OSError(e.errno, f"cannot listen on {lst.url()}: {e.strerror}") from None
            srv.listen(512)
            srv.setblocking(False)
            self._servers.append(srv)
            self.bound_ports[lst.name] = srv.getsockname()[1]
            self._spawn(self._accept_loop(loop, srv, lst))
            log.info("listening on %s (%s)", lst.url(), srv.getsockname()[:2])

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self, loop: asyncio.AbstractEventLoop, srv: socket.socket, lst: Listener) -> None:
        while True:
            try:
                sock, _ = await loop.sock_accept(srv)
            except OSError as e:
                log.warning("accept on %s failed: %s", lst.name, e)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, lst, self.handler, self.max_request_bytes)
            self._connections.add(conn)

            async def serve(conn: Connection = conn) -> None:
                try:
                    await conn.run()
                finally:
                    self._connections.discard(conn)

            self._spawn(serve())

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for srv in self._servers:
            srv.close()
        for conn in list(self._connections):
            conn.close()
