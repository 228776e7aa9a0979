"""The client's side of Kafka's SASL exchange, shared by Headwater's client and the broker's own
inter-broker connections: SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate v1.

``roundtrip(api, version, body)`` sends one request on the caller's connection and returns the
decoded response; this module does no I/O of its own. SCRAM's PBKDF2 runs on a worker thread
(``asyncio.to_thread``), so a login never blocks the caller's event loop; the server's iteration
count must be within [4096, 100000] (``headwater.scram.MIN_ITERATIONS``/``MAX_ITERATIONS``): a
server asking for fewer (a downgrade) or more (a freeze) fails the login.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from headwater.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Api, Message
from headwater.scram import MECHANISMS as SCRAM_MECHANISMS
from headwater.scram import ScramClient, ScramError

Roundtrip = Callable[[Api, int, Message], Awaitable[Message]]
SUPPORTED = ("PLAIN", *SCRAM_MECHANISMS)


class SaslAuthenticationError(Exception):
    """The broker refused the mechanism or the credentials (Kafka's message when it sent one)."""


async def authenticate(roundtrip: Roundtrip, mechanism: str, username: str, password: str) -> None:
    if mechanism not in SUPPORTED:
        raise SaslAuthenticationError(f"SASL mechanism {mechanism} is not supported (one of {', '.join(SUPPORTED)})")
    hs = await roundtrip(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if hs["error_code"] != ErrorCode.NONE:
        raise SaslAuthenticationError(
            f"the broker does not enable SASL mechanism {mechanism} "
            f"({ErrorCode.of(hs['error_code']).name}; it offers {hs['mechanisms']})"
        )

    async def token(data: bytes) -> bytes:
        resp = await roundtrip(SASL_AUTHENTICATE, 1, {"auth_bytes": data})
        if resp["error_code"] != ErrorCode.NONE:
            raise SaslAuthenticationError(
                resp["error_message"] or f"SaslAuthenticate failed: {ErrorCode.of(resp['error_code']).name}"
            )
        return bytes(resp["auth_bytes"])

    if mechanism == "PLAIN":
        await token(f"\0{username}\0{password}".encode())
        return
    scram = ScramClient(mechanism, username, password)
    try:
        server_first = await token(scram.first())
        client_final = await asyncio.to_thread(scram.final, server_first)  # PBKDF2: not on the event loop
        scram.verify(await token(client_final))
    except ScramError as e:
        raise SaslAuthenticationError(str(e)) from None
