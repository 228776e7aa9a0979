"""Malformed SCRAM input on both sides (security review L1 and M5).

Broker: whatever a client sends inside the SASL exchange is an authentication failure --
SASL_AUTHENTICATION_FAILED, the failed-login delay, the failure counted, the connection closed --
never an exception escaping the connection task. Client: the server-first message is checked
(iteration count within [4096, MAX_ITERATIONS], base64 salt, numeric count, our nonce) and every
parse error is a ScramError; PBKDF2 runs off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from headwater.broker.network import CloseConnection
from headwater.broker.sasl import SaslGate
from headwater.broker.security import ListenerSecurity
from headwater.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Api, Message
from headwater.sasl_client import SaslAuthenticationError, authenticate
from headwater.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    make_credential,
)
from tests.unit.security.test_sasl_gate import FakeConnection, answer, authenticated, frame

CRED = make_credential("SCRAM-SHA-256", "alice-pw")


async def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return CRED if user == "alice" else None


def _gate(results: list[tuple[str, bool]], delay: float = 0.0) -> SaslGate:
    sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, ("SCRAM-SHA-256", "PLAIN"), {"carol": "pw"})
    return SaslGate(sec, authenticated, lookup, delay, lambda m, ok: results.append((m, ok)))


async def _server_first(g: SaslGate, conn: FakeConnection) -> str:
    """Handshake and a valid client-first; the combined nonce the server chose."""
    await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}))
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-pw", nonce="clientnonce")
    resp = answer(
        SASL_AUTHENTICATE, 1, await g.handle(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()}))
    )
    assert resp["error_code"] == ErrorCode.NONE
    return dict(p.split("=", 1) for p in bytes(resp["auth_bytes"]).decode().split(","))["r"]


FINALS = [
    "p=AAAA,c=biws,r={nonce}",  # the proof first: rindex(",p=") found nothing (the review's snippet)
    "c=biws,r={nonce},p=!!!notbase64",
    "c=biws,r={nonce},p=",
    "c=biws,r={nonce}",
    "c=biws,r={nonce},p=AAAA,x",
    "\udcff",
]
FIRSTS = [
    b"n,,n=alice",
    b"n,,r=abc",
    b"x,,n=alice,r=abc",
    b"n,,n=alice,r=abc,=",
    b"n,,\xff\xfe",
    b"",
    b"n,a=bob,n=alice,r=x",
]


@pytest.mark.parametrize("final", FINALS)
def test_malformed_client_final_is_an_authentication_failure(final: str) -> None:
    async def go() -> None:
        results: list[tuple[str, bool]] = []
        g, conn = _gate(results, delay=0.2), FakeConnection()
        nonce = await _server_first(g, conn)
        conn.sent.clear()
        token = final.format(nonce=nonce).encode(errors="surrogateescape")
        started = time.monotonic()
        with pytest.raises(CloseConnection) as closed:
            await g.handle(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": token}))
        assert time.monotonic() - started >= 0.2  # connection.failed.authentication.delay.ms
        assert closed.value.logged
        resp = answer(SASL_AUTHENTICATE, 1, conn.sent)
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and resp["error_message"]
        assert results == [("SCRAM-SHA-256", False)]

    asyncio.run(go())


@pytest.mark.parametrize("first", FIRSTS)
@pytest.mark.parametrize("raw", [False, True])
def test_malformed_client_first_is_an_authentication_failure(first: bytes, raw: bool) -> None:
    async def go() -> None:
        results: list[tuple[str, bool]] = []
        g, conn = _gate(results), FakeConnection()
        await g.handle(conn, frame(SASL_HANDSHAKE, 0 if raw else 1, {"mechanism": "SCRAM-SHA-256"}))
        conn.sent.clear()
        with pytest.raises(CloseConnection) as closed:
            await g.handle(conn, memoryview(first) if raw else frame(SASL_AUTHENTICATE, 1, {"auth_bytes": first}))
        assert closed.value.logged
        if not raw:
            assert answer(SASL_AUTHENTICATE, 1, conn.sent)["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert results == [("SCRAM-SHA-256", False)]

    asyncio.run(go())


# -- the client ------------------------------------------------------------------------------------


def _client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "alice", "alice-pw", nonce="cn")


SALT = base64.b64encode(b"salt").decode()


@pytest.mark.parametrize(
    "server_first",
    [
        f"r=cnevil,s={SALT},i=1",  # a downgrade: one HMAC per guess
        f"r=cnevil,s={SALT},i={MIN_ITERATIONS - 1}",
        f"r=cnevil,s={SALT},i={MAX_ITERATIONS + 1}",
        f"r=cnevil,s={SALT},i=2147483647",  # tens of minutes of PBKDF2
        f"r=cnevil,s={SALT},i=many",
        f"r=cnevil,s={SALT},i=",
        "r=cnevil,s=!!!,i=4096",
        "r=cnevil,s=,i=4096",
        f"r=other,s={SALT},i=4096",  # not our nonce
        f"r=cn,s={SALT},i=4096",  # no server part in the nonce
        f"s={SALT},i=4096",
        "garbage",
        "\udcff",
    ],
)
def test_client_refuses_a_bad_server_first(server_first: str) -> None:
    with pytest.raises(ScramError):
        _client().final(server_first.encode(errors="surrogateescape"))


def test_client_accepts_the_bounds() -> None:
    for i in (MIN_ITERATIONS, 8192):
        assert _client().final(f"r=cnevil,s={SALT},i={i}".encode()).startswith(b"c=biws,r=cnevil,p=")
    assert MIN_ITERATIONS == 4096 and MAX_ITERATIONS == 100_000


@pytest.mark.parametrize("server_final", [b"v=", b"v=!!", b"\xff", b"", b"e=invalid-proof"])
def test_client_refuses_a_bad_server_final(server_final: bytes) -> None:
    c = _client()
    c.final(f"r=cnevil,s={SALT},i=4096".encode())
    with pytest.raises(ScramError):
        c.verify(server_final)


def test_pbkdf2_runs_off_the_event_loop() -> None:
    """A real ScramServer answers in memory with the largest count the client accepts; the loop
    keeps ticking while the client derives its key (a blocked loop would not tick at all)."""
    cred = make_credential("SCRAM-SHA-512", "alice-pw", iterations=MAX_ITERATIONS)
    server = ScramServer("SCRAM-SHA-512")

    async def roundtrip(api: Api, version: int, body: Message) -> Message:  # answers at once, never yields
        if api is SASL_HANDSHAKE:
            return {"error_code": 0, "mechanisms": ["SCRAM-SHA-512"]}
        token = bytes(body["auth_bytes"])
        reply = (
            server.server_first(cred)
            if token.startswith(b"n,,") and server.client_first(token)
            else server.client_final(token)
        )
        return {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0}

    async def go() -> int:
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                await asyncio.sleep(0.002)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        await authenticate(roundtrip, "SCRAM-SHA-512", "alice", "alice-pw")
        done = True
        await t
        return ticks

    assert asyncio.run(go()) >= 3


def test_authenticate_maps_a_bad_server_first_to_sasl_authentication_error() -> None:
    async def roundtrip(api: Api, version: int, body: Message) -> Message:
        if api is SASL_HANDSHAKE:
            return {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]}
        reply: Any = b"r=,s=,i=1"
        return {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0}

    with pytest.raises(SaslAuthenticationError):
        asyncio.run(authenticate(roundtrip, "SCRAM-SHA-256", "alice", "pw"))
