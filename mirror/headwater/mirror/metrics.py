"""The mirror's Prometheus metrics (in MirrorMaker 2's spirit) and its ``/metrics`` + ``/healthz`` endpoint."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("headwater.mirror.metrics")


class MirrorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.records = Counter(
            "headwater_mirror_records", "Records mirrored (acknowledged by the target)", ["flow", "topic"], registry=r
        )
        self.bytes = Counter("headwater_mirror_bytes", "Record-batch bytes mirrored", ["flow", "topic"], registry=r)
        self.produce_errors = Counter(
            "headwater_mirror_produce_errors",
            "Produce attempts the target refused or did not answer",
            ["flow"],
            registry=r,
        )
        self.skipped = Counter(
            "headwater_mirror_skipped_records",
            "Records not produced again: found in the target (copied before a change of owner, or by a produce "
            "whose answer was lost)",
            ["flow", "topic"],
            registry=r,
        )
        self.reencoded = Counter(
            "headwater_mirror_reencoded_batches",
            "Fast-path batches re-encoded with dense offsets because the source's log cleaner left offset gaps in "
            "them (compacted topics)",
            ["flow", "topic"],
            registry=r,
        )
        self.scans_abandoned = Counter(
            "headwater_mirror_resume_scans_abandoned",
            "Scans of the target for the previous owner's copies given up (more than resume.scan.max.bytes): that "
            "range is mirrored at-least-once",
            ["flow"],
            registry=r,
        )
        self.looped = Counter(
            "headwater_mirror_records_not_mirrored_back",
            "Records not copied because they were already in the target (the provenance header names it, or a "
            "heartbeat written there): active/active under IdentityReplicationPolicy",
            ["flow"],
            registry=r,
        )
        self.dropped = Counter(
            "headwater_mirror_test_dropped_records",
            "Records dropped by headwater.test.drop.every (tests only)",
            ["flow"],
            registry=r,
        )
        self.duplicated = Counter(
            "headwater_mirror_test_duplicated_records",
            "Records produced twice by headwater.test.duplicate.every (tests only)",
            ["flow"],
            registry=r,
        )
        self.plan_failures = Counter(
            "headwater_mirror_topic_plan_failures",
            "Attempts to plan a source topic (find or create its destination topic) that failed; the topic is "
            "left out, the others go on",
            ["flow", "topic"],
            registry=r,
        )
        self.partition_count_mismatch = Gauge(
            "headwater_mirror_partition_count_mismatch",
            "Source partitions of a topic mirrored partition for partition that the target topic lacks (not mirrored "
            "until the target topic is grown); 0 when the counts match",
            ["flow", "topic"],
            registry=r,
        )
        self.lag = Gauge(
            "headwater_mirror_partition_lag",
            "Source high watermark minus the offset after the last record the target acknowledged (computed when "
            "scraped, from the newest high watermark any fetch saw): what the target still lacks, growing while "
            "writes fail even though fetching ahead goes on, as Burrow's lag and MM2's record age",
            ["flow", "topic", "partition"],
            registry=r,
        )
        self.record_age = Gauge(
            "headwater_mirror_record_age_ms",
            "MM2's record-age-ms per partition: while the target lacks records of the partition (lag > 0), now minus "
            "the source timestamp of the last record it acknowledged (computed when scraped); 0 when caught up",
            ["flow", "topic", "partition"],
            registry=r,
        )
        self.replication_latency = Gauge(
            "headwater_mirror_replication_latency_ms",
            "MM2's replication-latency-ms per partition: the target's acknowledgement time minus the source "
            "timestamp of the newest record it acknowledged, at the last acknowledgement",
            ["flow", "topic", "partition"],
            registry=r,
        )
        self.byte_rate = Gauge(
            "headwater_mirror_partition_bytes_per_second",
            "The byte rate this process publishes for load-aware placement: bytes the target acknowledged per "
            "second, over the last placement.rebalance.interval.seconds",
            ["flow", "topic", "partition"],
            registry=r,
        )
        self.committed = Gauge(
            "headwater_mirror_committed_offset",
            "Source offset committed to the group in the source ZooKeeper",
            ["flow", "topic", "partition"],
            registry=r,
        )
        self.checkpoint_latency = Gauge(
            "headwater_mirror_checkpoint_latency_ms",
            "MM2's checkpoint-latency-ms: the last checkpoint of the group's partition, from reading the group's "
            "offsets in the source to the target acknowledging the checkpoint record",
            ["flow", "group", "topic", "partition"],
            registry=r,
        )
        self.owned = Gauge(
            "headwater_mirror_owned_partitions", "Source partitions this process mirrors", ["flow"], registry=r
        )
        self.latency = Histogram(
            "headwater_mirror_replication_latency_seconds",
            "Now minus the record batch's max timestamp, when the target acknowledged it",
            ["flow"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.records_lost = Counter(
            "headwater_mirror_records_lost",
            "Records the mirror could not copy: gone from the source (retention) before it read them; each gap is "
            "logged at ERROR and published as a gap event on the source's __audit topic",
            ["flow", "topic"],
            registry=r,
        )
        self.produce_throttle = Histogram(
            "headwater_mirror_produce_throttle_time_seconds",
            "throttle_time_ms of the target's produce answers that held the mirror back (a client quota on the "
            "mirror's principal or client id, docs/pipeline.md), in seconds; only throttled answers are observed",
            ["flow"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        #: what the copiers call with each throttled produce answer (the metric above, a log line a minute)
        self.throttle_report = ThrottleReport(self)
        self.heartbeat_age = Gauge(
            "headwater_mirror_heartbeat_age_seconds",
            "Now minus the newest heartbeat of the flow the target acknowledged (computed when scraped): "
            "the flow's end-to-end replication latency, growing by the second while a link is down",
            ["flow"],
            registry=r,
        )


class ThrottleReport:
    """The mirror reports being throttled by the target: each throttled produce answer is observed in
    ``headwater_mirror_produce_throttle_time_seconds{flow}``, and a flow logs one WARNING when it is
    first throttled, then at most one line a minute (``interval_s``) summing up what held it back
    since the last line. Clock injected; called on the event loop only."""

    def __init__(
        self,
        metrics: MirrorMetrics,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        self.metrics = metrics
        self.interval_s = interval_s
        self.clock = clock
        self.log = logger or logging.getLogger("headwater.mirror")
        #: flow -> [throttled answers, total ms, max ms] since its last line, and when that line was
        self._pending: dict[str, list[int]] = {}
        self._logged_at: dict[str, float] = {}

    def throttled(self, flow: str, target: str, ms: int) -> None:
        self.metrics.produce_throttle.labels(flow).observe(ms / 1000.0)
        p = self._pending.setdefault(flow, [0, 0, 0])
        p[0] += 1
        p[1] += ms
        p[2] = max(p[2], ms)
        now = self.clock()
        last = self._logged_at.get(flow)
        if last is not None and now - last < self.interval_s:
            return
        self._logged_at[flow] = now
        n, total, longest = p
        del self._pending[flow]
        self.log.warning(
            "%s: %s throttled %d produce answer(s) %s (%.1f s in all, longest %d ms): the mirror's produce "
            "quota on %s bounds its rate; a catch-up takes longer (docs/pipeline.md, sizing the mirror's quota)",
            flow,
            target,
            n,
            "since the last report" if last is not None else "(first time)",
            total / 1000.0,
            longest,
            target,
        )


async def serve_http(
    host: str, port: int, metrics: MirrorMetrics, health: Callable[[], tuple[bool, str]]
) -> asyncio.AbstractServer:
    """A minimal HTTP/1.0 endpoint: ``GET /metrics`` (Prometheus text) and ``GET /healthz``
    (200 when healthy, 503 otherwise, with a one-line reason)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = "200 OK", "text/plain; version=0.0.4", generate_latest(metrics.registry)
            elif path.startswith("/healthz"):
                ok, why = health()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", (why + "\n").encode()
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics or /healthz\n"
            writer.write(
                f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    log.info("metrics and health on http://%s:%d/metrics, /healthz", host, port)
    return server
