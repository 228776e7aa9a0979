"""``headwater mirror -c mirror.properties [--override key=value]``: run the mirror in the foreground.

``headwater mirror translate -c mirror.properties --group G --source dc1``: the offsets group G
resumes from in the target, per partition of the target topics, read from the target's
``dc1.checkpoints.internal`` as MM2's ``RemoteClusterUtils.translateOffsets`` reads them (see
:mod:`headwater.mirror.checkpoints`)."""

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
    p.add_argument(
        "action",
        nargs="?",
        choices=("run", "translate"),
        default="run",
        help="run (default): the mirror; translate: print a group's translated offsets from the checkpoints",
    )
    add_service_arguments(p, "mirror.properties")
    p.add_argument("--group", help="translate: the consumer group")
    p.add_argument("--source", help="translate: the source cluster's alias (its checkpoints in the target)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.mirror.config import MirrorConfigError, load

    try:
        config = load(args.config, overrides_of(args))
    except (MirrorConfigError, ValueError) as e:
        print(f"headwater mirror: configuration error: {e}", file=sys.stderr)
        return 2
    if args.action == "translate":
        return _translate(config, args.group, args.source)
    setup_logging(args.log_level)
    for key in config.unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", key)
    for line in config.differently:
        log.info("%s", line)
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


def _translate(config: object, group: str | None, source: str | None) -> int:
    """Print ``<target topic> <partition> <offset> <source offset>`` per partition (tab-separated)."""
    from headwater.client.cluster import Cluster
    from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, UnknownTopicError
    from headwater.mirror.checkpoints import read_checkpoints
    from headwater.mirror.config import MirrorConfig
    from headwater.protocol.errors import KafkaError

    assert isinstance(config, MirrorConfig)
    if not group or not source:
        print("headwater mirror translate: --group and --source are required", file=sys.stderr)
        return 2
    if source not in config.clusters:
        print(
            f"headwater mirror translate: --source {source}: not in clusters ({', '.join(config.clusters)})",
            file=sys.stderr,
        )
        return 2
    target = config.clusters[config.flows[0].target]

    async def main() -> int:
        cluster = Cluster(target.bootstrap, client_id="headwater-mirror-translate", security=target.security)
        try:
            found = await read_checkpoints(cluster, config.checkpoints_topic(source), group)
        finally:
            await cluster.close()
        if not found:
            print(
                f"headwater mirror translate: no checkpoint of group {group} in {config.checkpoints_topic(source)}",
                file=sys.stderr,
            )
            return 1
        print("topic\tpartition\toffset\tsource_offset")
        for (topic, partition), c in sorted(found.items()):
            print(f"{topic}\t{partition}\t{c.downstream}\t{c.upstream}")
        return 0

    try:
        return asyncio.run(main())
    except UnknownTopicError:
        print(
            f"headwater mirror translate: {config.checkpoints_topic(source)} does not exist in {target.alias}",
            file=sys.stderr,
        )
        return 1
    except (KafkaError, KafkaConnectionError, KafkaTimeoutError, OSError) as e:
        print(f"headwater mirror translate: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
