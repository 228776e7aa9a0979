"""``headwater configs``: describe and change topic configs (like kafka-configs).

    headwater configs --bootstrap-server H:P --describe --entity-type topics --entity-name T
    headwater configs --bootstrap-server H:P --alter --entity-type topics --entity-name T \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config segment.bytes

As in Kafka, ``--add-config`` takes comma-separated ``k=v`` pairs (a value containing commas goes in
square brackets) and ``--delete-config`` comma-separated keys; keys not named keep their override
(IncrementalAlterConfigs). An unknown key or a bad value is refused by the broker
(INVALID_CONFIG) and nothing is changed. Only ``--entity-type topics`` is built.
"""

from __future__ import annotations

import argparse
from typing import Any

from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, run_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("configs", help="describe and alter topic configs (kafka-configs)")
    add_bootstrap_argument(p, suppress=False)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's config overrides")
    action.add_argument("--alter", action="store_true", help="add, change or delete config overrides")
    p.add_argument("--entity-type", required=True, choices=["topics", "brokers"])
    p.add_argument("--entity-name", required=True)
    p.add_argument("--add-config", default="", metavar="K1=V1,K2=[V2a,V2b]", help="configs to set")
    p.add_argument("--delete-config", default="", metavar="K1,K2", help="overrides to remove (back to the default)")
    p.add_argument(
        "--all", action="store_true", help="with --describe: every config with its source, not only overrides"
    )
    p.set_defaults(func=lambda args: run_command("headwater configs", _run, args))


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


def _run(args: argparse.Namespace) -> int:
    if args.entity_type != "topics":
        raise CliError("--entity-type brokers: dynamic broker configs are not built yet (topics only)")
    from headwater.client.sync import SyncAdmin

    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000)
    try:
        if args.describe:
            if args.add_config or args.delete_config:
                raise CliError("--add-config and --delete-config go with --alter")
            entries = admin.describe_configs(args.entity_name)
            if args.all:
                print(f"All configs for topic {args.entity_name} are:")
                for e in entries.values():
                    print(f"  {e.name}={e.value} sensitive={str(e.is_sensitive).lower()} source={e.source}")
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
