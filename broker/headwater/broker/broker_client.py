"""Broker-to-broker requests: the controller's channel and the replica fetchers use this.

One connection to one broker: requests are pipelined with correlation ids and answered in
order (Kafka's per-connection ordering), each at the version this codebase implements (all
brokers of a cluster run the same code). The broker never imports the client library; this
is the broker's own small client.

On a secured inter-broker listener it speaks the listener's protocol: TLS with the listener's
truststore (and keystore, for brokers that require client certificates), then, for SASL, a v1
SaslHandshake and SaslAuthenticate rounds with the broker's own login before any other request.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque

from headwater.broker.security import ClientSecurity
from headwater.protocol.frames import decode_response, encode_request
from headwater.protocol.schema import Api, Message
from headwater.sasl_client import SaslAuthenticationError, authenticate

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    pass


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        connect_timeout_s: float = 5.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.security = security
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._pending: deque[tuple[int, Api, int, asyncio.Future[Message]]] = deque()
        self._read_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        sec = self.security
        ctx = sec.ssl_context if sec is not None else None
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=ctx, server_hostname=self.host if ctx else None),
                self.connect_timeout_s,
            )
        except (TimeoutError, OSError) as e:
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {e!r}") from None
        self._read_task = asyncio.ensure_future(self._read_loop())
        if sec is not None and sec.sasl_mechanism:
            try:
                await asyncio.wait_for(self._authenticate(sec), self.connect_timeout_s * 2)
            except (TimeoutError, SaslAuthenticationError, BrokerConnectionError) as e:
                self.close()
                raise BrokerConnectionError(
                    f"SASL {sec.sasl_mechanism} authentication to {self.host}:{self.port} failed: {e}"
                ) from None

    async def _authenticate(self, sec: ClientSecurity) -> None:
        async def roundtrip(api: Api, version: int, body: Message) -> Message:
            return await self._send(api, body, version)

        await authenticate(roundtrip, sec.sasl_mechanism or "", sec.username, sec.password)

    def _send(self, api: Api, body: Message, version: int) -> asyncio.Future[Message]:
        """Write one request (the caller holds the lock or is connecting); the future of its answer."""
        assert self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending.append((self._correlation, api, version, fut))
        self._writer.write(encode_request(api, version, self._correlation, self.client_id, body))
        return fut

    async def request(self, api: Api, body: Message, version: int | None = None, timeout_s: float = 30.0) -> Message:
        async with self._lock:
            if not self.connected:
                await self.connect()
            fut = self._send(api, body, api.max_version if version is None else version)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            self.close(BrokerConnectionError(f"{api.name} to {self.host}:{self.port} timed out"))
            raise BrokerConnectionError(f"{api.name} to {self.host}:{self.port} timed out after {timeout_s}s") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: BaseException = BrokerConnectionError(f"connection to {self.host}:{self.port} closed")
        try:
            while True:
                head = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    raise BrokerConnectionError("response without a request")
                cid, api, version, fut = self._pending.popleft()
                got_cid, body = decode_response(api, version, memoryview(frame))
                if got_cid != cid:
                    raise BrokerConnectionError(f"correlation id {got_cid} != {cid}")
                if not fut.done():
                    fut.set_result(body)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, OSError, ValueError) as e:
            error = BrokerConnectionError(f"connection to {self.host}:{self.port} lost: {e!r}")
        finally:
            self._fail_pending(error)
            self._close_writer()

    def _fail_pending(self, error: BaseException) -> None:
        while self._pending:
            _, _, _, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(error)

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None

    def close(self, error: BaseException | None = None) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            self._read_task = None
        self._fail_pending(error or BrokerConnectionError("closed"))
        self._close_writer()


def endpoint_of(endpoints: dict[str, tuple[str, int]], listener: str) -> tuple[str, int] | None:
    return endpoints.get(listener)
