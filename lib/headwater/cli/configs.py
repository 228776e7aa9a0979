"""``headwater configs``: SCRAM users, as Kafka 2.3's ``kafka-configs --zookeeper`` manages them.

    headwater configs --zookeeper ZK[/chroot] --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[password=alice-secret],SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    headwater configs --zookeeper ZK --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-256
    headwater configs --zookeeper ZK --describe --entity-type users [--entity-name alice]

Like Kafka 2.3, this writes ZooKeeper directly: ``/config/users/<name>`` holds the salted
credential (never the password) and a ``/config/changes/config_change_<seq>`` notification
announces it. Brokers read the credential at each authentication, so it applies to the next
connection. ``--describe`` shows each mechanism's iteration count, never the keys.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from headwater.cli.topics import CliError, run_command
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("configs", help="SCRAM credentials of users (kafka-configs --entity-type users)")
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--entity-type", required=True, choices=["users"], help="only users (SCRAM credentials)")
    p.add_argument("--entity-name")
    p.add_argument("--add-config", help="'SCRAM-SHA-512=[password=...],SCRAM-SHA-256=[iterations=8192,password=...]'")
    p.add_argument("--delete-config", help="SCRAM-SHA-512[,SCRAM-SHA-256]")
    p.set_defaults(func=lambda args: run_command("headwater configs", _run, args))


def split_top_level(text: str) -> list[str]:
    """``a=1,b=[x=1,y=2]`` -> ``["a=1", "b=[x=1,y=2]"]``: commas inside brackets don't split."""
    out: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise CliError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise CliError(f"unbalanced '[' in {text!r}")
    out.append(current)
    return [s.strip() for s in out if s.strip()]


def parse_scram_configs(text: str) -> dict[str, ScramCredential]:
    """kafka-configs' ``MECH=[password=...,iterations=N]`` entries as new salted credentials."""
    out: dict[str, ScramCredential] = {}
    for item in split_top_level(text):
        mech, sep, value = item.partition("=")
        mech = mech.strip().upper()
        if not sep or mech not in MECHANISMS:
            raise CliError(f"--add-config: {item.split('=')[0]!r} is not one of {', '.join(MECHANISMS)}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            options = dict(part.partition("=")[::2] for part in split_top_level(value[1:-1]))
        else:
            options = {"password": value}
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


def _run(args: argparse.Namespace) -> int:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=args.zookeeper, timeout=10)
    try:
        zk.start(timeout=15)
    except Exception as e:
        raise CliError(f"cannot connect to ZooKeeper at {args.zookeeper}: {e}") from None
    try:
        if args.describe:
            names = (
                [args.entity_name]
                if args.entity_name
                else sorted(zk.get_children(USERS_PATH) if zk.exists(USERS_PATH) else [])
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
            change_notification(f"users/{args.entity_name}"),
            sequence=True,
            makepath=True,
        )
        print(f"Completed Updating config for entity: user-principal '{args.entity_name}'.")
        return 0
    finally:
        zk.stop()
        zk.close()


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
