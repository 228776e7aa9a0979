"""What the long-running services' subcommands share: ``-c FILE``, ``--override key=value``,
``--log-level``, and one log format (``headwater mirror``, ``headwater audit serve``, ``headwater load``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from headwater.properties import parse_overrides

__all__ = ["add_service_arguments", "overrides_of", "setup_logging", "stop_on_signals"]


def add_service_arguments(parser: argparse.ArgumentParser, config_name: str) -> None:
    parser.add_argument("-c", "--config", required=True, help=config_name)
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a property (repeatable)"
    )
    parser.add_argument("--log-level", default="INFO")


def overrides_of(args: argparse.Namespace) -> dict[str, str]:
    """The ``--override`` pairs; ValueError names the first malformed one."""
    return parse_overrides(args.override)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets: how a service is asked to stop (call it on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    return stop
