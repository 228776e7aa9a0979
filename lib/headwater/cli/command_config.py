"""``--command-config client.properties``: how a ``headwater`` command secures its own connections.

Kafka's tools (kafka-topics, kafka-configs, kafka-acls, kafka-consumer-groups, ...) take the
client properties for a secured cluster from a file; so do ours:

    headwater topics --bootstrap-server broker1:9094 --command-config admin.properties list

    # admin.properties
    security.protocol=SASL_SSL
    ssl.ca.location=/etc/kafka/ca.pem
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=admin
    sasl.password=file:/etc/kafka/admin.secret

The option is added with ``--bootstrap-server`` (``headwater.cli.topics.add_bootstrap_argument``).
The file's ``security.*``, ``ssl.*`` and ``sasl.*`` keys become the client's security settings
(:class:`headwater.client.security.ClientSecurity`, which also takes ``file:``/``env:`` secrets).
Other keys are not used; each is named in a warning on stderr, as Kafka's clients warn about
configs they do not know. A file that cannot be read, an unknown ``security.protocol``, a missing
SASL setting or a CA file that cannot be loaded is a usage error: one line on stderr and exit
code 2, before any connection is made. No secret is ever printed.
"""

from __future__ import annotations

import argparse
import ssl
import sys

from headwater.cli.topics import CliError
from headwater.client.security import ClientSecurity, SecurityConfigError
from headwater.properties import parse_properties

SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


class CommandConfigError(CliError):
    """The ``--command-config`` file cannot be used: a usage error (exit code 2, as argparse's)."""

    exit_code = 2


def load_command_config(path: str, prog: str = "headwater") -> ClientSecurity:
    """The security settings of a client.properties file; raises CommandConfigError naming the problem."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CommandConfigError(f"--command-config {path}: cannot read it: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CommandConfigError(f"--command-config {path}: not a text .properties file") from None
    props = parse_properties(text)
    used = {k: v for k, v in props.items() if k.startswith(SECURITY_PREFIXES)}
    for key in sorted(set(props) - set(used)):
        print(
            f"{prog}: warning: --command-config {path}: {key} is not used (only security.*, ssl.*, sasl.*)",
            file=sys.stderr,
        )
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = used.get(key, "PEM").strip().upper()
        if kind != "PEM":
            raise CommandConfigError(f"--command-config {path}: {key}={kind} is not supported; use PEM files")
    try:
        security = ClientSecurity.from_properties(used)
        security.ssl_context()  # a CA or certificate that cannot be loaded fails here, not at connect
    except SecurityConfigError as e:
        raise CommandConfigError(f"--command-config {path}: {e}") from None
    except (OSError, ssl.SSLError) as e:
        raise CommandConfigError(f"--command-config {path}: cannot load the TLS files it names: {e}") from None
    return security


def security_of(args: argparse.Namespace, prog: str = "headwater") -> ClientSecurity | None:
    """The command's ``--command-config`` settings, or None (PLAINTEXT) without one."""
    path = getattr(args, "command_config", None)
    return load_command_config(path, prog) if path else None
