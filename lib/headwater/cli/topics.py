"""``headwater topics``: create, list, describe and delete topics (like kafka-topics).

    headwater topics --bootstrap-server H:P create --topic T --partitions N --replication-factor R [--config k=v]
    headwater topics --bootstrap-server H:P list [--exclude-internal]
    headwater topics --bootstrap-server H:P describe [--topic T]
    headwater topics --bootstrap-server H:P delete --topic T
    headwater topics --bootstrap-server H:P alter --topic T --partitions N   (kafka-topics --alter)

``--bootstrap-server`` is accepted before or after the action (or from $HEADWATER_BOOTSTRAP_SERVER).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from headwater.cli.extras import describe_missing
from headwater.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, UnknownTopicError
from headwater.protocol.errors import ErrorCode

BOOTSTRAP_ENV = "HEADWATER_BOOTSTRAP_SERVER"


class CliError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 1 (2 for usage errors)."""

    exit_code = 1


def add_bootstrap_argument(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    parser.add_argument(
        "--bootstrap-server",
        "-b",
        dest="bootstrap_server",
        metavar="HOST:PORT[,HOST:PORT...]",
        default=argparse.SUPPRESS if suppress else None,
        help=f"brokers to bootstrap from (default ${BOOTSTRAP_ENV})",
    )
    # kafka-topics' --command-config: read by headwater.cli.command_config.security_of
    parser.add_argument(
        "--command-config",
        dest="command_config",
        metavar="client.properties",
        default=argparse.SUPPRESS if suppress else None,
        help="client properties for a secured cluster: security.protocol, ssl.*, sasl.* (Kafka's names)",
    )


def bootstrap_of(args: argparse.Namespace) -> str:
    value = getattr(args, "bootstrap_server", None) or os.environ.get(BOOTSTRAP_ENV)
    if not value:
        raise CliError(f"--bootstrap-server is required (or set ${BOOTSTRAP_ENV})")
    return str(value)


def describe_error(e: BaseException) -> str:
    """One readable line for an exception the client raises."""
    if isinstance(e, UnknownTopicError):
        return e.message
    if isinstance(e, KafkaError):
        if e.message and e.message != e.code.name:
            return f"{e.message} ({e.code.name})"
        return f"the broker answered {e.code.name} ({int(e.code)})"
    if isinstance(e, KafkaConnectionError | KafkaTimeoutError | CliError | ValueError):
        return str(e)
    return f"{type(e).__name__}: {e}"


def run_command(prog: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``func``; any failure becomes ``prog: error: ...`` on stderr and exit code 1 (a CliError's own; 2 for a missing extra)."""
    try:
        return func(args)
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as e:  # never a traceback for bad input or an unreachable cluster
        missing = describe_missing(prog, e)
        if missing is not None:  # an optional extra: exit code 2, as every command says it
            print(missing, file=sys.stderr)
            return 2
        print(f"{prog}: error: {describe_error(e)}", file=sys.stderr)
        return e.exit_code if isinstance(e, CliError) else 1


def parse_configs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--config expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    add_bootstrap_argument(topics, suppress=False)
    actions = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a topic")
    add_bootstrap_argument(create, suppress=True)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    create.add_argument("--timeout-ms", type=int, default=30000)
    create.set_defaults(func=_wrap(_create))

    lst = actions.add_parser("list", help="list topic names")
    add_bootstrap_argument(lst, suppress=True)
    lst.add_argument("--exclude-internal", action="store_true")
    lst.set_defaults(func=_wrap(_list))

    describe = actions.add_parser("describe", help="partitions, leaders, replicas, ISR and configs")
    add_bootstrap_argument(describe, suppress=True)
    describe.add_argument("--topic", help="one topic (default: all)")
    describe.add_argument("--exclude-internal", action="store_true")
    describe.set_defaults(func=_wrap(_describe))

    delete = actions.add_parser("delete", help="delete a topic")
    add_bootstrap_argument(delete, suppress=True)
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true", help="succeed if the topic does not exist")
    delete.add_argument("--timeout-ms", type=int, default=30000)
    delete.set_defaults(func=_wrap(_delete))

    alter = actions.add_parser("alter", help="add partitions to a topic (kafka-topics --alter --partitions)")
    add_bootstrap_argument(alter, suppress=True)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True, help="the new total number of partitions")
    alter.add_argument("--validate-only", action="store_true", help="check the request, change nothing")
    alter.add_argument("--timeout-ms", type=int, default=30000)
    alter.set_defaults(func=_wrap(_alter))


def _wrap(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return run_command("headwater topics", func, args)

    return run


def _admin(args: argparse.Namespace) -> Any:
    from headwater.cli.command_config import security_of
    from headwater.client.sync import SyncAdmin

    security = security_of(args, "headwater topics")
    return SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)


def _create(args: argparse.Namespace) -> int:
    from headwater.client.admin import validate_topic_name

    validate_topic_name(args.topic)
    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, got {args.partitions}")
    if args.replication_factor < 1:
        raise CliError(f"--replication-factor must be at least 1, got {args.replication_factor}")
    configs = parse_configs(args.config)
    admin = _admin(args)
    try:
        admin.create_topic(args.topic, args.partitions, args.replication_factor, configs, timeout_ms=args.timeout_ms)
    except KafkaError as e:
        if not (args.if_not_exists and e.code is ErrorCode.TOPIC_ALREADY_EXISTS):
            raise
    finally:
        admin.close()
    print(f"Created topic {args.topic}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        names = admin.list_topics(include_internal=not args.exclude_internal)
    finally:
        admin.close()
    for name in names:
        print(name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        descriptions = admin.describe_topics(None if args.topic is None else [args.topic])
        lines: list[str] = []
        for d in descriptions:
            if args.exclude_internal and d.is_internal:
                continue
            configs = _topic_overrides(admin, d.name)
            lines.append(
                f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\t"
                f"ReplicationFactor: {d.replication_factor}\tConfigs: {configs}"
            )
            for p in d.partitions:
                leader = "none" if p.leader < 0 else str(p.leader)
                lines.append(
                    f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader}\t"
                    f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
                    + (f"\tOffline: {_ids(p.offline_replicas)}" if p.offline_replicas else "")
                )
    finally:
        admin.close()
    print("\n".join(lines))
    return 0


def _topic_overrides(admin: Any, topic: str) -> str:
    """The topic's own config overrides as ``k=v,k=v`` (what kafka-topics shows)."""
    try:
        entries = admin.describe_configs(topic)
    except KafkaError:
        return ""
    return ",".join(f"{e.name}={e.value}" for e in entries.values() if e.source == "DYNAMIC_TOPIC_CONFIG")


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def _delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        admin.delete_topic(args.topic, timeout_ms=args.timeout_ms)
    except UnknownTopicError:
        if not args.if_exists:
            raise
        return 0
    finally:
        admin.close()
    print(f"Topic {args.topic} is marked for deletion.")
    return 0


def _alter(args: argparse.Namespace) -> int:
    from headwater.client.admin import validate_topic_name

    validate_topic_name(args.topic)
    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, got {args.partitions}")
    admin = _admin(args)
    try:
        result = admin.create_partitions(
            {args.topic: args.partitions}, timeout_ms=args.timeout_ms, validate_only=args.validate_only
        )
    finally:
        admin.close()
    error = result.get(args.topic)
    if error is not None:
        raise error
    if args.validate_only:
        print(f"Topic {args.topic} can have {args.partitions} partitions (nothing changed).")
    else:
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0
