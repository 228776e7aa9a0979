"""Listener security settings with Kafka's property names: TLS contexts and SASL mechanisms.

Each listener's security protocol comes from ``listener.security.protocol.map`` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL). A setting is looked up first with the listener prefix Kafka uses,
``listener.name.<listener, lower case>.<property>``, then without it.

TLS: ``ssl.keystore.location`` is a PEM file holding the broker's certificate chain and its
private key (``ssl.keystore.type=PEM``, as Kafka 2.7+ accepts; JKS and PKCS12 are Java formats and
are refused with a clear error), ``ssl.key.password`` decrypts an encrypted key,
``ssl.truststore.location`` is a PEM bundle of the CAs trusted for client certificates (and, on
the broker's own connections to other brokers, for their server certificates),
``ssl.client.auth`` is none | requested | required.

SASL: ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI is
not built). PLAIN users come from ``listener.name.<l>.plain.sasl.jaas.config`` entries
``user_<name>="<password>"``; SCRAM credentials from ZooKeeper (``/config/users/<name>``). The
broker's own credentials for inter-broker SASL are the ``username``/``password`` of the
``sasl.mechanism.inter.broker.protocol`` mechanism's JAAS config on the inter-broker listener.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field

from headwater.security import PROTOCOLS as PROTOCOLS
from headwater.security import SecurityConfigError as SecurityConfigError
from headwater.security import uses_sasl, uses_tls

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")


@dataclass(frozen=True)
class SslSettings:
    keystore_location: str | None
    key_password: str | None
    truststore_location: str | None
    client_auth: str
    endpoint_identification: str  # "https" (verify the host name) or "" (don't)

    def server_context(self, listener: str) -> ssl.SSLContext:
        if not self.keystore_location:
            raise SecurityConfigError(f"listener {listener}: ssl.keystore.location is required for SSL listeners")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_keystore(ctx, self.keystore_location, self.key_password, listener)
        if self.truststore_location:
            _load_truststore(ctx, self.truststore_location, listener)
        if self.client_auth != "none" and not self.truststore_location:
            raise SecurityConfigError(
                f"listener {listener}: ssl.client.auth={self.client_auth} needs ssl.truststore.location"
            )
        ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
            self.client_auth
        ]
        return ctx

    def client_context(self, listener: str) -> ssl.SSLContext:
        """For the broker's own connections to other brokers on this listener."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.truststore_location:
            _load_truststore(ctx, self.truststore_location, listener)
        else:
            ctx.load_default_certs()
        ctx.check_hostname = self.endpoint_identification == "https"
        if self.keystore_location:  # presented when the other broker asks for a client certificate
            _load_keystore(ctx, self.keystore_location, self.key_password, listener)
        return ctx


def _load_keystore(ctx: ssl.SSLContext, path: str, password: str | None, listener: str) -> None:
    try:
        ctx.load_cert_chain(path, password=password)
    except (OSError, ssl.SSLError) as e:
        raise SecurityConfigError(
            f"listener {listener}: ssl.keystore.location={path}: cannot load a PEM certificate chain and key "
            f"({e}); check ssl.key.password"
        ) from None


def _load_truststore(ctx: ssl.SSLContext, path: str, listener: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise SecurityConfigError(
            f"listener {listener}: ssl.truststore.location={path}: cannot load PEM CA certificates ({e})"
        ) from None


@dataclass(frozen=True)
class ListenerSecurity:
    listener: str
    protocol: str
    ssl: SslSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    #: mechanism -> (username, password): this broker's own login, for inter-broker SASL
    logins: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def uses_tls(self) -> bool:
        return uses_tls(self.protocol)

    @property
    def uses_sasl(self) -> bool:
        return uses_sasl(self.protocol)


_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas(text: str, prop: str) -> dict[str, str]:
    """The options of one JAAS login module entry: ``Module required a="1" b="2";``."""
    body = text.strip()
    m = re.match(r"^[A-Za-z0-9_.$]+\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", body, re.S)
    if not m:
        raise SecurityConfigError(f'{prop}: expected "<LoginModule> required key="value" ...;"')
    return {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(m.group(2))}


def is_security_property(key: str) -> bool:
    return key.startswith(("ssl.", "sasl.", "listener.name.")) or key == "connection.failed.authentication.delay.ms"


def listener_security(props: dict[str, str], listener: str, protocol: str) -> ListenerSecurity:
    if protocol not in PROTOCOLS:
        raise SecurityConfigError(f"listener {listener}: unknown security protocol {protocol} (one of {PROTOCOLS})")
    prefix = f"listener.name.{listener.lower()}."

    def get(name: str, default: str | None = None) -> str | None:
        return props.get(prefix + name, props.get(name, default))

    tls: SslSettings | None = None
    if uses_tls(protocol):
        kstype = (get("ssl.keystore.type") or "PEM").upper()
        if kstype != "PEM":
            raise SecurityConfigError(
                f"listener {listener}: ssl.keystore.type={kstype} is not supported; use PEM "
                "(a file with the certificate chain and the private key)"
            )
        tstype = (get("ssl.truststore.type") or "PEM").upper()
        if tstype != "PEM":
            raise SecurityConfigError(f"listener {listener}: ssl.truststore.type={tstype} is not supported; use PEM")
        client_auth = (get("ssl.client.auth") or "none").lower()
        if client_auth not in CLIENT_AUTH:
            raise SecurityConfigError(f"listener {listener}: ssl.client.auth={client_auth} (one of {CLIENT_AUTH})")
        tls = SslSettings(
            keystore_location=get("ssl.keystore.location"),
            key_password=get("ssl.key.password"),
            truststore_location=get("ssl.truststore.location"),
            client_auth=client_auth,
            endpoint_identification=(get("ssl.endpoint.identification.algorithm", "https") or "").lower(),
        )
        tls.server_context(listener)  # fail at start-up, with the property's name, not at first connection
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    logins: dict[str, tuple[str, str]] = {}
    if uses_sasl(protocol):
        enabled = get("sasl.enabled.mechanisms") or ""
        mechanisms = tuple(m.strip().upper() for m in enabled.split(",") if m.strip())
        if not mechanisms:
            raise SecurityConfigError(
                f"listener {listener}: sasl.enabled.mechanisms is required ({', '.join(MECHANISMS)}; GSSAPI is not built)"
            )
        for mech in mechanisms:
            if mech not in MECHANISMS:
                raise SecurityConfigError(
                    f"listener {listener}: sasl.enabled.mechanisms: {mech} is not supported (one of {MECHANISMS})"
                )
            jaas_prop = f"{prefix}{mech.lower()}.sasl.jaas.config"
            if jaas_prop not in props:
                if mech == "PLAIN":
                    raise SecurityConfigError(f'listener {listener}: PLAIN needs {jaas_prop} with user_<name>="..."')
                continue
            options = parse_jaas(props[jaas_prop], jaas_prop)
            if mech == "PLAIN":
                plain_users = {k[len("user_") :]: v for k, v in options.items() if k.startswith("user_")}
            if "username" in options and "password" in options:
                logins[mech] = (options["username"], options["password"])
    return ListenerSecurity(listener, protocol, tls, mechanisms, plain_users, logins)


@dataclass(frozen=True)
class ClientSecurity:
    """How one of the broker's (or a client's) connections secures itself."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""


def inter_broker_security(sec: ListenerSecurity, props: dict[str, str]) -> ClientSecurity | None:
    """The broker's own client settings for ``inter.broker.listener.name``; None for PLAINTEXT."""
    if sec.protocol == "PLAINTEXT":
        return None
    ctx = sec.ssl.client_context(sec.listener) if sec.ssl is not None else None
    if not sec.uses_sasl:
        return ClientSecurity(ctx)
    mech = props.get("sasl.mechanism.inter.broker.protocol", "").strip().upper()
    if not mech:
        raise SecurityConfigError(
            f"inter.broker.listener.name={sec.listener} is {sec.protocol}: set sasl.mechanism.inter.broker.protocol "
            "(Kafka's default, GSSAPI, is not built)"
        )
    if mech not in sec.sasl_mechanisms:
        raise SecurityConfigError(
            f"sasl.mechanism.inter.broker.protocol={mech} is not in listener {sec.listener}'s sasl.enabled.mechanisms"
        )
    if mech not in sec.logins:
        raise SecurityConfigError(
            f'listener.name.{sec.listener.lower()}.{mech.lower()}.sasl.jaas.config needs username="..." and '
            'password="..." for the broker\'s own inter-broker login'
        )
    user, password = sec.logins[mech]
    return ClientSecurity(ctx, mech, user, password)
