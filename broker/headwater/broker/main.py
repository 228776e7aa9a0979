"""``headwater broker start``: run one broker in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import uvloop

from headwater.broker.config import ConfigError, load_config
from headwater.broker.server import BrokerIdInUse, KafkaBroker

log = logging.getLogger("headwater.broker")


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)


async def _run(broker: KafkaBroker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except BrokerIdInUse as e:
        log.error("%s", e)
        await broker.stop()
        return 2
    except (ConnectionError, OSError) as e:
        log.error("broker failed to start: %s", e)
        await broker.stop()
        return 1
    await stop.wait()
    await broker.stop()
    return 0


def run(config_path: str | None, overrides: list[str], log_level: str = "INFO") -> int:
    setup_logging(log_level)
    try:
        config = load_config(config_path, overrides)
    except ConfigError as e:
        print(f"headwater broker: configuration error: {e}", file=sys.stderr)
        return 2
    for key in config.unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", key)
    return uvloop.run(_run(KafkaBroker(config)))
