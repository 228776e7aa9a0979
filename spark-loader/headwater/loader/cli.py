"""``headwater load -c loader.properties [--override key=value]``: one nightly load, now."""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "load",
        help="load the aggregate cluster into the Parquet warehouse (PySpark), exactly once",
        description="Read every matching topic-partition from where the last published run ended to "
        "the log end offsets fixed at start, write Parquet under <warehouse>/<topic>/date=YYYY-MM-DD/, "
        "publish data and offsets together, then the warehouse-tier audit counts.",
    )
    p.add_argument("-c", "--config", required=True, help="loader.properties")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a property (repeatable)"
    )
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.properties import parse_overrides, parse_properties

    try:
        with open(args.config, encoding="utf-8") as f:
            props = parse_properties(f.read())
        props.update(parse_overrides(args.override))
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
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    run(config)
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
