"""The SASL gate: what a connection on a SASL listener may do before it authenticated.

Kafka 2.3's order: ApiVersions (optional, any number), SaslHandshake (v0 or v1, once), then the
mechanism's tokens -- inside SaslAuthenticate requests after a v1 handshake, as raw size-prefixed
frames after a v0 handshake. Any other request before authentication closes the connection, as
Kafka's SaslServerAuthenticator does.

On success the connection's principal becomes ``User:<name>`` and its handler becomes the
broker's own, so an authenticated connection pays nothing per request. On failure the client
gets SASL_AUTHENTICATION_FAILED (v1) and the connection is closed after
``connection.failed.authentication.delay.ms``: each guess costs a connection and that delay, and
the broker does no key derivation for a guess (SCRAM's PBKDF2 runs on the client).

Mechanisms: PLAIN (RFC 4616; users from the listener's JAAS config), SCRAM-SHA-256/512 (RFC
5802/7677; credentials from the broker's cache, credential_cache.py, refreshed by ZooKeeper change
notifications: a login reads nothing from ZooKeeper).

Until the login succeeds the connection reads frames of at most 512 KiB (network.py), and any
error a client's token causes is a failed login (delay, metric, code 58), never an exception.
Re-authentication (KIP-368, ``connections.max.reauth.ms``, Kafka 2.2 semantics): with a positive
value a successful login's SaslAuthenticate answer carries ``session_lifetime_ms``; a request
arriving after the session's end closes the connection, unless it is a SaslHandshake (v1, the same
mechanism) starting a re-authentication, whose success (as the same principal) starts a new
session. A changed password or a deleted user fails it and the connection is closed. With 0 (the
default) sessions never end and the lifetime is 0.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
import time
import weakref
from collections.abc import Awaitable, Callable

from headwater.broker.network import ClientConnection, CloseConnection, RequestHandler, Response
from headwater.broker.security import ListenerSecurity
from headwater.protocol.apis import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import DecodeError, ErrorCode
from headwater.protocol.frames import RequestHeader, UnsupportedRequest, decode_request, encode_response
from headwater.scram import MECHANISMS as SCRAM_MECHANISMS
from headwater.scram import ScramCredential, ScramError, ScramServer

log = logging.getLogger(__name__)

#: (user, mechanism) -> the user's SCRAM credential, or None when unknown
CredentialLookup = Callable[[str, str], Awaitable[ScramCredential | None]]

_SIZE = struct.Struct(">i")


class AuthenticationFailed(Exception):
    """The client's credentials are wrong; the text goes to the client."""


class _Exchange:
    """One connection's progress through SASL."""

    __slots__ = ("mechanism", "raw_tokens", "reauth", "scram", "step", "user")

    def __init__(self, mechanism: str, raw_tokens: bool) -> None:
        self.mechanism = mechanism
        self.raw_tokens = raw_tokens
        self.scram: ScramServer | None = None
        self.step = 0
        self.user = ""
        self.reauth: _Session | None = None  # the session a re-authentication (KIP-368) renews


class _Session:
    """A logged-in connection's session when ``connections.max.reauth.ms`` is set."""

    __slots__ = ("expires_at", "mechanism", "principal")

    def __init__(self, principal: str, mechanism: str, expires_at: float) -> None:
        self.principal = principal
        self.mechanism = mechanism
        self.expires_at = expires_at


class SaslGate:
    """The first handler of every connection on one SASL listener."""

    def __init__(
        self,
        security: ListenerSecurity,
        authenticated_handler: RequestHandler,
        credentials: CredentialLookup,
        failed_delay_s: float,
        on_result: Callable[[str, bool], None] | None = None,
        reauth_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``reauth_ms``: ``connections.max.reauth.ms`` (0: sessions never expire and an
        authenticated connection goes straight to ``authenticated_handler``)."""
        self.security = security
        self.reauth_ms = reauth_ms
        self.clock = clock
        self._sessions: weakref.WeakKeyDictionary[ClientConnection, _Session] = weakref.WeakKeyDictionary()
        self.next = authenticated_handler
        self.credentials = credentials
        self.failed_delay_s = failed_delay_s
        self.on_result = on_result  # (mechanism, succeeded): for metrics
        # a connection that goes away mid-exchange takes its entry with it
        self._exchanges: weakref.WeakKeyDictionary[ClientConnection, _Exchange] = weakref.WeakKeyDictionary()

    async def handle(self, conn: ClientConnection, frame: memoryview) -> Response:
        exchange = self._exchanges.get(conn)
        if exchange is not None and exchange.raw_tokens:
            return await self._raw_token(conn, exchange, bytes(frame))
        try:
            header, api, body = decode_request(frame)
        except UnsupportedRequest as e:
            if e.header.api_key == API_VERSIONS.key:  # the KIP-511 fallback answer
                return await self.next(conn, frame)
            self._forget(conn)
            raise CloseConnection(f"{e.message} before SASL authentication") from None
        except DecodeError as e:
            self._forget(conn)
            raise CloseConnection(f"malformed request before SASL authentication: {e}") from None
        if api.key == API_VERSIONS.key:
            return await self.next(conn, frame)
        if api.key == SASL_HANDSHAKE.key:
            return await self._handshake(conn, header, body["mechanism"])
        if api.key == SASL_AUTHENTICATE.key and exchange is not None:
            return await self._authenticate(conn, exchange, header, bytes(body["auth_bytes"]))
        self._forget(conn)
        raise CloseConnection(
            f"unexpected {api.name} request from {conn.peer} on {self.security.listener} before SASL authentication"
        )

    def _forget(self, conn: ClientConnection) -> None:
        self._exchanges.pop(conn, None)

    async def _after_login(self, conn: ClientConnection, frame: memoryview) -> Response:
        """An authenticated connection's handler when sessions expire (KIP-368, Kafka 2.2): a
        SaslHandshake starts a re-authentication; any other request after the session's lifetime
        closes the connection, as Kafka's SocketServer does; the rest goes to the broker."""
        session = self._sessions.get(conn)
        key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
        if session is not None and key == SASL_HANDSHAKE.key:
            return await self._reauthenticate(conn, session, frame)
        if session is not None and self.clock() > session.expires_at:
            log.info(
                "closing connection from %s on %s: the SASL session of %s expired (connections.max.reauth.ms=%d)",
                conn.peer,
                self.security.listener,
                session.principal,
                self.reauth_ms,
            )
            raise CloseConnection("SASL session expired", logged=True)
        return await self.next(conn, frame)

    async def _reauthenticate(self, conn: ClientConnection, session: _Session, frame: memoryview) -> Response:
        """A SaslHandshake v1 on a logged-in connection: a re-authentication with the same mechanism;
        its SaslAuthenticate tokens go through the gate again (``handle``)."""
        try:
            header, _, body = decode_request(frame)
        except DecodeError as e:
            raise CloseConnection(f"malformed SaslHandshake: {e}") from None
        enabled = list(self.security.sasl_mechanisms)
        if header.api_version < 1 or body["mechanism"] != session.mechanism:
            await self._answer_and_close(
                conn,
                encode_response(
                    header.correlation_id,
                    SASL_HANDSHAKE,
                    header.api_version,
                    {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled},
                ),
            )
            raise CloseConnection(
                f"re-authentication of {session.principal} needs SaslHandshake v1 with {session.mechanism}, "
                f"got v{header.api_version} with {body['mechanism']}"
            )
        exchange = _Exchange(session.mechanism, raw_tokens=False)
        exchange.reauth = session
        self._exchanges[conn] = exchange
        conn.handler = self.handle
        return encode_response(
            header.correlation_id,
            SASL_HANDSHAKE,
            header.api_version,
            {"error_code": ErrorCode.NONE, "mechanisms": enabled},
        )

    async def _handshake(self, conn: ClientConnection, header: RequestHeader, mechanism: str) -> Response:
        enabled = list(self.security.sasl_mechanisms)
        if conn in self._exchanges:
            await self._answer_and_close(
                conn,
                encode_response(
                    header.correlation_id,
                    SASL_HANDSHAKE,
                    header.api_version,
                    {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled},
                ),
            )
            raise CloseConnection("SaslHandshake received twice")
        if mechanism not in enabled:
            await self._answer_and_close(
                conn,
                encode_response(
                    header.correlation_id,
                    SASL_HANDSHAKE,
                    header.api_version,
                    {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled},
                ),
            )
            raise CloseConnection(f"unsupported SASL mechanism {mechanism!r} (enabled: {enabled})")
        self._exchanges[conn] = _Exchange(mechanism, raw_tokens=header.api_version == 0)
        return encode_response(
            header.correlation_id,
            SASL_HANDSHAKE,
            header.api_version,
            {"error_code": ErrorCode.NONE, "mechanisms": enabled},
        )

    async def _authenticate(
        self, conn: ClientConnection, exchange: _Exchange, header: RequestHeader, token: bytes
    ) -> Response:
        try:
            reply, user = await self._step(exchange, token)
            if user is not None and exchange.reauth is not None and f"User:{user}" != exchange.reauth.principal:
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from {exchange.reauth.principal}: User:{user}"
                )
        except AuthenticationFailed as e:
            body = {
                "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": str(e),
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            }
            await self._fail(conn, exchange, e)
            await self._answer_and_close(
                conn, encode_response(header.correlation_id, SASL_AUTHENTICATE, header.api_version, body)
            )
            raise CloseConnection(f"SASL {exchange.mechanism} authentication failed: {e}", logged=True) from None
        lifetime = 0
        if user is not None:
            self._succeed(conn, exchange, user)
            lifetime = self.reauth_ms
        body = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "auth_bytes": reply,
            "session_lifetime_ms": lifetime,
        }
        return encode_response(header.correlation_id, SASL_AUTHENTICATE, header.api_version, body)

    async def _raw_token(self, conn: ClientConnection, exchange: _Exchange, token: bytes) -> Response:
        """After a v0 handshake: tokens without Kafka headers; a failure can only close."""
        try:
            reply, user = await self._step(exchange, token)
        except AuthenticationFailed as e:
            await self._fail(conn, exchange, e)
            raise CloseConnection(f"SASL {exchange.mechanism} authentication failed: {e}", logged=True) from None
        if user is not None:
            self._succeed(conn, exchange, user)
        return [_SIZE.pack(len(reply)) + reply]

    async def _step(self, exchange: _Exchange, token: bytes) -> tuple[bytes, str | None]:
        """One token in: the reply token, and the user once authenticated. Anything a client's
        token makes go wrong is a failed login (security review L1): never an exception that
        escapes the connection, skips the delay or goes uncounted."""
        try:
            return await self._mechanism_step(exchange, token)
        except (AuthenticationFailed, CloseConnection):
            raise
        except Exception as e:
            log.debug("SASL %s token from a client raised %r", exchange.mechanism, e)
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{exchange.mechanism}: malformed message"
            ) from None

    async def _mechanism_step(self, exchange: _Exchange, token: bytes) -> tuple[bytes, str | None]:
        mech = exchange.mechanism
        invalid = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mech}"
        if mech == "PLAIN":
            parts = token.split(b"\0")
            if len(parts) != 3:
                raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
            authzid, user_b, password_b = (p.decode(errors="replace") for p in parts)
            expected = self.security.plain_users.get(user_b)
            if expected is None or not hmac.compare_digest(expected.encode(), password_b.encode()):
                raise AuthenticationFailed(invalid)
            if authzid and authzid != user_b:
                raise AuthenticationFailed(
                    "Authentication failed: Client requested an authorization id that is different from username"
                )
            return b"", user_b
        if mech in SCRAM_MECHANISMS:
            try:
                if exchange.step == 0:
                    exchange.scram = ScramServer(mech)
                    user = exchange.scram.client_first(token)
                    try:
                        credential = await self.credentials(user, mech)
                    except Exception as e:  # ZooKeeper unreachable: not the client's fault, not a failed login
                        log.error("cannot read the SCRAM credentials of %r: %r", user, e)
                        raise CloseConnection(f"cannot read the SCRAM credentials of {user!r}: {e!r}") from None
                    if credential is None:
                        raise AuthenticationFailed("Authentication failed: Invalid user credentials")
                    exchange.step = 1
                    exchange.user = user
                    return exchange.scram.server_first(credential), None
                if exchange.step == 1 and exchange.scram is not None:
                    exchange.step = 2
                    return exchange.scram.client_final(token), exchange.user
            except ScramError as e:
                raise AuthenticationFailed(invalid if "credentials" in str(e) else f"{invalid}: {e}") from None
            raise AuthenticationFailed("SCRAM exchange already complete")
        raise AuthenticationFailed(f"unsupported mechanism {mech}")

    def _succeed(self, conn: ClientConnection, exchange: _Exchange, user: str) -> None:
        self._forget(conn)
        principal = f"User:{user}"
        if self.reauth_ms > 0:
            expires_at = self.clock() + self.reauth_ms / 1000.0
            self._sessions[conn] = _Session(principal, exchange.mechanism, expires_at)
            conn.authenticated(principal, self._after_login)
        else:
            conn.authenticated(principal, self.next)
        if self.on_result is not None:
            self.on_result(exchange.mechanism, True)
        log.debug("%s authenticated as User:%s with %s", conn.peer, user, exchange.mechanism)

    async def _fail(self, conn: ClientConnection, exchange: _Exchange, error: Exception) -> None:
        self._forget(conn)
        if self.on_result is not None:
            self.on_result(exchange.mechanism, False)
        log.info(
            "Failed authentication with %s on %s (%s: %s)", conn.peer, self.security.listener, exchange.mechanism, error
        )
        await asyncio.sleep(self.failed_delay_s)

    async def _answer_and_close(self, conn: ClientConnection, parts: Response) -> None:
        if parts:
            await conn.send(parts)
        try:
            await conn.flush()
        except ConnectionError:
            pass
