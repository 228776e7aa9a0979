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
    headwater configs --zookeeper ZK --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-256
    headwater configs --zookeeper ZK --describe --entity-type users [--entity-name alice]

``/config/users/<name>`` holds the salted credential (never the password) and a
``/config/changes/config_change_<seq>`` notification announces it; the name is Sanitizer-encoded
as Kafka stores it (``alice@X`` is ``/config/users/alice%40X``). Brokers cache credentials and
reload a user when its notification arrives, so a change applies to the next login within moments.
``--describe`` shows each mechanism's iteration count, never the keys.

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
    p.add_argument("--entity-type", required=True, choices=["topics", "users", "brokers"])
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true", help="with --entity-type brokers: the cluster-wide default")
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


def _run(args: argparse.Namespace) -> int:
    if args.entity_type == "brokers":
        return _run_brokers(args)
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
            out[mech] = make_credential(mech, options["password"], iterations)
        except (ValueError, ScramError) as e:
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
