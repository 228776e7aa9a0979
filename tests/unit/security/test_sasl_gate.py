"""The SASL gate in memory: a fake connection, frames in, responses out (no sockets)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from headwater.broker.config import Listener
from headwater.broker.network import ANONYMOUS, CloseConnection, Response
from headwater.broker.sasl import SaslGate
from headwater.broker.security import ListenerSecurity
from headwater.protocol.apis import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_response, encode_request
from headwater.protocol.primitives import FileRegion
from headwater.scram import ScramClient, ScramCredential, make_credential

CRED = make_credential("SCRAM-SHA-256", "alice-pw")


class FakeConnection:
    def __init__(self) -> None:
        self.listener = Listener("SASL_PLAINTEXT", "127.0.0.1", 9094)
        self.peer = "127.0.0.1:5555"
        self.principal = ANONYMOUS
        self.closed = False
        self.sent: list[bytes] = []
        self.handler: Any = None

    async def send(self, parts: list[bytes | FileRegion]) -> None:
        self.sent.extend(p for p in parts if isinstance(p, bytes))

    async def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def authenticated(self, principal: str, handler: Any) -> None:
        self.principal = principal
        self.handler = handler


async def authenticated(conn: Any, frame: memoryview) -> Response:
    return [b"authenticated handler"]


async def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return CRED if (user, mechanism) == ("alice", "SCRAM-SHA-256") else None


def gate() -> SaslGate:
    sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, ("PLAIN", "SCRAM-SHA-256"), {"carol": "carol-pw"})
    return SaslGate(sec, authenticated, lookup, failed_delay_s=0.0)


def frame(api: Any, version: int, body: dict[str, Any], cid: int = 7) -> memoryview:
    return memoryview(encode_request(api, version, cid, "unit", body)[4:])


def answer(api: Any, version: int, parts: Response) -> dict[str, Any]:
    assert parts is not None
    data = b"".join(p for p in parts if isinstance(p, bytes))
    return decode_response(api, version, memoryview(data[4:]))[1]


def test_v0_handshake_then_raw_plain_token() -> None:
    async def go() -> None:
        g, conn = gate(), FakeConnection()
        conn.handler = g.handle
        hs = answer(SASL_HANDSHAKE, 0, await g.handle(conn, frame(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})))
        assert hs == {"error_code": ErrorCode.NONE, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
        reply = await g.handle(conn, memoryview(b"\0carol\0carol-pw"))  # no Kafka header after v0
        assert reply == [struct.pack(">i", 0)]
        assert conn.principal == "User:carol" and conn.handler is authenticated

    asyncio.run(go())


def test_v1_scram_exchange_and_api_versions_before_it() -> None:
    async def go() -> None:
        g, conn = gate(), FakeConnection()
        assert await g.handle(conn, frame(API_VERSIONS, 0, {})) == [b"authenticated handler"]  # passed on
        answer(SASL_HANDSHAKE, 1, await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})))
        client = ScramClient("SCRAM-SHA-256", "alice", "alice-pw")
        first = answer(
            SASL_AUTHENTICATE, 1, await g.handle(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()}))
        )
        assert first["error_code"] == ErrorCode.NONE and conn.principal == ANONYMOUS
        final_msg = client.final(bytes(first["auth_bytes"]))
        final = answer(
            SASL_AUTHENTICATE, 1, await g.handle(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": final_msg}))
        )
        assert final["error_code"] == ErrorCode.NONE and final["session_lifetime_ms"] == 0
        client.verify(bytes(final["auth_bytes"]))
        assert conn.principal == "User:alice" and conn.handler is authenticated

    asyncio.run(go())


@pytest.mark.parametrize(
    ("mechanism", "token", "raw"),
    [
        ("PLAIN", b"\0carol\0wrong", False),
        ("PLAIN", b"\0carol\0wrong", True),
        ("SCRAM-SHA-256", b"n,,n=nobody,r=x", False),
    ],
)
def test_failed_logins_answer_58_and_close(mechanism: str, token: bytes, raw: bool) -> None:
    async def go() -> None:
        g, conn = gate(), FakeConnection()
        version = 0 if raw else 1
        await g.handle(conn, frame(SASL_HANDSHAKE, version, {"mechanism": mechanism}))
        conn.sent.clear()
        with pytest.raises(CloseConnection) as e:
            await g.handle(conn, memoryview(token) if raw else frame(SASL_AUTHENTICATE, 1, {"auth_bytes": token}))
        assert e.value.logged
        if not raw:
            resp = answer(SASL_AUTHENTICATE, 1, conn.sent)
            assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and resp["error_message"]
        assert conn.principal == ANONYMOUS

    asyncio.run(go())


def test_other_requests_unknown_mechanisms_and_second_handshakes_close() -> None:
    async def go() -> None:
        g, conn = gate(), FakeConnection()
        with pytest.raises(CloseConnection, match="before SASL authentication"):
            await g.handle(conn, frame(METADATA, 1, {"topics": []}))
        g, conn = gate(), FakeConnection()
        with pytest.raises(CloseConnection, match="unsupported SASL mechanism"):
            await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
        assert answer(SASL_HANDSHAKE, 1, conn.sent)["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        g, conn = gate(), FakeConnection()
        await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
        conn.sent.clear()
        with pytest.raises(CloseConnection, match="twice"):
            await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
        assert answer(SASL_HANDSHAKE, 1, conn.sent)["error_code"] == ErrorCode.ILLEGAL_SASL_STATE

    asyncio.run(go())


def test_unreadable_credentials_close_without_counting_a_failed_login() -> None:
    async def broken(user: str, mechanism: str) -> ScramCredential | None:
        raise ConnectionError("ZooKeeper connection lost")

    async def go() -> None:
        results: list[tuple[str, bool]] = []
        sec = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, ("SCRAM-SHA-256",))
        g, conn = SaslGate(sec, authenticated, broken, 0.0, lambda m, ok: results.append((m, ok))), FakeConnection()
        await g.handle(conn, frame(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}))
        client = ScramClient("SCRAM-SHA-256", "alice", "alice-pw")
        with pytest.raises(CloseConnection, match="cannot read the SCRAM credentials"):
            await g.handle(conn, frame(SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()}))
        assert results == [] and conn.principal == ANONYMOUS

    asyncio.run(go())
