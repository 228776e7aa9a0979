"""``headwater bench``: run the benchmark (``bench/headwater/bench``), write results.md and results.json."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure throughput, latency and resources against the paper, Kreps and the machine",
        description="Start a local ZooKeeper and brokers, run the benchmark scenarios with baselines "
        "measured in the same run, and write a markdown table and JSON.",
    )
    p.add_argument("--quick", action="store_true", help="a small run (under two minutes), for CI")
    p.add_argument("--runs", type=int, default=None, help="runs per figure (default: 1 quick, 3 full)")
    p.add_argument(
        "--only",
        default=None,
        metavar="N,N",
        help="scenarios to run (1 produce, 2 consume, 3 latency, 4 stored, 5 resources, 6 large records, 7 mirror, "
        "8 Spark loader, 9 mirror across a WAN link, 10 audit counting, 11 TLS and SASL cost, 12 client quotas on vs off, "
        "scale thousands of partitions, zk-outage a ZooKeeper outage, txn transactional vs idempotent produce; "
        "default: all, all but 8, 9, 11, 12, scale, zk-outage, preauth and txn with --quick); with --versus kafka, "
        "groups: core, large, java, failover, mm2, spark, preauth, quotas, tls, stored, large1m, tuned "
        "(default: all)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="directory for results.md/.json")
    p.add_argument("--workdir", type=Path, default=None, help="where brokers keep their logs (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    p.add_argument(
        "--stored-gib",
        type=float,
        default=None,
        help="GiB held by scenario 4's full log (default 2; 0.25 with --quick)",
    )
    p.add_argument(
        "--scale-partitions",
        default=None,
        metavar="N,N",
        help="the scale scenario's cluster sizes in partitions (default 1000,5000,10000; 1000 with --quick)",
    )
    p.add_argument("--profile", action="store_true", help="also profile the broker with py-spy")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--versus",
        choices=["kafka"],
        default=None,
        help="run produce, consume, latency, resources, large records, Kafka's Java perf tools, controller failover "
        "(--scale-partitions N), MirrorMaker 2 and Spark's Kafka source on Apache Kafka (pinned jars, make java-deps) and on "
        "Headwater alternately; writes versus.md/.json with Headwater / Kafka ratios",
    )
    p.add_argument("--records", type=int, default=None, help="--versus: records per produce row (default 1,500,000)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from headwater.bench.runner import ALL, QUICK, Options, run
    except ImportError as e:
        print(
            f"headwater bench: the benchmark is not installed ({e}); pip install -e . from a checkout", file=sys.stderr
        )
        return 2
    if args.versus:
        return _versus(args)
    if args.only is None:
        only = QUICK if args.quick else ALL
    else:
        only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = [s for s in only if s not in ALL]
    if unknown:
        print(
            f"headwater bench: unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(ALL)}", file=sys.stderr
        )
        return 2
    try:
        scale_partitions = _sizes(args.scale_partitions)
    except ValueError as e:
        print(f"headwater bench: --scale-partitions {args.scale_partitions!r}: {e}", file=sys.stderr)
        return 2
    options = Options(
        quick=args.quick,
        runs=args.runs,
        only=only,
        out=args.out,
        workdir=args.workdir,
        keep=args.keep,
        stored_gib=args.stored_gib,
        scale_partitions=scale_partitions,
        profile=args.profile,
        verbose=not args.quiet,
        command=shlex.join(["headwater", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"] else "headwater bench",
    )
    report, md, js = run(options)
    sys.stdout.write(report.markdown())
    print(f"\nwrote {md} and {js}", file=sys.stderr)
    return 0


def _versus(args: argparse.Namespace) -> int:
    from headwater.bench import versus
    from headwater.testing import java

    groups = versus.GROUPS
    if args.only is not None:
        groups = tuple(s.strip() for s in args.only.split(",") if s.strip())
        unknown = [g for g in groups if g not in versus.GROUPS]
        if unknown:
            print(
                f"headwater bench --versus kafka: unknown group(s) {', '.join(unknown)}; "
                f"choose from {', '.join(versus.GROUPS)}",
                file=sys.stderr,
            )
            return 2
    try:
        sizes = _sizes(args.scale_partitions)
    except ValueError as e:
        print(f"headwater bench: --scale-partitions {args.scale_partitions!r}: {e}", file=sys.stderr)
        return 2
    reason = java.unavailable()
    if reason is not None:
        print(f"headwater bench --versus kafka: {reason}", file=sys.stderr)
        return 2
    plan = versus.Plan.make(args.quick, args.runs, args.records, groups, sizes[0] if sizes else None)
    md = versus.run(plan, args.out, args.workdir, None if not args.quiet else (lambda m: None))
    sys.stdout.write(md.read_text())
    print(f"\nwrote {md}", file=sys.stderr)
    return 0


def _sizes(text: str | None) -> tuple[int, ...]:
    """``1000,10000`` -> (1000, 10000); each a positive multiple of 20 (the scenario's topics have 20)."""
    if text is None:
        return ()
    sizes = tuple(int(s.strip().replace("_", "")) for s in text.split(",") if s.strip())
    bad = [n for n in sizes if n <= 0 or n % 20]
    if not sizes or bad:
        raise ValueError("give positive multiples of 20, comma-separated (topics of 20 partitions)")
    return sizes
