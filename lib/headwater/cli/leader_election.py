"""``headwater leader-election``: elect partitions' leaders on demand (like Kafka 2.4's kafka-leader-election).

    headwater leader-election --bootstrap-server H:P --election-type preferred --all-topic-partitions
    headwater leader-election --bootstrap-server H:P --election-type preferred --topic T --partition 0
    headwater leader-election --bootstrap-server H:P --election-type unclean --path-to-json-file f.json

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``. ``preferred``
moves leadership back to each partition's preferred replica (the first of its assignment) when it
is alive and in the ISR, e.g. after a broker restart; ``unclean`` gives a partition without a live
leader any live replica, in the ISR or not (records only the old leader had are lost). The
controller does the election (ElectLeaders); this prints Kafka's lines and exits 1 if any
partition could not be elected. ``--command-config client.properties`` secures the connections
(security.protocol, ssl.*, sasl.*), as for kafka-leader-election.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from headwater.cli.command_config import security_of
from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, describe_error, run_command
from headwater.protocol.errors import ErrorCode


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("leader-election", help="elect preferred or unclean leaders (kafka-leader-election)")
    add_bootstrap_argument(p, suppress=False)
    p.add_argument(
        "--election-type", required=True, type=str.lower, choices=["preferred", "unclean"], help="PREFERRED or UNCLEAN"
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic of --partition")
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--path-to-json-file", help='{"partitions": [{"topic": T, "partition": P}, ...]}')
    p.add_argument("--partition", type=int, help="with --topic: the partition")
    p.add_argument("--timeout-ms", type=int, default=30000)
    p.set_defaults(func=lambda args: run_command("headwater leader-election", _run, args))


def parse_partitions_json(text: str) -> list[tuple[str, int]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"the partitions JSON file is not JSON: {e}") from None
    if not isinstance(value, dict) or not isinstance(value.get("partitions"), list):
        raise CliError('the partitions JSON file must be {"partitions": [{"topic": T, "partition": P}, ...]}')
    out: list[tuple[str, int]] = []
    for entry in value["partitions"]:
        if not (
            isinstance(entry, dict) and isinstance(entry.get("topic"), str) and type(entry.get("partition")) is int
        ):
            raise CliError(f"each partition needs a string topic and an integer partition: {entry!r}")
        tp = (entry["topic"], entry["partition"])
        if tp in out:
            raise CliError(f"partition {tp[0]}-{tp[1]} is listed twice")
        out.append(tp)
    if not out:
        raise CliError("the partitions JSON file lists no partitions")
    return out


def _partitions(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    if args.all_topic_partitions:
        if args.partition is not None:
            raise CliError("--partition goes with --topic")
        return None
    if args.topic is not None:
        if args.partition is None:
            raise CliError("--topic needs --partition")
        return [(args.topic, args.partition)]
    if args.partition is not None:
        raise CliError("--partition goes with --topic")
    try:
        with open(args.path_to_json_file, encoding="utf-8") as f:
            return parse_partitions_json(f.read())
    except OSError as e:
        raise CliError(f"cannot read {args.path_to_json_file}: {e.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    from headwater.client.sync import SyncAdmin

    partitions = _partitions(args)
    kind = args.election_type.upper()
    security = security_of(args, "headwater leader-election")
    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)
    try:
        results = admin.elect_leaders(partitions, unclean=kind == "UNCLEAN", timeout_ms=args.timeout_ms)
    finally:
        admin.close()
    elected = sorted(tp for tp, e in results.items() if e is None)
    not_needed = sorted(tp for tp, e in results.items() if e is not None and e.code is ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted(
        (tp, e) for tp, e in results.items() if e is not None and e.code is not ErrorCode.ELECTION_NOT_NEEDED
    )
    if elected:
        print(f"Successfully completed leader election ({kind}) for partitions {_names(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {_names(not_needed)}")
    if not (elected or not_needed or failed):
        print("No partitions to elect leaders for")
    for (t, p), e in failed:
        print(f"Error completing leader election ({kind}) for partition: {t}-{p}: {describe_error(e)}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def _names(tps: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
