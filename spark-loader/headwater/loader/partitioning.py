"""Event-time partitioning of the warehouse: which directory under ``<topic>/run=<run>/`` a record lands in.

Three ``loader.properties`` settings (Camus's and Gobblin's names in docs/loader.md)::

    output.partition.granularity = day        # or hour
    output.timezone = UTC                     # an IANA zone name: the dates and hours are local to it
    output.partition.time.field = timestamp   # the event time: see below

Directories (hive partitioning, so ``date`` and ``hour`` are columns to Spark and pyarrow)::

    day:   <topic>/run=<run>/date=YYYY-MM-DD/part-*.parquet
    hour:  <topic>/run=<run>/date=YYYY-MM-DD/hour=HH/part-*.parquet

``day`` with ``UTC`` and ``timestamp`` is the layout of every earlier run (the default). The event
time (``output.partition.time.field``):

- ``timestamp``: the Kafka record timestamp (CreateTime or LogAppendTime, as the topic has it);
- ``header:<name>``, e.g. ``header:origin.created`` (``origin.created`` alone means the same): a
  header holding milliseconds since the epoch as a decimal string, as the audited producers write
  ``origin.created`` (:data:`headwater.client.audit.HEADER_CREATED`);
- ``value:<JSON path>``, e.g. ``value:$.event.created``: a field of a JSON value (UTF-8), read with
  Spark's ``get_json_object`` path syntax; a number or a decimal string is milliseconds since the
  epoch, any other string an ISO-8601 time (``2026-11-27T09:15:00Z``; without an offset it is UTC).

On a typed topic (``schema.registry.url``, :mod:`headwater.loader.schemas`) ``value:$.a.b`` reads
the field of the decoded value instead (names only, no brackets): an Avro ``timestamp-*`` or
``date`` as it is, an integer as milliseconds since the epoch, a string as above.

A record whose field is absent or does not parse lands by its Kafka timestamp, as the audit counts
such a record (``origin.created`` else the timestamp). A late record lands in its own hour: a run
writes every hour its records fall in, and its manifest lists them (``partitions``). In a zone with
daylight saving time the repeated hour of an autumn night holds both hours' records and the skipped
hour of a spring night holds none (a Hive layout by local wall time, as Camus's and Gobblin's).
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "GRANULARITIES",
    "PartitionConfigError",
    "PartitionSpec",
    "dashboard_link",
    "parse_partitioning",
    "partition_start_ms",
    "touched",
]

GRANULARITIES = ("day", "hour")
#: the loader.properties names, in one place (the CLI's flags map onto them)
GRANULARITY, TIMEZONE, TIME_FIELD = "output.partition.granularity", "output.timezone", "output.partition.time.field"

_HEADER_NAME = re.compile(r"[^\s]+")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an Avro name; JSON Schema property names alike


class PartitionConfigError(ValueError):
    """One line naming the property and the value."""


@dataclass(frozen=True)
class PartitionSpec:
    granularity: str = "day"
    timezone: str = "UTC"
    #: "timestamp", "header:<name>" or "value:<JSON path>"
    time_field: str = "timestamp"

    @property
    def columns(self) -> tuple[str, ...]:
        """The partition columns, outermost first (``partitionBy``'s arguments)."""
        return ("date", "hour") if self.granularity == "hour" else ("date",)

    def event_time(self, typed: Sequence[tuple[int, pa.DataType]] | None = None) -> Any:
        """The event time as a Spark ``timestamp`` column (an instant; Kafka's timestamp when the
        configured field is absent or does not parse). ``typed``: a typed topic's decoded rows
        (``_table`` and one ``v<n>`` struct per table version, :mod:`headwater.loader.schemas`),
        whose payload field is read from the decoded struct instead of the raw value."""
        from pyspark.sql import functions as F

        kind, _, name = self.time_field.partition(":")
        if kind == "timestamp":
            return F.col("timestamp")
        if kind == "value" and typed is not None:
            return F.coalesce(_typed_field_time(name, typed), F.col("timestamp"))
        if kind == "header":
            # The last header of that name wins, as Kafka's Headers.lastHeader (map_from_entries
            # keeps the last duplicate under spark.sql.mapKeyDedupPolicy=LAST_WIN only, so filter).
            raw = F.try_element_at(F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name)), F.lit(-1))
            ms = raw["value"].cast("string").try_cast("bigint")  # decode() fails the job on bytes not UTF-8
            return F.coalesce(F.when(ms.isNotNull(), F.timestamp_millis(ms)), F.col("timestamp"))
        return F.coalesce(_text_time(F.get_json_object(F.col("value").cast("string"), name)), F.col("timestamp"))

    def add_columns(self, df: Any, typed: Sequence[tuple[int, pa.DataType]] | None = None) -> Any:
        """``df`` with the partition columns (strings: ``date`` = ``YYYY-MM-DD``, ``hour`` = ``HH``)
        of each record's event time in :attr:`timezone` (``typed``: see :meth:`event_time`)."""
        from pyspark.sql import functions as F

        local = F.from_utc_timestamp(self.event_time(typed), self.timezone)  # the session time zone is UTC
        df = df.withColumn("date", F.date_format(local, "yyyy-MM-dd"))
        if self.granularity == "hour":
            df = df.withColumn("hour", F.date_format(local, "HH"))
        return df

    def describe(self) -> dict[str, str]:
        """For the manifest: how this run partitioned."""
        return {"granularity": self.granularity, "timezone": self.timezone, "time_field": self.time_field}


def _text_time(text: Any) -> Any:
    """A payload's time as text: decimal milliseconds since the epoch, else ISO-8601 (else null)."""
    from pyspark.sql import functions as F

    ms = text.try_cast("bigint")
    return F.when(ms.isNotNull(), F.timestamp_millis(ms)).otherwise(F.try_to_timestamp(text))


def _typed_field_time(path: str, typed: Sequence[tuple[int, pa.DataType]]) -> Any:
    """The field at JSON path ``path`` (``$.a.b``: names only) of each table version's decoded
    struct that has it, as a timestamp: a timestamp or date as it is, an integer as milliseconds
    since the epoch, a string as for JSON values (decimal milliseconds, else ISO-8601); null for
    a row whose version lacks the field or has it of another type (then the Kafka timestamp)."""
    from pyspark.sql import functions as F

    names = path[2:].split(".") if path.startswith("$.") and len(path) > 2 else []
    if not names or not all(_FIELD_NAME.fullmatch(n) for n in names):
        return F.lit(None).cast("timestamp")  # brackets and wildcards: get_json_object's, not a struct's
    out: Any = None
    for version, value_type in typed:
        t: pa.DataType | None = value_type
        col = F.col(f"v{version}")
        for n in names:
            if t is None or not pa.types.is_struct(t) or t.get_field_index(n) < 0:
                t = None
                break
            t = t.field(n).type
            col = col.getField(n)
        if t is None:
            continue
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            when = col.cast("timestamp")
        elif pa.types.is_integer(t):
            when = F.timestamp_millis(col.cast("bigint"))
        elif pa.types.is_string(t):
            when = _text_time(col)
        else:
            continue
        row = F.col("_table") == F.lit(version)
        out = F.when(row, when) if out is None else out.when(row, when)
    return out if out is not None else F.lit(None).cast("timestamp")


def parse_partitioning(props: dict[str, str]) -> PartitionSpec:
    granularity = props.get(GRANULARITY, "").strip().lower() or "day"
    if granularity not in GRANULARITIES:
        raise PartitionConfigError(f"{GRANULARITY}: {granularity!r} is not hour or day")
    zone = props.get(TIMEZONE, "").strip() or "UTC"
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise PartitionConfigError(
            f"{TIMEZONE}: {zone!r} is not an IANA time zone name (for example UTC, Europe/Berlin)"
        ) from None
    field = props.get(TIME_FIELD, "").strip() or "timestamp"
    kind, colon, name = field.partition(":")
    if not colon and field != "timestamp":  # a bare header name, as origin.created
        kind, name = "header", field
    if kind == "timestamp" and not colon:
        time_field = "timestamp"
    elif kind == "header" and _HEADER_NAME.fullmatch(name):
        time_field = f"header:{name}"
    elif kind == "value" and name.startswith("$") and len(name) > 1:
        time_field = f"value:{name}"
    else:
        raise PartitionConfigError(
            f"{TIME_FIELD}: {field!r} is not timestamp, header:<name> (e.g. header:origin.created) "
            "or value:<JSON path> (e.g. value:$.created)"
        )
    return PartitionSpec(granularity, zone, time_field)


def touched(files: list[str], staging: str) -> list[str]:
    """The partition directories (``date=.../hour=...``) the data files below ``staging`` are in,
    from their relative paths (no Spark job)."""
    out = set()
    for rel in files:
        parts = rel[len(staging) + 1 :].split("/")[:-1]
        if parts and all("=" in p for p in parts):
            out.add("/".join(parts))
    return sorted(out)


def partition_start_ms(directory: str, timezone: str = "UTC") -> int:
    """The first instant (ms since the epoch) of a partition directory, ``date=YYYY-MM-DD`` or
    ``date=YYYY-MM-DD/hour=HH``, read in ``timezone`` (a repeated local hour: its first instance)."""
    import datetime

    fields = dict(part.split("=", 1) for part in directory.split("/"))
    day = datetime.date.fromisoformat(fields["date"])
    local = datetime.datetime(
        day.year, day.month, day.day, int(fields.get("hour", 0)), tzinfo=zoneinfo.ZoneInfo(timezone)
    )
    return int(local.timestamp() * 1000)


def dashboard_link(base_url: str, topic: str, directory: str, timezone: str = "UTC") -> str:
    """The audit dashboard's page of ``topic`` from the start of a partition directory (the
    producer, cluster and warehouse tiers' counts of its windows side by side)."""
    from urllib.parse import urlencode

    query = urlencode({"topic": topic, "from": partition_start_ms(directory, timezone)})
    return f"{base_url.rstrip('/')}/topic?{query}"
