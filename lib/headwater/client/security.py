"""How Headwater's client secures its connections, from Kafka's client property names.

    security.protocol        PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    ssl.ca.location          PEM CA bundle to trust (librdkafka's name; Java's ssl.truststore.location
                             is accepted for a PEM file)
    ssl.certificate.location / ssl.key.location / ssl.key.password
                             a client certificate, for brokers with ssl.client.auth=required
    ssl.endpoint.identification.algorithm
                             https (default: check the broker's host name) or none
    sasl.mechanism           PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (librdkafka's sasl.mechanisms too)
    sasl.username / sasl.password
                             or Java's sasl.jaas.config with username="..." password="..."

A secret (``sasl.password``, ``ssl.key.password``, ``sasl.jaas.config``) may be given as
``file:/path`` (the file's first line) or ``env:NAME``; none is ever logged or shown in ``repr``.

The services read these names per cluster: :func:`cluster_properties` takes the ones under a
prefix (a cluster alias, ``dc1.security.protocol``, as MirrorMaker 2 does, or Spark's
``kafka.``) over the unprefixed ones.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.security import PROTOCOLS as PROTOCOLS
from headwater.security import SecurityConfigError as SecurityConfigError
from headwater.security import resolve_secret as _secret
from headwater.security import uses_sasl, uses_tls


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    @property
    def uses_tls(self) -> bool:
        return uses_tls(self.protocol)

    @property
    def uses_sasl(self) -> bool:
        return uses_sasl(self.protocol)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol={protocol}: one of {', '.join(PROTOCOLS)}")
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip().upper() or None
        username = props.get("sasl.username")
        password = _secret(props.get("sasl.password"), "sasl.password")
        jaas = _secret(props.get("sasl.jaas.config"), "sasl.jaas.config")
        if jaas and (username is None or password is None):
            options = dict(re.findall(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"', jaas))
            username = username if username is not None else options.get("username")
            password = password if password is not None else options.get("password")
        if uses_sasl(protocol):
            if mechanism is None:
                raise SecurityConfigError(f"security.protocol={protocol} needs sasl.mechanism")
            if not username or password is None:
                raise SecurityConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password")
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        return cls(
            protocol=protocol,
            ca_location=props.get("ssl.ca.location") or props.get("ssl.truststore.location"),
            certificate_location=props.get("ssl.certificate.location"),
            key_location=props.get("ssl.key.location"),
            key_password=_secret(props.get("ssl.key.password"), "ssl.key.password"),
            check_hostname=algorithm == "https",
            sasl_mechanism=mechanism,
            sasl_username=username or "",
            sasl_password=password or "",
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_location) if self.ca_location else ssl.create_default_context()
        ctx.check_hostname = self.check_hostname
        if self.certificate_location:
            ctx.load_cert_chain(self.certificate_location, self.key_location, password=self.key_password)
        return ctx


#: the client security property names this module reads (librdkafka's and Java's spellings)
SECURITY_PROPERTIES = frozenset(
    {
        "security.protocol",
        "ssl.ca.location",
        "ssl.truststore.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
    }
)


def cluster_properties(props: Mapping[str, str], prefix: str = "", *, inherit: bool = True) -> dict[str, str]:
    """The security properties of one cluster: ``<prefix><name>`` over the unprefixed ``<name>``
    (MirrorMaker 2's rule: top-level client settings apply to every cluster unless an alias
    overrides them; ``inherit=False`` takes the prefixed ones only)."""
    out = {k: v for k, v in props.items() if k in SECURITY_PROPERTIES} if inherit or not prefix else {}
    if prefix:
        for key, value in props.items():
            if key.startswith(prefix) and key[len(prefix) :] in SECURITY_PROPERTIES:
                out[key[len(prefix) :]] = value
    return out


def cluster_security(props: Mapping[str, str], prefix: str = "", *, inherit: bool = True) -> ClientSecurity:
    """:class:`ClientSecurity` of one cluster from :func:`cluster_properties`, checked now: a CA or
    certificate file that cannot be loaded is an error at start-up, not at the first connection.
    Errors name the property with its prefix (``dc1.sasl.password: ...``); none shows a secret."""
    mine = cluster_properties(props, prefix, inherit=inherit)
    try:
        sec = ClientSecurity.from_properties(mine)
    except SecurityConfigError as e:
        raise SecurityConfigError(f"{prefix}{e}") from None
    if not sec.uses_tls:
        return sec
    if sec.ca_location:
        prop = "ssl.ca.location" if "ssl.ca.location" in mine else "ssl.truststore.location"
        try:
            ssl.create_default_context(cafile=sec.ca_location)
        except (OSError, ssl.SSLError) as e:
            raise SecurityConfigError(f"{prefix}{prop}: cannot load {sec.ca_location} ({_why(e)})") from None
    try:
        sec.ssl_context()
    except (OSError, ssl.SSLError) as e:
        raise SecurityConfigError(
            f"{prefix}ssl.certificate.location: cannot load {sec.certificate_location} with its key ({_why(e)})"
        ) from None
    return sec


def _why(e: Exception) -> str:
    return str(getattr(e, "strerror", None) or getattr(e, "reason", None) or e)


def describe(sec: ClientSecurity | None) -> str:
    """How a client connects, for a log line: protocol, mechanism and user; never a secret."""
    if sec is None or sec.protocol == "PLAINTEXT":
        return "PLAINTEXT"
    if sec.uses_sasl:
        return f"{sec.protocol} ({sec.sasl_mechanism} as {sec.sasl_username})"
    return sec.protocol
