"""``headwater delete-records``: move partitions' log start offsets (like kafka-delete-records).

    headwater delete-records --bootstrap-server H:P --offset-json-file offsets.json

The file is Kafka's::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 1500}], "version": 1}

``offset`` -1 means the high watermark (everything written so far). Records below the offset are
no longer readable on any replica. Prints each partition's low watermark or its error (exit code 1
if any partition failed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from headwater.cli.command_config import security_of
from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, describe_error, run_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("delete-records", help="delete records below an offset (kafka-delete-records)")
    add_bootstrap_argument(p, suppress=False)
    p.add_argument("--offset-json-file", required=True, help='{"partitions":[{"topic":..,"partition":..,"offset":..}]}')
    p.add_argument("--timeout-ms", type=int, default=30000)
    p.set_defaults(func=lambda args: run_command("headwater delete-records", _run, args))


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"the offset JSON file is not JSON: {e}") from None
    if not isinstance(value, dict) or not isinstance(value.get("partitions"), list):
        raise CliError('the offset JSON file must be {"partitions": [{"topic": T, "partition": P, "offset": O}, ...]}')
    out: dict[tuple[str, int], int] = {}
    for entry in value["partitions"]:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and type(entry.get("partition")) is int
            and type(entry.get("offset")) is int
        ):
            raise CliError(f"each partition needs a string topic and integer partition and offset: {entry!r}")
        key = (entry["topic"], entry["partition"])
        if key in out:
            raise CliError(f"partition {key[0]}-{key[1]} is listed twice")
        if entry["offset"] < -1:
            raise CliError(f"offset {entry['offset']} of {key[0]}-{key[1]} is negative (only -1, the high watermark)")
        out[key] = entry["offset"]
    if not out:
        raise CliError("the offset JSON file lists no partitions")
    return out


def _run(args: argparse.Namespace) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            offsets = parse_offset_json(f.read())
    except OSError as e:
        raise CliError(f"cannot read {args.offset_json_file}: {e.strerror}") from None
    from headwater.client.sync import SyncAdmin

    security = security_of(args, "headwater delete-records")
    admin: Any = SyncAdmin(bootstrap_of(args), request_timeout_ms=30000, connect_timeout_ms=10000, security=security)
    try:
        results = admin.delete_records(offsets, timeout_ms=args.timeout_ms)
    finally:
        admin.close()
    print("Records delete operation completed:")
    failed = False
    for (topic, partition), result in sorted(results.items()):
        if isinstance(result, int):
            print(f"partition: {topic}-{partition}\tlow_watermark: {result}")
        else:
            failed = True
            print(f"partition: {topic}-{partition}\terror: {describe_error(result)}", file=sys.stderr)
    return 1 if failed else 0
