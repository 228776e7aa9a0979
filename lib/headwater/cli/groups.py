"""``headwater groups``: consumer groups like kafka-consumer-groups.

    headwater groups -b H:P list
    headwater groups -b H:P describe --group G          # per partition: offsets, lag, owner
    headwater groups -b H:P reset-offsets --group G --topic T[:P,P] (--to-earliest | --to-latest |
                     --to-offset N | --shift-by N) [--execute]        # a plan unless --execute
    headwater groups -b H:P delete --group G

Resetting needs the group to have no active members, as in Kafka; without ``--execute`` it only
prints the new offsets it would commit.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from headwater.cli.command_config import security_of
from headwater.cli.topics import CliError, add_bootstrap_argument, bootstrap_of, run_command
from headwater.protocol.errors import ErrorCode


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    add_bootstrap_argument(groups, suppress=False)
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")

    lst = actions.add_parser("list", help="every group and its coordinator")
    add_bootstrap_argument(lst, suppress=True)
    lst.set_defaults(func=_wrap(_list))

    describe = actions.add_parser("describe", help="state, members, committed offsets and lag")
    add_bootstrap_argument(describe, suppress=True)
    describe.add_argument("--group", required=True)
    describe.set_defaults(func=_wrap(_describe))

    reset = actions.add_parser("reset-offsets", help="commit new offsets for a group without members")
    add_bootstrap_argument(reset, suppress=True)
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True, help="TOPIC or TOPIC:P,P,... (default: every partition)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--shift-by", type=int)
    reset.add_argument("--execute", action="store_true", help="commit them (default: only show the plan)")
    reset.set_defaults(func=_wrap(_reset))

    delete = actions.add_parser("delete", help="delete a group without members and its offsets")
    add_bootstrap_argument(delete, suppress=True)
    delete.add_argument("--group", required=True)
    delete.set_defaults(func=_wrap(_delete))


def _wrap(func: Callable[[argparse.Namespace, Any], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def with_admin(args: argparse.Namespace) -> int:
            from headwater.client.groups import GroupAdmin

            security = security_of(args, "headwater groups")
            async with GroupAdmin(bootstrap_of(args), security=security) as admin:
                return await func(args, admin)

        return run_command("headwater groups", lambda a: asyncio.run(with_admin(a)), args)

    return run


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


async def _list(args: argparse.Namespace, admin: Any) -> int:
    for group_id, _, _ in await admin.list_groups():
        print(group_id)
    return 0


async def _describe(args: argparse.Namespace, admin: Any) -> int:
    d = await admin.describe(args.group)
    print(f"Group {d.group_id}: state {d.state}, coordinator {d.coordinator}, {len(d.members)} member(s)")
    rows = [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    ]
    for o in d.offsets:
        owner = d.owner_of((o.topic, o.partition))
        rows.append(
            [
                d.group_id,
                o.topic,
                str(o.partition),
                "-" if o.committed is None else str(o.committed),
                str(o.log_end_offset),
                "-" if o.lag is None else str(o.lag),
                owner.member_id if owner else "-",
                owner.host if owner else "-",
                owner.client_id if owner else "-",
            ]
        )
    print(_table(rows) if len(rows) > 1 else "(no committed offsets and no assigned partitions)")
    return 0


def _topic_and_partitions(spec: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise CliError(f"--topic {spec!r}: partitions must be numbers, as in TOPIC:0,1") from None


async def _reset(args: argparse.Namespace, admin: Any) -> int:
    topic, only = _topic_and_partitions(args.topic)
    bounds = await admin.log_offsets(topic)
    committed = await admin.committed(args.group)
    plan: dict[tuple[str, int], int] = {}
    for p, (start, end) in sorted(bounds.items()):
        if only is not None and p not in only:
            continue
        if args.to_earliest:
            target = start
        elif args.to_latest:
            target = end
        elif args.to_offset is not None:
            target = args.to_offset
        else:
            target = committed.get((topic, p), end) + args.shift_by
        plan[(topic, p)] = min(max(target, start), end)  # Kafka clamps to the log's range
    missing = sorted(set(only or ()) - set(bounds))
    if missing:
        raise CliError(f"topic {topic!r} has no partition(s) {missing}")
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[args.group, t, str(p), str(o)] for (t, p), o in plan.items()]
    print(_table(rows))
    if args.execute:
        await admin.commit(args.group, plan)
        print(f"Committed {len(plan)} offset(s) for group {args.group}.")
    else:
        print("Dry run: nothing committed (add --execute to commit these offsets).")
    return 0


async def _delete(args: argparse.Namespace, admin: Any) -> int:
    code = (await admin.delete([args.group]))[args.group]
    if code is ErrorCode.NON_EMPTY_GROUP:
        raise CliError(f"group {args.group!r} has active members: stop them before deleting it (NON_EMPTY_GROUP)")
    if code is ErrorCode.GROUP_ID_NOT_FOUND:
        raise CliError(f"group {args.group!r} does not exist (GROUP_ID_NOT_FOUND)")
    if code is not ErrorCode.NONE:
        raise CliError(f"deleting group {args.group!r}: {code.name}")
    print(f"Deleted group {args.group}.")
    return 0
