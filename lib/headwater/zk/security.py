"""ZooKeeper authentication and znode ACLs, configured as a Kafka 2.3 operator configures them.

Kafka's brokers and tools authenticate to ZooKeeper with SASL when the JVM has a JAAS login
configuration with a ``Client`` section; Headwater reads the same file::

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="broker"
      password="broker-zk-secret";
    };

Where the file is named, first found wins (a Headwater process has no JVM, so the system
properties Kafka takes from ``KAFKA_OPTS`` may also be given as properties of the process's own
configuration file: server.properties, mirror.properties, the CLI's ``--authorizer-properties``):

- ``java.security.auth.login.config=<file>`` in the process's properties;
- ``-Djava.security.auth.login.config=<file>`` in the environment variable ``KAFKA_OPTS``, exactly
  as for Kafka's scripts (``KAFKA_OPTS=-Djava.security.auth.login.config=/etc/kafka/zk_jaas.conf``).

ZooKeeper's client system properties are honoured the same way (properties first, then
``-D...`` in ``KAFKA_OPTS``): ``zookeeper.sasl.client`` (``false`` turns SASL off even with a JAAS
file), ``zookeeper.sasl.clientconfig`` (the section, default ``Client``) and
``zookeeper.sasl.client.username`` (the server's service name, default ``zookeeper``). The login is
DIGEST-MD5 (ZooKeeper's ``DigestLoginModule``): Kerberos (``Krb5LoginModule``, GSSAPI) is not built
and is refused with its name. ``file:`` is not needed for the password: the JAAS file is the file.

ACLs (``zookeeper.set.acl=true`` on the broker; Kafka's tools set them whenever SASL is on, as
``JaasUtils.isZkSecurityEnabled`` decides): every znode Headwater creates carries Kafka 2.3's
``ZkData.defaultAcls``: ``CREATOR_ALL_ACL`` (``auth`` scheme: ZooKeeper stores the creator's SASL
identity, ``sasl:<username>``) plus world read, except

- the sensitive paths ``/config/users`` (SCRAM credentials), ``/config/brokers`` (broker configs)
  and ``/delegation_token/tokens`` (and everything below them): creator only, not world-readable;
- ``/consumers`` itself: open to everyone (``OPEN_ACL_UNSAFE``), so ZooKeeper-based consumers of any
  principal can register their groups under it (their own znodes below carry their creator's ACL).

Every broker and tool of a cluster must therefore log in as the same ZooKeeper user, as in Kafka.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

#: Kafka 2.3's ZkData.SensitiveRootPaths: creator-only, no world read, for the path and below
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token/tokens")
#: Kafka 2.3's ZkData.defaultAcls leaves this one path open (old consumers of any principal write under it)
CONSUMERS_PATH = "/consumers"

JAAS_CONFIG_PROPERTY = "java.security.auth.login.config"
SASL_CLIENT_PROPERTY = "zookeeper.sasl.client"
SASL_SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
SASL_SERVICE_PROPERTY = "zookeeper.sasl.client.username"
SET_ACL_PROPERTY = "zookeeper.set.acl"
#: the properties this module reads (a broker accepts them in server.properties)
PROPERTIES = frozenset(
    {JAAS_CONFIG_PROPERTY, SASL_CLIENT_PROPERTY, SASL_SECTION_PROPERTY, SASL_SERVICE_PROPERTY, SET_ACL_PROPERTY}
)


class ZkSecurityError(ValueError):
    """A ZooKeeper security setting that cannot be used; the message names the setting, never a secret."""


def sensitive_path(path: str) -> bool:
    """Kafka 2.3's ``ZkData.sensitivePath``: a prefix match on the chroot-relative path."""
    return any(path.startswith(root) for root in SENSITIVE_ROOT_PATHS)


def default_acls(path: str) -> list[ACL]:
    """Kafka 2.3's ``ZkData.defaultAcls(isSecure=true, path)`` (``path`` relative to the chroot)."""
    if path.rstrip("/") == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    if sensitive_path(path):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


@dataclass(frozen=True)
class ZkSecurity:
    """How one process reaches ZooKeeper: a SASL login (or none) and whether it sets znode ACLs."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    service: str = "zookeeper"
    set_acl: bool = False
    #: where the login came from (``<file> [Client]``), for messages; never the secret
    source: str = ""

    @property
    def sasl(self) -> bool:
        return self.username is not None

    def sasl_options(self) -> dict[str, str] | None:
        """kazoo's ``sasl_options`` (pure-sasl's DIGEST-MD5), or None without a login."""
        if self.username is None or self.password is None:
            return None
        return {
            "mechanism": "DIGEST-MD5",
            "username": self.username,
            "password": self.password,
            "service": self.service,
        }


_JAAS_COMMENTS = re.compile(r"/\*.*?\*/|^\s*//[^\n]*", re.S | re.M)
_JAAS_SECTION = re.compile(r"([A-Za-z0-9_.\-]+)\s*\{(.*?)\}\s*;", re.S)
_JAAS_ENTRY = re.compile(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);", re.S)
_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def parse_jaas_file(text: str, source: str) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """A JAAS login configuration: section name -> [(login module, options)]."""
    sections: dict[str, list[tuple[str, dict[str, str]]]] = {}
    body = _JAAS_COMMENTS.sub("", text)
    for name, inner in _JAAS_SECTION.findall(body):
        entries = []
        for module, _flag, opts in _JAAS_ENTRY.findall(inner):
            options = {
                k: (q.replace('\\"', '"') if q or not bare else bare) for k, q, bare in _JAAS_OPTION.findall(opts)
            }
            entries.append((module, options))
        if not entries and inner.strip():
            raise ZkSecurityError(f"{source}: section {name}: expected '<LoginModule> required key=\"value\" ...;'")
        sections[name] = entries
    if not sections and body.strip():
        raise ZkSecurityError(f"{source}: no 'Name {{ ... }};' section")
    return sections


def _system_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``-Dkey=value`` settings of ``KAFKA_OPTS``, as Kafka's scripts hand them to the JVM."""
    found: dict[str, str] = {}
    try:
        words = shlex.split(environ.get("KAFKA_OPTS", ""))
    except ValueError:
        words = environ.get("KAFKA_OPTS", "").split()
    for word in words:
        if word.startswith("-D") and "=" in word:
            k, v = word[2:].split("=", 1)
            found[k] = v
    return found


def _bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ZkSecurityError(f"{name}={value!r}: expected true or false")
    return v == "true"


def zk_security(
    props: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    set_acl: bool | None = None,
) -> ZkSecurity:
    """This process's ZooKeeper security from its properties and ``KAFKA_OPTS``.

    ``set_acl``: the broker passes ``zookeeper.set.acl``; None means a tool's rule (ACLs whenever
    SASL is on, unless the properties say ``zookeeper.set.acl``). ``zookeeper.set.acl=true`` without
    a usable login is refused, with Kafka's reason.
    """
    props = dict(props or {})
    sysprops = _system_properties(os.environ if environ is None else environ)

    def setting(name: str) -> str | None:
        return props.get(name, sysprops.get(name))

    if set_acl is None and props.get(SET_ACL_PROPERTY) is not None:
        set_acl = _bool(props[SET_ACL_PROPERTY], SET_ACL_PROPERTY)
    service = setting(SASL_SERVICE_PROPERTY) or "zookeeper"
    path = setting(JAAS_CONFIG_PROPERTY)
    enabled = _bool(setting(SASL_CLIENT_PROPERTY) or "true", SASL_CLIENT_PROPERTY)
    if not path or not enabled:
        if set_acl:
            raise ZkSecurityError(
                f"{SET_ACL_PROPERTY} is true, but no ZooKeeper SASL login is configured: give "
                f"{JAAS_CONFIG_PROPERTY}=<file> (or -D{JAAS_CONFIG_PROPERTY}=<file> in KAFKA_OPTS) with a "
                f"{setting(SASL_SECTION_PROPERTY) or 'Client'} section"
            )
        return ZkSecurity(service=service)
    section = setting(SASL_SECTION_PROPERTY) or "Client"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ZkSecurityError(f"{JAAS_CONFIG_PROPERTY}={path}: cannot read the JAAS file ({e.strerror})") from None
    sections = parse_jaas_file(text, f"{JAAS_CONFIG_PROPERTY}={path}")
    if section not in sections:
        if set_acl:
            raise ZkSecurityError(
                f"{SET_ACL_PROPERTY} is true, but {path} has no {section} section (the ZooKeeper client login)"
            )
        return ZkSecurity(service=service)  # as ZooKeeper's client: no section, no SASL
    entries = sections[section]
    if len(entries) != 1:
        raise ZkSecurityError(f"{path}: section {section}: expected one login module, found {len(entries)}")
    module, options = entries[0]
    if module.rsplit(".", 1)[-1] == "Krb5LoginModule":
        raise ZkSecurityError(f"{path}: section {section}: {module} (Kerberos, GSSAPI) is not built; use DIGEST-MD5")
    if "username" not in options or "password" not in options:
        raise ZkSecurityError(f'{path}: section {section}: {module} needs username="..." and password="..."')
    return ZkSecurity(
        username=options["username"],
        password=options["password"],
        service=service,
        set_acl=True if set_acl is None else set_acl,
        source=f"{path} [{section}]",
    )
