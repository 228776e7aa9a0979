"""``headwater reassign-partitions``: move partitions between brokers (Kafka 2.3's kafka-reassign-partitions).

    headwater reassign-partitions --zookeeper ZK --generate --topics-to-move-json-file topics.json --broker-list 2,3,4
    headwater reassign-partitions --zookeeper ZK --execute --reassignment-json-file plan.json [--throttle 10485760]
    headwater reassign-partitions --zookeeper ZK --verify --reassignment-json-file plan.json

As in Kafka 2.3 the tool works through ZooKeeper: ``--execute`` writes ``/admin/reassign_partitions``
(the controller then adds the new replicas, waits for them to join the ISR, moves leadership and
removes the old replicas) after printing the current assignment to keep for a rollback; with
``--throttle`` (bytes/s) it first sets the replication throttles so the copy does not starve
producers. Running ``--execute`` again with a new ``--throttle`` while a reassignment runs only
changes the rate. ``--verify`` prints each partition's status (a partition still in progress shows
which new replicas have not joined the ISR yet) and, once none is in progress, removes the
throttles. ``--generate`` proposes an assignment of the topics' partitions over the brokers given.
Exit code 1 on bad input or when a partition's reassignment failed.
"""

from __future__ import annotations

import argparse
from typing import Any

from headwater.cli.topics import CliError, run_command
from headwater.cli.zookeeper import zookeeper_session
from headwater.zk import admin as zkadmin
from headwater.zk.paths import REASSIGN_PARTITIONS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("reassign-partitions", help="move partitions between brokers (kafka-reassign-partitions)")
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose an assignment for --topics-to-move-json-file")
    action.add_argument("--execute", action="store_true", help="start the reassignment in --reassignment-json-file")
    action.add_argument("--verify", action="store_true", help="show progress; remove the throttle when done")
    p.add_argument(
        "--reassignment-json-file", help='{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}'
    )
    p.add_argument("--topics-to-move-json-file", help='{"version":1,"topics":[{"topic":..}]} (with --generate)')
    p.add_argument("--broker-list", help="brokers to move the topics onto (with --generate), e.g. 2,3,4")
    p.add_argument(
        "--throttle", type=int, default=-1, metavar="BYTES_PER_SEC", help="replication throttle during --execute"
    )
    p.add_argument("--disable-rack-aware", action="store_true", help="accepted for Kafka's sake (no racks here)")
    p.set_defaults(func=lambda args: run_command("headwater reassign-partitions", _run, args))


def _read(path: str | None, flag: str) -> str:
    if not path:
        raise CliError(f"{flag} is required here")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    from headwater.reassignment import ReassignmentError

    try:
        with zookeeper_session(args.zookeeper) as zk:
            if args.generate:
                return _generate(zk, args)
            if args.execute:
                return _execute(zk, args)
            return _verify(zk, args)
    except ReassignmentError as e:
        raise CliError(str(e)) from None


def _generate(zk: Any, args: argparse.Namespace) -> int:
    from headwater import reassignment as ra

    topics = ra.parse_topics_to_move(_read(args.topics_to_move_json_file, "--topics-to-move-json-file"))
    if not args.broker_list:
        raise CliError("--generate needs --broker-list")
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--broker-list expects comma-separated broker ids, got {args.broker_list!r}") from None
    if len(set(brokers)) != len(brokers) or not brokers:
        raise CliError(f"--broker-list names a broker twice or none: {args.broker_list}")
    current = ra.current_assignment(zk, topics)
    missing = sorted(set(topics) - {t for t, _ in current})
    if missing:
        raise CliError(f"topics do not exist: {', '.join(missing)}")
    proposed: ra.Assignment = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        for p, replicas in ra.assign(brokers, len(parts), rf).items():
            proposed[(topic, parts[p])] = replicas
    print("Current partition replica assignment")
    print(ra.format_reassignment(current))
    print()
    print("Proposed partition reassignment configuration")
    print(ra.format_reassignment(proposed))
    return 0


def _execute(zk: Any, args: argparse.Namespace) -> int:
    from headwater import reassignment as ra

    proposed = ra.parse_reassignment_json(_read(args.reassignment_json_file, "--reassignment-json-file"))
    running = ra.in_progress(zk)
    if running:
        if args.throttle < 0:
            raise CliError("There is an existing assignment running.")
        current = ra.current_assignment(zk, {t for t, _ in proposed})
        ra.set_throttle(zk, current, proposed, args.throttle)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        return 0
    current = ra.current_assignment(zk, {t for t, _ in proposed})
    unknown = sorted(f"{t}-{p}" for t, p in proposed if (t, p) not in current)
    if unknown:
        raise CliError(f"The proposed assignment contains partitions that do not exist: {', '.join(unknown)}")
    live = set(ra.live_brokers(zk))
    absent = sorted({b for rs in proposed.values() for b in rs} - live)
    if absent:
        raise CliError(f"The proposed assignment contains non-existent brokerIDs: {','.join(map(str, absent))}")
    moving = {tp: rs for tp, rs in proposed.items() if rs != current[tp]}
    print("Current partition replica assignment")
    print()
    print(ra.format_reassignment({tp: current[tp] for tp in proposed}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if not moving:
        print("Every partition already has the replicas proposed: nothing to do.")
        return 0
    if args.throttle >= 0:
        ra.set_throttle(zk, current, moving, args.throttle)
        print(
            "Warning: You must run Verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed. You can also alter the throttle by rerunning the Execute command passing a new value."
        )
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    from kazoo.exceptions import NodeExistsError

    try:
        zk.create(REASSIGN_PARTITIONS, zkadmin.encode_reassignment(moving), makepath=True)
    except NodeExistsError:
        raise CliError("There is an existing assignment running.") from None
    print("Successfully started reassignment of partitions.")
    return 0


def _verify(zk: Any, args: argparse.Namespace) -> int:
    from headwater import reassignment as ra

    proposed = ra.parse_reassignment_json(_read(args.reassignment_json_file, "--reassignment-json-file"))
    running = ra.in_progress(zk)
    current = ra.current_assignment(zk, {t for t, _ in proposed})
    print("Status of partition reassignment:")
    failed = False
    for tp, replicas in sorted(proposed.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in running:
            waiting = [r for r in replicas if r not in ra.isr(zk, tp)]
            detail = f" (waiting for {waiting} to join the ISR)" if waiting else " (moving leadership)"
            print(f"Reassignment of partition {name} is still in progress{detail}")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {name} completed successfully")
        else:
            failed = True
            print(f"Reassignment of partition {name} failed: its replicas are {current.get(tp)}")
    if not any(tp in running for tp in proposed) and not running:
        ra.remove_throttle(zk, {t for t, _ in proposed})
        print("Throttle was removed.")
    return 1 if failed else 0
