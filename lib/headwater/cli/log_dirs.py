"""``headwater log-dirs --describe``: each broker's log dirs and replica sizes (like kafka-log-dirs).

    headwater log-dirs --describe --bootstrap-server H:P [--broker-list 1,2] [--topic-list t1,t2]
        [--command-config client.properties]

Asks every broker named (default: every live broker) with DescribeLogDirs and prints Kafka's
output: two lines, then one JSON document::

    {"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":"/data/kafka","error":null,
      "partitions":[{"partition":"t-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}

``size`` is the bytes of the replica's segments, ``offsetLag`` how far its log end offset is behind
the high watermark, ``error`` null or the log dir's error name. ``--topic-list`` keeps only those
topics' replicas. A broker that cannot be asked is an error (exit code 1).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from headwater.cli.command_config import security_of
from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, describe_error, run_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("log-dirs", help="describe brokers' log dirs and replica sizes (kafka-log-dirs)")
    add_bootstrap_argument(p, suppress=False)
    p.add_argument("--describe", action="store_true", required=True, help="describe the log dirs (the only action)")
    p.add_argument("--broker-list", default="", metavar="1,2", help="brokers to ask (default: every live broker)")
    p.add_argument("--topic-list", default="", metavar="T1,T2", help="only these topics' replicas (default: all)")
    p.set_defaults(func=lambda args: run_command("headwater log-dirs", _run, args))


def _ids(text: str) -> list[int] | None:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        return None
    try:
        return [int(x) for x in items]
    except ValueError:
        raise CliError(f"--broker-list expects comma-separated broker ids, got {text!r}") from None


def log_dirs_json(described: dict[int, Any], topics: set[str] | None) -> dict[str, Any]:
    """kafka-log-dirs' document from ``Admin.describe_log_dirs``'s answer."""
    brokers = []
    for broker_id, dirs in sorted(described.items()):
        entries = []
        for d in dirs:
            partitions = [
                {"partition": f"{t}-{p}", "size": r.size, "offsetLag": r.offset_lag, "isFuture": r.is_future}
                for (t, p), r in sorted(d.replicas.items())
                if topics is None or t in topics
            ]
            error = None if d.error is None else d.error.code.name
            entries.append({"logDir": d.path, "error": error, "partitions": partitions})
        brokers.append({"broker": broker_id, "logDirs": entries})
    return {"version": 1, "brokers": brokers}


def _run(args: argparse.Namespace) -> int:
    from headwater.client.sync import SyncAdmin

    broker_ids = _ids(args.broker_list)
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()} or None
    security = security_of(args, "headwater log-dirs")
    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)
    try:
        print("Querying brokers for log directories information")
        described = admin.describe_log_dirs(broker_ids)
    finally:
        admin.close()
    failed = {b: e for b, e in described.items() if not isinstance(e, list)}
    if failed:
        raise CliError("; ".join(f"broker {b}: {describe_error(e)}" for b, e in sorted(failed.items())))
    print(f"Received log directory information from brokers {','.join(str(b) for b in sorted(described))}")
    print(json.dumps(log_dirs_json(described, topics), separators=(",", ":")))
    return 0
