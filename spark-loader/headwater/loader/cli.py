"""``headwater load -c loader.properties [--override key=value]``: one nightly load, now."""

from __future__ import annotations

import argparse
import logging
import sys

from headwater.cli.service import add_service_arguments, overrides_of, setup_logging

__all__ = ["add_parser", "main"]

#: flags that set a loader.properties property (they win over the file and --override)
PROPERTY_FLAGS = (
    ("--partition-granularity", "output.partition.granularity", "hour or day (default day)"),
    ("--timezone", "output.timezone", "IANA zone of the date=/hour= directories (default UTC)"),
    (
        "--partition-time-field",
        "output.partition.time.field",
        "the event time: timestamp (default), header:origin.created, value:<JSON path>",
    ),
    ("--max-records-per-run", "max.records.per.run", "publish after this many records (0: no bound)"),
    ("--max-duration-per-run", "max.duration.per.run", "start no read round after this long, e.g. 4h (0: no bound)"),
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "load",
        help="load the aggregate cluster into the Parquet warehouse (PySpark), exactly once",
        description="Read every matching topic-partition from where the last published run ended to "
        "the log end offsets fixed at start, write Parquet under <warehouse>/<topic>/run=<run>/date=YYYY-MM-DD/[hour=HH/] "
        "(by event time; at most max.records.per.run / max.duration.per.run per run), "
        "publish each topic with one rename and the offsets with the run's manifest (exactly once), then the "
        "warehouse-tier audit counts. Offsets the cluster no longer holds fail the run unless failOnDataLoss=false.",
    )
    add_service_arguments(p, "loader.properties")
    p.add_argument(
        "--schedule",
        metavar="HH:MM",
        help="stay up and run the load every day at this UTC time (each run a child process)",
    )
    for flag, prop, text in PROPERTY_FLAGS:
        p.add_argument(flag, dest=prop, metavar="VALUE", help=f"{text} [{prop}]")
    p.set_defaults(func=_run)


def _flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    return {prop: str(v) for _, prop, _ in PROPERTY_FLAGS if (v := getattr(args, prop, None)) is not None}


def _run(args: argparse.Namespace) -> int:
    from headwater.properties import parse_properties

    try:
        with open(args.config, encoding="utf-8") as f:
            props = parse_properties(f.read())
        props.update(overrides_of(args))
        props.update(_flag_overrides(args))
    except OSError as e:
        print(f"headwater load: cannot read {args.config}: {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"headwater load: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        from headwater.loader.job import LoaderConfigError, parse_config, run
    except ImportError as e:
        print(f"headwater load: needs the loader extra (pip install 'headwater[loader]'): {e}", file=sys.stderr)
        return 2
    try:
        config = parse_config(props)
    except LoaderConfigError as e:
        print(f"headwater load: configuration error: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    if args.schedule:
        from headwater.loader.schedule import parse_time, run_schedule

        try:
            at = parse_time(args.schedule)
        except ValueError as e:
            print(f"headwater load: {e}", file=sys.stderr)
            return 2
        if not 0 < config.bounds.max_duration_ms < config.run_timeout_ms:
            logging.getLogger("headwater.loader").warning(
                "max.duration.per.run is %s: a backlog the load cannot read within loader.run.timeout.ms "
                "(%d ms) is stopped unpublished every night; set it below that (docs/loader.md, 'Bounded catch-up')",
                f"{config.bounds.max_duration_ms} ms" if config.bounds.max_duration_ms else "not set",
                config.run_timeout_ms,
            )
        argv = ["-c", args.config, "--log-level", args.log_level]
        for o in [*args.override, *(f"{k}={v}" for k, v in _flag_overrides(args).items())]:
            argv += ["--override", o]
        return run_schedule(at, argv, config.run_timeout_ms / 1000.0)
    from headwater.loader.lock import LockLostError, LockTimeoutError, warehouse_lock
    from headwater.loader.offsets import DataLossError

    try:
        with warehouse_lock(config.warehouse, config.lock_zookeeper, config.lock_timeout_ms) as guard:
            run(config, guard)
    except DataLossError as e:
        print(f"headwater load: {e} (see docs/loader.md, 'After a data-loss failure')", file=sys.stderr)
        return 1
    except (LockTimeoutError, LockLostError) as e:
        print(f"headwater load: {e}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    """For ``spark-submit spark-loader/headwater/loader/cli.py -c loader.properties``."""
    parser = argparse.ArgumentParser(prog="headwater load")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["load", *sys.argv[1:]])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
