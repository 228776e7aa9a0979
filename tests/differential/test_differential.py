"""Differential conformance: every scripted scenario against Apache Kafka 2.3.1 and Headwater, the
answers compared field by field.

Both brokers get the same requests (``scenarios.SCENARIOS``, in order) through the project's raw
protocol client (``tests/broker/wire.py``). Answers are normalised before comparing: hosts and
ports, cluster ids, producer and member ids, fetch session ids, log directory paths and throttle times
are replaced by placeholders; an ``error_message`` is compared only as present or absent (the words
are each broker's own); record sets are decoded to (offset, timestamp, key, value); arrays of
topics, partitions, configs and API keys are keyed by their name or index, so order does not matter.

A difference fails unless docs/protocol.md lists it under "Intended differences" (a table of
scenario and field patterns with the reason): the list is data, read here.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.protocol.apis import CREATE_TOPICS, FIND_COORDINATOR, INIT_PRODUCER_ID, METADATA, PRODUCE
from headwater.protocol.records.record import iter_batches
from tests.broker.wire import Wire
from tests.differential import scenarios
from tests.differential.conftest import Pair

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

#: Fields whose values are each broker's own: replaced by a placeholder when set.
_PLACEHOLDERS = {
    "host": "<host>",
    "port": "<port>",
    "cluster_id": "<cluster>",
    "log_dir": "<dir>",
    "throttle_time_ms": 0,
    "session_id": "<session>",
}
#: Ids that differ between the brokers but whose "unset" value (-1, "") is part of the answer.
_IDS = {"producer_id": -1, "member_id": "", "leader": ""}
#: How the elements of an array of structs are keyed (the first field present).
_KEYS = (
    "name",
    "topic",
    "topic_name",
    "partition_index",
    "partition",
    "api_key",
    "group_id",
    "resource_name",
    "node_id",
    "member_id",
)


def intended_differences() -> list[tuple[str, str, str]]:
    """(scenario glob, field glob, reason) rows of docs/protocol.md's "Intended differences" table."""
    text = DOC.read_text()
    section = text.split("## Intended differences", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def normalise(value: Any, field: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalise(v, field) for v in value]
        if items and all(isinstance(i, dict) for i in items):
            key = next((k for k in _KEYS if all(k in i for i in items)), None)
            if key is not None:
                return {f"{key}={i[key]}": i for i in items}
        return items
    if field in _PLACEHOLDERS:
        return _PLACEHOLDERS[field] if value not in (None, 0, -1) or field == "throttle_time_ms" else value
    if field in _IDS and value not in (-1, "", None):
        return f"<{field}>"
    if field == "error_message":
        return "<message>" if value else value
    if field == "records" and isinstance(value, (bytes, bytearray, memoryview)):
        return _records(bytes(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def _records(data: bytes) -> list[Any]:
    if not data:
        return []
    try:
        return [(r.offset, r.timestamp, r.key, r.value) for _, records in iter_batches(data) for r in records]
    except Exception as e:  # bytes we cannot decode: compare the reason
        return [f"undecodable: {type(e).__name__}"]


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(v, f"{path}.{k}" if path else str(k))
    else:
        yield path, value


def run(bootstrap: str, steps: list[scenarios.Step], until: Any = None) -> list[Any]:
    """Each step's answer (or the way the broker refused it: a closed connection); with ``until``,
    the last step is asked again until its answer satisfies it (60 s at most)."""
    w = Wire(bootstrap, timeout=30)
    ctx: scenarios.Ctx = {}
    answers: list[Any] = []
    try:
        for i, (api, version, body) in enumerate(steps):
            try:
                resp = w.request(api, version, _resolve(body, ctx))
                if until is not None and i == len(steps) - 1:
                    deadline = time.monotonic() + 60
                    while not until(resp) and time.monotonic() < deadline:
                        time.sleep(0.2)
                        resp = w.request(api, version, _resolve(body, ctx))
            except (ConnectionError, OSError) as e:
                answers.append({"closed": type(e).__name__})
                w.sock.close()
                w = Wire(bootstrap, timeout=30)
                continue
            if resp.get("producer_id", -1) >= 0:
                ctx["pid"] = resp["producer_id"]
            if api.name == "JoinGroup" and resp.get("member_id"):
                ctx["member"] = resp["member_id"]
                ctx["generation"] = resp["generation_id"]
            answers.append(resp)
    finally:
        w.sock.close()
    return answers


def _resolve(body: Any, ctx: scenarios.Ctx) -> Any:
    if callable(body):
        return body(ctx)
    if isinstance(body, dict):
        return {k: _resolve(v, ctx) for k, v in body.items()}
    if isinstance(body, list):
        return [_resolve(v, ctx) for v in body]
    return body


def differences(name: str, kafka: list[Any], headwater: list[Any]) -> list[tuple[str, Any, Any]]:
    out = []
    for i, (k, h) in enumerate(zip(kafka, headwater, strict=True)):
        fk, fh = dict(flatten(normalise(k))), dict(flatten(normalise(h)))
        for path in sorted(set(fk) | set(fh)):
            a, b = fk.get(path, "<absent>"), fh.get(path, "<absent>")
            if a != b:
                out.append((f"{i}.{path}", a, b))
    return out


@pytest.fixture(scope="module")
def ready(pair: Pair) -> Pair:
    """The scenarios' topics on both brokers, led, and the seeded records in them."""
    for bootstrap in (pair.kafka, pair.headwater):
        w = Wire(bootstrap, timeout=30)
        for topic, partitions in scenarios.TOPICS.items():
            w.request(CREATE_TOPICS, 2, scenarios.create_topic(topic, partitions))
        deadline = time.monotonic() + 60
        while True:
            md = w.request(METADATA, 1, {"topics": [{"name": t} for t in scenarios.TOPICS]})
            if all(p["leader_id"] >= 0 for t in md["topics"] for p in t["partitions"]) and len(md["topics"]) == len(
                scenarios.TOPICS
            ):
                break
            assert time.monotonic() < deadline, f"topics not led on {bootstrap}: {md}"
            time.sleep(0.1)
        while w.request(FIND_COORDINATOR, 1, {"key": "g-ready", "key_type": 0})["error_code"] != 0:
            assert time.monotonic() < deadline, f"no group coordinator on {bootstrap}"
            time.sleep(0.1)  # the offsets topic is created by the first FindCoordinator
        while w.request(FIND_COORDINATOR, 1, {"key": "tx-ready", "key_type": 1})["error_code"] != 0:
            assert time.monotonic() < deadline, f"no transaction coordinator on {bootstrap}"
            time.sleep(0.1)  # likewise __transaction_state
        init = {"transactional_id": "tx-ready", "transaction_timeout_ms": 60000}
        while w.request(INIT_PRODUCER_ID, 1, init)["error_code"] != 0:
            assert time.monotonic() < deadline, f"the transaction coordinator never loaded on {bootstrap}"
            time.sleep(0.1)
        for topic in scenarios.SEEDED:
            resp = w.request(PRODUCE, 7, scenarios.produce(topic, 0, scenarios.batch(5)))
            assert resp["responses"][0]["partitions"][0]["error_code"] == 0, resp
        w.sock.close()
    return pair


_RAN: set[str] = set()
_USED: set[tuple[str, str]] = set()


def _ids() -> list[str]:
    return [name for name, _ in scenarios.SCENARIOS]


def test_enough_scenarios() -> None:
    assert len(scenarios.SCENARIOS) >= 200
    assert len(set(_ids())) == len(_ids())
    served = {api.key for _, steps in scenarios.SCENARIOS for api, _, _ in steps}
    from headwater.protocol.apis import ALL_APIS

    for api in ALL_APIS:
        assert api.key in served, api.name
        used = {v for _, steps in scenarios.SCENARIOS for a, v, _ in steps if a is api}
        assert {api.min_version, api.max_version} <= used, api.name


def test_intended_differences_are_read_from_the_doc() -> None:
    rows = intended_differences()
    assert rows, "docs/protocol.md has no Intended differences table"
    assert all(reason for _, _, reason in rows)


@pytest.mark.parametrize("name", _ids())
def test_same_answer(ready: Pair, name: str) -> None:
    steps = dict(scenarios.SCENARIOS)[name]
    until = scenarios.UNTIL.get(name)
    kafka = run(ready.kafka, steps, until)
    headwater = run(ready.headwater, steps, until)
    allowed = intended_differences()
    unexplained = [
        (path, a, b)
        for path, a, b in differences(name, kafka, headwater)
        if not any(fnmatch.fnmatchcase(name, s) and fnmatch.fnmatchcase(path, f) for s, f, _ in allowed)
    ]
    _RAN.add(name)
    _USED.update(
        (s, f)
        for path, _, _ in differences(name, kafka, headwater)
        for s, f, _ in allowed
        if fnmatch.fnmatchcase(name, s) and fnmatch.fnmatchcase(path, f)
    )
    assert not unexplained, "\n".join(f"{name} {p}: Kafka {a!r} / Headwater {b!r}" for p, a, b in unexplained)


def test_every_intended_difference_is_still_seen() -> None:
    """A row of the list that no scenario needed any more is stale (the difference was fixed): it goes."""
    if set(_ids()) != _RAN:
        pytest.skip("only when every scenario ran in this session")
    stale = [(s, f) for s, f, _ in intended_differences() if (s, f) not in _USED]
    assert not stale, f"docs/protocol.md lists differences no scenario shows any more: {stale}"
