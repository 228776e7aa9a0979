"""One TCP connection to one broker, over asyncio streams.

On connect the client sends ApiVersions v0 and remembers the broker's ranges; every later
request uses, unless told otherwise, the highest version both sides implement. Requests are
pipelined: each gets the next correlation id and is written at once; one reader task matches
responses, which a Kafka broker sends in request order, to their waiters. A Produce with acks=0
gets no response at all (``expect_response=False``).

With a :class:`~headwater.client.security.ClientSecurity` the connection speaks TLS and, for
SASL, authenticates right after ApiVersions (SaslHandshake v1 + SaslAuthenticate); a refused
login raises :class:`KafkaAuthenticationError` and is not retried by the connection.

Any transport failure (refused, reset, EOF, a malformed frame, a correlation id out of order)
closes the connection and fails every waiting request with :class:`KafkaConnectionError`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import struct

from headwater.client.errors import KafkaAuthenticationError, KafkaConnectionError, KafkaTimeoutError
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import API_VERSIONS
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError
from headwater.protocol.frames import decode_response, encode_request
from headwater.protocol.schema import Api, Message
from headwater.sasl_client import SaslAuthenticationError, authenticate

log = logging.getLogger("headwater.client")

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")

DEFAULT_CLIENT_ID = "headwater"


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """``host:port`` (or ``[v6addr]:port``, or a bare host) as (host, port); ValueError when malformed."""
    text = address.strip()
    if "://" in text:  # PLAINTEXT://host:port, as listeners are written
        text = text.split("://", 1)[1]
    if not text:
        raise ValueError("empty broker address")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"malformed broker address {address!r}")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"malformed broker address {address!r}: no host")
    if not port_text:
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"malformed broker address {address!r}: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"malformed broker address {address!r}: port {port} is out of range")
    return host, port


class BrokerConnection:
    """A pipelined request/response channel to one broker.

    ``node_id`` is informational (None for a bootstrap address whose id is not known yet).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        max_response_bytes: int = 1 << 30,
        security: ClientSecurity | None = None,
    ) -> None:
        self.security = security
        self._ssl = security.ssl_context() if security is not None else None
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: collections.deque[tuple[int, Api, int, asyncio.Future[Message]]] = collections.deque()
        self._ids = itertools.count(1)
        self._broker_versions: dict[int, tuple[int, int]] = {}
        self._closed_error: KafkaConnectionError | None = None
        self._connected = False

    def __repr__(self) -> str:
        node = "bootstrap" if self.node_id is None else f"node {self.node_id}"
        return f"<BrokerConnection {self.host}:{self.port} ({node})>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._connected and self._closed_error is None

    @property
    def broker_versions(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version per API key, from ApiVersions."""
        return dict(self._broker_versions)

    # -- life cycle ------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the socket and do the ApiVersions handshake, both within ``connect_timeout``."""
        if self._closed_error is not None:
            raise self._closed_error
        if self._connected:
            return
        try:
            async with asyncio.timeout(self.connect_timeout):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl, server_hostname=self.host if self._ssl else None
                )
                self._read_task = asyncio.create_task(self._read_loop(), name=f"headwater-reader-{self.address}")
                self._connected = True
                response = await self._send(API_VERSIONS, 0, {}, expect_response=True, timeout=None)
                sec = self.security
                if sec is not None and sec.uses_sasl and sec.sasl_mechanism:

                    async def roundtrip(api: Api, version: int, body: Message) -> Message:
                        return await self._send(api, version, body, expect_response=True, timeout=None)

                    await authenticate(roundtrip, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password)
        except TimeoutError:
            await self.close()
            raise KafkaTimeoutError(
                f"could not connect to broker {self.address} within {self.connect_timeout:g}s"
            ) from None
        except SaslAuthenticationError as e:
            await self.close()
            raise KafkaAuthenticationError(f"SASL authentication to broker {self.address} failed: {e}") from None
        except OSError as e:
            await self.close()
            reason = e.strerror or str(e) or type(e).__name__
            raise KafkaConnectionError(f"could not connect to broker {self.address}: {reason}") from None
        except BaseException:
            await self.close()
            raise
        code = ErrorCode.of(response["error_code"])
        if code is not ErrorCode.NONE:
            await self.close()
            raise KafkaConnectionError(f"broker {self.address} refused ApiVersions v0: {code.name}")
        self._broker_versions = {
            int(k["api_key"]): (int(k["min_version"]), int(k["max_version"])) for k in response["api_keys"]
        }
        log.debug("connected to %s: %d APIs", self.address, len(self._broker_versions))

    async def close(self) -> None:
        """Close the socket; waiting requests fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"connection to broker {self.address} was closed"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _fail(self, error: KafkaConnectionError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        if self._writer is not None:
            self._writer.close()
        while self._pending:
            _, _, _, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(self._closed_error)

    # -- versions --------------------------------------------------------------------------------

    def version_for(self, api: Api, *, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of ``api`` that both we and the broker implement (within the bounds given)."""
        rng = self._broker_versions.get(api.key)
        if rng is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker {self.address} does not support {api.name}")
        lo = max(api.min_version, rng[0], min_version if min_version is not None else 0)
        hi = min(api.max_version, rng[1], max_version if max_version is not None else api.max_version)
        if lo > hi:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"no common {api.name} version: we speak v{api.min_version}-{api.max_version}, "
                f"broker {self.address} v{rng[0]}-{rng[1]}"
                + (f", need v{min_version}+" if min_version is not None else ""),
            )
        return hi

    # -- requests --------------------------------------------------------------------------------

    async def request(
        self,
        api: Api,
        body: Message,
        version: int | None = None,
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Message:
        """Send one request and wait for its response body (``{}`` when ``expect_response`` is False).

        ``timeout`` (seconds) defaults to ``request_timeout``; a request that times out raises
        KafkaTimeoutError and its late response is discarded.
        """
        if not self._connected:
            raise KafkaConnectionError(f"not connected to broker {self.address}")
        if version is None:
            version = self.version_for(api)
        elif not api.supports(version):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"{api.name} v{version} is not implemented here")
        else:
            rng = self._broker_versions.get(api.key)
            if rng is None or not rng[0] <= version <= rng[1]:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION, f"broker {self.address} does not support {api.name} v{version}"
                )
        return await self._send(
            api,
            version,
            body,
            expect_response=expect_response,
            timeout=self.request_timeout if timeout is None else timeout,
        )

    async def _send(
        self, api: Api, version: int, body: Message, *, expect_response: bool, timeout: float | None
    ) -> Message:
        if self._closed_error is not None:
            raise self._closed_error
        writer = self._writer
        assert writer is not None
        correlation_id = next(self._ids) & 0x7FFFFFFF
        frame = encode_request(api, version, correlation_id, self.client_id, body)
        fut: asyncio.Future[Message] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending.append((correlation_id, api, version, fut))
        writer.write(frame)
        try:
            await writer.drain()
        except OSError as e:
            self._fail(KafkaConnectionError(f"connection to broker {self.address} failed: {e}"))
            assert self._closed_error is not None
            raise self._closed_error from None
        if fut is None:
            return {}
        if timeout is None:
            return await fut
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise KafkaTimeoutError(
                f"{api.name} request to broker {self.address} got no response within {timeout:g}s"
            ) from None

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 4 or size > self.max_response_bytes:
                    raise KafkaConnectionError(f"broker {self.address} sent a frame of invalid size {size}")
                frame = await reader.readexactly(size)
                if not self._pending:
                    raise KafkaConnectionError(f"broker {self.address} sent a response nobody asked for")
                correlation_id, api, version, fut = self._pending.popleft()
                (got,) = _CORRELATION.unpack_from(frame, 0)
                if got != correlation_id:
                    raise KafkaConnectionError(
                        f"broker {self.address} answered correlation id {got}, expected {correlation_id}"
                    )
                if fut.done():  # timed out or cancelled: drop the late answer
                    continue
                try:
                    _, body = decode_response(api, version, memoryview(frame))
                except DecodeError as e:
                    fut.set_exception(
                        KafkaConnectionError(f"malformed {api.name} v{version} response from {self.address}: {e}")
                    )
                    continue
                fut.set_result(body)
        except asyncio.IncompleteReadError:
            self._fail(KafkaConnectionError(f"broker {self.address} closed the connection"))
        except OSError as e:
            self._fail(KafkaConnectionError(f"connection to broker {self.address} failed: {e}"))
        except KafkaConnectionError as e:
            self._fail(e)
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError(f"connection to broker {self.address} was closed"))
            raise
