"""``headwater lab activity`` (the lab's demo producers) and ``headwater lab check`` (the pipeline
check). Defaults are the lab's addresses as published on the host by ``make lab``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.cli.service import setup_logging, stop_on_signals

if TYPE_CHECKING:
    from headwater.client.security import ClientSecurity

__all__ = ["add_parser"]

log = logging.getLogger("headwater.lab")

_LAB_SOURCES = [
    "dc1=127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
    "dc2=127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094",
]
_LAB_AGGREGATE = "127.0.0.1:39092,127.0.0.1:39093,127.0.0.1:39094"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = sub.add_parser("lab", help="the multi-DC lab's demo traffic, pipeline check and WAN links")
    lab_sub = lab.add_subparsers(dest="lab_command", required=True, metavar="ACTION")

    a = lab_sub.add_parser(
        "activity",
        help="write demo page views and clicks into a datacenter (auditing producer, acks=all)",
        description="Write page views and clicks keyed by member id, each stamped with its send time, "
        "through Headwater's auditing producer, until SIGTERM or SIGINT.",
    )
    a.add_argument("--datacenter", required=True, help="origin datacenter of the records (e.g. dc1)")
    a.add_argument("--bootstrap-server", required=True, help="the datacenter's brokers, host:port[,...]")
    a.add_argument(
        "--rate",
        type=float,
        default=float(os.environ.get("LAB_ACTIVITY_RATE", "20")),
        help="records per second (default $LAB_ACTIVITY_RATE or 20)",
    )
    a.add_argument("--window-ms", type=int, default=60_000, help="audit window; must match the audit service's")
    a.add_argument("--members", type=int, default=100_000, help="number of distinct member ids")
    a.add_argument("--report-every", type=float, default=30.0, help="seconds between progress lines")
    a.add_argument("--health-file", type=Path, help="touched while records are being acknowledged")
    a.add_argument(
        "--schema-registry-url",
        default=os.environ.get("LAB_SCHEMA_REGISTRY_URL") or None,
        help="a Confluent-compatible schema registry: one record in ten is then an Avro search, in "
        "topic searches (default $LAB_SCHEMA_REGISTRY_URL; none: JSON page views and clicks only)",
    )
    a.add_argument("--log-level", default="INFO")
    _add_command_config(a)
    a.set_defaults(func=_activity)

    c = lab_sub.add_parser(
        "check",
        help="measure the pipeline: records from each DC until readable in the aggregate cluster",
        description="Write tagged records into each source datacenter and report, for each, the time "
        "until they are readable in the aggregate cluster (p50, p99, max), whether every one arrived, "
        "and the audit status of the last closed windows. Exit code 0 when all is well, 1 otherwise.",
    )
    c.add_argument(
        "--source",
        action="append",
        metavar="DC=BOOTSTRAP",
        help="a source datacenter (repeatable; default: the lab's dc1 and dc2 on this host)",
    )
    c.add_argument("--aggregate", default=_LAB_AGGREGATE, help="the aggregate cluster's brokers")
    c.add_argument("--audit-url", default="http://127.0.0.1:8080", help="the audit service ('' to skip)")
    c.add_argument("--records", type=int, default=200, help="records per datacenter (default 200)")
    c.add_argument("--rate", type=float, default=50.0, help="records per second per datacenter (default 50)")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the records")
    c.add_argument(
        "--p99-goal-ms",
        type=float,
        default=0.0,
        help="fail (exit 1) when a datacenter's p99 is above this (0: no goal; make lab-check: 1000)",
    )
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.add_argument("--log-level", default="WARNING")
    _add_command_config(c)
    c.set_defaults(func=_check)
    _add_link_parser(lab_sub)
    _add_outage_parser(lab_sub)


def _add_command_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured cluster (security.protocol, ssl.ca.location, sasl.mechanism, "
        "sasl.username, sasl.password: file:/path or env:NAME ...)",
    )


def _security(args: argparse.Namespace, command: str) -> ClientSecurity | None:
    """The --command-config file's client security (None without one); exits 2 naming the problem
    (the same reader as every other command's ``--command-config``)."""
    from headwater.cli.command_config import CommandConfigError, security_of

    try:
        return security_of(args, f"headwater lab {command}")
    except CommandConfigError as e:
        print(f"headwater lab {command}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


# Each lab DC's link service publishes its control endpoint on the host (deploy/compose).
_LAB_LINK_CONTROL = {"dc1": "127.0.0.1:19190", "dc2": "127.0.0.1:29190"}


def _add_control_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--control",
        help="HOST:PORT of the link's control endpoint (default: the lab's, "
        + ", ".join(f"{k}={v}" for k, v in _LAB_LINK_CONTROL.items())
        + ")",
    )


def _control_address(args: argparse.Namespace, command: str) -> str | None:
    """``--control`` or the lab's address of ``args.link``'s endpoint; None (said on stderr) when neither."""
    address = args.control or _LAB_LINK_CONTROL.get(args.link)
    if address is None:
        print(f"headwater lab {command}: no control address known for {args.link!r}: pass --control", file=sys.stderr)
    return address


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report(
    command: str, run: Callable[[], Coroutine[Any, Any, Any]], as_json: bool, errors: tuple[type[BaseException], ...]
) -> int:
    """Run a report-making drill (``lab check``, ``lab outage``) and print its report: JSON or
    text; exit code 0 when the report is ok, 1 when not or when ``errors`` stopped it."""
    import uvloop

    try:
        report = uvloop.run(run())
    except errors as e:
        print(f"headwater lab {command}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report.as_dict(), indent=2) if as_json else report.text())
    return 0 if report.ok else 1


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"headwater lab link: ${name}={raw!r} is not a number") from None


def _add_link_parser(lab_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    link = lab_sub.add_parser(
        "link",
        help="the WAN links between each DC and the aggregate side: serve one, cut, heal, status, set",
        description="A WAN link is a TCP relay with one-way delay, jitter, a bandwidth cap and cut/heal "
        "(see headwater.lab.link). 'serve' runs one; the other actions call a running link's control endpoint.",
    )
    link_sub = link.add_subparsers(dest="link_command", required=True, metavar="ACTION")
    s = link_sub.add_parser("serve", help="run one link in the foreground (the lab's link service)")
    s.add_argument("--name", required=True, help="the link's name: the datacenter it connects (dc2)")
    s.add_argument(
        "--route",
        action="append",
        required=True,
        metavar="[LISTEN_HOST:]PORT=TARGET_HOST:PORT",
        help="listen here, relay to there (repeatable: one per broker, one for ZooKeeper)",
    )
    s.add_argument("--control", default="127.0.0.1:9190", help="HOST:PORT of the control endpoint")
    s.add_argument(
        "--delay-ms",
        type=float,
        default=_env_float("LAB_WAN_DELAY_MS", 40.0),
        help="one-way delay (default $LAB_WAN_DELAY_MS or 40)",
    )
    s.add_argument(
        "--jitter-ms",
        type=float,
        default=_env_float("LAB_WAN_JITTER_MS", 0.0),
        help="extra uniform delay in [0, jitter] (default $LAB_WAN_JITTER_MS or 0)",
    )
    s.add_argument(
        "--bandwidth-mbit",
        type=float,
        default=_env_float("LAB_WAN_BANDWIDTH_MBIT", 100.0),
        help="per direction, 0 = unlimited (default $LAB_WAN_BANDWIDTH_MBIT or 100)",
    )
    s.add_argument("--log-level", default="INFO")
    s.set_defaults(func=_link_serve)
    for action, text in (
        ("cut", "cut the link: connections dropped, new ones refused (--mode blackhole: everything hangs)"),
        ("heal", "heal a cut link"),
        ("status", "the link's settings, state and counters (JSON)"),
        ("set", "change the delay, jitter or bandwidth of a running link"),
    ):
        a = link_sub.add_parser(action, help=text)
        a.add_argument("link", help="the link's name (dc1, dc2)")
        _add_control_argument(a)
        if action == "cut":
            a.add_argument("--mode", choices=["drop", "blackhole"], default="drop")
        if action == "set":
            a.add_argument("--delay-ms", type=float)
            a.add_argument("--jitter-ms", type=float)
            a.add_argument("--bandwidth-mbit", type=float)
        a.set_defaults(func=_link_call)


def _add_outage_parser(lab_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    o = lab_sub.add_parser(
        "outage",
        help="cut a DC's WAN link for a while, heal it, and measure the mirror's catch-up",
        description="Cut one datacenter's link (its producers keep writing), check the other "
        "datacenters' flow during the cut, heal, and measure how long the mirror takes to copy and "
        "commit everything written meanwhile (catch-up time and its ratio to the production rate; "
        "goal >= 5x), and what the audit showed for the cut DC's windows. Exit code 0 when all is "
        "well, 1 otherwise. See headwater.lab.outage.",
    )
    o.add_argument("link", help="the datacenter whose link is cut (dc1, dc2)")
    o.add_argument("--seconds", type=float, default=600.0, help="how long the link stays cut (default 600)")
    o.add_argument(
        "--mode", choices=["drop", "blackhole"], default="blackhole", help="how it is cut (default blackhole)"
    )
    _add_control_argument(o)
    o.add_argument(
        "--source",
        action="append",
        metavar="DC=BOOTSTRAP",
        help="the source datacenters, the cut one included (repeatable; default: the lab's dc1 and dc2)",
    )
    o.add_argument("--aggregate", default=_LAB_AGGREGATE, help="the aggregate cluster's brokers")
    o.add_argument(
        "--mirror-metrics",
        action="append",
        metavar="URL",
        help="a mirror process's /metrics (repeatable; default http://127.0.0.1:9404/metrics)",
    )
    o.add_argument("--audit-url", default="http://127.0.0.1:8080", help="the audit service ('' to skip)")
    o.add_argument(
        "--check-records", type=int, default=100, help="pipeline-check records per other DC during the cut (0: none)"
    )
    o.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the catch-up (default 900)")
    o.add_argument(
        "--mirror-quota",
        type=float,
        metavar="BYTES_PER_S",
        help="the mirror's producer_byte_rate on the aggregate cluster (per broker, as set with headwater "
        "configs): the catch-up is estimated and judged against what it allows (default: no quota)",
    )
    o.add_argument("--json", action="store_true", help="print the report as JSON")
    o.add_argument("--log-level", default="WARNING")
    _add_command_config(o)
    o.set_defaults(func=_outage)


def _outage(args: argparse.Namespace) -> int:
    try:
        sources = _parse_sources(args.source)
    except ValueError as e:
        print(f"headwater lab outage: {e}", file=sys.stderr)
        return 2
    if args.link not in sources:
        print(f"headwater lab outage: {args.link!r} is not one of the sources ({', '.join(sources)})", file=sys.stderr)
        return 2
    control = _control_address(args, "outage")
    if control is None:
        return 2
    if args.seconds <= 0 or args.timeout <= 0 or args.check_records < 0:
        print("headwater lab outage: --seconds and --timeout must be positive, --check-records >= 0", file=sys.stderr)
        return 2
    if args.mirror_quota is not None and not args.mirror_quota > 0:
        print("headwater lab outage: --mirror-quota must be a positive number of bytes/s", file=sys.stderr)
        return 2
    security = _security(args, "outage")
    setup_logging(args.log_level)
    from headwater.lab.outage import run_outage

    return _report(
        "outage",
        lambda: run_outage(
            args.link,
            control,
            sources[args.link],
            args.mirror_metrics or ["http://127.0.0.1:9404/metrics"],
            cut_seconds=args.seconds,
            mode=args.mode,
            others={dc: b for dc, b in sources.items() if dc != args.link},
            aggregate=args.aggregate,
            check_records=args.check_records,
            audit_url=args.audit_url or None,
            timeout=args.timeout,
            progress=_progress,
            security=security,
            mirror_quota=args.mirror_quota,
        ),
        args.json,
        (OSError, TimeoutError, ValueError),
    )


def _host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not port.isdigit() or (sep and not host):
        raise ValueError(f"{what}: {value!r} is not [HOST:]PORT")
    return host or "0.0.0.0", int(port)


def _link_serve(args: argparse.Namespace) -> int:
    from headwater.lab.link import LinkSettings, serve

    try:
        settings = LinkSettings(args.delay_ms, args.jitter_ms, args.bandwidth_mbit)
        routes = []
        for r in args.route:
            listen, sep, target = r.partition("=")
            if not sep:
                raise ValueError(f"--route {r!r}: expected [LISTEN_HOST:]PORT=TARGET_HOST:PORT")
            lh, lp = _host_port(listen, "--route")
            th, tp = _host_port(target, "--route")
            routes.append((lh, lp, th, tp))
        control = _host_port(args.control, "--control")
    except ValueError as e:
        print(f"headwater lab link serve: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level)

    async def main() -> int:
        stop = stop_on_signals()
        await serve(args.name, settings, routes, control, stop)
        return 0

    import uvloop

    return uvloop.run(main())


def _link_call(args: argparse.Namespace) -> int:
    import urllib.parse

    from headwater.lab.link import control_request

    address = _control_address(args, "link")
    if address is None:
        return 2
    query: dict[str, object] = {"link": args.link}
    if args.link_command == "cut":
        query["mode"] = args.mode
    if args.link_command == "set":
        changes = {"delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms, "bandwidth_mbit": args.bandwidth_mbit}
        query.update({k: v for k, v in changes.items() if v is not None})
        if len(query) == 1:
            print("headwater lab link set: nothing to set (--delay-ms, --jitter-ms, --bandwidth-mbit)", file=sys.stderr)
            return 2
    method, path = ("GET", "/status") if args.link_command == "status" else ("POST", f"/{args.link_command}")
    try:
        code, body = control_request(address, method, f"{path}?{urllib.parse.urlencode(query)}")
    except OSError as e:
        print(f"headwater lab link {args.link_command}: cannot reach {address}: {e}", file=sys.stderr)
        return 1
    if code != 200:
        print(f"headwater lab link {args.link_command}: {body.get('error', body)}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2))
    return 0


def _activity(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.window_ms <= 0 or args.members <= 0:
        print("headwater lab activity: --rate, --window-ms and --members must be positive", file=sys.stderr)
        return 2
    security = _security(args, "activity")
    setup_logging(args.log_level)
    from headwater.lab.activity import run_activity

    async def main() -> int:
        stop = stop_on_signals()
        await run_activity(
            args.bootstrap_server,
            args.datacenter,
            args.rate,
            stop,
            window_ms=args.window_ms,
            members=args.members,
            report_every=args.report_every,
            health_file=args.health_file,
            security=security,
            schema_registry_url=args.schema_registry_url,
        )
        return 0

    import uvloop

    return uvloop.run(main())


def _parse_sources(values: list[str] | None) -> dict[str, str]:
    sources: dict[str, str] = {}
    for v in values or _LAB_SOURCES:
        dc, sep, bootstrap = v.partition("=")
        if not sep or not dc.strip() or not bootstrap.strip():
            raise ValueError(f"--source {v!r}: expected DC=host:port[,host:port...]")
        sources[dc.strip()] = bootstrap.strip()
    return sources


def _check(args: argparse.Namespace) -> int:
    try:
        sources = _parse_sources(args.source)
    except ValueError as e:
        print(f"headwater lab check: {e}", file=sys.stderr)
        return 2
    if args.records <= 0 or args.rate <= 0 or args.timeout <= 0 or not args.p99_goal_ms >= 0:
        print(
            "headwater lab check: --records, --rate and --timeout must be positive, --p99-goal-ms >= 0", file=sys.stderr
        )
        return 2
    security = _security(args, "check")
    setup_logging(args.log_level)
    from headwater.lab.check import run_check

    return _report(
        "check",
        lambda: run_check(
            sources,
            args.aggregate,
            records=args.records,
            rate=args.rate,
            timeout=args.timeout,
            audit_url=args.audit_url or None,
            progress=_progress,
            security=security,
            p99_goal_ms=args.p99_goal_ms,
        ),
        args.json,
        (OSError, TimeoutError),
    )
