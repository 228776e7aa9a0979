"""SCRAM math against RFC 7677's worked example, and both sides of the exchange against each other."""

from __future__ import annotations

import base64
import json

import pytest

from headwater.scram import (
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    credential_from_user_config,
    make_credential,
    user_config_json,
)

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_client_and_server() -> None:
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    server = ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert server.client_first(client.first()) == "user"
    server_first = server.server_first(cred)
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(server_first)
    assert final == RFC_CLIENT_FINAL
    assert server.client_final(final) == RFC_SERVER_FINAL
    client.verify(RFC_SERVER_FINAL)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused_and_kafka_format_roundtrips(mechanism: str) -> None:
    cred = make_credential(mechanism, "alice-secret")
    stored = user_config_json({mechanism: cred.to_kafka()})
    doc = json.loads(stored)
    assert doc["version"] == 1 and doc["config"][mechanism].startswith("salt=")
    assert doc["config"][mechanism].endswith(",iterations=4096")
    again = credential_from_user_config(stored, mechanism)
    assert again == cred
    assert credential_from_user_config(stored, "SCRAM-SHA-1") is None

    ok = ScramClient(mechanism, "alice", "alice-secret")
    server = ScramServer(mechanism)
    server.client_first(ok.first())
    ok.verify(server.client_final(ok.final(server.server_first(cred))))

    bad = ScramClient(mechanism, "alice", "guess")
    server = ScramServer(mechanism)
    server.client_first(bad.first())
    with pytest.raises(ScramError, match="invalid credentials"):
        server.client_final(bad.final(server.server_first(cred)))


def test_malformed_messages_and_weak_iterations() -> None:
    server = ScramServer("SCRAM-SHA-512")
    for token in (b"", b"garbage", b"p=tls-unique,,n=a,r=b", b"n,,r=abc", b"\xff\xfe"):
        with pytest.raises(ScramError):
            ScramServer("SCRAM-SHA-512").client_first(token)
    with pytest.raises(ScramError):
        server.client_final(b"c=biws,r=x,p=AAAA")  # before server-first
    with pytest.raises(ScramError, match="at least 4096"):
        make_credential("SCRAM-SHA-512", "pw", iterations=1000)
    with pytest.raises(ScramError):
        ScramCredential.from_kafka("salt=AAAA,iterations=x")


def _client_final(user_first_bare: str, server_first: bytes, r: str, password: str) -> bytes:
    """A SCRAM-SHA-512 client-final message with ``r`` as given, its proof computed over it (as
    librdkafka computes it)."""
    import hashlib
    import hmac as _h

    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = _h.new(salted, b"Client Key", "sha512").digest()
    stored_key = hashlib.sha512(client_key).digest()
    without_proof = f"c=biws,r={r}"
    auth = f"{user_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = _h.new(stored_key, auth, "sha512").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    return f"{without_proof},p={proof}".encode()


def test_librdkafkas_doubled_client_nonce_is_accepted_and_nothing_else() -> None:
    """librdkafka < 2.6.1 (Debian's kcat) sends r = client nonce + (client nonce + server nonce) in its
    client-final message; that form still carries the server's nonce and is signed by the proof."""
    cred = make_credential("SCRAM-SHA-512", "alice-secret", 4096)
    cnonce = "kcatclientnonce0123456789"

    def exchange(r_of: str) -> bytes:
        server = ScramServer("SCRAM-SHA-512")
        assert server.client_first(f"n,,n=alice,r={cnonce}".encode()) == "alice"
        server_first = server.server_first(cred)
        full = server_first.decode().split(",")[0][2:]
        r = {"rfc": full, "doubled": cnonce + full, "wrong": cnonce + "x" + full, "short": cnonce}[r_of]
        return server.client_final(_client_final(f"n=alice,r={cnonce}", server_first, r, "alice-secret"))

    assert exchange("rfc").startswith(b"v=")
    assert exchange("doubled").startswith(b"v=")
    for bad in ("wrong", "short"):
        with pytest.raises(ScramError, match="nonce"):
            exchange(bad)
