"""``headwater acls``: add, remove and list ACLs as kafka-acls does with ``--authorizer-properties
zookeeper.connect=...`` (writing ZooKeeper directly, in Kafka 2.3's layout: headwater/acls.py).

    headwater acls --zookeeper ZK --add --allow-principal User:alice --operation Read --operation Describe \\
        --topic orders --group orders-app
    headwater acls --zookeeper ZK --add --allow-principal User:mirror --operation Write \\
        --topic dc1. --resource-pattern-type prefixed
    headwater acls --zookeeper ZK --add --allow-principal User:broker --operation ClusterAction --cluster
    headwater acls --zookeeper ZK --remove --allow-principal User:alice --operation Read --topic orders
    headwater acls --zookeeper ZK --list [--topic orders]

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
import os

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
)
from headwater.cli.command_config import security_of
from headwater.cli.topics import BOOTSTRAP_ENV, CliError, add_bootstrap_argument, bootstrap_of, run_command
from headwater.cli.zookeeper import zookeeper_session


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="write ZooKeeper directly")
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


def _pattern(res: Resource) -> str:
    return f"`ResourcePattern(resourceType={res.type.upper()}, name={res.name}, patternType={res.pattern})`"


def _acl_line(a: Acl) -> str:
    return (
        f"\t(principal={a.principal}, host={a.host}, operation={a.operation.upper()}, "
        f"permissionType={a.permission.upper()})"
    )


def _run(args: argparse.Namespace) -> int:
    if args.zookeeper and args.bootstrap_server:
        raise CliError("--zookeeper and --bootstrap-server: give one (ZooKeeper directly, or through the brokers)")
    if not args.zookeeper:
        if not (args.bootstrap_server or args.command_config or os.environ.get(BOOTSTRAP_ENV)):
            raise CliError(f"--zookeeper or --bootstrap-server is required (or set ${BOOTSTRAP_ENV})")
        return asyncio.run(_run_via_brokers(args))
    if args.command_config:
        raise CliError("--command-config goes with --bootstrap-server (--zookeeper writes ZooKeeper directly)")
    return _run_via_zookeeper(args)


async def _run_via_brokers(args: argparse.Namespace) -> int:
    from headwater.client import acl_admin
    from headwater.client.admin import Admin

    security = security_of(args, "headwater acls")
    bootstrap = bootstrap_of(args)
    resources = _resources(args)
    if not args.list:
        if not resources:
            raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
        acls = _acls(args)
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
            await acl_admin.create_acls(admin.cluster, [(res, a) for res in resources for a in acls])
        else:
            filters = [acl_admin.binding_filter(res, a) for res in resources for a in acls]
            await acl_admin.delete_acls(admin.cluster, filters)
    verb = "Adding" if args.add else "Removing"
    for res in resources:
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
        resources = _resources(args)
        if not resources:
            raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
        acls = _acls(args)
        for res in resources:
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
            print(f"{verb} ACLs for resource {_pattern(res)}:")
            for a in acls:
                print(_acl_line(a))
        return 0
