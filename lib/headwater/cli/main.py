"""``headwater``: one console script, Kafka-style subcommands."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from headwater.cli import bench, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headwater", description="Headwater: Kafka as its authors described it.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    broker = sub.add_parser("broker", help="run a broker")
    broker_sub = broker.add_subparsers(dest="broker_command", required=True, metavar="ACTION")
    start = broker_sub.add_parser("start", help="start a broker in the foreground")
    start.add_argument("-c", "--config", help="server.properties file")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a property (repeatable)"
    )
    start.add_argument("--log-level", default="INFO")
    start.set_defaults(func=_broker_start)

    _add_client_commands(sub)
    bench.add_parser(sub)
    _add_service_commands(sub)
    return parser


# The pipeline services live in their own folders (mirror/, audit/, spark-loader/) and each
# contributes its subcommands through a ``cli`` module with ``add_parser(sub)``. A service that
# is not part of this installation (its folder absent from the wheel) simply has no subcommand.
_SERVICE_CLIS = ("headwater.mirror.cli", "headwater.audit.cli", "headwater.loader.cli", "headwater.lab.cli")


def _add_service_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name in _SERVICE_CLIS:
        try:
            present = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # the service's package itself is absent
            present = False
        if present:
            importlib.import_module(name).add_parser(sub)


def _add_client_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    try:
        from headwater.cli import (
            acls,
            configs,
            console,
            delete_records,
            groups,
            leader_election,
            log_dirs,
            reassign_partitions,
            topics,
        )
    except ImportError:  # pragma: no cover - during bootstrap of the tree
        return
    topics.add_parser(sub)
    configs.add_parser(sub)
    acls.add_parser(sub)
    delete_records.add_parser(sub)
    log_dirs.add_parser(sub)
    leader_election.add_parser(sub)
    reassign_partitions.add_parser(sub)
    groups.add_parser(sub)
    console.add_parsers(sub)


def _broker_start(args: argparse.Namespace) -> int:
    from headwater.broker.main import run

    return run(args.config, args.override, args.log_level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = extras.missing_for(args)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except ImportError as e:  # an extra's module on a path missing_for does not know: one line, no traceback
        prog = " ".join(str(a) for a in ("headwater", getattr(args, "command", "")) if a)
        message = extras.describe_missing(prog, e)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
