"""The load generators and how each is told to produce a given workload.

Producers: ``rdkafka-c`` (librdkafka from C, ``bench/native/rdkafka_produce.c``), ``confluent``
(confluent-kafka, librdkafka's Python wrapper) and ``headwater`` (our client). Consumers: ``kcat``
(librdkafka from C), ``confluent`` and ``headwater``. Latency: ``confluent`` and ``headwater``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from headwater.bench.context import Bench
from headwater.bench.report import confluent_version

PRODUCERS = ("rdkafka-c", "confluent", "headwater")
CONSUMERS = ("kcat", "confluent", "headwater")
LATENCY = ("confluent", "headwater")

SHORT = {
    "rdkafka-c": "librdkafka (C)",
    "kcat": "kcat (C)",
    "confluent": "confluent-kafka (Py)",
    "headwater": "headwater (Py)",
}

_BATCH_HEADER = 61
_RECORD_OVERHEAD = 10  # varints and attributes of a small record without key or headers
_REQUEST_OVERHEAD = 80  # request header, transactional id, acks, timeout, topic and partition


@dataclass(frozen=True)
class Workload:
    """Records of ``size`` bytes; ``batch`` records per batch (None: the client's default
    batching); ``batch_bytes`` caps a batch in bytes (None: the client's default)."""

    size: int
    batch: int | None = None
    batch_bytes: int | None = None


def describe(bench: Bench) -> dict[str, str]:
    """The generators section of the report."""
    n = bench.native
    out: dict[str, str] = {}
    try:
        import confluent_kafka

        confluent = (
            f"confluent-kafka {confluent_version()} with its bundled librdkafka {confluent_kafka.libversion()[0]}"
        )
    except ImportError:
        confluent = "confluent-kafka (not installed)"
    out[SHORT["rdkafka-c"]] = (
        f"our C producer `bench/native/rdkafka_produce.c` on Debian's librdkafka {n.librdkafka_version}"
        if n.producer
        else n.producer_why_not
    )
    out[SHORT["kcat"]] = f"`kcat -C` (Debian, librdkafka {n.librdkafka_version})" if n.kcat else n.kcat_why_not
    out[SHORT["confluent"]] = f"{confluent}, driven from Python (`python -m headwater.bench.loadgen`)"
    out[SHORT["headwater"]] = "Headwater's own client, `headwater.client` (asyncio on uvloop, Python)"
    return out


def why_not(bench: Bench, key: str) -> str:
    """'' when the generator can run here, else the reason."""
    if key == "rdkafka-c":
        return bench.native.producer_why_not if bench.native.producer is None else ""
    if key == "kcat":
        return bench.native.kcat_why_not if bench.native.kcat is None else ""
    if key == "confluent":
        return "" if importlib.util.find_spec("confluent_kafka") else "not available: confluent-kafka is not installed"
    if key == "headwater":
        if importlib.util.find_spec("headwater.client") is None:
            return "not available: headwater.client does not exist yet"
        import headwater.client as client

        missing = [n for n in ("Producer", "Consumer") if not hasattr(client, n)]
        return f"not available: headwater.client has no {', '.join(missing)} yet" if missing else ""
    raise ValueError(key)


def estimate_request_size(w: Workload) -> float:
    """A Produce request's size when the generator cannot say (one batch per request)."""
    records = w.batch or max(1, (w.batch_bytes or 16384) // (w.size + _RECORD_OVERHEAD))
    return _REQUEST_OVERHEAD + _BATCH_HEADER + records * (w.size + _RECORD_OVERHEAD)


def _rdkafka_props(w: Workload, acks: str) -> list[str]:
    # max.in.flight 5, the Java producer's default (librdkafka's is 1,000,000): a bounded pipeline,
    # so a run that hits its time limit stops within it
    props = [f"acks={acks}", "max.in.flight=5"]
    if w.batch is not None:
        props += [f"batch.num.messages={w.batch}", "linger.ms=0" if w.batch == 1 else "linger.ms=5"]
    if w.batch_bytes is not None:
        props += [f"batch.size={w.batch_bytes}"]
    return props


def produce_cmd(
    bench: Bench,
    key: str,
    bootstrap: str,
    topic: str,
    count: int,
    w: Workload,
    acks: str,
    max_seconds: float | None = None,
) -> list[str]:
    """The command for one produce run: ``count`` records, stopping after ``max_seconds``
    (default: the plan's limit for a measured run)."""
    seconds = str(max_seconds or bench.plan.max_seconds)
    if key == "rdkafka-c":
        assert bench.native.producer is not None
        cmd = [str(bench.native.producer), "-b", bootstrap, "-t", topic, "-n", str(count), "-s", str(w.size)]
        cmd += ["-d", seconds, "-X", "statistics.interval.ms=500"]
        for prop in _rdkafka_props(w, acks):
            cmd += ["-X", prop]
        return cmd
    common = ["--bootstrap", bootstrap, "--topic", topic, "--count", str(count), "--size", str(w.size)]
    common += ["--seconds", seconds, "--acks", acks]
    if key == "confluent":
        props = [arg for prop in _rdkafka_props(w, acks)[1:] for arg in ("-X", prop)]
        return Bench.loadgen("confluent-produce", *common, *props)
    if key == "headwater":
        if w.batch == 1:
            batch_size, linger = 0, 0.0  # every record its own batch
        elif w.batch is not None:
            batch_size, linger = _BATCH_HEADER + w.batch * (w.size + 21), 5.0  # 21: the client's per-record bound
        else:
            batch_size, linger = w.batch_bytes or 16384, 5.0 if w.batch_bytes else 0.0
        extra = ["--batch-size", str(batch_size), "--linger-ms", str(linger)]
        extra += ["--max-request-size", str(max(1048576, batch_size + 65536))]
        return Bench.loadgen("headwater-produce", *common, *extra)
    raise ValueError(key)


def consume_cmd(bench: Bench, key: str, bootstrap: str, topic: str, count: int, fetch_bytes: int) -> list[str]:
    common = ["--bootstrap", bootstrap, "--topic", topic, "--count", str(count)]
    common += ["--seconds", str(bench.plan.max_seconds)]
    if key == "confluent":
        return Bench.loadgen("confluent-consume", *common, "-X", f"fetch.message.max.bytes={fetch_bytes}")
    if key == "headwater":
        return Bench.loadgen("headwater-consume", *common, "--fetch-bytes", str(fetch_bytes))
    raise ValueError(key)
