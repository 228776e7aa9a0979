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
A JAAS option's value may be ``file:/path`` or ``env:NAME`` (:func:`headwater.security.resolve_secret`),
as the clients' secrets may.

Which names exist: :data:`SECURITY_PROPERTIES` lists every ``ssl.*`` / ``sasl.*`` property (bare or
under ``listener.name.<listener>.``) Headwater reads, and Kafka 2.3's others it refuses with the
reason. :func:`check_security_properties` refuses, at start-up and by name, any other ``ssl.*``,
``sasl.*`` or ``listener.name.*`` property: a misspelt ``ssl.client.auth`` must not leave client
authentication silently off. The same table says which values are secrets (Kafka's PASSWORD type):
those are never shown (DescribeConfigs, ``repr``, logs).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field

from headwater.security import PROTOCOLS as PROTOCOLS
from headwater.security import SecurityConfigError as SecurityConfigError
from headwater.security import resolve_secret, uses_sasl, uses_tls

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")

#: What Headwater does with each security property Kafka 2.3 knows, by its name without the
#: ``listener.name.<l>.`` prefix (``<mechanism>.sasl.jaas.config`` is matched as ``sasl.jaas.config``):
#: ``"secret"`` read, and a secret (Kafka's PASSWORD type: never shown); ``"read"`` read, not secret;
#: any other text: refused at start-up, the text saying why.
SECURITY_PROPERTIES: dict[str, str] = {
    "ssl.keystore.type": "read",
    "ssl.keystore.location": "read",
    "ssl.key.password": "secret",
    "ssl.truststore.type": "read",
    "ssl.truststore.location": "read",
    "ssl.client.auth": "read",
    "ssl.endpoint.identification.algorithm": "read",
    "ssl.enabled.protocols": "read",
    "ssl.cipher.suites": "read",
    "ssl.protocol": "read",
    "sasl.enabled.mechanisms": "read",
    "sasl.mechanism.inter.broker.protocol": "read",
    "sasl.jaas.config": "secret",
    "ssl.keystore.password": "is for JKS/PKCS12 keystores; a PEM keystore's key takes ssl.key.password",
    "ssl.truststore.password": "is for JKS/PKCS12 truststores; a PEM truststore has no password",
    "ssl.provider": "names a Java security provider; TLS here is OpenSSL's",
    "ssl.keymanager.algorithm": "is a Java KeyManagerFactory setting; TLS here is OpenSSL's",
    "ssl.trustmanager.algorithm": "is a Java TrustManagerFactory setting; TLS here is OpenSSL's",
    "ssl.secure.random.implementation": "is a Java SecureRandom setting; TLS here is OpenSSL's",
    "ssl.principal.mapping.rules": "is not built: the principal is the certificate's full subject (DEFAULT)",
    "sasl.kerberos.service.name": "is for GSSAPI, which is not built",
    "sasl.kerberos.kinit.cmd": "is for GSSAPI, which is not built",
    "sasl.kerberos.ticket.renew.window.factor": "is for GSSAPI, which is not built",
    "sasl.kerberos.ticket.renew.jitter": "is for GSSAPI, which is not built",
    "sasl.kerberos.min.time.before.relogin": "is for GSSAPI, which is not built",
    "sasl.kerberos.principal.to.local.rules": "is for GSSAPI, which is not built",
    "sasl.login.class": "names a Java class; custom login modules are not built",
    "sasl.login.callback.handler.class": "names a Java class; custom callback handlers are not built",
    "sasl.server.callback.handler.class": "names a Java class; custom callback handlers are not built",
    "sasl.client.callback.handler.class": "names a Java class; custom callback handlers are not built",
    "sasl.login.refresh.window.factor": "is for OAUTHBEARER/GSSAPI logins, which are not built",
    "sasl.login.refresh.window.jitter": "is for OAUTHBEARER/GSSAPI logins, which are not built",
    "sasl.login.refresh.min.period.seconds": "is for OAUTHBEARER/GSSAPI logins, which are not built",
    "sasl.login.refresh.buffer.seconds": "is for OAUTHBEARER/GSSAPI logins, which are not built",
}
#: Java's default values of refused properties: accepted, they change nothing
_ACCEPTED_DEFAULTS = {"ssl.principal.mapping.rules": "DEFAULT", "sasl.kerberos.principal.to.local.rules": "DEFAULT"}
#: read only without the listener prefix (broker-wide in Kafka too)
_BROKER_WIDE = frozenset({"sasl.mechanism.inter.broker.protocol"})
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.")
_MECHANISM_JAAS = re.compile(r"^([a-z0-9-]+)\.sasl\.jaas\.config$")


def is_security_property(key: str) -> bool:
    return key.startswith(_SECURITY_PREFIXES)


def _split(key: str) -> tuple[str | None, str]:
    """(the listener of a ``listener.name.<l>.`` prefix or None, the name in the table)."""
    if not key.startswith("listener.name."):
        return None, key
    listener, _, rest = key[len("listener.name.") :].partition(".")
    return listener, "sasl.jaas.config" if _MECHANISM_JAAS.match(rest) else rest


def check_security_properties(props: dict[str, str], listeners: frozenset[str]) -> None:
    """Refuse, naming it, every ``ssl.*`` / ``sasl.*`` / ``listener.name.*`` property that is not read."""
    for key in sorted(props):
        if not is_security_property(key):
            continue
        listener, name = _split(key)
        if listener is not None and (listener.upper() not in listeners or not name):
            raise SecurityConfigError(
                f"{key}: listener.name.{listener} is not one of the listeners ({', '.join(sorted(listeners))})"
            )
        jaas = _MECHANISM_JAAS.match(key.split(".", 3)[3]) if listener is not None else None
        if jaas and jaas.group(1).upper() not in MECHANISMS:
            raise SecurityConfigError(f"{key}: {jaas.group(1).upper()} is not a supported mechanism ({MECHANISMS})")
        what = SECURITY_PROPERTIES.get(name)
        if what is None:
            raise SecurityConfigError(f"{key} is not a known security property (Kafka 2.3's ssl.*/sasl.* names)")
        if name == "sasl.jaas.config" and listener is None:
            raise SecurityConfigError(
                f"{key}: a broker's JAAS config is per listener and mechanism: "
                "listener.name.<listener>.<mechanism>.sasl.jaas.config"
            )
        if name in _BROKER_WIDE and listener is not None:
            raise SecurityConfigError(f"{key}: {name} is broker-wide; set it without the listener prefix")
        if what in ("read", "secret") or props[key].strip() == _ACCEPTED_DEFAULTS.get(name):
            continue
        raise SecurityConfigError(f"{key} is not supported: {name} {what}")


def is_secret_property(key: str) -> bool:
    """Whether a security property's value is a secret (Kafka's PASSWORD type); unknown names are."""
    return SECURITY_PROPERTIES.get(_split(key)[1]) != "read"


@dataclass(frozen=True)
class SslSettings:
    keystore_location: str | None
    key_password: str | None = field(repr=False)
    truststore_location: str | None
    client_auth: str
    endpoint_identification: str  # "https" (verify the host name) or "" (don't)
    #: ssl.enabled.protocols: (lowest, highest) TLS version offered
    versions: tuple[ssl.TLSVersion, ssl.TLSVersion] = (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.MAXIMUM_SUPPORTED)
    #: ssl.cipher.suites as an OpenSSL cipher list for TLS 1.2 (None: OpenSSL's defaults)
    ciphers: str | None = None

    def _restrict(self, ctx: ssl.SSLContext) -> None:
        ctx.minimum_version, ctx.maximum_version = self.versions
        if self.ciphers is not None:
            ctx.set_ciphers(self.ciphers)

    def server_context(self, listener: str) -> ssl.SSLContext:
        if not self.keystore_location:
            raise SecurityConfigError(f"listener {listener}: ssl.keystore.location is required for SSL listeners")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._restrict(ctx)
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
        self._restrict(ctx)
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
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    #: mechanism -> (username, password): this broker's own login, for inter-broker SASL
    logins: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)

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


def _jaas_secrets(options: dict[str, str], prop: str) -> dict[str, str]:
    """The options with ``password`` and every ``user_<name>`` resolved (``file:`` / ``env:``)."""
    return {
        k: (resolve_secret(v, f"{prop} ({k})") or "") if k == "password" or k.startswith("user_") else v
        for k, v in options.items()
    }


_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OLD_TLS = ("TLSv1", "TLSv1.1")
#: TLS 1.3 suites OpenSSL offers and Python cannot narrow (no SSL_CTX_set_ciphersuites binding)
_TLS13_SUITES = frozenset({"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"})


def _enabled_protocols(value: str | None, prop: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """``ssl.enabled.protocols`` as (lowest, highest). TLSv1 and TLSv1.1 (in Kafka 2.3's default
    list) are never offered here; a list naming nothing newer is refused."""
    if value is None or not value.strip():
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.MAXIMUM_SUPPORTED
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in _TLS_VERSIONS and n not in _OLD_TLS]
    if bad:
        raise SecurityConfigError(f"{prop}={value}: {bad[0]} is not a TLS version (TLSv1.2, TLSv1.3)")
    versions = sorted(_TLS_VERSIONS[n] for n in names if n in _TLS_VERSIONS)
    if not versions:
        raise SecurityConfigError(f"{prop}={value}: TLS 1.2 is the oldest version offered; list TLSv1.2 or TLSv1.3")
    return versions[0], versions[-1]


def _openssl_cipher(name: str, prop: str) -> str:
    """A TLS 1.2 suite's OpenSSL name from its IANA (JSSE, Kafka) name:
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256."""
    m = re.match(r"^TLS_(?:(ECDHE|DHE)_(RSA|ECDSA)|RSA)_WITH_(.+)$", name)
    cipher = m and re.match(r"^(?:AES_(128|256)_(GCM|CBC)_(SHA|SHA256|SHA384)|CHACHA20_POLY1305_SHA256)$", m.group(3))
    if not m or not cipher:
        raise SecurityConfigError(
            f"{prop}: {name} is not supported (ECDHE/DHE/RSA key exchange with AES-GCM, AES-CBC or CHACHA20-POLY1305)"
        )
    kx = f"{m.group(1)}-{m.group(2)}-" if m.group(1) else ""
    if cipher.group(1) is None:
        return f"{kx}CHACHA20-POLY1305"
    aes = f"AES{cipher.group(1)}"
    mode = "GCM-" if cipher.group(2) == "GCM" else ""  # OpenSSL leaves CBC unnamed
    return f"{kx}{aes}-{mode}{cipher.group(3)}"


def _cipher_suites(
    value: str | None, prop: str, versions: tuple[ssl.TLSVersion, ssl.TLSVersion]
) -> tuple[str | None, tuple[ssl.TLSVersion, ssl.TLSVersion]]:
    """``ssl.cipher.suites`` (IANA names, as Kafka takes them) as an OpenSSL list for TLS 1.2, and the
    versions left: without a TLS 1.3 suite TLS 1.3 is off; TLS 1.3 suites can only be all three."""
    if value is None or not value.strip():
        return None, versions
    names = [v.strip() for v in value.split(",") if v.strip()]
    tls13 = {n for n in names if n in _TLS13_SUITES}
    if tls13 and tls13 != _TLS13_SUITES:
        raise SecurityConfigError(
            f"{prop}: TLS 1.3 suites can only be all of {', '.join(sorted(_TLS13_SUITES))} or none (Python's ssl)"
        )
    tls12 = [_openssl_cipher(n, prop) for n in names if n not in _TLS13_SUITES]
    low, high = versions
    if not tls13:
        if low > ssl.TLSVersion.TLSv1_2:
            raise SecurityConfigError(f"{prop}: lists no TLS 1.3 suite, and only TLS 1.3 is enabled")
        high = ssl.TLSVersion.TLSv1_2
    if not tls12:
        if high < ssl.TLSVersion.TLSv1_3:
            raise SecurityConfigError(f"{prop}: lists no TLS 1.2 suite, and TLS 1.3 is not enabled")
        low = ssl.TLSVersion.TLSv1_3
    ciphers = ":".join(tls12) if tls12 else None
    if ciphers is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(ciphers)
        except ssl.SSLError:
            raise SecurityConfigError(f"{prop}: OpenSSL offers none of {value}") from None
    return ciphers, (low, high)


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
        tls_protocol = get("ssl.protocol") or "TLS"
        if tls_protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
            raise SecurityConfigError(f"listener {listener}: ssl.protocol={tls_protocol} (TLS, TLSv1.2 or TLSv1.3)")
        versions = _enabled_protocols(get("ssl.enabled.protocols"), f"listener {listener}: ssl.enabled.protocols")
        ciphers, versions = _cipher_suites(
            get("ssl.cipher.suites"), f"listener {listener}: ssl.cipher.suites", versions
        )
        tls = SslSettings(
            keystore_location=get("ssl.keystore.location"),
            key_password=resolve_secret(get("ssl.key.password"), "ssl.key.password"),
            truststore_location=get("ssl.truststore.location"),
            client_auth=client_auth,
            endpoint_identification=(get("ssl.endpoint.identification.algorithm", "https") or "").lower(),
            versions=versions,
            ciphers=ciphers,
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
            options = _jaas_secrets(parse_jaas(props[jaas_prop], jaas_prop), jaas_prop)
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
    password: str = field(default="", repr=False)


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
