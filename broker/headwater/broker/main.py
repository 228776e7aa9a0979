"""``headwater broker start``: run one broker in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

import uvloop

from headwater.broker.config import ConfigError, load_config
from headwater.broker.server import BrokerIdInUse, KafkaBroker
from headwater.broker.storage.broker_metadata import InconsistentBrokerMetadata

log = logging.getLogger("headwater.broker")


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def freeze_start_up_objects() -> None:
    """Take what start-up made (modules, configuration, handlers, caches: ~40,000 objects that live
    as long as the broker) out of the garbage collector's passes, so a full pass scans only what
    came later (connections, requests, partitions). Measured (docs/performance.md, "Clients that
    never log in"): the full pass set off by 1,100 connections arriving at once scanned ~57,000
    objects before, ~19,000 after. A ``gc.collect()`` first, so no start-up garbage is frozen.
    Only the broker's own process does it (``headwater broker start``), never a process that
    merely embeds a broker."""
    gc.collect()
    gc.freeze()


async def _run(broker: KafkaBroker) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except (BrokerIdInUse, InconsistentBrokerMetadata) as e:
        log.error("%s", e)
        await broker.stop()
        return 2
    except (ConnectionError, OSError) as e:
        log.error("broker failed to start: %s", e)
        await broker.stop()
        return 1
    freeze_start_up_objects()
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
