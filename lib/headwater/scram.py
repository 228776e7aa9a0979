"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, shared by the broker,
the client and the CLI.

Credentials live in ZooKeeper at ``/config/users/<name>``, in Kafka's format (what Kafka 2.3's
``kafka-configs --zookeeper --alter --entity-type users`` writes)::

    {"version": 1, "config": {"SCRAM-SHA-512": "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

Only the salted derivatives are stored: ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``, where ``SaltedPassword = PBKDF2(password, salt,
iterations)``. A broker that holds them can check a client's proof and prove itself, but cannot
recover the password.

The exchange, one token per SaslAuthenticate round trip::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<b64 salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<b64 ClientKey XOR HMAC(StoredKey, AuthMessage)>
    server-final   v=<b64 HMAC(ServerKey, AuthMessage)>

with ``AuthMessage = client-first-bare + "," + server-first + "," + client-final-without-proof``.
This module does no I/O: the caller moves the tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

from headwater.zk import config as zkconfig
from headwater.zk.config import sanitize
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import CONFIG_CHANGES, CONFIG_USERS, config_entity_path

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka refuses fewer (ScramMechanism.minIterations); so does our client, from a server (a
#: rogue or man-in-the-middle server asking for 1 would make the proof cheap to brute-force).
MIN_ITERATIONS = 4096
#: The most our client derives for a server (Kafka has no maximum): 100,000 rounds of PBKDF2 are
#: ~0.1-0.3 s of CPU; a server asking for 2**31 would freeze the client for tens of minutes.
#: Credentials stored with more cannot be used by Headwater's clients.
MAX_ITERATIONS = 100_000
DEFAULT_ITERATIONS = 4096


class ScramError(ValueError):
    """A malformed SCRAM message, or a failed proof; the text is safe to show a client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's string form, as stored under ``/config/users/<name>``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ScramError(f"malformed SCRAM credential: {e}") from None


def _digest(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism}") from None


def _hmac(algo: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, algo).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_digest(mechanism), password.encode(), salt, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    if iterations < MIN_ITERATIONS:
        raise ScramError(f"iterations must be at least {MIN_ITERATIONS} for {mechanism}, got {iterations}")
    algo = _digest(mechanism)
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(algo, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(algo, client_key).digest(), _hmac(algo, salted, b"Server Key"), iterations)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM message {message!r}")
        out.setdefault(part[0], part[2:])
    return out


def _parse_server_message(message: bytes) -> tuple[str, dict[str, str]]:
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise ScramError("SCRAM server message is not UTF-8") from None
    return text, _attributes(text)


def _saslname(name: str) -> str:
    """RFC 5802 escaping in user names: ``=2C`` is ``,`` and ``=3D`` is ``=``."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The broker's side of one exchange: ``first(token) -> user``, then the caller looks up the
    user's credential and calls ``server_first``, then ``final(token) -> server-final``."""

    def __init__(self, mechanism: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.algo = _digest(mechanism)
        self._server_nonce = nonce or base64.b64encode(os.urandom(24)).decode().rstrip("=")
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self._nonce = ""
        self._client_nonce = ""
        self._credential: ScramCredential | None = None

    def client_first(self, token: bytes) -> str:
        """Parse the client's first message; returns the user name it authenticates as."""
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise ScramError("SCRAM client-first message without a valid GS2 header (channel binding is not supported)")
        authzid = parts[1]
        self._gs2_header = f"{parts[0]},{authzid},"
        self._client_first_bare = parts[2]
        attrs = _attributes(self._client_first_bare)
        if "n" not in attrs or "r" not in attrs:
            raise ScramError("SCRAM client-first message lacks n= or r=")
        user = _saslname(attrs["n"])
        if authzid and _saslname(authzid.removeprefix("a=")) != user:
            raise ScramError("SCRAM authorization id differs from the user name")
        self._client_nonce = attrs["r"]
        self._nonce = attrs["r"] + self._server_nonce
        return user

    def server_first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, token: bytes) -> bytes:
        """Check the client's proof; returns the server-final message or raises ScramError."""
        cred = self._credential
        if cred is None:
            raise ScramError("SCRAM client-final before server-first")
        text = token.decode(errors="replace")
        attrs = _attributes(text)
        # librdkafka before 2.6.1 (Debian's kcat: 2.0.2; confluentinc/librdkafka#4895) sends its client
        # nonce twice: r = client nonce + (client nonce + server nonce). Kafka 2.3 did not check r at all;
        # 3.8.1-3.9 accept this form too. It still carries the whole server nonce, and the proof signs
        # the message with it, so the exchange stays bound to this session: accepted, as Kafka 3.9 does.
        if attrs.get("r") not in (self._nonce, self._client_nonce + self._nonce):
            raise ScramError("SCRAM nonce mismatch")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("SCRAM channel binding mismatch")
        without_proof, sep, last = text.rpartition(",p=")
        if not sep or "," in last or attrs.get("p") != last:
            raise ScramError("SCRAM client-final message without a proof as its last attribute")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise ScramError("SCRAM proof is not base64") from None
        signature = _hmac(self.algo, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), cred.stored_key):
            raise ScramError("invalid credentials")
        verifier = base64.b64encode(_hmac(self.algo, cred.server_key, auth_message)).decode()
        return f"v={verifier}".encode()


class ScramClient:
    """A client's side: ``first()``, ``final(server_first)``, ``verify(server_final)``."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.algo = _digest(mechanism)
        self.user = user
        self.password = password
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode().rstrip("=")
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={escaped},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message for the server's first; raises ScramError for anything but a
        well-formed server-first extending our nonce, with a base64 salt and an iteration count
        within [MIN_ITERATIONS, MAX_ITERATIONS]. Runs PBKDF2: call it off the event loop."""
        text, attrs = _parse_server_message(server_first)
        nonce = attrs.get("r", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or "s" not in attrs or "i" not in attrs:
            raise ScramError(f"unexpected SCRAM server-first message {text[:200]!r}")
        try:
            iterations = int(attrs["i"], 10)
            salt = base64.b64decode(attrs["s"], validate=True)
        except ValueError:
            raise ScramError(f"malformed SCRAM server-first message {text[:200]!r}") from None
        if not salt:
            raise ScramError("SCRAM server-first message with an empty salt")
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        if iterations > MAX_ITERATIONS:
            raise ScramError(f"Requested iterations {iterations} is more than the maximum {MAX_ITERATIONS}")
        self._salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.algo, self._salted, b"Client Key")
        stored_key = hashlib.new(self.algo, client_key).digest()
        signature = _hmac(self.algo, stored_key, self._auth_message)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
        return f"{without_proof},p={proof}".encode()

    def verify(self, server_final: bytes) -> None:
        _, attrs = _parse_server_message(server_final)
        if "e" in attrs:
            raise ScramError(f"SCRAM authentication failed: {attrs['e']}")
        server_key = _hmac(self.algo, self._salted, b"Server Key")
        expected = base64.b64encode(_hmac(self.algo, server_key, self._auth_message)).decode()
        if not hmac.compare_digest(attrs.get("v", "").encode(), expected.encode()):
            raise ScramError("the broker's SCRAM signature does not verify")


# -- ZooKeeper: /config/users/<name> and the change notification ---------------------------------

USERS_PATH = CONFIG_USERS
CHANGES_PATH = CONFIG_CHANGES


def user_config_path(user: str) -> str:
    """``/config/users/<sanitized user>`` (``alice@X`` is ``/config/users/alice%40X``)."""
    return config_entity_path("users", sanitize(user))


def user_config_json(config: dict[str, str]) -> bytes:
    return zkconfig.encode_entity_config(config)


def credential_from_user_config(data: bytes | None, mechanism: str) -> ScramCredential | None:
    """The credential for ``mechanism`` in a ``/config/users/<name>`` node, or None."""
    try:
        text = zkconfig.decode_entity_config(USERS_PATH, data).get(mechanism)
    except ZnodeFormatError:
        return None
    return ScramCredential.from_kafka(text) if text is not None else None


def change_notification(entity_path: str) -> bytes:
    """A ``/config/changes/config_change_<seq>`` value (Kafka 2.3's version 2 form)."""
    entity_type, _, name = entity_path.partition("/")
    return zkconfig.encode_change(entity_type, name)
