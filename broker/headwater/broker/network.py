"""Listeners and connections: bytes in, frames to the request handler, responses out in order.

One reader task per connection. Requests of a connection are handled one at a time and
answered in the order they arrived, as Kafka does (it mutes a channel while a request is in
flight); pipelined requests wait in the socket buffer. Response parts that are
:class:`FileRegion` s (Fetch record data) leave with ``os.sendfile`` straight from the
segment file: zero copy. The frame size is checked against ``socket.request.max.bytes``
before a buffer of that size exists.

TLS listeners (SSL, SASL_SSL) are served by :class:`TlsConnection` over asyncio streams with
Python's ``ssl``: bytes must pass through the TLS library, so record data is read from the
segment file and written (no sendfile there). PLAINTEXT keeps the raw-socket path untouched.

SASL listeners start each connection with a gate as its handler (broker/sasl.py); once the client
authenticated, the gate swaps in the broker's handler, so an authenticated connection does no
per-request security work. ``principal`` is the connection's KafkaPrincipal (``User:alice``).

Limits against clients that never log in (security review H3), with Kafka 2.3's names:

- Before SASL authentication a frame may be at most :data:`SASL_MAX_RECEIVE_SIZE` (512 KiB, Kafka's
  ``SaslServerAuthenticator.MAX_RECEIVE_SIZE``); a larger size prefix closes the connection.
  Afterwards ``socket.request.max.bytes`` applies. Buffers grow as bytes arrive (frames.py), so a
  size prefix alone costs nothing on any listener.
- ``connections.max.idle.ms``: a connection with no request in progress that has read and written
  nothing for that long is closed, authenticated or not (Kafka's default: 10 minutes).
- ``max.connections.per.ip`` / ``max.connections.per.ip.overrides``: a connection beyond its
  address's count is closed as soon as it is accepted (before a TLS handshake or any read).
- ``max.connections``: the broker stops accepting while that many connections are open (they wait
  in the listen backlog, as Kafka's acceptor blocks); the inter-broker listener is exempt.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import ssl
import struct
import time
import types
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from headwater.broker.config import Listener
from headwater.protocol.errors import DecodeError
from headwater.protocol.frames import FrameDecoder, FrameTooLarge
from headwater.protocol.primitives import FileRegion

if TYPE_CHECKING:
    from headwater.broker.quotas import QuotaSlots

log = logging.getLogger(__name__)

Response = list[bytes | FileRegion] | None
#: (connection, frame) -> response parts, or None for no response (acks=0), or raises
#: CloseConnection.
RequestHandler = Callable[["ClientConnection", memoryview], Awaitable[Response]]

ANONYMOUS = "User:ANONYMOUS"
_SIZE = struct.Struct(">i")
#: The largest frame read before SASL authentication (Kafka's SaslServerAuthenticator.MAX_RECEIVE_SIZE).
SASL_MAX_RECEIVE_SIZE = 512 * 1024
MAX_INT = 2**31 - 1


class LoopTime:
    """The time one connection's task runs on the event loop: its own steps, not its waits.

    Each connection is served by one task, which reads, decodes, handles (awaiting what it must) and
    sends its requests one at a time; :meth:`timed` drives that task's coroutine and clocks every
    step it runs (two clock reads a step). ``now()``, read inside a step, is the task's total so far,
    so ``now()`` at a request's end minus ``now()`` at its start is what the request itself cost the
    broker — decoding, handling and encoding it, not the time it waited (a long-polling Fetch, an
    acks=all Produce waiting for its ISR) nor other connections' work: KIP-124's request-handler
    plus network-thread time, on one loop (broker/quotas.py, ``request_percentage``). Event loop only.
    """

    __slots__ = ("busy", "clock", "running", "step_start")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.busy = 0.0  # the steps finished so far
        self.step_start = 0.0  # when the current step began
        self.clock = clock
        self.running = False  # inside timed(): now() is meaningful

    def now(self) -> float:
        return self.busy + (self.clock() - self.step_start)

    @types.coroutine
    def timed(self, coro: Awaitable[Any]) -> Generator[Any, Any, Any]:
        it = coro.__await__()
        send, throw, clock = it.send, it.throw, self.clock
        value: Any = None
        error: BaseException | None = None
        self.running = True
        try:
            while True:
                t0 = self.step_start = clock()
                try:
                    yielded = send(value) if error is None else throw(error)
                except StopIteration as done:
                    return done.value
                finally:
                    self.busy += clock() - t0
                try:
                    value, error = (yield yielded), None
                except BaseException as e:  # cancellation and the like go into the coroutine
                    value, error = None, e
        finally:
            self.running = False


class ClientConnection(Protocol):
    """What a request handler may use of a connection, plain or TLS."""

    listener: Listener
    peer: str
    principal: str
    handler: RequestHandler
    closed: bool
    #: set by the request path when a client quota throttles this connection (broker/quotas.py)
    throttle_ms: int
    #: the time its task ran on the loop (request quotas)
    loop_time: LoopTime
    #: the client quotas its requests record into, resolved once (broker/quotas.py)
    quota_slots: QuotaSlots | None

    async def send(self, parts: list[bytes | FileRegion]) -> None: ...

    async def flush(self) -> None: ...

    def close(self) -> None: ...

    def authenticated(self, principal: str, handler: RequestHandler) -> None:
        """SASL succeeded: the principal and the handler from now on; frames up to
        ``socket.request.max.bytes`` again."""


class CloseConnection(Exception):
    """Raised by a request handler to close the connection (what Kafka does for bad requests).

    ``logged``: the handler already logged why (a failed authentication is logged once, at INFO).
    """

    def __init__(self, message: str, logged: bool = False) -> None:
        super().__init__(message)
        self.logged = logged


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
        self,
        sock: socket.socket,
        listener: Listener,
        handler: RequestHandler,
        max_request_bytes: int,
        pre_auth_max_bytes: int | None = None,
    ) -> None:
        """``pre_auth_max_bytes``: the frame limit until :meth:`authenticated` (SASL listeners)."""
        self.sock = sock
        self.listener = listener
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.decoder = FrameDecoder(max_request_bytes if pre_auth_max_bytes is None else pre_auth_max_bytes)
        self.last_active = time.monotonic()  # the last read or write (connections.max.idle.ms)
        self.busy = False  # a request is being handled: never idle
        self._task: asyncio.Task[None] | None = None
        try:
            self.peer = peer_address(sock.getpeername())
        except OSError:
            self.peer = "?"
        self.principal = ANONYMOUS
        self.closed = False
        self.throttle_ms = 0
        self.loop_time = LoopTime()
        self.quota_slots: QuotaSlots | None = None
        self._out: list[bytes] = []  # queued response bytes, in order
        self._flush_scheduled = False
        self._drain: asyncio.Task[None] | None = None  # sends what the socket did not take at once

    def authenticated(self, principal: str, handler: RequestHandler) -> None:
        self.principal = principal
        self.handler = handler
        self.decoder.max_frame_bytes = self.max_request_bytes

    def expire(self) -> None:
        """Close from outside (idle): the reader task ends and cleans up."""
        if self._task is not None:
            self._task.cancel()
        else:
            self.close()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
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
                self.last_active = time.monotonic()
                try:
                    frames = decoder.received(n)
                except FrameTooLarge as e:
                    _log_too_large(self.peer, self.listener, e.size, e.limit, self.max_request_bytes)
                    return
                except DecodeError as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    return
                for frame in frames:
                    self.busy = True
                    try:
                        response = await self.handler(self, frame)
                    except CloseConnection as e:
                        if not e.logged:
                            log.warning("closing connection from %s: %s", self.peer, e)
                        return
                    finally:
                        self.busy = False
                    if response is not None:
                        await self.send(response)
                    if self.throttle_ms:
                        self._flush()
                        await muted(self)
                self._flush()  # the answers to one read's requests leave together
                self.last_active = time.monotonic()
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
        self.last_active = time.monotonic()
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


class TlsConnection:
    """One connection on a TLS listener, over an asyncio stream (the TLS handshake is done).

    Requests are answered one at a time, in order, as on :class:`Connection`. Record data
    (FileRegions) is read from the segment with ``os.pread`` and written through TLS: sendfile
    cannot encrypt. A client certificate, when the listener asked for one and got it, names the
    principal (``User:CN=client,OU=...``) until SASL authenticates someone else.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: Listener,
        handler: RequestHandler,
        max_request_bytes: int,
        pre_auth_max_bytes: int | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.listener = listener
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.max_frame_bytes = max_request_bytes if pre_auth_max_bytes is None else pre_auth_max_bytes
        self.last_active = time.monotonic()
        self.busy = False
        self._task: asyncio.Task[None] | None = None
        peer = writer.get_extra_info("peername")
        self.peer = peer_address(peer) if peer else "?"
        self.principal = ANONYMOUS
        if writer.get_extra_info("peercert"):  # a client certificate, verified
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            self.principal = "User:" + certificate_principal(der)
        self.closed = False
        self.throttle_ms = 0
        self.loop_time = LoopTime()
        self.quota_slots: QuotaSlots | None = None

    def authenticated(self, principal: str, handler: RequestHandler) -> None:
        self.principal = principal
        self.handler = handler
        self.max_frame_bytes = self.max_request_bytes

    def expire(self) -> None:
        if self._task is not None:
            self._task.cancel()
        else:
            self.close()

    async def run(self) -> None:
        self._task = asyncio.current_task()
        try:
            while True:
                try:
                    head = await self.reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return
                self.last_active = time.monotonic()
                (size,) = _SIZE.unpack(head)
                if size < 0 or size > self.max_frame_bytes:
                    _log_too_large(self.peer, self.listener, size, self.max_frame_bytes, self.max_request_bytes)
                    return
                frame = await self.reader.readexactly(size)  # the stream buffers what arrives, no more
                self.last_active = time.monotonic()
                self.busy = True
                try:
                    response = await self.handler(self, memoryview(frame))
                except CloseConnection as e:
                    if not e.logged:
                        log.warning("closing connection from %s: %s", self.peer, e)
                    return
                finally:
                    self.busy = False
                if response is not None:
                    await self.send(response)
                if self.throttle_ms:
                    await muted(self)
                self.last_active = time.monotonic()
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
        except asyncio.CancelledError:
            raise
        finally:
            self.close()

    async def send(self, parts: list[bytes | FileRegion]) -> None:
        for part in parts:
            if isinstance(part, FileRegion):
                await self._send_region(part)
            else:
                self.writer.write(part)
        await self.writer.drain()  # returns at once unless the transport's buffer is above its high mark

    async def _send_region(self, region: FileRegion, chunk: int = 1 << 20) -> None:
        fd = region.file.fileno()
        offset, remaining = region.position, region.size
        while remaining > 0:
            data = os.pread(fd, min(chunk, remaining), offset)
            if not data:
                raise ConnectionError(f"segment ended {remaining} bytes early while sending to {self.peer}")
            self.writer.write(data)
            offset += len(data)
            remaining -= len(data)
            await self.writer.drain()

    async def flush(self) -> None:
        await self.writer.drain()
        if self.closed:
            raise ConnectionError(f"connection from {self.peer} closed")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


async def muted(conn: Connection | TlsConnection) -> None:
    """A client quota throttled the connection: its response has left; nothing more is read or
    handled on it for ``throttle_ms`` (Kafka 2.3 mutes the channel, KIP-219)."""
    delay, conn.throttle_ms = conn.throttle_ms, 0
    await asyncio.sleep(delay / 1000.0)


def _log_too_large(peer: str, listener: Listener, size: int, limit: int, max_request_bytes: int) -> None:
    if size < 0:
        log.warning("closing connection from %s on %s: negative frame size %d", peer, listener.name, size)
    elif limit < max_request_bytes:
        log.warning(
            "closing connection from %s on %s: a frame of %d bytes before SASL authentication (at most %d)",
            peer,
            listener.name,
            size,
            limit,
        )
    else:
        log.warning(
            "closing connection from %s on %s: frame of %d bytes exceeds %d (socket.request.max.bytes)",
            peer,
            listener.name,
            size,
            limit,
        )


def peer_address(sockaddr: tuple[object, ...]) -> str:
    """``host:port`` of a peer, the host as Java's ``InetAddress.getHostAddress`` writes it (what
    Kafka's ACL host matching compares): an IPv4 client of a dual-stack listener (``::ffff:a.b.c.d``)
    is ``a.b.c.d``, an IPv6 address is eight uncompressed groups (``0:0:0:0:0:0:0:1``)."""
    host, port = str(sockaddr[0]), sockaddr[1]
    address, _, scope = host.partition("%")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{host}:{port}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"{ip.ipv4_mapped}:{port}"
        groups = ":".join(f"{int(g, 16):x}" for g in ip.exploded.split(":"))
        return f"{groups}{'%' + scope if scope else ''}:{port}"
    return f"{ip}:{port}"


#: X500Principal's RFC 2253 keywords; any other attribute is written as its dotted OID
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: ASN.1 string tags X500Principal writes as text (else ``#`` and the hex of the DER value)
_STRING_TAGS = {12: "utf-8", 19: "ascii", 20: "latin-1", 22: "ascii", 27: "latin-1", 30: "utf-16-be"}
_ESCAPED = frozenset(',=+<>#;"\\')


def _der_value(tag: int, data: bytes) -> bytes:
    n = len(data)
    length = (
        bytes([n])
        if n < 128
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )
    return bytes([tag]) + length + data


def _rfc2253_value(value: str) -> str:
    out = "".join("\\00" if c == "\0" else f"\\{c}" if c in _ESCAPED else c for c in value)
    lead, trail = len(out) - len(out.lstrip(" \r")), len(out.rstrip(" \r"))
    return "".join(f"\\{c}" if i < lead or i >= trail else c for i, c in enumerate(out))


def certificate_principal(der: bytes) -> str:
    """A DER certificate's subject as Kafka names the principal: ``X500Principal.getName()``, RFC
    2253 (``CN=broker\\,OU=ops,O=Example``): most specific RDN first, the members of a multi-valued
    RDN joined with ``+`` in their DER order, ``, = + < > # ; " \\`` escaped with a backslash (and
    leading or trailing spaces), CN/C/L/ST/O/OU/STREET/DC/UID by keyword and any other attribute as
    its dotted OID with ``#`` and the hex of its DER value (emailAddress: ``1.2.840.113549.1.9.1=#16...``)."""
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der).subject
    rdns = []
    for rdn in reversed(list(subject.rdns)):
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            tag = int(attr._type.value)  # the ASN.1 string type (cryptography keeps it as parsed)
            text = attr.value if isinstance(attr.value, str) else attr.value.decode("latin-1")
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is None or tag not in _STRING_TAGS:
                encoded = _der_value(tag, text.encode(_STRING_TAGS.get(tag, "utf-8")))
                parts.append(f"{keyword or oid}=#{encoded.hex()}")
            else:
                parts.append(f"{keyword}={_rfc2253_value(text)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


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


def quota_address(host: str) -> str:
    """The address a connection is counted under: an IPv4 client on a dual-stack listener
    (``::ffff:10.0.0.1``) counts as ``10.0.0.1``, as Java sees it."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass(frozen=True)
class ConnectionLimits:
    """Kafka 2.3's connection limits (KafkaConfig): ``connections.max.idle.ms``,
    ``max.connections.per.ip``, ``max.connections.per.ip.overrides`` (host or address -> count)
    and ``max.connections``; the SASL listeners' pre-authentication frame limit."""

    connections_max_idle_ms: int = 600000
    max_connections_per_ip: int = MAX_INT
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    max_connections: int = MAX_INT
    inter_broker_listener: str = ""
    sasl_max_receive_size: int = SASL_MAX_RECEIVE_SIZE


class ConnectionQuotas:
    """Open connections per client address and in total (Kafka's ConnectionQuotas). On the event
    loop only."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.overrides: dict[str, int] = {}
        for host, count in limits.max_connections_per_ip_overrides.items():
            self.overrides[_resolve(host)] = count
        self.counts: dict[str, int] = {}
        self.total = 0
        self._slot_freed = asyncio.Event()

    def limit_of(self, address: str) -> int:
        return self.overrides.get(address, self.limits.max_connections_per_ip)

    def acquire(self, address: str) -> bool:
        """Count a new connection from ``address``; False (nothing counted) when it has its maximum."""
        count = self.counts.get(address, 0)
        if count >= self.limit_of(address):
            return False
        self.counts[address] = count + 1
        self.total += 1
        return True

    def release(self, address: str) -> None:
        count = self.counts.get(address, 0) - 1
        if count > 0:
            self.counts[address] = count
        else:
            self.counts.pop(address, None)
        self.total -= 1
        self._slot_freed.set()

    async def wait_for_slot(self, listener: str) -> None:
        """Until fewer than ``max.connections`` are open (the inter-broker listener never waits)."""
        while self.total >= self.limits.max_connections and listener != self.limits.inter_broker_listener:
            self._slot_freed.clear()
            await self._slot_freed.wait()


def _resolve(host: str) -> str:
    """An override's host as the address connections from it are counted under (Kafka resolves
    the names in ``max.connections.per.ip.overrides`` once, at start-up)."""
    try:
        return quota_address(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as e:
        log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); its override does not apply", host, e)
        return host
    return quota_address(str(infos[0][4][0]))


class SocketServer:
    """Accepts connections on every configured listener, within the connection limits."""

    def __init__(
        self,
        listeners: list[Listener],
        handler: RequestHandler,
        max_request_bytes: int,
        first_handlers: dict[str, RequestHandler] | None = None,
        ssl_contexts: dict[str, ssl.SSLContext] | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        """``first_handlers``: a listener's handler for new connections (the SASL gate) when not
        ``handler``; ``ssl_contexts``: the listeners served with TLS."""
        self.listeners = listeners
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.first_handlers = first_handlers or {}
        self.ssl_contexts = ssl_contexts or {}
        self.limits = limits or ConnectionLimits()
        self.quotas = ConnectionQuotas(self.limits)
        self._servers: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[Connection | TlsConnection] = set()
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
            self.bound_ports[lst.name] = srv.getsockname()[1]
            ctx = self.ssl_contexts.get(lst.name)
            self._servers.append(srv)
            self._spawn(self._accept_loop(loop, srv, lst, ctx))
            log.info("listening on %s (%s)%s", lst.url(), srv.getsockname()[:2], " with TLS" if ctx is not None else "")
        if self.limits.connections_max_idle_ms >= 0:
            self._spawn(self._close_idle())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(
        self, loop: asyncio.AbstractEventLoop, srv: socket.socket, lst: Listener, ctx: ssl.SSLContext | None
    ) -> None:
        first_handler = self.first_handlers.get(lst.name, self.handler)
        pre_auth = self.limits.sasl_max_receive_size if lst.name in self.first_handlers else None
        quotas = self.quotas
        while True:
            await quotas.wait_for_slot(lst.name)
            try:
                sock, addr = await loop.sock_accept(srv)
            except OSError as e:
                log.warning("accept on %s failed: %s", lst.name, e)
                await asyncio.sleep(0.1)
                continue
            address = quota_address(str(addr[0]))
            if not quotas.acquire(address):
                log.info(
                    "Rejected connection from %s on %s, address already has the configured maximum of %d connections "
                    "(max.connections.per.ip)",
                    address,
                    lst.name,
                    quotas.limit_of(address),
                )
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ctx is not None:
                self._spawn(self._serve_tls(loop, sock, lst, ctx, first_handler, pre_auth, address))
            else:
                self._spawn(
                    self._serve(Connection(sock, lst, first_handler, self.max_request_bytes, pre_auth), address)
                )

    async def _serve(self, conn: Connection | TlsConnection, address: str) -> None:
        self._connections.add(conn)
        try:
            await conn.loop_time.timed(conn.run())
        finally:
            self._connections.discard(conn)
            self.quotas.release(address)

    async def _serve_tls(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        lst: Listener,
        ctx: ssl.SSLContext,
        handler: RequestHandler,
        pre_auth: int | None,
        address: str,
    ) -> None:
        """The TLS handshake (10 s at most), then the connection; a failed handshake (a plaintext
        client, an untrusted certificate) closes the socket."""
        try:
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=ctx, ssl_handshake_timeout=10.0
            )
        except Exception as e:  # the handshake failed: nothing to serve
            log.debug("TLS handshake with %s on %s failed: %s", address, lst.name, e)
            sock.close()
            self.quotas.release(address)
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._serve(TlsConnection(reader, writer, lst, handler, self.max_request_bytes, pre_auth), address)

    async def _close_idle(self) -> None:
        """Close connections idle for ``connections.max.idle.ms`` (Kafka's Selector does it on each
        poll; here a check every tenth of the idle time, at most every 5 s)."""
        idle_s = self.limits.connections_max_idle_ms / 1000.0
        while True:
            await asyncio.sleep(min(max(idle_s / 10, 0.01), 5.0))
            cutoff = time.monotonic() - idle_s
            for conn in list(self._connections):
                if not conn.busy and conn.last_active < cutoff and not conn.closed:
                    log.debug(
                        "closing connection from %s on %s: idle (connections.max.idle.ms)",
                        conn.peer,
                        conn.listener.name,
                    )
                    conn.expire()

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for srv in self._servers:
            srv.close()
        for conn in list(self._connections):
            conn.close()
