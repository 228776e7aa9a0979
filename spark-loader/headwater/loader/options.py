"""The ``headwater`` data source's options, spelled and checked as Spark's Kafka source spells them.

One parser for the batch reader, the stream reader and the writer, so an option means the same in
each and a bad value fails the same way: :class:`OptionError`, a one-line message that names the
option (Spark shows it as the query's error).

Which partitions (exactly one of):

    subscribe          t1,t2                          those topics, every partition (new ones too)
    subscribePattern   page-.*                        topics whose whole name matches (Java's matches())
    assign             {"t1": [0, 1], "t2": [3]}      exactly those partitions

Where to start and end (the first that is set wins, as in Spark):

    startingTimestamp            1700000000000        every partition: the first offset at or after it
    startingOffsetsByTimestamp   {"t1": {"0": 1700000000000}}
    startingOffsets              earliest | latest | {"t1": {"0": 23, "1": -2}}   (-2 earliest, -1 latest)
    endingTimestamp / endingOffsetsByTimestamp / endingOffsets      (batch only; default latest)

A starting timestamp no record reaches fails the read unless ``startingOffsetsByTimestampStrategy``
is ``latest`` (then that partition starts at its end); an ending timestamp no record reaches ends at
the latest offset, as in Spark. Streaming only: ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
``maxTriggerDelay`` (Spark's admission control, see :mod:`headwater.loader.stream`).

Consumer settings Spark's source refuses are refused here too, with the option to use instead:
``kafka.auto.offset.reset``, ``kafka.enable.auto.commit``, ``kafka.key.deserializer``,
``kafka.value.deserializer``, ``kafka.interceptor.classes``. A JSON offset map naming a
partition that the subscription does not hold is an error, never silently ignored.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from headwater.client.raw import READ_COMMITTED
from headwater.client.security import ClientSecurity, cluster_security
from headwater.loader.offsets import (
    EARLIEST,
    LATEST,
    DataLoss,
    DataLossError,
    OffsetRange,
    OffsetSpecError,
    isolation_level,
    parse_spec,
    plan_range,
)

Spec = str | dict[str, dict[int, int]]
TopicPartition = tuple[str, int]

#: Kafka consumer settings Spark's Kafka source refuses, and what to set instead
REFUSED = {
    "kafka.auto.offset.reset": "set the source option startingOffsets (earliest or latest) instead",
    "kafka.enable.auto.commit": "offsets are kept in Spark's checkpoint, never committed to Kafka",
    "kafka.key.deserializer": "keys are always binary: cast or decode the key column",
    "kafka.value.deserializer": "values are always binary: cast or decode the value column",
    "kafka.interceptor.classes": "consumer interceptors are not supported",
}
#: Spark's ``maxTriggerDelay`` default (15 minutes)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000


class OptionError(OffsetSpecError):
    """An option the data source cannot use; the message names it."""


def boolean(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name}: {raw!r} is not true or false")
    return value == "true"


def integer(opts: dict[str, str], name: str, default: int | None, least: int = 0) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is not an integer") from None
    if value < least:
        raise OptionError(f"option {name}: {value} must be >= {least}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(opts: dict[str, str], name: str, default: int) -> int:
    """Spark's time strings as ``maxTriggerDelay`` takes them: ``15m``, ``30s``, ``500ms``, ``1h``."""
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    m = _DURATION.match(raw.lower())
    if not m:
        raise OptionError(f"option {name}: {raw!r} is not a duration like 15m, 30s, 500ms or 1h")
    return int(m.group(1)) * _UNIT_MS[m.group(2) or "ms"]


def _timestamps(option: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        data = json.loads(raw)
        out = {str(t): {int(p): int(ts) for p, ts in parts.items()} for t, parts in data.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f'option {option}: {raw!r} is not JSON like {{"topic": {{"0": 1700000000000}}}}') from None
    for t, parts in out.items():
        for p, ts in parts.items():
            if ts < 0:
                raise OptionError(f"option {option}: {t}-{p}: the timestamp {ts} is negative")
    return out


@dataclass(frozen=True)
class Bound:
    """Where one side of the read is: an offset spec, per-partition timestamps, or one timestamp."""

    option: str  # the option it came from, for messages
    spec: Spec = "earliest"
    timestamps: dict[str, dict[int, int]] | None = None
    timestamp: int | None = None

    @property
    def by_time(self) -> bool:
        return self.timestamps is not None or self.timestamp is not None


def _bound(opts: dict[str, str], side: str, default: str) -> Bound:
    single = opts.get(f"{side}timestamp")
    if single is not None and single.strip():
        try:
            ts = int(single.strip())
        except ValueError:
            raise OptionError(f"option {side}Timestamp: {single!r} is not a timestamp in milliseconds") from None
        if ts < 0:
            raise OptionError(f"option {side}Timestamp: {ts} is negative")
        return Bound(f"{side}Timestamp", timestamp=ts)
    by_ts = opts.get(f"{side}offsetsbytimestamp")
    if by_ts is not None and by_ts.strip():
        return Bound(f"{side}OffsetsByTimestamp", timestamps=_timestamps(f"{side}OffsetsByTimestamp", by_ts))
    name = f"{side}Offsets"
    try:
        spec = parse_spec(name, opts.get(name.lower()), default)
    except OffsetSpecError as e:
        raise OptionError(f"option {e}") from None
    return Bound(name, spec=spec)


@dataclass(frozen=True)
class SourceOptions:
    """Every read option, checked. ``stream`` marks a streaming read (no ending options)."""

    bootstrap: str
    subscribe: list[str] | None
    pattern: str | None
    assign: dict[str, list[int]] | None
    starting: Bound
    ending: Bound
    on_no_start: str  # startingOffsetsByTimestampStrategy: "error" or "latest"
    include_headers: bool
    isolation: int
    fail_on_data_loss: bool
    min_partitions: int
    max_bytes: int
    delay_ms: int
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    security: ClientSecurity = field(default_factory=ClientSecurity)

    @classmethod
    def parse(cls, options: dict[str, str], stream: bool = False) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        bootstrap = (opts.get("kafka.bootstrap.servers") or "").strip()
        if not bootstrap:
            raise OptionError("option kafka.bootstrap.servers is required")
        for key, why in REFUSED.items():
            if key in opts:
                raise OptionError(f"option {key} is not supported: {why}")
        given = [name for name in ("subscribe", "subscribePattern", "assign") if (opts.get(name.lower()) or "").strip()]
        if len(given) != 1:
            raise OptionError(
                "exactly one of the options assign, subscribe and subscribePattern must be set"
                + (f" (got {', '.join(given)})" if given else "")
            )
        subscribe = pattern = assign = None
        if given[0] == "subscribe":
            subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not subscribe:
                raise OptionError("option subscribe: no topic named")
        elif given[0] == "subscribePattern":
            pattern = opts["subscribepattern"].strip()
            try:
                re.compile(pattern)
            except re.error as e:
                raise OptionError(f"option subscribePattern: {pattern!r} is not a valid regex ({e})") from None
        else:
            raw = opts["assign"]
            try:
                data = json.loads(raw)
                assign = {str(t): sorted({int(p) for p in parts}) for t, parts in data.items()}
                if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
                    raise TypeError
            except (ValueError, AttributeError, TypeError):
                raise OptionError(
                    f'option assign: {raw!r} is not JSON like {{"topicA": [0, 1], "topicB": [2, 4]}}'
                ) from None
            if not assign or not any(assign.values()):
                raise OptionError("option assign: no partition named")
        starting = _bound(opts, "starting", "latest" if stream else "earliest")
        if stream:
            for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
                if name.lower() in opts:
                    raise OptionError(f"option {name} is not valid in streaming queries (a stream has no end)")
            ending = Bound("endingOffsets", spec="latest")
        else:
            ending = _bound(opts, "ending", "latest")
        strategy = (opts.get("startingoffsetsbytimestampstrategy") or "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(f"option startingOffsetsByTimestampStrategy: {strategy!r} is not error or latest")
        try:
            isolation = isolation_level(opts.get("kafka.isolation.level"), "option kafka.isolation.level")
        except OffsetSpecError as e:
            raise OptionError(str(e)) from None
        max_per = integer(opts, "maxOffsetsPerTrigger", None, 1)
        min_per = integer(opts, "minOffsetsPerTrigger", None, 1)
        if max_per is not None and min_per is not None and min_per > max_per:
            raise OptionError(f"option minOffsetsPerTrigger: {min_per} is above maxOffsetsPerTrigger {max_per}")
        return cls(
            bootstrap=bootstrap,
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            on_no_start=strategy,
            include_headers=boolean(opts, "includeHeaders", True),
            isolation=isolation,
            fail_on_data_loss=boolean(opts, "failOnDataLoss", True),
            min_partitions=integer(opts, "minPartitions", 0) or 0,
            max_bytes=integer(opts, "fetch.max.bytes", 4 * 1024 * 1024, 1) or 4 * 1024 * 1024,
            delay_ms=integer(opts, "headwater.test.read.delay.ms", 0) or 0,
            max_offsets_per_trigger=max_per,
            min_offsets_per_trigger=min_per,
            max_trigger_delay_ms=duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            security=cluster_security(opts, "kafka.", inherit=False),
        )

    @property
    def end_name(self) -> str:
        return "last stable offset" if self.isolation == READ_COMMITTED else "log end offset"


# -- resolution against the cluster -------------------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    """One topic-partition as the cluster has it now: ``[earliest, latest)`` (latest: HW or LSO)."""

    earliest: int
    latest: int


async def _partitions(admin: Any, consumer: Any, o: SourceOptions) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    if o.assign is not None:
        for topic, parts in sorted(o.assign.items()):
            have = set(await consumer.partitions_for(topic))
            missing = [p for p in parts if p not in have]
            if missing:
                raise OptionError(
                    f"option assign: {topic} has no partition {', '.join(map(str, missing))} "
                    f"(it has {len(have)}{'' if have else ': does the topic exist?'})"
                )
            out.extend((topic, p) for p in parts)
        return out
    if o.subscribe is not None:
        topics = o.subscribe
    else:
        assert o.pattern is not None
        regex = re.compile(o.pattern)
        topics = [t for t in await admin.list_topics(include_internal=False) if regex.fullmatch(t)]
    for topic in sorted(topics):
        out.extend((topic, p) for p in sorted(await consumer.partitions_for(topic)))
    return out


async def _state(
    o: SourceOptions, starting: bool, ending: bool
) -> tuple[dict[TopicPartition, PartitionState], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """The partitions with their offsets now, and (when asked) the start and end of each,
    timestamps resolved to offsets (EARLIEST/LATEST kept symbolic)."""
    from headwater.client.admin import Admin
    from headwater.client.consumer import Consumer

    async with Admin(o.bootstrap, security=o.security) as admin:
        consumer = Consumer("", cluster=admin.cluster, isolation_level=o.isolation)
        tps = await _partitions(admin, consumer, o)
        state: dict[TopicPartition, PartitionState] = {}
        for t, p in tps:
            state[(t, p)] = PartitionState(await consumer.earliest_offset(t, p), await consumer.latest_offset(t, p))
        starts = await _offsets(consumer, tps, o.starting, o.on_no_start) if starting else {}
        ends = await _offsets(consumer, tps, o.ending, "latest") if ending else {}
        return state, starts, ends


async def _offsets(consumer: Any, tps: list[TopicPartition], bound: Bound, on_none: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    named = {(t, p) for t, parts in (bound.timestamps or {}).items() for p in parts}
    if isinstance(bound.spec, dict):
        named = {(t, p) for t, parts in bound.spec.items() for p in parts}
    if bound.timestamps is not None or isinstance(bound.spec, dict):
        extra = sorted(named - set(tps))
        if extra:
            raise OptionError(
                f"option {bound.option}: {', '.join(f'{t}-{p}' for t, p in extra)} "
                "not in the partitions read (assign, subscribe or subscribePattern)"
            )
    for tp in tps:
        t, p = tp
        if bound.by_time:
            if bound.timestamp is not None:
                ts = bound.timestamp
            else:
                assert bound.timestamps is not None
                if p not in bound.timestamps.get(t, {}):
                    raise OptionError(
                        f"option {bound.option}: no timestamp for {t}-{p} (the JSON must name every partition)"
                    )
                ts = bound.timestamps[t][p]
            found = (await consumer.list_offset(t, p, ts)).offset
            if found < 0:  # no record at or after ts
                if on_none == "error":
                    raise OptionError(
                        f"option {bound.option}: no record of {t}-{p} has a timestamp at or after {ts} "
                        "(startingOffsetsByTimestampStrategy=latest starts such a partition at its end)"
                    )
                found = LATEST
            out[tp] = found
        else:
            spec = bound.spec
            if spec in ("earliest", "latest"):
                out[tp] = EARLIEST if spec == "earliest" else LATEST
            else:
                assert isinstance(spec, dict)
                if p not in spec.get(t, {}):
                    raise OptionError(
                        f"option {bound.option}: no offset for {t}-{p} (JSON offsets must name every partition)"
                    )
                out[tp] = spec[t][p]
    return out


def current(o: SourceOptions) -> dict[TopicPartition, PartitionState]:
    """Every partition read, with its offsets now."""
    return asyncio.run(_state(o, False, False))[0]


def starting_offsets(o: SourceOptions) -> tuple[dict[TopicPartition, int], list[DataLoss]]:
    """A stream's initial offsets, resolved to numbers (what goes into Spark's checkpoint)."""
    state, starts, _ = asyncio.run(_state(o, True, False))
    out: dict[TopicPartition, int] = {}
    losses: list[DataLoss] = []
    for tp, s in state.items():
        r, loss = plan_range(tp[0], tp[1], starts[tp], LATEST, s.earliest, s.latest, o.end_name)
        out[tp] = r.start
        if loss:
            losses.append(loss)
    if losses and o.fail_on_data_loss:
        raise DataLossError(losses)
    return out, losses


def plan_batch(o: SourceOptions) -> tuple[list[OffsetRange], list[DataLoss]]:
    """A batch read's ranges (one per partition, empty ones too), fixed now, and what is lost."""
    state, starts, ends = asyncio.run(_state(o, True, True))
    ranges: list[OffsetRange] = []
    losses: list[DataLoss] = []
    for tp, s in state.items():
        r, loss = plan_range(tp[0], tp[1], starts[tp], ends[tp], s.earliest, s.latest, o.end_name)
        ranges.append(r)
        if loss:
            losses.append(loss)
    if losses and o.fail_on_data_loss:
        raise DataLossError(losses)
    return ranges, losses


def offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset JSON (as a dict): ``{"topic": {"0": 23}}``."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def offsets_of(data: dict[str, Any]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_json` (a checkpoint's offset, as Spark hands it back)."""
    return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
