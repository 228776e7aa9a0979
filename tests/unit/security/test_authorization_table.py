"""The authorizer table (broker/headwater/broker/authorizer.py): one row for every API key the
broker serves, derived from the broker's own handler registry and ApiVersions answer, so adding a
handler without saying how it is authorized fails here; docs/security.md shows the same table.
Also the pure pieces the table's checks rely on: the producer flags of a record set, the
control-batch refusal, and fetch sessions bound to the principal that opened them."""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import pytest

from headwater.broker.authorizer import BEFORE, HANDLER, NO_CHECK, TABLE, markdown_table, producer_flags
from headwater.broker.fetch_session import FetchSessionCache
from headwater.broker.handlers import HANDLERS
from headwater.protocol.apis import ALL_APIS
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import has_control_batch
from headwater.protocol.records.record import encode_batch

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = {
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
}
RESOURCES = {"Topic", "Group", "Cluster", "TransactionalId"}


def test_every_served_api_key_has_a_row() -> None:
    served = set(HANDLERS)
    assert served, "the handler registry is empty: nothing checked"
    missing = sorted(served - set(TABLE))
    assert not missing, f"served API keys without an authorization row in authorizer.TABLE: {missing}"
    stale = sorted(set(TABLE) - served)
    assert not stale, f"rows for API keys the broker does not serve: {stale}"
    # what ApiVersions advertises is what is served
    assert {api.key for api in ALL_APIS} == served
    for api in ALL_APIS:
        assert TABLE[api.key].api.lower() == api.name.replace("_", "").lower(), (api.name, TABLE[api.key].api)


def test_rows_are_well_formed() -> None:
    for key, rule in TABLE.items():
        assert rule.where in (BEFORE, HANDLER, NO_CHECK), key
        if rule.where == BEFORE:
            assert rule.check is not None, f"{rule.api}: checked before the handler, but no check"
        else:
            assert rule.check is None, f"{rule.api}: a check that authorize() would never run"
        if rule.where == NO_CHECK:
            assert rule.needs == () and key in (17, 18, 36), f"{rule.api}: only the pre-login APIs go unchecked"
        else:
            assert rule.needs, f"{rule.api}: what does it need?"
            assert "AUTHORIZATION_FAILED" in rule.denied or rule.denied.startswith("no error"), rule
        for alternative in rule.needs:
            for operation, resource in alternative:
                assert operation in OPERATIONS and resource in RESOURCES, (rule.api, operation, resource)
        if rule.where == HANDLER:
            # a row that says "checked in the handler" names a handler that does ask the authorizer
            source = inspect.getsource(inspect.getmodule(HANDLERS[key]))  # type: ignore[arg-type]
            assert "authorizer" in source, f"{rule.api}: the handler never asks the authorizer"


def test_docs_security_md_shows_the_table() -> None:
    doc = (ROOT / "docs" / "security.md").read_text()
    assert markdown_table() in doc, "docs/security.md's authorization table differs from authorizer.markdown_table()"


def test_the_four_critical_apis_are_checked_before_their_handlers() -> None:
    """C1: DeleteRecords, CreatePartitions, AlterConfigs and IncrementalAlterConfigs had no row."""
    assert TABLE[21].needs == ((("Delete", "Topic"),),) and TABLE[21].where == BEFORE
    assert TABLE[37].needs == ((("Alter", "Topic"),),) and TABLE[37].where == BEFORE
    for key in (33, 44):
        assert (("AlterConfigs", "Topic"),) in TABLE[key].needs and TABLE[key].where == BEFORE


def test_producer_flags_look_at_every_batch() -> None:
    plain = encode_batch([(None, b"v", 0, ())])
    idempotent = encode_batch([(None, b"v", 0, ())], producer_id=7, producer_epoch=0, base_sequence=0)
    transactional = encode_batch(
        [(None, b"v", 0, ())], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
    )
    assert producer_flags(plain) == (False, False)
    assert producer_flags(idempotent) == (True, False)
    assert producer_flags(transactional) == (True, True)
    assert producer_flags(plain + idempotent) == (True, False)  # not only the first batch
    assert producer_flags(None) == (False, False)
    assert producer_flags(b"\x00" * 30) == (False, False)  # short input: nothing, no exception
    assert producer_flags(idempotent[:40]) == (False, False)


def test_control_batches_are_recognised() -> None:
    marker = encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 0, ())], control=True)
    plain = encode_batch([(None, b"v", 0, ())])
    assert has_control_batch(marker) and has_control_batch(plain + marker)
    assert not has_control_batch(plain) and not has_control_batch(None)


def test_fetch_session_is_bound_to_its_principal() -> None:
    cache = FetchSessionCache(10)
    s = cache.create(replica_id=-1, size=1, now_ms=0, principal="User:alice")
    assert s is not None
    assert cache.get(s.id, 1, -1, "User:alice") is s
    with pytest.raises(KafkaError) as e:
        cache.get(s.id, 1, -1, "User:mallory")
    assert e.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    cache.remove(s.id, "User:mallory")  # another principal's close: nothing closed
    assert not s.closed and cache.get(s.id, 1, -1, "User:alice") is s
    cache.remove(s.id, "User:alice")
    assert s.closed and len(cache) == 0


def test_fetch_session_ids_do_not_come_from_a_seeded_generator() -> None:
    """H2: ids from ``random`` (Mersenne Twister) could be replayed by seeding it, or predicted from
    earlier ids; two caches with ``random`` seeded alike must still hand out different ids."""
    ids = []
    for _ in range(2):
        random.seed(37)
        cache = FetchSessionCache(100)
        ids.append([s.id for _ in range(20) if (s := cache.create(-1, 1, 0, "User:c")) is not None])
    assert len(ids[0]) == 20 and ids[0] != ids[1]
    assert len(set(ids[0])) == 20 and all(0 < i <= 2**31 - 1 for i in ids[0])


def test_fetch_session_counts_its_topics_for_the_read_check() -> None:
    """The per-request Read check walks a session's topics, not its partitions: the count follows
    upserts and forgets."""
    s = FetchSessionCache(10).create(replica_id=-1, size=3, now_ms=0, principal="User:c")
    assert s is not None
    for topic, p in (("t", 0), ("t", 1), ("u", 0), ("t", 0)):
        s.upsert(
            topic,
            {
                "partition": p,
                "fetch_offset": 0,
                "log_start_offset": -1,
                "partition_max_bytes": 1,
                "current_leader_epoch": -1,
            },
        )
    assert s.topics == {"t": 2, "u": 1}
    s.forget([("t", 0), ("u", 0), ("u", 0)])
    assert s.topics == {"t": 1}
