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

_RECV_SIZE = 256 * 1024


class CloseConnection(Exception):
    """Raised by a request handler to close the connection (what Kafka does for bad requests)."""


class Connection:
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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.sock, _RECV_SIZE)
                if not data:
                    return
                try:
                    frames = self.decoder.feed(data)
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
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
        except asyncio.CancelledError:
            raise
        finally:
            self.close()

    async def send(self, parts: list[bytes | FileRegion]) -> None:
        loop = asyncio.get_running_loop()
        pending = bytearray()
        for part in parts:
            if isinstance(part, FileRegion):
                if pending:
                    await loop.sock_sendall(self.sock, pending)
                    pending = bytearray()
                await self._sendfile(part)
            else:
                pending += part
        if pending:
            await loop.sock_sendall(self.sock, pending)

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
