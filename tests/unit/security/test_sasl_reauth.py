"""KIP-368 (``connections.max.reauth.ms``, Kafka 2.2+) in the SASL gate, in memory.

With a positive value the broker tells SaslAuthenticate v1 clients the session's lifetime; a request
(other than a SaslHandshake starting a re-authentication) that arrives after it closes the
connection; a client that logs in again on the same connection, as the same principal and with
the same mechanism, gets a new lifetime. A changed password fails the re-authentication, and the
connection is closed: a changed or deleted user's connections end within the lifetime.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.broker.network import CloseConnection
from headwater.broker.sasl import SaslGate
from headwater.broker.security import ListenerSecurity
from headwater.protocol.apis import METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import ErrorCode
from headwater.scram import ScramClient, ScramCredential, make_credential
from tests.unit.security.test_sasl_gate import FakeConnection, answer, authenticated, frame

USERS = {"alice": make_credential("SCRAM-SHA-256", "alice-pw"), "bob": make_credential("SCRAM-SHA-256", "bob-pw")}


async def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return USERS.get(user)


def gate(reauth_ms: int) -> SaslGate:
    sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, ("SCRAM-SHA-256", "PLAIN"), {"carol": "pw"})
    return SaslGate(sec, authenticated, lookup, 0.0, reauth_ms=reauth_ms)


async def login(conn: Any, user: str, password: str) -> dict[str, Any]:
    """A v1 handshake and a SCRAM exchange through ``conn.handler``; the final SaslAuthenticate answer."""
    answer(SASL_HANDSHAKE, 1, await conn.handler(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})))
    client = ScramClient("SCRAM-SHA-256", user, password)
    first = answer(
        SASL_AUTHENTICATE, 1, await conn.handler(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()}))
    )
    assert first["error_code"] == ErrorCode.NONE, first
    token = client.final(bytes(first["auth_bytes"]))
    return answer(SASL_AUTHENTICATE, 1, await conn.handler(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": token})))


def test_session_lifetime_expiry_and_reauthentication() -> None:
    async def go() -> None:
        g, conn = gate(300), FakeConnection()
        conn.handler = g.handle
        final = await login(conn, "alice", "alice-pw")
        assert final["error_code"] == ErrorCode.NONE and final["session_lifetime_ms"] == 300
        assert conn.principal == "User:alice"
        assert await conn.handler(conn, frame(METADATA, 1, {"topics": []})) == [b"authenticated handler"]
        await asyncio.sleep(0.15)
        again = await login(conn, "alice", "alice-pw")  # before the lifetime ends: a new one
        assert again["error_code"] == ErrorCode.NONE and again["session_lifetime_ms"] == 300
        await asyncio.sleep(0.2)  # past the first lifetime, within the second
        assert await conn.handler(conn, frame(METADATA, 1, {"topics": []})) == [b"authenticated handler"]
        await asyncio.sleep(0.35)  # past the second
        with pytest.raises(CloseConnection, match="expired"):
            await conn.handler(conn, frame(METADATA, 1, {"topics": []}))

    asyncio.run(go())


def test_changed_password_or_other_principal_fails_reauthentication_and_closes() -> None:
    async def go() -> None:
        g, conn = gate(10_000), FakeConnection()
        conn.handler = g.handle
        assert (await login(conn, "alice", "alice-pw"))["error_code"] == ErrorCode.NONE
        USERS["alice"] = make_credential("SCRAM-SHA-256", "new-pw")  # the operator changed it
        try:
            with pytest.raises(CloseConnection):
                await login(conn, "alice", "alice-pw")
            assert answer(SASL_AUTHENTICATE, 1, conn.sent[-1:])["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        finally:
            USERS["alice"] = make_credential("SCRAM-SHA-256", "alice-pw")
        conn2 = FakeConnection()
        conn2.handler = g.handle
        assert (await login(conn2, "alice", "alice-pw"))["error_code"] == ErrorCode.NONE
        with pytest.raises(CloseConnection, match="principal"):
            await login(conn2, "bob", "bob-pw")

    asyncio.run(go())


def test_without_reauth_the_lifetime_is_zero_and_handshakes_after_login_are_illegal() -> None:
    async def go() -> None:
        g, conn = gate(0), FakeConnection()
        conn.handler = g.handle
        final = await login(conn, "alice", "alice-pw")
        assert final["session_lifetime_ms"] == 0 and conn.handler is authenticated  # no per-request work

    asyncio.run(go())
