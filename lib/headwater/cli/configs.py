"""``headwater configs``: topic configs and SCRAM users, as Kafka 2.3's ``kafka-configs`` manages them.

Topics, through the brokers (AlterConfigs / IncrementalAlterConfigs / DescribeConfigs):

    headwater configs --bootstrap-server H:P --describe --entity-type topics --entity-name T [--all]
    headwater configs --bootstrap-server H:P --alter --entity-type topics --entity-name T \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config segment.bytes

As in Kafka, ``--add-config`` takes comma-separated ``k=v`` pairs (a value containing commas goes in
square brackets) and ``--delete-config`` comma-separated keys; keys not named keep their override.
An unknown key or a bad value is refused by the broker (INVALID_CONFIG) and nothing is changed.

Users' SCRAM credentials, through ZooKeeper (as ``kafka-configs --zookeeper`` does in Kafka 2.3):

    headwater configs --zookeeper ZK[/chroot] --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[password=alice-secret],SCRAM-SHA-256=[iterations=8192,password=alice-secret]'

A password may be given as ``password=file:/path`` (its first line; ``file:/dev/stdin`` reads it from
standard input) or ``env:NAME``, so it is never on a command line::

    headwater configs --zookeeper ZK --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-256
    headwater configs --zookeeper ZK --describe --entity-type users [--entity-name alice]

``/config/users/<name>`` holds the salted credential (never the password) and a
``/config/changes/config_change_<seq>`` notification announces it; the name is Sanitizer-encoded
as Kafka stores it (``alice@X`` is ``/config/users/alice%40X``). Brokers cache credentials and
reload a user when its notification arrives, so a change applies to the next login within moments.
``--describe`` shows each mechanism's iteration count, never the keys.

Client quotas (KIP-13/55/124), through ZooKeeper as ``kafka-configs --zookeeper`` in Kafka 2.3 (users,
clients, a user's clients, and ``--entity-default`` for any of them):

    headwater configs --zookeeper ZK --alter --entity-type clients --entity-name app \
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    headwater configs --zookeeper ZK --alter --entity-type users --entity-name alice \
        --entity-type clients --entity-default --add-config request_percentage=50
    headwater configs --zookeeper ZK --describe --entity-type users [--entity-name alice] [--entity-type clients]

Stored in ``/config/users/<u>[/clients/<c>]`` or ``/config/clients/<c>`` (``<default>`` for a default)
with a change notification; every broker applies it live (broker/quotas.py gives the precedence).

Dynamic broker configs, through the brokers (as ``kafka-configs --bootstrap-server`` in Kafka 2.3):

    headwater configs --bootstrap-server H:P --alter --entity-type brokers --entity-name 1 \\
        --add-config follower.replication.throttled.rate=10485760
    headwater configs --bootstrap-server H:P --alter --entity-type brokers --entity-default \\
        --add-config log.retention.ms=86400000
    headwater configs --bootstrap-server H:P --describe --entity-type brokers --entity-name 1 [--all]

Stored in ``/config/brokers/<id>`` or ``/config/brokers/<default>`` and applied live by every broker
(broker/dynamic_config.py lists the configs that may be changed).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from headwater.cli.command_config import security_of
from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, run_command
from headwater.cli.zookeeper import zookeeper_session
from headwater.quotas import DEFAULT as DEFAULT_QUOTA_ENTITY
from headwater.quotas import QUOTA_CONFIGS, entity_key, entity_znode, user_clients_znode, validate_quota_config
from headwater.scram import (
    CHANGES_PATH,
    MECHANISMS,
    USERS_PATH,
    ScramCredential,
    ScramError,
    change_notification,
    make_credential,
    user_config_json,
    user_config_path,
)
from headwater.security import SecurityConfigError, resolve_secret
from headwater.zk.config import desanitize, sanitize


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("configs", help="describe and alter topic configs and users' SCRAM credentials (kafka-configs)")
    add_bootstrap_argument(p, suppress=False)
    p.add_argument(
        "--zookeeper", metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper (for --entity-type users)"
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's config overrides")
    action.add_argument("--alter", action="store_true", help="add, change or delete config overrides")
    # repeatable for a user's clients (--entity-type users --entity-name u --entity-type clients ...);
    # entity_type / entity_name / entity_default keep the first entity's
    p.add_argument(
        "--entity-type", required=True, choices=["topics", "users", "clients", "brokers"], action=_EntityArgument
    )
    p.add_argument("--entity-name", action=_EntityArgument)
    p.add_argument(
        "--entity-default",
        nargs=0,
        action=_EntityArgument,
        default=False,
        help="the default entity (brokers: cluster-wide; users / clients: the default quota)",
    )
    p.add_argument(
        "--add-config",
        default="",
        metavar="K1=V1,K2=[V2a,V2b]",
        help="configs to set; for users 'SCRAM-SHA-512=[password=...],SCRAM-SHA-256=[iterations=8192,password=...]'",
    )
    p.add_argument("--delete-config", default="", metavar="K1,K2", help="overrides to remove (back to the default)")
    p.add_argument(
        "--all", action="store_true", help="with --describe: every config with its source, not only overrides"
    )
    p.set_defaults(func=lambda args: run_command("headwater configs", _run, args))


class _EntityArgument(argparse.Action):
    """``--entity-type`` / ``--entity-name`` / ``--entity-default``, in order, as ``args.entities``:
    ``[[type, name or <default> or None], ...]``; the first entity's also as the plain attributes."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        entities: list[list[str | None]] = list(getattr(ns, "entities", None) or [])
        if self.dest == "entity_type":
            entities.append([values, None])
        else:
            if not entities:
                entities.append([None, None])
            if entities[-1][1] is not None:
                parser.error(f"{option}: the {entities[-1][0]} entity already has a name")
            entities[-1][1] = values if self.dest == "entity_name" else DEFAULT_QUOTA_ENTITY
        ns.entities = entities
        if len(entities) == 1:
            setattr(ns, self.dest, True if self.dest == "entity_default" else values)


def _is_quota_command(args: argparse.Namespace) -> bool:
    """users/clients quota entities (a user's SCRAM credentials stay with _run_users)."""
    entities = getattr(args, "entities", [])
    if args.entity_type == "clients" or len(entities) > 1 or args.entity_default:
        return True
    if args.entity_type != "users":
        return False
    if args.alter:
        keys = set(parse_add_config(args.add_config)) if args.add_config else set()
        keys |= {k.strip() for k in args.delete_config.split(",") if k.strip()}
        return bool(keys) and keys <= set(QUOTA_CONFIGS)
    return False


def _run(args: argparse.Namespace) -> int:
    if args.entity_type == "brokers":
        return _run_brokers(args)
    if args.entity_type in ("users", "clients") and _is_quota_command(args):
        if not args.zookeeper:
            raise CliError(f"--entity-type {args.entity_type} needs --zookeeper (quotas are written to ZooKeeper)")
        return _run_quotas(args)
    if args.entity_default:
        raise CliError("--entity-default goes with --entity-type brokers")
    if args.entity_type == "users":
        if not args.zookeeper:
            raise CliError("--entity-type users needs --zookeeper (credentials are written to ZooKeeper)")
        if args.command_config:
            raise CliError(
                "--entity-type users writes ZooKeeper (--zookeeper); --command-config is for --bootstrap-server"
            )
        return _run_users(args)
    return _run_topics(args)


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``--add-config`` syntax: ``k=v,k2=[a,b]`` (brackets protect commas in a value)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise CliError(f"--add-config expects KEY=VALUE[,KEY=VALUE...], got {text[i:]!r}")
        key = text[i:eq].strip()
        if not key or "," in key:
            raise CliError(f"--add-config expects KEY=VALUE[,KEY=VALUE...], got {text[i:eq]!r}")
        j = eq + 1
        if j < n and text[j] == "[":
            end = text.find("]", j)
            if end < 0:
                raise CliError(f"--add-config: unclosed '[' in the value of {key}")
            value, i = text[j + 1 : end], end + 1
            if i < n and text[i] != ",":
                raise CliError(f"--add-config: expected ',' after ']' in the value of {key}")
        else:
            end = text.find(",", j)
            end = n if end < 0 else end
            value, i = text[j:end], end
        out[key] = value
        i += 1  # the comma
    return out


def parse_scram_configs(text: str) -> dict[str, ScramCredential]:
    """kafka-configs' ``MECH=[password=...,iterations=N]`` entries as new salted credentials."""
    out: dict[str, ScramCredential] = {}
    for mech, value in parse_add_config(text).items():
        mech = mech.strip().upper()
        if mech not in MECHANISMS:
            raise CliError(f"--add-config: {mech!r} is not one of {', '.join(MECHANISMS)}")
        # ``[password=...,iterations=N]`` or, as kafka-configs also takes, a bare password
        options = dict(part.partition("=")[::2] for part in value.split(",")) if "=" in value else {"password": value}
        if not options.get("password"):
            raise CliError(f"--add-config: {mech} needs password=...")
        unknown = set(options) - {"password", "iterations"}
        if unknown:
            raise CliError(f"--add-config: {mech}: unknown option(s) {sorted(unknown)}")
        try:
            iterations = int(options.get("iterations") or 4096)
            # password=file:/path (its first line; file:/dev/stdin too) or env:NAME: off the command line
            password = resolve_secret(options["password"], f"--add-config {mech} password") or ""
            out[mech] = make_credential(mech, password, iterations)
        except (ValueError, ScramError, SecurityConfigError) as e:
            raise CliError(f"--add-config: {mech}: {e}") from None
    return out


def _run_topics(args: argparse.Namespace) -> int:
    from headwater.client.sync import SyncAdmin

    if not args.entity_name:
        raise CliError("--entity-type topics needs --entity-name")
    security = security_of(args, "headwater configs")
    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)
    try:
        if args.describe:
            if args.add_config or args.delete_config:
                raise CliError("--add-config and --delete-config go with --alter")
            entries = admin.describe_configs(args.entity_name)
            if args.all:
                print(f"All configs for topic {args.entity_name} are:")
                for e in entries.values():
                    print(
                        f"  {e.name}={_shown(e.value, e.is_sensitive)} sensitive={str(e.is_sensitive).lower()} "
                        f"source={e.source}"
                    )
            else:
                overrides = ",".join(
                    f"{e.name}={e.value}" for e in entries.values() if e.source == "DYNAMIC_TOPIC_CONFIG"
                )
                print(f"Configs for topic '{args.entity_name}' are {overrides}")
            return 0
        to_set = parse_add_config(args.add_config) if args.add_config else {}
        to_delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
        if not to_set and not to_delete:
            raise CliError("--alter needs --add-config and/or --delete-config")
        both = sorted(set(to_set) & set(to_delete))
        if both:
            raise CliError(f"a config cannot be both added and deleted: {both}")
        admin.alter_topic_configs(args.entity_name, to_set, to_delete)
        print(f"Completed updating config for topic {args.entity_name}.")
        return 0
    finally:
        admin.close()


def _run_brokers(args: argparse.Namespace) -> int:
    """Dynamic broker configs through the brokers (IncrementalAlterConfigs / DescribeConfigs on a
    BROKER resource), as kafka-configs --bootstrap-server does for brokers."""
    from headwater.client.sync import SyncAdmin

    if args.entity_default == bool(args.entity_name):
        raise CliError("--entity-type brokers needs exactly one of --entity-name ID and --entity-default")
    broker_id: int | None = None
    if args.entity_name:
        try:
            broker_id = int(args.entity_name)
        except ValueError:
            raise CliError(f"--entity-name for brokers is a broker id, got {args.entity_name!r}") from None
    security = security_of(args, "headwater configs")
    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)
    try:
        if args.describe:
            if args.add_config or args.delete_config:
                raise CliError("--add-config and --delete-config go with --alter")
            entries = admin.describe_broker_configs(broker_id)
            dynamic = {"DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"}
            if broker_id is None:
                print("Default configs for brokers in the cluster are:")
            elif args.all:
                print(f"All configs for broker {broker_id} are:")
            else:
                print(f"Dynamic configs for broker {broker_id} are:")
            for e in entries.values():
                if not args.all and e.source not in dynamic:
                    continue
                # a sensitive value is never printed, even if a broker sent one (Kafka prints null)
                synonyms = ", ".join(f"{src}:{name}={_shown(value, e.is_sensitive)}" for name, value, src in e.synonyms)
                print(
                    f"  {e.name}={_shown(e.value, e.is_sensitive)} sensitive={str(e.is_sensitive).lower()} "
                    f"synonyms={{{synonyms}}}"
                )
            return 0
        to_set = parse_add_config(args.add_config) if args.add_config else {}
        to_delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
        if not to_set and not to_delete:
            raise CliError("--alter needs --add-config and/or --delete-config")
        both = sorted(set(to_set) & set(to_delete))
        if both:
            raise CliError(f"a config cannot be both added and deleted: {both}")
        admin.alter_broker_configs(broker_id, to_set, to_delete)
        if broker_id is None:
            print("Completed updating default config for brokers in the cluster.")
        else:
            print(f"Completed updating config for broker {broker_id}.")
        return 0
    finally:
        admin.close()


def _shown(value: str | None, sensitive: bool) -> str:
    """A config value as kafka-configs prints it: null when absent or sensitive."""
    return "null" if value is None or sensitive else value


def _run_users(args: argparse.Namespace) -> int:
    from kazoo.exceptions import NoNodeError

    with zookeeper_session(args.zookeeper) as zk:
        if args.describe:
            names = (
                [args.entity_name]
                if args.entity_name
                else sorted(desanitize(n) for n in (zk.get_children(USERS_PATH) if zk.exists(USERS_PATH) else []))
            )
            for name in names:
                try:
                    data, _ = zk.get(user_config_path(name))
                except NoNodeError:
                    print(f"Configs for user-principal '{name}' are ")
                    continue
                config = _config_of(data)
                shown = ",".join(f"{k}={_describe_value(k, v)}" for k, v in sorted(config.items()))
                print(f"Configs for user-principal '{name}' are {shown}")
            return 0
        if not args.entity_name:
            raise CliError("--alter needs --entity-name")
        if not (args.add_config or args.delete_config):
            raise CliError("--alter needs --add-config or --delete-config")
        added = parse_scram_configs(args.add_config) if args.add_config else {}
        deleted = [m.strip().upper() for m in (args.delete_config or "").split(",") if m.strip()]
        path = user_config_path(args.entity_name)
        try:
            data, stat = zk.get(path)
            config = _config_of(data)
            version: int | None = stat.version
        except NoNodeError:
            config, version = {}, None
        for mech in deleted:
            if mech not in config:
                raise CliError(f"--delete-config: user {args.entity_name} has no {mech} credential")
            del config[mech]
        config.update({mech: cred.to_kafka() for mech, cred in added.items()})
        value = user_config_json(config)
        if version is None:
            zk.create(path, value, makepath=True)
        else:
            zk.set(path, value, version=version)
        zk.create(
            f"{CHANGES_PATH}/config_change_",
            change_notification(f"users/{sanitize(args.entity_name)}"),
            sequence=True,
            makepath=True,
        )
        print(f"Completed Updating config for entity: user-principal '{args.entity_name}'.")
        return 0


def _quota_entities(args: argparse.Namespace) -> list[tuple[str | None, str | None]]:
    """(user, client) of the entity named: ``users [clients]`` or ``clients``; None for a name not given."""
    entities = args.entities
    types = [t for t, _ in entities]
    if types not in (["users"], ["clients"], ["users", "clients"]):
        raise CliError("quota entities are --entity-type users, clients, or users then clients")
    user = entities[0][1] if types[0] == "users" else None
    client = entities[-1][1] if types[-1] == "clients" else None
    return [(user, client)]


def _quota_description(user: str | None, client: str | None, types: list[str]) -> str:
    """The entity as kafka-configs names it: ``user-principal 'alice', client-id 'app'``."""

    def one(kind: str, name: str | None) -> str:
        return f"default {kind}" if name == DEFAULT_QUOTA_ENTITY else f"{kind} '{name}'"

    parts = []
    if "users" in types:
        parts.append(one("user-principal", user))
    if "clients" in types:
        parts.append(one("client-id", client))
    return ", ".join(parts)


def _run_quotas(args: argparse.Namespace) -> int:
    from kazoo.exceptions import NoNodeError

    from headwater.zk import config as zkconfig
    from headwater.zk.paths import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, CONFIG_CLIENTS, CONFIG_USERS

    types = [t for t, _ in args.entities if t is not None]
    ((user, client),) = _quota_entities(args)
    with zookeeper_session(args.zookeeper) as zk:

        def children(path: str) -> list[str]:
            try:
                return sorted(zk.get_children(path))
            except NoNodeError:
                return []

        if args.describe:
            if args.add_config or args.delete_config:
                raise CliError("--add-config and --delete-config go with --alter")
            found: list[tuple[str | None, str | None]] = []
            users = [user] if user is not None else [zkconfig.desanitize(u) for u in children(CONFIG_USERS)]
            if types == ["clients"]:
                names = [client] if client is not None else children(CONFIG_CLIENTS)
                found = [(None, zkconfig.desanitize(c) if client is None else c) for c in names]
            elif types == ["users"]:
                found = [(u, None) for u in users]
            else:
                for u in users:
                    names = [client] if client is not None else children(user_clients_znode(u))
                    found += [(u, zkconfig.desanitize(c) if client is None else c) for c in names]
            for fu, fc in found:
                path = entity_znode(entity_key(fu, fc))
                try:
                    data, _ = zk.get(path)
                except NoNodeError:
                    data = b""
                config = zkconfig.decode_entity_config(path, data)
                shown = ",".join(f"{k}={v}" for k, v in sorted(config.items()) if k in QUOTA_CONFIGS)
                print(f"Configs for {_quota_description(fu, fc, types)} are {shown}")
            return 0
        if ("users" in types and user is None) or ("clients" in types and client is None):
            raise CliError("--alter needs --entity-name or --entity-default for each --entity-type")
        to_set = parse_add_config(args.add_config) if args.add_config else {}
        to_delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
        if not to_set and not to_delete:
            raise CliError("--alter needs --add-config and/or --delete-config")
        for name, value in to_set.items():
            problem = validate_quota_config(name, value)
            if problem:
                raise CliError(f"--add-config: {problem}")
        unknown = sorted(set(to_delete) - set(QUOTA_CONFIGS))
        if unknown:
            raise CliError(f"--delete-config: not quota configs: {unknown} (one of {', '.join(QUOTA_CONFIGS)})")
        key = entity_key(user, client)
        path = entity_znode(key)
        try:
            data, stat = zk.get(path)
            config, version = zkconfig.decode_entity_config(path, data), stat.version
        except NoNodeError:
            config, version = {}, None
        for name in to_delete:
            if name not in config:
                raise CliError(f"--delete-config: {_quota_description(user, client, types)} has no {name}")
            del config[name]
        config.update(to_set)
        entity_type, _, name = key.partition("/")
        zk.ensure_path(CONFIG_CHANGES)
        if version is None:
            zk.ensure_path(path.rsplit("/", 1)[0])
        tx = zk.transaction()
        if version is None:
            tx.create(path, zkconfig.encode_entity_config(config))
        else:
            tx.set_data(path, zkconfig.encode_entity_config(config), version=version)
        tx.create(CONFIG_CHANGE_PREFIX, zkconfig.encode_change(entity_type, name), sequence=True)
        failures = [r for r in tx.commit() if isinstance(r, Exception)]
        if failures:
            raise CliError(f"the config of {path} changed meanwhile ({failures[0]!r}); try again")
        print(f"Completed Updating config for entity: {_quota_description(user, client, types)}.")
        return 0


def _config_of(data: bytes) -> dict[str, str]:
    try:
        doc: Any = json.loads(data)
    except ValueError:
        raise CliError("malformed user config in ZooKeeper") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in (config or {}).items()}


def _describe_value(key: str, value: str) -> str:
    if key in MECHANISMS:
        try:
            return f"iterations={ScramCredential.from_kafka(value).iterations}"
        except ScramError:
            return "<malformed>"
    return value
