"""Typed tables from a schema registry: Confluent's wire format decoded to Spark columns.

A producer using confluent-kafka's ``AvroSerializer`` or ``JSONSerializer`` (or any client with
Confluent's wire format: magic byte ``0``, the schema's 4-byte big-endian id, then the encoded
value) registers its schema under the subject ``<topic>-value`` (TopicNameStrategy). With
``schema.registry.url`` set, the loader asks the registry (Confluent's REST API: Apicurio Registry's
``/apis/ccompat/v6``, or Confluent's own root) for every version of each loaded topic's
value subject, once per run:

- a topic without that subject keeps today's binary ``key`` / ``value`` columns;
- a topic with it lands in **typed tables**: ``value`` is a struct of the schema's fields (Avro
  through fastavro, JSON Schema through ``json``), the other columns as before (``key`` stays
  binary, ``schema_id`` says which registered schema wrote the row).

Table versions follow the subject's versions in order, by Avro's rules of schema resolution: a new
version that only adds optional fields (a union with ``null``, or a default; for JSON Schema a
property that is not ``required``) or drops fields keeps the table, which gains a nullable column
(a dropped field's column stays, null in the newer rows); any other change (a field's type changed,
a new required field without a default) starts the next table version. Avro would promote ``int``
to ``long``; a table's Parquet files must agree on each column's type, so a promotion starts a new
version too. Table version ``n`` of a topic is the warehouse directory ``<topic>@v<n>`` (``@``
cannot appear in a topic name), every version nullable column by column, so ``mergeSchema``
reads all of a version's runs.

Records that do not decode (no magic byte, a schema id the subject does not hold, bytes the schema
does not read, a value that does not fit the column types) go to ``<topic>@deadletter``: topic,
partition, offset, timestamp, the raw key, value and headers, the schema id when there was one,
and ``reason``. They count in the run like every loaded record (the manifest's ``records``) and in
the audit's warehouse tier: each count event says how many of its records were dead-lettered
(``dead_lettered``), so the audit balances and the dead letters show.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from headwater.loader.partitioning import PartitionSpec

log = logging.getLogger("headwater.loader.schemas")

MAGIC = 0
TABLE_SEP = "@"  # never in a Kafka topic name ([a-zA-Z0-9._-])
DEADLETTER = "deadletter"


def table_name(topic: str, version: int) -> str:
    """The warehouse directory of ``topic``'s typed table version ``version``."""
    return f"{topic}{TABLE_SEP}v{version}"


def deadletter_name(topic: str) -> str:
    return f"{topic}{TABLE_SEP}{DEADLETTER}"


def is_deadletter(table: str) -> bool:
    return table.endswith(TABLE_SEP + DEADLETTER)


class RegistryError(RuntimeError):
    """The registry did not answer as Confluent's API does (one line, naming the URL)."""


class SchemaError(ValueError):
    """A schema the loader cannot map to Spark types (its records are dead-lettered)."""


# -- the registry ---------------------------------------------------------------------------------


class Registry:
    """Confluent's schema registry REST API, the calls the loader needs (``urllib``, JSON)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(
            self.url + path, headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise RegistryError(f"{self.url}{path}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"{self.url}{path}: {e}") from None

    def versions(self, subject: str) -> list[dict[str, Any]]:
        """Every version of ``subject`` (``{"version", "id", "schema", "schemaType"}``), oldest first;
        [] when the subject is not registered."""
        q = urllib.parse.quote(subject, safe="")
        numbers = self._get(f"/subjects/{q}/versions")
        if not numbers:
            return []
        out = []
        for n in sorted(int(v) for v in numbers):
            got = self._get(f"/subjects/{q}/versions/{n}")
            if got is None:  # deleted between the two calls
                continue
            out.append(
                {
                    "version": int(got["version"]),
                    "id": int(got["id"]),
                    "schema": got["schema"],
                    "schemaType": (got.get("schemaType") or _sniff(got["schema"])).upper(),
                }
            )
        return out


def _sniff(text: str) -> str:
    """The type of a schema whose registry answer has no ``schemaType`` (Confluent's API leaves it
    out for Avro; Apicurio Registry 2.0's ccompat leaves it out for every type): JSON Schema when it
    says so (``$schema``) or describes an object by ``properties``, else Avro."""
    try:
        doc = json.loads(text)
    except ValueError:
        return "PROTOBUF"  # Protobuf's text is not JSON
    if isinstance(doc, dict) and ("$schema" in doc or "properties" in doc or doc.get("type") == "object"):
        return "JSON"
    return "AVRO"


# -- schemas to Arrow (Spark) types ---------------------------------------------------------------


#: turns one decoded value into what ``pa.array`` takes for its column; None where it takes it as is
Conv = Callable[[Any], Any]
#: an Avro name (fastavro's full name) -> its column type and converter
Named = dict[str, tuple[pa.DataType, "Conv | None"]]

_AVRO_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _avro(schema: Any, named: Named) -> tuple[pa.DataType, bool, Conv | None]:
    """(Arrow type, nullable, converter) of a parsed Avro schema, as Spark's own Avro source maps
    it (``from_avro``): a union ``[null, T]`` is a nullable ``T``; ``[int, long]`` is a long and
    ``[float, double]`` a double; any other union is a struct with one nullable field per non-null
    branch (``member0``, ``member1``, ...), the branch a value took set and the others null. A
    logical type the column types cannot hold is read as its underlying type, as Avro's
    specification asks of readers: ``time-millis`` an int and ``time-micros`` a long (Spark's
    mapping too). The converter undoes what fastavro made of a value (``uuid.UUID``,
    ``datetime.time``, a map's dict, a named union branch's ``(name, value)``, see
    :func:`read_avro`)."""
    if isinstance(schema, list):
        return _avro_union(schema, named)
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], False, None
        if schema in named:
            return named[schema][0], False, named[schema][1]
        raise SchemaError(f"Avro type {schema!r} has no column type")
    logical = schema.get("logicalType")
    t = schema["type"]
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return pa.timestamp("us", tz="UTC"), False, None
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and t == "long":
        return pa.timestamp("us"), False, None  # Spark's TIMESTAMP_NTZ
    if logical == "date" and t == "int":
        return pa.date32(), False, None
    if logical == "decimal" and t in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0))), False, None
    if logical == "uuid" and t == "string":
        return pa.string(), False, _str
    if logical == "time-millis" and t == "int":
        return pa.int32(), False, _time_millis
    if logical == "time-micros" and t == "long":
        return pa.int64(), False, _time_micros
    if t == "record":
        fields, convs = [], []
        for f in schema["fields"]:
            ft, _, fc = _avro(f["type"], named)
            fields.append(pa.field(f["name"], ft, nullable=True))
            if fc is not None:
                convs.append((f["name"], fc))
        out = pa.struct(fields)
        conv = _record_conv(convs) if convs else None
        named[schema["name"]] = (out, conv)
        return out, False, conv
    if t == "enum":
        named[schema["name"]] = (pa.string(), None)
        return pa.string(), False, None
    if t == "fixed":
        named[schema["name"]] = (pa.binary(), None)
        return pa.binary(), False, None
    if t == "array":
        it, _, ic = _avro(schema["items"], named)
        return pa.list_(it), False, (None if ic is None else _list_conv(ic))
    if t == "map":
        vt, _, vc = _avro(schema["values"], named)
        return pa.map_(pa.string(), vt), False, _map_conv(vc)
    if isinstance(t, (str, list, dict)):  # {"type": T} with no logical type, or one not mapped above
        return _avro(t, named)
    raise SchemaError(f"Avro type {json.dumps(schema)[:80]} has no column type")


def _avro_union(schema: list[Any], named: Named) -> tuple[pa.DataType, bool, Conv | None]:
    branches = [b for b in schema if b != "null"]
    nullable = len(branches) < len(schema)
    if not branches:
        raise SchemaError("a union of only null has no column type")
    mapped = [_avro(b, named) for b in branches]
    has_named = any(_avro_name(b) for b in branches)  # fastavro gives (name, value) for those
    if len(branches) == 1:
        t, _, c = mapped[0]
        return t, True, (_unwrap_conv(c) if has_named else c)
    if sorted(map(str, branches)) in (["int", "long"], ["double", "float"]):
        return (pa.int64() if "long" in branches else pa.float64()), nullable, None
    members = [pa.field(f"member{i}", t, nullable=True) for i, (t, _, _) in enumerate(mapped)]
    tests = [_avro_test(b) for b in branches]
    convs = [c for _, _, c in mapped]
    out = pa.struct(members)

    def union(v: Any) -> Any:
        if v is None:
            return None
        name = None
        if isinstance(v, tuple):
            name, v = v
        for i, test in enumerate(tests):
            if test(name, v):
                c = convs[i]
                return {f"member{i}": c(v) if c else v}
        raise ValueError(f"no branch of the union takes {type(v).__name__} {v!r:.40}")

    return out, nullable, union


def _avro_name(schema: Any) -> str | None:
    """The full name of a named Avro type (a definition or a reference), None for the others."""
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed") and "logicalType" not in schema:
        return str(schema["name"])
    if isinstance(schema, str) and schema not in _AVRO_PRIMITIVES and schema != "null":
        return schema
    return None


def _avro_test(schema: Any) -> Callable[[str | None, Any], bool]:
    """Whether a value fastavro read from a union (with the branch's name for named types) came
    from this branch: named types by name, the others by the Python type fastavro makes."""
    name = _avro_name(schema)
    if name is not None:
        return lambda got, v: got == name
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    base = schema.get("type") if isinstance(schema, dict) else schema
    kinds: dict[str, tuple[type, ...]] = {
        "timestamp-millis": (datetime.datetime,),
        "timestamp-micros": (datetime.datetime,),
        "local-timestamp-millis": (datetime.datetime,),
        "local-timestamp-micros": (datetime.datetime,),
        "date": (datetime.date,),
        "time-millis": (datetime.time,),
        "time-micros": (datetime.time,),
        "uuid": (uuid.UUID,),
        "decimal": (decimal.Decimal,),
    }
    if logical in kinds:
        want = kinds[logical]
    else:
        want = {
            "boolean": (bool,),
            "int": (int,),
            "long": (int,),
            "float": (float,),
            "double": (float,),
            "bytes": (bytes,),
            "string": (str,),
            "array": (list,),
            "map": (dict,),
        }.get(str(base), ())
    exact_bool = base == "boolean"
    return lambda got, v: got is None and isinstance(v, want) and (exact_bool or not isinstance(v, bool))


def _str(v: Any) -> Any:
    return None if v is None else str(v)


def _time_millis(v: Any) -> Any:
    if not isinstance(v, datetime.time):
        return v
    return ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000


def _time_micros(v: Any) -> Any:
    if not isinstance(v, datetime.time):
        return v
    return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond


def _record_conv(convs: list[tuple[str, Conv]]) -> Conv:
    def record(v: Any) -> Any:
        if v is None:
            return None
        v = dict(v)
        for n, c in convs:
            if n in v:
                v[n] = c(v[n])
        return v

    return record


def _list_conv(c: Conv) -> Conv:
    return lambda v: None if v is None else [c(x) for x in v]


def _map_conv(c: Conv | None) -> Conv:
    if c is None:
        return lambda v: None if v is None else list(v.items())
    return lambda v: None if v is None else [(k, c(x)) for k, x in v.items()]


def _unwrap_conv(c: Conv | None) -> Conv:
    """``[null, T]`` with a named ``T``: fastavro gives ``(name, value)``."""

    def unwrap(v: Any) -> Any:
        if isinstance(v, tuple):
            v = v[1]
        return c(v) if c is not None and v is not None else v

    return unwrap


def read_avro(parsed: Any) -> Callable[[bytes], Any]:
    """A reader of one writer schema's values (Confluent's header removed), converted for its
    column type (:func:`_avro`); bytes left over are an error, as the value would be misread."""
    import fastavro

    conv = _avro(parsed, {})[2]

    def read(data: bytes) -> Any:
        buf = io.BytesIO(data)
        v = fastavro.schemaless_reader(buf, parsed, None, return_named_type=True)
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} byte(s) left after the record")
        return conv(v) if conv is not None else v

    return read


def _json_type(schema: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of a JSON Schema (the subset serializers write: typed properties)."""
    if not isinstance(schema, dict):
        raise SchemaError(f"JSON Schema {json.dumps(schema)[:80]} has no column type")
    t = schema.get("type")
    nullable = False
    if isinstance(t, list):
        kinds = [k for k in t if k != "null"]
        nullable = len(kinds) < len(t)
        if len(kinds) != 1:
            raise SchemaError(f"JSON Schema type {t} has more than one non-null type")
        t = kinds[0]
    if t is None and ("oneOf" in schema or "anyOf" in schema):
        options = schema.get("oneOf") or schema.get("anyOf") or []
        kinds = [o for o in options if o.get("type") != "null"]
        if len(kinds) != 1:
            raise SchemaError("a oneOf/anyOf of more than one non-null schema has no column type")
        return _json_type(kinds[0])[0], True
    simple = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    if t in simple:
        return simple[t], nullable
    if t == "array":
        return pa.list_(_json_type(schema.get("items", {}))[0]), nullable
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        if not props:
            raise SchemaError("a JSON Schema object without properties has no column types")
        return pa.struct([pa.field(k, _json_type(v)[0], nullable=True) for k, v in props.items()]), nullable
    raise SchemaError(f"JSON Schema type {t!r} has no column type")


def _optional_fields(kind: str, parsed: Any) -> set[str]:
    """The top-level fields a reader may miss: Avro ones with a default or a null branch, JSON
    Schema properties that are not ``required``."""
    if kind == "AVRO":
        if not (isinstance(parsed, dict) and parsed.get("type") == "record"):
            return set()
        return {
            f["name"]
            for f in parsed["fields"]
            if "default" in f or (isinstance(f["type"], list) and "null" in f["type"])
        }
    required = set(parsed.get("required") or []) if isinstance(parsed, dict) else set()
    return {k for k in (parsed.get("properties") or {}) if k not in required} if isinstance(parsed, dict) else set()


# -- the plan of one topic ------------------------------------------------------------------------


@dataclass
class TableVersion:
    version: int
    value_type: pa.DataType  # the union of its schemas' fields (a struct), every field nullable
    schema_ids: list[int] = field(default_factory=list)


@dataclass
class TopicSchemas:
    """What one run decodes one topic with: every registered value schema and its table version."""

    topic: str
    subject: str
    #: schema id -> (kind "AVRO" / "JSON", parsed schema, table version); unusable ones -> reason
    writers: dict[int, tuple[str, Any, int]]
    unusable: dict[int, str]
    tables: dict[int, TableVersion]
    #: the registry's answer the plan was made from (the source's decode option carries it)
    versions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def newest(self) -> int:
        return max(self.tables) if self.tables else 0


def _parse(kind: str, text: str) -> tuple[Any, pa.DataType]:
    if kind == "AVRO":
        import fastavro

        parsed = fastavro.parse_schema(json.loads(text))
        return parsed, _avro(parsed, {})[0]
    if kind == "JSON":
        parsed = json.loads(text)
        return parsed, _json_type(parsed)[0]
    raise SchemaError(f"schema type {kind} is not decoded (AVRO and JSON are)")


def _extends(table: pa.DataType, new: pa.DataType, optional: set[str]) -> pa.DataType | None:
    """The table's type with ``new``'s fields added, if Avro's rules keep the table (see the module);
    None when the change needs a new table version."""
    if not (pa.types.is_struct(table) and pa.types.is_struct(new)):
        return table if table.equals(new) else None
    have = {table.field(i).name: table.field(i) for i in range(table.num_fields)}
    fields = list(have.values())
    for i in range(new.num_fields):
        f = new.field(i)
        old = have.get(f.name)
        if old is None:
            if f.name not in optional:  # the table's older rows have no value for a required field
                return None
            fields.append(pa.field(f.name, f.type, nullable=True))
        elif not old.type.equals(f.type):
            return None
    return pa.struct(fields)


def plan_topic(registry: Registry, topic: str) -> TopicSchemas | None:
    """The topic's value schemas and table versions, or None: no subject, binary columns as today."""
    subject = f"{topic}-value"
    versions = registry.versions(subject)
    return plan_versions(topic, subject, versions) if versions else None


def plan_versions(topic: str, subject: str, versions: Sequence[dict[str, Any]]) -> TopicSchemas:
    """The plan of ``subject``'s versions (:meth:`Registry.versions`' answer), oldest first."""
    writers: dict[int, tuple[str, Any, int]] = {}
    unusable: dict[int, str] = {}
    tables: dict[int, TableVersion] = {}
    current: TableVersion | None = None
    for v in versions:
        try:
            parsed, value_type = _parse(v["schemaType"], v["schema"])
        except (SchemaError, ValueError, KeyError, TypeError) as e:
            unusable[v["id"]] = f"{subject} version {v['version']} (schema id {v['id']}): {e}"
            continue
        extended = (
            _extends(current.value_type, value_type, _optional_fields(v["schemaType"], parsed)) if current else None
        )
        if current is None or extended is None:
            current = TableVersion(len(tables) + 1, value_type)
            tables[current.version] = current
        else:
            current.value_type = extended
        current.schema_ids.append(v["id"])
        writers[v["id"]] = (v["schemaType"], parsed, current.version)
    return TopicSchemas(topic, subject, writers, unusable, tables, list(versions))


#: the ``headwater`` source's option that decodes while it reads (one Python pass over each record):
#: the plan as :func:`decode_option` writes it; the read's columns gain :func:`extra_fields`
DECODE_OPTION = "headwater.decode.schemas"


def decode_option(plan: TopicSchemas) -> str:
    """The plan as the source's :data:`DECODE_OPTION` (the registry's versions: small, plain JSON)."""
    return json.dumps({"topic": plan.topic, "subject": plan.subject, "versions": plan.versions})


def plan_of_option(text: str) -> TopicSchemas:
    try:
        got = json.loads(text)
        return plan_versions(got["topic"], got["subject"], got["versions"])
    except (ValueError, KeyError, TypeError) as e:
        raise SchemaError(f"{DECODE_OPTION}: not a plan written by decode_option ({e})") from None


# -- decoding (in Spark's Python workers) ---------------------------------------------------------

#: the columns every typed table and dead-letter table carries besides value (the source's)
META = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def extra_fields(plan: TopicSchemas) -> list[pa.Field]:
    """What decoding adds to the source's columns (value stays raw): ``_table`` (the row's table
    version, 0 for a dead letter), ``schema_id``, ``reason`` and one ``v<n>`` struct per table version."""
    fields = [pa.field("_table", pa.int32()), pa.field("schema_id", pa.int32()), pa.field("reason", pa.string())]
    return fields + [pa.field(f"v{n}", t.value_type) for n, t in sorted(plan.tables.items())]


def decoder(plan: TopicSchemas) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Each source batch with its values decoded into its table version (the source's columns as
    they come, then :func:`extra_fields`): run by the source itself (:data:`DECODE_OPTION`) or as
    a ``mapInArrow`` function. A decoded row's raw ``value`` is null (its ``v<n>`` carries it)."""
    extra = extra_fields(plan)
    tables = sorted(plan.tables)
    types = {n: plan.tables[n].value_type for n in tables}
    writers = plan.writers
    unusable = plan.unusable
    subject = plan.subject
    newest = plan.newest

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        readers: dict[int, Callable[[bytes], Any]] = {}

        def reader(sid: int) -> Callable[[bytes], Any]:
            got = readers.get(sid)
            if got is None:
                kind, parsed, _ = writers[sid]
                got = read_avro(parsed) if kind == "AVRO" else json.loads
                readers[sid] = got
            return got

        for batch in batches:
            values = batch.column(batch.schema.get_field_index("value")).to_pylist()
            n = len(values)
            table = [0] * n
            sids: list[int | None] = [None] * n
            reasons: list[str | None] = [None] * n
            decoded: dict[int, list[Any]] = {t: [None] * n for t in tables}
            for i, raw in enumerate(values):
                if raw is None:  # a tombstone: a row of the newest version, value null
                    table[i] = newest
                    continue
                if len(raw) < 5 or raw[0] != MAGIC:
                    reasons[i] = "no Confluent wire-format header (magic byte 0 and a 4-byte schema id)"
                    continue
                sid = int.from_bytes(raw[1:5], "big")
                sids[i] = sid
                if sid not in writers:
                    reasons[i] = unusable.get(sid) or f"schema id {sid} is not a version of subject {subject}"
                    continue
                try:
                    v = reader(sid)(raw[5:])
                except Exception as e:  # fastavro's errors, and a value no union branch takes
                    reasons[i] = f"schema id {sid} does not read the value: {type(e).__name__} {e}".strip()[:500]
                    continue
                t = writers[sid][2]
                decoded[t][i] = v
                table[i] = t
            columns: dict[str, pa.Array] = {}
            for t in tables:
                try:
                    columns[f"v{t}"] = pa.array(decoded[t], type=types[t])
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    # one value does not fit the columns: find it (and any other), dead-letter it
                    for i, v in enumerate(decoded[t]):
                        if v is None:
                            continue
                        try:
                            pa.array([v], type=types[t])
                        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                            decoded[t][i] = None
                            table[i] = 0
                            reasons[i] = f"schema id {sids[i]}: the value does not fit table version {t}: {e}"[:500]
                    columns[f"v{t}"] = pa.array(decoded[t], type=types[t])
            arrays = [batch.column(i) for i in range(batch.num_columns)]
            # the raw value is only kept for the dead letters: a decoded row carries it in v<n>
            at = batch.schema.get_field_index("value")
            arrays[at] = pa.array(
                [raw if t == 0 else None for raw, t in zip(values, table)], batch.schema.field(at).type
            )
            arrays += [
                pa.array(table, pa.int32()),
                pa.array(sids, pa.int32()),
                pa.array(reasons, pa.string()),
            ]
            arrays += [columns[f"v{t}"] for t in tables]
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema([*batch.schema, *extra]))

    return run


# -- the Spark side: one topic's run into its table versions and dead letters ---------------------


def write_typed(
    df: Any, plan: TopicSchemas, staging: Callable[[str], str], partitioning: PartitionSpec, decoded: bool = False
) -> dict[str, int]:
    """Decode ``df`` (the source's columns) once, add ``partitioning``'s columns (a payload event
    time read from the decoded struct) and write each table version with rows, and the dead
    letters, as Parquet at ``staging(table)``; returns rows per table. ``decoded``: ``df`` was read
    with :data:`DECODE_OPTION` and has :func:`extra_fields` already (no ``mapInArrow``: the records
    pass through Python once, in the source's reader).

    The decoded rows are written once, by ``_table``, to a scratch directory beside the staging
    (``staging("<topic>@decoded")``, deleted when the tables are written; a crash leaves it to
    the next run's drop of unpublished staging), and each table is written from there: no second
    read of the topic, no second decode, and no cached DataFrame, whose blocks (a Kafka partition's
    records each) overflowed the driver's default 1 GiB heap at 250,000 records of 1 KiB a
    partition (``java.lang.OutOfMemoryError`` reading the cache back, bench scenario 8)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    spark = df.sparkSession
    if not decoded:
        extra = [StructField(f.name, from_arrow_type(f.type), True) for f in extra_fields(plan)]
        df = df.mapInArrow(decoder(plan), StructType([*df.schema.fields, *extra]))
    df = partitioning.add_columns(df, [(n, t.value_type) for n, t in sorted(plan.tables.items())])
    out = df.schema
    partition_cols = partitioning.columns
    scratch = staging(f"{plan.topic}{TABLE_SEP}decoded")
    df.write.mode("overwrite").partitionBy("_table").parquet(scratch)
    try:
        written_once = spark.read.parquet(scratch)  # counts from the files' footers: no data read
        counts = {int(r["_table"]): int(r["count"]) for r in written_once.groupBy("_table").count().collect()}
        written: dict[str, int] = {}
        for t, n in sorted(counts.items()):
            rows = spark.read.schema(out).parquet(f"{scratch}/_table={t}")
            if t == 0:
                name = deadletter_name(plan.topic)
                cols: list[Any] = [*META, "value", "schema_id", "reason"]
            else:
                name = table_name(plan.topic, t)
                cols = [*META[:1], F.col(f"v{t}").alias("value"), *META[1:], "schema_id"]
            rows.select(*cols, *partition_cols).write.mode("append").partitionBy(*partition_cols).parquet(
                staging(name)
            )  # append: a run bounded by max.duration.per.run writes a topic in rounds
            written[name] = n
            log.info("%s: %d record(s) into %s", plan.topic, n, name)
        return written
    finally:
        _delete(spark, scratch)


def _delete(spark: Any, path: str) -> None:
    """Delete ``path`` (recursively), and its parent when that leaves it empty (Hadoop's FileSystem)."""
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.delete(p, True)
    parent = p.getParent()
    if parent is not None and fs.exists(parent) and not fs.listStatus(parent):
        fs.delete(parent, False)
