"""Security vocabulary shared by the broker, the client and the services; no sockets, no TLS.

Kafka's security protocols (a listener's in ``listener.security.protocol.map``, a client's
``security.protocol``) and what each implies, and how a secret given in a properties file is read:
``file:/path`` (the file's first line, without its newline) or ``env:NAME`` (an environment
variable), anything else as written. A secret is never put into an error message.
"""

from __future__ import annotations

import os

__all__ = ["PROTOCOLS", "SecurityConfigError", "resolve_secret", "uses_sasl", "uses_tls"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_TLS = frozenset({"SSL", "SASL_SSL"})
_SASL = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


class SecurityConfigError(ValueError):
    """A security property has a value we cannot use; the message names the property."""


def uses_tls(protocol: str) -> bool:
    """Whether connections of this security protocol are TLS (``SSL``, ``SASL_SSL``)."""
    return protocol in _TLS


def uses_sasl(protocol: str) -> bool:
    """Whether connections of this security protocol log in with SASL (``SASL_PLAINTEXT``, ``SASL_SSL``)."""
    return protocol in _SASL


def resolve_secret(value: str | None, prop: str) -> str | None:
    """The secret ``value`` stands for; raises SecurityConfigError naming ``prop`` (never the secret)."""
    if value is None:
        return None
    if value.startswith("file:"):
        try:
            with open(value[5:], encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise SecurityConfigError(f"{prop}: cannot read {value[5:]}: {e.strerror}") from None
    if value.startswith("env:"):
        got = os.environ.get(value[4:])
        if got is None:
            raise SecurityConfigError(f"{prop}: environment variable {value[4:]} is not set")
        return got
    return value
