"""``headwater mirror -c mirror.properties [--override key=value]``: run the mirror in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from headwater.cli.service import add_service_arguments, overrides_of, setup_logging, stop_on_signals

__all__ = ["add_parser"]

log = logging.getLogger("headwater.mirror")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mirror",
        help="mirror source clusters into the aggregate cluster (MirrorMaker 2's property names)",
        description="Copy every enabled flow (<src>-><dst>.enabled = true) into the target cluster: "
        "partitions kept, record batches never decoded when partition counts match, acks=all, "
        "source offsets committed to the source ZooKeeper only after the target acknowledged.",
    )
    add_service_arguments(p, "mirror.properties")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.mirror.config import MirrorConfigError, load

    try:
        config = load(args.config, overrides_of(args))
    except (MirrorConfigError, ValueError) as e:
        print(f"headwater mirror: configuration error: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    for key in config.unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", key)
    import uvloop

    return uvloop.run(_main(config, args.config, args.override))


async def _main(config: object, path: str, overrides: list[str]) -> int:
    from headwater.mirror.config import MirrorConfig, MirrorConfigError, load
    from headwater.mirror.metrics import serve_http
    from headwater.mirror.mirror import Mirror
    from headwater.properties import parse_overrides

    assert isinstance(config, MirrorConfig)
    mirror = Mirror(config)
    stop = stop_on_signals()
    reload = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_hup() -> None:
        try:
            fresh = load(path, parse_overrides(overrides))
        except (MirrorConfigError, ValueError) as e:
            log.error("SIGHUP: %s: keeping the running configuration", e)
            return
        mirror.reload_topics(fresh)
        reload.set()

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    server = None
    if config.metrics_port is not None:
        server = await serve_http(config.metrics_host, config.metrics_port, mirror.metrics, mirror.health)
    log.info(
        "mirroring %s into %s",
        ", ".join(f"{f.name} ({', '.join(p.pattern for p in f.topics)})" for f in config.flows),
        config.flows[0].target,
    )
    from headwater.client.security import describe

    for alias, cluster in config.clusters.items():
        log.info("cluster %s: %s via %s", alias, describe(cluster.security), cluster.bootstrap)
    try:
        await mirror.run(stop, reload)
    finally:
        if server is not None:
            server.close()
            await server.wait_closed()
    log.info("mirror stopped; offsets committed")
    return 0
