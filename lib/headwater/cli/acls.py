"""``headwater acls``: add, remove and list ACLs as kafka-acls does with ``--authorizer-properties
zookeeper.connect=...`` (writing ZooKeeper directly, in Kafka 2.3's layout: headwater/acls.py).
``--zookeeper ZK`` and kafka-acls' own ``--authorizer-properties zookeeper.connect=ZK`` (with or
without ``--authorizer kafka.security.auth.SimpleAclAuthorizer``) are the same.

    headwater acls --zookeeper ZK --add --allow-principal User:alice --operation Read --operation Describe \\
        --topic orders --group orders-app
    headwater acls --zookeeper ZK --add --allow-principal User:mirror --operation Write \\
        --topic dc1. --resource-pattern-type prefixed
    headwater acls --zookeeper ZK --add --allow-principal User:broker --operation ClusterAction --cluster
    headwater acls --zookeeper ZK --remove --allow-principal User:alice --operation Read --topic orders
    headwater acls --zookeeper ZK --list [--topic orders]

Many bindings at once (an inventory's ACLs: deploy/ansible), from a JSON file or ``-`` (stdin); with
``--zookeeper`` only what is missing is written (and printed), so running it again changes nothing::

    headwater acls --zookeeper ZK --add --from-file acls.json
    [{"principal": "User:mirror", "operations": ["Read", "DescribeConfigs"], "resource_type": "Topic",
      "names": ["*"], "pattern_type": "literal", "permission": "Allow", "host": "*"}, ...]

Each change also writes Kafka's change notification, which brokers watch to reload their ACLs.

Through the brokers instead (DescribeAcls / CreateAcls / DeleteAcls, as ``kafka-acls
--bootstrap-server`` does), with ``--command-config`` for a secured cluster; the principal needs
Describe (``--list``) or Alter (``--add``, ``--remove``) on the Cluster:

    headwater acls --bootstrap-server H:P --command-config admin.properties --add \\
        --allow-principal User:alice --operation Read --topic orders
    headwater acls --bootstrap-server H:P --command-config admin.properties --list [--topic orders]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from headwater.acls import (
    CLUSTER_NAME,
    LITERAL_ROOT,
    PREFIXED_ROOT,
    RESOURCE_TYPES,
    Acl,
    AclError,
    Resource,
    decode_acls,
    encode_acls,
    operation,
    resource_type,
)
from headwater.cli.command_config import security_of
from headwater.cli.topics import BOOTSTRAP_ENV, CliError, add_bootstrap_argument, bootstrap_of, run_command
from headwater.cli.zookeeper import zookeeper_session


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="write ZooKeeper directly")
    p.add_argument(
        "--authorizer-properties",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="kafka-acls' spelling of --zookeeper: zookeeper.connect=HOST:PORT[/chroot] (other keys are "
        "the broker authorizer's and are not needed here)",
    )
    p.add_argument(
        "--authorizer",
        metavar="CLASS",
        help=f"kafka-acls' authorizer class; only Kafka's ACL authorizer ({', '.join(AUTHORIZER_CLASSES)})",
    )
    add_bootstrap_argument(p, suppress=False)  # or through the brokers: --bootstrap-server, --command-config
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--operation", action="append", default=[], help="Read, Write, Create, Describe, All, ...")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default="literal", choices=["literal", "prefixed"])
    p.add_argument(
        "--from-file",
        metavar="FILE",
        help="JSON list of bindings to --add or --remove (- for stdin): principal, operations, resource_type, "
        "name or names, and optionally pattern_type (literal), permission (Allow), host (*)",
    )
    p.set_defaults(func=lambda args: run_command("headwater acls", _run, args))


def _resources(args: argparse.Namespace) -> list[Resource]:
    pattern = args.resource_pattern_type.upper()
    out = [Resource("Topic", t, pattern) for t in args.topic]
    out += [Resource("Group", g, pattern) for g in args.group]
    out += [Resource("TransactionalId", t, pattern) for t in args.transactional_id]
    if args.cluster:
        out.append(Resource("Cluster", CLUSTER_NAME, "LITERAL"))
    return out


def _acls(args: argparse.Namespace) -> list[Acl]:
    try:
        ops = [operation(o) for o in args.operation]
    except AclError as e:
        raise CliError(str(e)) from None
    if not ops:
        raise CliError("--operation is required (Read, Write, Create, Delete, Alter, Describe, ClusterAction, ...)")
    out: list[Acl] = []
    for permission, principals, hosts in (
        ("Allow", args.allow_principal, args.allow_host or ["*"]),
        ("Deny", args.deny_principal, args.deny_host or ["*"]),
    ):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
            out.extend(Acl(principal, permission, op, host) for op in ops for host in hosts)
    if not out:
        raise CliError("--allow-principal or --deny-principal is required")
    return out


_FILE_KEYS = {"principal", "operations", "resource_type", "name", "names", "pattern_type", "permission", "host"}


def bindings_from_json(doc: Any) -> list[tuple[Resource, Acl]]:
    """``--from-file``'s bindings: [{"principal": "User:audit", "operations": ["Read"], "resource_type":
    "Topic", "names": ["clicks"], "pattern_type": "literal", "permission": "Allow", "host": "*"}, ...]."""
    if not isinstance(doc, list):
        raise CliError("--from-file: expected a JSON list of bindings")
    out: list[tuple[Resource, Acl]] = []
    for i, entry in enumerate(doc):
        where = f"--from-file: binding {i + 1}"
        if not isinstance(entry, dict):
            raise CliError(f"{where}: expected an object, got {entry!r}")
        unknown = set(entry) - _FILE_KEYS
        if unknown:
            raise CliError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_FILE_KEYS)})")
        principal = entry.get("principal")
        if not isinstance(principal, str) or ":" not in principal:
            raise CliError(f"{where}: principal {principal!r} must be TYPE:NAME, e.g. User:alice")
        ops, names = entry.get("operations"), entry.get("names", [entry["name"]] if "name" in entry else None)
        if not isinstance(ops, list) or not ops or not all(isinstance(o, str) for o in ops):
            raise CliError(f'{where}: operations must be a non-empty list, e.g. ["Read"]')
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise CliError(f"{where}: name (a string) or names (a non-empty list) is required")
        permission = str(entry.get("permission", "Allow")).capitalize()
        pattern = str(entry.get("pattern_type", "literal")).upper()
        if permission not in ("Allow", "Deny"):
            raise CliError(f"{where}: permission {permission!r} must be Allow or Deny")
        if pattern not in ("LITERAL", "PREFIXED"):
            raise CliError(f"{where}: pattern_type {pattern!r} must be literal or prefixed")
        try:
            type_ = resource_type(str(entry.get("resource_type", "")))
            acls = [Acl(principal, permission, operation(o), str(entry.get("host", "*"))) for o in ops]
        except AclError as e:
            raise CliError(f"{where}: {e}") from None
        if type_ == "Cluster" and names != [CLUSTER_NAME]:
            raise CliError(f"{where}: the Cluster resource is named {CLUSTER_NAME}")
        out.extend((Resource(type_, n, pattern), a) for n in names for a in acls)
    return out


def _read_from_file(path: str) -> list[tuple[Resource, Acl]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise CliError(f"--from-file: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CliError(f"--from-file: not JSON: {e}") from None
    return bindings_from_json(doc)


def _bindings(args: argparse.Namespace) -> list[tuple[Resource, Acl]]:
    """What --add / --remove apply: --from-file's bindings, or the flags' resources x ACLs."""
    if args.from_file is not None:
        if args.list:
            raise CliError("--from-file goes with --add or --remove")
        flags = args.topic or args.group or args.transactional_id or args.cluster or args.operation
        if flags or args.allow_principal or args.deny_principal:
            raise CliError("--from-file names every binding: no --topic/--group/--cluster/--operation/--*-principal")
        return _read_from_file(args.from_file)
    resources = _resources(args)
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    acls = _acls(args)
    return [(res, a) for res in resources for a in acls]


def _by_resource(bindings: list[tuple[Resource, Acl]]) -> dict[Resource, list[Acl]]:
    out: dict[Resource, list[Acl]] = {}
    for res, a in bindings:
        if a not in out.setdefault(res, []):
            out[res].append(a)
    return out


def _pattern(res: Resource) -> str:
    return f"`ResourcePattern(resourceType={res.type.upper()}, name={res.name}, patternType={res.pattern})`"


def _acl_line(a: Acl) -> str:
    return (
        f"\t(principal={a.principal}, host={a.host}, operation={a.operation.upper()}, "
        f"permissionType={a.permission.upper()})"
    )


#: the authorizers whose ACLs live in ZooKeeper in Kafka 2.3's layout (the broker's authorizer.class.name)
AUTHORIZER_CLASSES = ("kafka.security.auth.SimpleAclAuthorizer", "kafka.security.authorizer.AclAuthorizer")


def _zookeeper_from_authorizer_properties(args: argparse.Namespace) -> None:
    """kafka-acls' ``--authorizer-properties zookeeper.connect=...`` (and ``--authorizer``) as
    ``--zookeeper``: SimpleAclAuthorizer's ``authorizer.zookeeper.url`` wins over
    ``zookeeper.connect``, as in Kafka; other keys (timeouts, super.users) are the broker's."""
    if args.authorizer is not None and args.authorizer.strip() not in AUTHORIZER_CLASSES:
        raise CliError(
            f"--authorizer {args.authorizer}: only Kafka's ACL authorizer is supported ({', '.join(AUTHORIZER_CLASSES)})"
        )
    if not args.authorizer_properties:
        if args.authorizer is not None:
            raise CliError("--authorizer goes with --authorizer-properties zookeeper.connect=HOST:PORT")
        return
    props: dict[str, str] = {}
    for item in args.authorizer_properties:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f"--authorizer-properties takes key=value pairs, e.g. zookeeper.connect=HOST:PORT; got {item!r}"
            )
        props[key.strip()] = value.strip()
    connect = props.get("authorizer.zookeeper.url") or props.get("zookeeper.connect")
    if not connect:
        raise CliError("--authorizer-properties needs zookeeper.connect=HOST:PORT[/chroot]")
    if args.zookeeper:
        raise CliError("--zookeeper or --authorizer-properties zookeeper.connect=...: give one, not both")
    args.zookeeper = connect


def _run(args: argparse.Namespace) -> int:
    if args.list and args.from_file is not None:
        raise CliError("--from-file goes with --add or --remove")
    _zookeeper_from_authorizer_properties(args)
    if args.zookeeper and args.bootstrap_server:
        raise CliError("--zookeeper and --bootstrap-server: give one (ZooKeeper directly, or through the brokers)")
    if not args.zookeeper:
        if not (args.bootstrap_server or args.command_config or os.environ.get(BOOTSTRAP_ENV)):
            raise CliError(
                "--zookeeper (or --authorizer-properties zookeeper.connect=...) or --bootstrap-server is required "
                f"(or set ${BOOTSTRAP_ENV})"
            )
        return asyncio.run(_run_via_brokers(args))
    if args.command_config:
        raise CliError("--command-config goes with --bootstrap-server (--zookeeper writes ZooKeeper directly)")
    return _run_via_zookeeper(args)


async def _run_via_brokers(args: argparse.Namespace) -> int:
    from headwater.client import acl_admin
    from headwater.client.admin import Admin

    security = security_of(args, "headwater acls")
    bootstrap = bootstrap_of(args)
    resources = _resources(args) if args.list else []
    bindings = [] if args.list else _bindings(args)
    async with Admin(bootstrap, security=security, request_timeout_ms=30000, connect_timeout_ms=10000) as admin:
        if args.list:
            found: dict[Resource, list[Acl]] = {}
            wanted: list[Resource | None] = list(resources) or [None]  # None: every ACL of the cluster
            for res in wanted:
                for r, a in await acl_admin.describe_acls(admin.cluster, acl_admin.resource_filter(res)):
                    found.setdefault(r, []).append(a)
            for res in sorted(found, key=lambda r: (r.pattern, r.type, r.name)):
                print(f"Current ACLs for resource {_pattern(res)}:")
                for a in found[res]:
                    print(_acl_line(a))
            return 0
        if args.add:
            await acl_admin.create_acls(admin.cluster, bindings)
        else:
            await acl_admin.delete_acls(admin.cluster, [acl_admin.binding_filter(res, a) for res, a in bindings])
    verb = "Adding" if args.add else "Removing"
    for res, acls in _by_resource(bindings).items():
        print(f"{verb} ACLs for resource {_pattern(res)}:")
        for a in acls:
            print(_acl_line(a))
    return 0


def _run_via_zookeeper(args: argparse.Namespace) -> int:
    from kazoo.exceptions import NoNodeError

    with zookeeper_session(args.zookeeper) as zk:
        if args.list:
            wanted = set(_resources(args))
            for root, pattern in ((LITERAL_ROOT, "LITERAL"), (PREFIXED_ROOT, "PREFIXED")):
                for type_ in RESOURCE_TYPES:
                    path = f"{root}/{type_}"
                    for name in sorted(zk.get_children(path)) if zk.exists(path) else []:
                        res = Resource(type_, name, pattern)
                        if wanted and res not in wanted:
                            continue
                        data, _ = zk.get(res.zk_path())
                        print(f"Current ACLs for resource {_pattern(res)}:")
                        for a in decode_acls(data):
                            print(_acl_line(a))
            return 0
        for res, acls in _by_resource(_bindings(args)).items():
            try:
                data, stat = zk.get(res.zk_path())
                current, version = decode_acls(data), stat.version
            except NoNodeError:
                current, version = [], None
            if args.add:
                updated = current + [a for a in acls if a not in current]
            else:
                updated = [a for a in current if a not in acls]
            if updated == current:
                continue
            if version is None:
                zk.create(res.zk_path(), encode_acls(updated), makepath=True)
            elif updated:
                zk.set(res.zk_path(), encode_acls(updated), version=version)
            else:
                zk.delete(res.zk_path(), version=version)
            parent, value = res.change_notification()
            zk.create(f"{parent}/acl_changes_", value, sequence=True, makepath=True)
            verb = "Adding" if args.add else "Removing"
            print(f"{verb} ACLs for resource {_pattern(res)}:")  # only what changed
            for a in acls if args.add else current:
                if (a in updated) != (a in current):
                    print(_acl_line(a))
        return 0
