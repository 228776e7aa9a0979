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

A secret may be given as ``file:/path`` (the file's first line) or ``env:NAME``; none is ever
logged or shown in ``repr``.
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
        jaas = props.get("sasl.jaas.config")
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
