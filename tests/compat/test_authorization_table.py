"""Every API the broker serves, authorized as Kafka 2.3's KafkaApis: table-driven, on the wire.

One broker for the module, with a SASL_PLAINTEXT/PLAIN listener, ``SimpleAclAuthorizer`` and
``allow.everyone.if.no.acl.found=false``. For each API key of the broker's handler registry
(``authorizer.TABLE``) a case sends the request exactly (Headwater's raw protocol client) twice:

- as a principal with no ACL on the case's resources -- ``nobody`` (no ACL at all), or ``reader``
  (Read on every topic and group, the review's "may only Read and Describe") for the APIs that
  must need more than that -- and expects Kafka's ``*_AUTHORIZATION_FAILED`` with nothing changed:
  the topic's log start and end offsets, its partition count and configs in ZooKeeper, the group's
  committed offsets and the ACLs are the same after the refusal as before it;
- as ``ok<key>``, which holds exactly the ACLs the table says the API needs (its first alternative,
  or the one the case names) on the case's resources, and expects the request to be served.

Then the findings the table's rows fix, one test each: C1 (DeleteRecords on internal topics, the
CreatePartitions bound), H2 (a fetch session after its ACL is removed, and in another principal's
hands), M3 (producer ids, transactional and control batches), M4 (OffsetFetch of every partition),
L5 (Metadata auto-creation decided per topic).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from headwater.acls import CLUSTER_NAME
from headwater.broker.authorizer import NO_CHECK, TABLE
from headwater.broker.handlers import HANDLERS
from headwater.cli.main import main as cli_main
from headwater.client.connection import BrokerConnection
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import ALL_APIS
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import encode_batch
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port

APIS = {api.key: api for api in ALL_APIS}
DENIALS = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
STALE_EPOCH = 1  # a broker epoch the broker never had: the controller APIs answer STALE_BROKER_EPOCH


def batch(n: int = 1, **kw: Any) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, f"v{i}".encode(), now, ()) for i in range(n)], **kw)


def produce_body(topic: str, records: bytes, transactional_id: str | None = None) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "acks": 1,
        "timeout_ms": 10000,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "records": records}]}],
    }


def fetch_body(topic: str, session_id: int = 0, epoch: int = -1, partitions: list[int] | None = None) -> dict[str, Any]:
    parts = [
        {"partition": p, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        for p in ([0] if partitions is None else partitions)
    ]
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": topic, "partitions": parts}] if parts else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def offset_commit_body(group: str, topic: str, offset: int) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}],
            }
        ],
    }


#: producer id and epoch of each transactional id the fixture initialised (InitProducerId as admin)
PRODUCERS: dict[str, tuple[int, int]] = {}
TXN_IDS = ("az-tx24", "az-tx25", "az-tx26", "az-tx28")


def txn(tid: str) -> dict[str, Any]:
    producer_id, epoch = PRODUCERS[tid]
    return {"transactional_id": tid, "producer_id": producer_id, "producer_epoch": epoch}


def config_resource(topic: str, value: str, incremental: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "retention.ms", "value": value}
    if incremental:
        entry["config_operation"] = 0  # SET
    return {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [entry]}], "validate_only": False}


def acl_creation(name: str) -> dict[str, Any]:
    return {
        "resource_type": 2,
        "resource_name": name,
        "resource_pattern_type": 3,
        "principal": "User:someone",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }


# -- what a response says ----------------------------------------------------------------------------


def first_partition_code(key: str = "responses", parts: str = "partitions") -> Callable[[dict[str, Any]], int]:
    return lambda r: int(r[key][0][parts][0]["error_code"])


def top_code(r: dict[str, Any]) -> int:
    return int(r["error_code"])


def first_code(key: str) -> Callable[[dict[str, Any]], int]:
    return lambda r: int(r[key][0]["error_code"])


@dataclass
class Case:
    """One API: the request, where its error code is, and the resources its ACLs name."""

    key: int
    version: int
    body: Callable[[], dict[str, Any]]
    code: Callable[[dict[str, Any]], int]
    topic: str | None = None
    group: str | None = None
    tid: str | None = None
    alternative: int = 0  # which of the table's alternatives ok<key> gets
    denied_user: str = "nobody"
    #: the refused answer when it is not an error code (ListGroups, DescribeLogDirs: filtered)
    refused: Callable[[dict[str, Any]], bool] | None = None
    allowed: Callable[[dict[str, Any]], bool] | None = None
    #: ACL znode a CreateAcls / DeleteAcls case would change
    acl_topic: str | None = None
    #: the code the allowed principal gets (not an authorization error: the request was served)
    expect: int = ErrorCode.NONE
    #: what the served request changed, seen from the broker's own state
    after: Callable[[Secured], bool] | None = None
    #: tells a second case of one API key apart (its own allowed principal)
    suffix: str = ""

    @property
    def user(self) -> str:
        return f"ok{self.key}{self.suffix}"

    @property
    def id(self) -> str:
        return f"{self.key}-{TABLE[self.key].api}{'-' + self.suffix if self.suffix else ''}"

    def grants(self) -> list[dict[str, Any]]:
        """Exactly what the table says this API needs, on this case's resources."""
        out = []
        for operation, resource in TABLE[self.key].needs[self.alternative]:
            name = {"Topic": self.topic, "Group": self.group, "TransactionalId": self.tid, "Cluster": CLUSTER_NAME}[
                resource
            ]
            assert name is not None, (self.key, resource)
            out.append(
                {"principal": f"User:{self.user}", "operations": [operation], "resource_type": resource, "name": name}
            )
        return out


CASES = [
    Case(0, 7, lambda: produce_body("az-produce", batch()), first_partition_code(), topic="az-produce"),
    Case(1, 11, lambda: fetch_body("az-fetch"), first_partition_code(), topic="az-fetch"),
    Case(
        2,
        5,
        lambda: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "az-offsets", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        first_partition_code("topics"),
        topic="az-offsets",
    ),
    Case(
        3,
        7,
        lambda: {"topics": [{"name": "az-metadata"}], "allow_auto_topic_creation": False},
        first_code("topics"),
        topic="az-metadata",
    ),
    Case(
        4,
        2,
        lambda: {
            "controller_id": 0,
            "controller_epoch": 99,
            "broker_epoch": STALE_EPOCH,
            "topic_states": [{"topic_name": "az-fetch", "partition_states": [{"partition_index": 0}]}],
        },
        top_code,
        topic="az-fetch",  # its partition is named: nothing of it may change
        expect=ErrorCode.STALE_BROKER_EPOCH,
        refused=lambda r: (
            r["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            and [(e["topic_name"], e["partition_index"], e["error_code"]) for e in r["partition_errors"]]
            == [("az-fetch", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
        ),
    ),
    Case(
        5,
        1,
        lambda: {
            "controller_id": 0,
            "controller_epoch": 99,
            "broker_epoch": STALE_EPOCH,
            "delete_partitions": False,
            "topics": [{"name": "az-fetch", "partition_indexes": [0]}],
        },
        top_code,
        topic="az-fetch",  # its partition is named: nothing of it may change
        expect=ErrorCode.STALE_BROKER_EPOCH,
        refused=lambda r: (
            r["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            and [(e["topic_name"], e["partition_index"], e["error_code"]) for e in r["partition_errors"]]
            == [("az-fetch", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
        ),
    ),
    Case(
        6,
        5,
        lambda: {"controller_id": 0, "controller_epoch": 99, "broker_epoch": STALE_EPOCH, "topic_states": []},
        top_code,
        expect=ErrorCode.STALE_BROKER_EPOCH,
    ),
    Case(7, 2, lambda: {"broker_id": 0, "broker_epoch": STALE_EPOCH}, top_code, expect=ErrorCode.STALE_BROKER_EPOCH),
    Case(
        8,
        2,
        lambda: offset_commit_body("az-commit-group", "az-commit", 1),
        first_partition_code("topics"),
        topic="az-commit",
        group="az-commit-group",
    ),
    Case(
        9,
        5,
        lambda: {"group_id": "az-fetch-group", "topics": [{"name": "az-committed", "partition_indexes": [0]}]},
        top_code,
        topic="az-committed",
        group="az-fetch-group",
        allowed=lambda r: r["error_code"] == 0 and r["topics"][0]["partitions"][0]["committed_offset"] == 1,
    ),
    Case(10, 2, lambda: {"key": "az-find-group", "key_type": 0}, top_code, group="az-find-group"),
    Case(
        11,
        5,
        lambda: {
            "group_id": "az-join-group",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        top_code,
        group="az-join-group",
        expect=ErrorCode.MEMBER_ID_REQUIRED,
    ),
    Case(
        12,
        3,
        lambda: {"group_id": "az-hb-group", "generation_id": 1, "member_id": "m"},
        top_code,
        group="az-hb-group",
        expect=ErrorCode.UNKNOWN_MEMBER_ID,
    ),
    Case(
        13,
        2,
        lambda: {"group_id": "az-leave-group", "member_id": "m"},
        top_code,
        group="az-leave-group",
        expect=ErrorCode.UNKNOWN_MEMBER_ID,
    ),
    Case(
        14,
        3,
        lambda: {"group_id": "az-sync-group", "generation_id": 1, "member_id": "m", "assignments": []},
        top_code,
        group="az-sync-group",
        expect=ErrorCode.UNKNOWN_MEMBER_ID,
    ),
    Case(15, 2, lambda: {"groups": ["az-fetch-group"]}, first_code("groups"), group="az-fetch-group"),
    Case(
        16,
        2,
        lambda: {},
        top_code,
        refused=lambda r: r["error_code"] == 0 and "az-fetch-group" not in {g["group_id"] for g in r["groups"]},
        allowed=lambda r: r["error_code"] == 0 and "az-fetch-group" in {g["group_id"] for g in r["groups"]},
    ),
    Case(18, 2, lambda: {}, top_code, allowed=lambda r: r["error_code"] == 0 and len(r["api_keys"]) == len(HANDLERS)),
    Case(
        19,
        3,
        lambda: {
            "topics": [
                {"name": "az-created", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
        first_code("topics"),
        topic="az-created",
        alternative=1,  # Create on the Topic (not on the Cluster)
        after=lambda s: s.znode("/brokers/topics/az-created") is not None,
    ),
    Case(
        20, 3, lambda: {"topic_names": ["az-deleted"], "timeout_ms": 10000}, first_code("responses"), topic="az-deleted"
    ),
    Case(
        21,
        1,
        lambda: {
            "topics": [{"name": "az-records", "partitions": [{"partition_index": 0, "offset": -1}]}],
            "timeout_ms": 10000,
        },
        first_partition_code("topics"),
        topic="az-records",
        denied_user="reader",
        after=lambda s: s.offsets("az-records") == (3, 3),  # every record deleted
    ),
    Case(22, 1, lambda: {"transactional_id": None, "transaction_timeout_ms": 60000}, top_code),
    Case(
        22,
        1,
        lambda: {"transactional_id": "az-tx22", "transaction_timeout_ms": 60000},
        top_code,
        tid="az-tx22",
        alternative=1,  # Write on the TransactionalId (a transactional producer)
        suffix="txn",
    ),
    Case(
        23,
        2,
        lambda: {
            "topics": [
                {"topic": "az-epochs", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
            ]
        },
        first_partition_code("topics"),
        topic="az-epochs",
        alternative=1,  # Describe on the Topic: a KIP-320 consumer
        denied_user="nobody",
    ),
    Case(
        24,
        1,
        lambda: {**txn("az-tx24"), "topics": [{"name": "az-txn-add", "partitions": [0]}]},
        lambda r: int(r["results"][0]["results_by_partition"][0]["partition_error_code"]),
        topic="az-txn-add",
        tid="az-tx24",
    ),
    Case(
        25,
        1,
        lambda: {**txn("az-tx25"), "group_id": "az-txn-group"},
        top_code,
        group="az-txn-group",
        tid="az-tx25",
        denied_user="reader",  # Read on the group is not enough
    ),
    Case(
        26,
        1,
        lambda: {**txn("az-tx26"), "committed": False},  # the fixture opened its transaction
        top_code,
        tid="az-tx26",
    ),
    Case(
        27,
        0,
        lambda: {
            "markers": [
                {
                    "producer_id": 424242,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "az-markers", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
        lambda r: int(r["markers"][0]["topics"][0]["partitions"][0]["error_code"]),
        topic="az-markers",
        after=lambda s: s.offsets("az-markers") == (0, 4),  # the three records and the ABORT marker
    ),
    Case(
        28,
        2,
        lambda: {
            **txn("az-tx28"),
            "group_id": "az-txn-commit-group",
            "topics": [
                {
                    "name": "az-txn-commit",
                    "partitions": [{"partition_index": 0, "committed_offset": 2, "committed_metadata": ""}],
                }
            ],
        },
        first_partition_code("topics"),
        topic="az-txn-commit",
        group="az-txn-commit-group",
        tid="az-tx28",
        denied_user="reader",  # Read on the group and the topic is not enough
    ),
    Case(
        29,
        1,
        lambda: {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
        top_code,
    ),
    Case(
        30,
        1,
        lambda: {"creations": [acl_creation("az-acl-created")]},
        first_code("results"),
        acl_topic="az-acl-created",
        after=lambda s: s.znode("/kafka-acl/Topic/az-acl-created") is not None,
    ),
    Case(
        31,
        1,
        lambda: {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": "az-acl-doomed",
                    "pattern_type_filter": 3,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
        first_code("filter_results"),
        acl_topic="az-acl-doomed",
        after=lambda s: s.znode("/kafka-acl/Topic/az-acl-doomed") is None,
    ),
    Case(
        32,
        1,
        lambda: {
            "resources": [{"resource_type": 2, "resource_name": "az-describe-configs", "configuration_keys": None}],
            "include_synonyms": False,
        },
        first_code("results"),
        topic="az-describe-configs",
    ),
    Case(
        33,
        1,
        lambda: config_resource("az-alter-configs", "1000", False),
        first_code("responses"),
        topic="az-alter-configs",
        denied_user="reader",
        after=lambda s: s.znode("/config/topics/az-alter-configs")["config"] == {"retention.ms": "1000"},
    ),
    Case(
        35,
        1,
        lambda: {"topics": None},
        top_code,
        refused=lambda r: r["results"] == [],
        allowed=lambda r: len(r["results"]) == 1 and r["results"][0]["error_code"] == 0,
    ),
    Case(
        37,
        1,
        lambda: {
            "topics": [{"name": "az-partitions", "count": 3, "assignments": None}],
            "timeout_ms": 10000,
            "validate_only": False,
        },
        first_code("results"),
        topic="az-partitions",
        denied_user="reader",
        after=lambda s: len(s.znode("/brokers/topics/az-partitions")["partitions"]) == 3,
    ),
    Case(42, 1, lambda: {"groups_names": ["az-doomed-group"]}, first_code("results"), group="az-doomed-group"),
    Case(
        43,
        1,
        lambda: {
            "election_type": 0,
            "topic_partitions": [{"topic": "az-elect", "partitions": [0]}],
            "timeout_ms": 5000,
        },
        top_code,
        topic="az-elect",
    ),
    Case(
        44,
        0,
        lambda: config_resource("az-incremental", "2000", True),
        first_code("responses"),
        topic="az-incremental",
        denied_user="reader",
        after=lambda s: s.znode("/config/topics/az-incremental")["config"] == {"retention.ms": "2000"},
    ),
]
TOPICS = sorted(
    {c.topic for c in CASES if c.topic and c.key not in (19, 3)} | {"az-metadata", "az-session", "az-txn-end"}
)
USERS = ["admin", "nobody", "reader", "other", "producer", "idem", "txn", "lister", "creator"] + [c.user for c in CASES]
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{u}-pw"' for u in USERS)
    + ";"
)


async def _call(port: int, user: str, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    sec = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-pw",
        }
    )
    conn = BrokerConnection("127.0.0.1", port, security=sec)
    await conn.connect()
    try:
        return await conn.request(APIS[key], body, version)
    finally:
        await conn.close()


@dataclass
class Secured:
    zk: str
    sasl: int
    kazoo: KazooClient

    def call(self, user: str, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return asyncio.run(_call(self.sasl, user, key, version, body))

    def offsets(self, topic: str) -> tuple[int, int]:
        """(log start, log end) of partition 0, as the broker answers its super user."""
        out = []
        for ts in (-2, -1):
            body = {
                "replica_id": -1,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}],
            }
            p = self.call("admin", 2, 5, body)["topics"][0]["partitions"][0]
            assert p["error_code"] == 0, (topic, p)
            out.append(int(p["offset"]))
        return out[0], out[1]

    def znode(self, path: str) -> Any:
        got = self.kazoo.exists(path)
        return None if got is None else json.loads(self.kazoo.get(path)[0] or b"null")

    def committed(self, group: str) -> Any:
        return self.call("admin", 9, 5, {"group_id": group, "topics": None})["topics"]

    def world(self, case: Case) -> dict[str, Any]:
        """What a refused request must leave as it was."""
        w: dict[str, Any] = {}
        if case.topic:
            w["assignment"] = self.znode(f"/brokers/topics/{case.topic}")
            w["config"] = self.znode(f"/config/topics/{case.topic}")
            if w["assignment"] is not None:
                w["offsets"] = self.offsets(case.topic)
        if case.group:
            w["committed"] = self.committed(case.group)
        if case.acl_topic:
            w["acls"] = self.znode(f"/kafka-acl/Topic/{case.acl_topic}")
        w["brokers_config"] = self.znode("/config/brokers/0")
        return w


def _grant(zk: str, tmp: Path, bindings: list[dict[str, Any]]) -> None:
    f = tmp / f"acls-{time.monotonic_ns()}.json"
    f.write_text(json.dumps(bindings))
    assert cli_main(["acls", "--zookeeper", zk, "--add", "--from-file", str(f)]) == 0


def _acl_count(s: Secured) -> int:
    body = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    return sum(len(r["acls"]) for r in s.call("admin", 29, 1, body)["resources"])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _expected_acls(s: Secured) -> int:
    total = 0
    for path in ("/kafka-acl", "/kafka-acl-extended/prefixed"):
        for rtype in s.kazoo.get_children(path) if s.kazoo.exists(path) else []:
            for name in s.kazoo.get_children(f"{path}/{rtype}"):
                total += len(json.loads(s.kazoo.get(f"{path}/{rtype}/{name}")[0])["acls"])
    return total


def grant_and_wait(s: Secured, tmp: Path, bindings: list[dict[str, Any]]) -> None:
    """Write ACLs (headwater acls --from-file) and wait until the broker's own view has them all."""
    _grant(s.zk, tmp, bindings)
    want = _expected_acls(s)
    wait_for(lambda: _acl_count(s) == want, f"the broker to load {want} ACLs")


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("authz")
    zk = f"{zookeeper.connect}/authz-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp, 0, zk)
    sasl = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            "transaction.state.log.num.partitions": 1,
        }
    )
    broker.start(timeout=90)
    kazoo = KazooClient(hosts=zk, timeout=10)
    kazoo.start(timeout=15)
    s = Secured(zk, sasl, kazoo)
    try:
        body = {
            "topics": [
                {"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                for t in TOPICS
            ],
            "timeout_ms": 30000,
            "validate_only": False,
        }
        created = s.call("admin", 19, 3, body)
        assert all(t["error_code"] == 0 for t in created["topics"]), created
        for t in TOPICS:  # three records each, so a refused delete or fetch would show
            wait_for(
                lambda t=t: (
                    s.call("admin", 0, 7, produce_body(t, batch(3)))["responses"][0]["partitions"][0]["error_code"] == 0
                ),
                f"a leader for {t}",
            )  # type: ignore[misc]
        # groups with a committed offset (the coordinator's topic comes first)
        wait_for(
            lambda: s.call("admin", 10, 2, {"key": "az-fetch-group", "key_type": 0})["error_code"] == 0,
            "the coordinator",
        )
        for group, topic in (
            ("az-fetch-group", "az-committed"),
            ("az-doomed-group", "az-committed"),
            ("az-commit-group", "az-commit"),
        ):
            wait_for(
                lambda g=group, t=topic: (
                    first_partition_code("topics")(s.call("admin", 8, 2, offset_commit_body(g, t, 1))) == 0
                ),
                f"{group}'s commit",
            )  # type: ignore[misc]
        assert s.call("admin", 30, 1, {"creations": [acl_creation("az-acl-doomed")]})["results"][0]["error_code"] == 0
        _init_transactional_ids(s)
        # reader: Read on every topic and group (implies Describe), nothing else
        bindings = [
            {"principal": "User:reader", "operations": ["Read"], "resource_type": "Topic", "name": "*"},
            {"principal": "User:reader", "operations": ["Read"], "resource_type": "Group", "name": "*"},
        ]
        for case in CASES:
            if TABLE[case.key].needs:
                bindings += case.grants()
        grant_and_wait(s, tmp, bindings)
        yield s
    finally:
        kazoo.stop()
        kazoo.close()
        broker.stop()


def _init_transactional_ids(s: Secured) -> None:
    """A producer id for each case's transactional id (the transaction coordinator's topic comes
    first), and an open transaction for EndTxn's."""
    wait_for(
        lambda: s.call("admin", 10, 2, {"key": TXN_IDS[0], "key_type": 1})["error_code"] == 0,
        "the transaction coordinator",
    )
    for tid in TXN_IDS:
        body = {"transactional_id": tid, "transaction_timeout_ms": 600000}  # no timeout abort mid-module
        deadline = time.monotonic() + 90
        while (answer := s.call("admin", 22, 1, body))["error_code"] != 0:  # the coordinator loading
            assert time.monotonic() < deadline, f"no producer id for {tid}: {answer}"
            time.sleep(0.3)
        PRODUCERS[tid] = (answer["producer_id"], answer["producer_epoch"])
    add = {**txn("az-tx26"), "topics": [{"name": "az-txn-end", "partitions": [0]}]}
    answer = s.call("admin", 24, 1, add)
    assert answer["results"][0]["results_by_partition"][0]["partition_error_code"] == 0, answer


def test_every_served_api_key_has_a_case() -> None:
    """Adding an API to the broker without a case here fails (the pre-login SASL APIs are exercised
    by every connection of this module: each logs in with SaslHandshake and SaslAuthenticate)."""
    covered = {c.key for c in CASES} | {k for k, r in TABLE.items() if r.where == NO_CHECK and k != 18}
    assert covered == set(HANDLERS), sorted(set(HANDLERS) - covered)


def _is_refused(case: Case, resp: dict[str, Any]) -> bool:
    if case.refused is not None:
        return case.refused(resp)
    return case.code(resp) in DENIALS


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_api_is_authorized_as_kafka(secured: Secured, case: Case) -> None:
    s = secured
    rule = TABLE[case.key]
    if rule.where != NO_CHECK:
        before = s.world(case)
        refused = s.call(case.denied_user, case.key, case.version, case.body())
        assert _is_refused(case, refused), (rule.api, refused)
        if case.refused is None:
            assert ErrorCode(case.code(refused)).name in rule.denied, (rule.api, case.code(refused), rule.denied)
        assert s.world(case) == before, f"{rule.api}: a refused request changed something"
    answer = s.call(case.user if rule.needs else "nobody", case.key, case.version, case.body())
    if case.allowed is not None:
        assert case.allowed(answer), (rule.api, answer)
    else:
        assert case.code(answer) == case.expect, (rule.api, answer)
    if case.after is not None:
        wait_for(lambda: case.after(s), f"{rule.api}'s effect")  # type: ignore[misc]


# -- the findings, one test each ----------------------------------------------------------------------


def test_c1_delete_records_refuses_internal_topics_for_everyone(secured: Secured) -> None:
    """Kafka 2.3's ReplicaManager: INVALID_TOPIC_EXCEPTION on __consumer_offsets, super users too;
    the group's committed offsets survive."""
    s = secured
    before = s.committed("az-fetch-group")
    body = {
        "topics": [{"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": -1}]}],
        "timeout_ms": 5000,
    }
    answer = s.call("admin", 21, 1, body)
    assert first_partition_code("topics")(answer) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert s.committed("az-fetch-group") == before != []


def test_c1_create_partitions_is_bounded_before_any_work(secured: Secured) -> None:
    """A count of 2**31 - 1 (validate_only too) is INVALID_PARTITIONS with the limit named, answered
    at once; the topic is unchanged. CreateTopics likewise."""
    s = secured
    before = s.znode("/brokers/topics/az-fetch")
    for validate_only in (True, False):
        body = {
            "topics": [{"name": "az-fetch", "count": 2**31 - 1, "assignments": None}],
            "timeout_ms": 10000,
            "validate_only": validate_only,
        }
        started = time.monotonic()
        [result] = s.call("admin", 37, 1, body)["results"]
        assert result["error_code"] == ErrorCode.INVALID_PARTITIONS, result
        assert "10000" in result["error_message"], result
        assert time.monotonic() - started < 10  # no assignment of two billion partitions
    assert s.znode("/brokers/topics/az-fetch") == before
    # CreateTopics takes the same bound (a principal with Create could otherwise do the same)
    body = {
        "topics": [
            {"name": "az-huge", "num_partitions": 2**31 - 1, "replication_factor": 1, "assignments": [], "configs": []}
        ],
        "timeout_ms": 10000,
        "validate_only": True,
    }
    [created] = s.call("admin", 19, 3, body)["topics"]
    assert created["error_code"] == ErrorCode.INVALID_PARTITIONS and "10000" in created["error_message"], created
    assert s.znode("/brokers/topics/az-huge") is None


def test_h2_fetch_session_rechecks_read_and_belongs_to_its_principal(secured: Secured, tmp_path: Path) -> None:
    """A consumer's incremental fetch session (Fetch v11): after its Read ACL is removed, the next
    incremental fetch -- listing nothing -- answers TOPIC_AUTHORIZATION_FAILED for the session's
    partition and no records; another principal naming the session id gets
    FETCH_SESSION_ID_NOT_FOUND and cannot close it; a follower fetch without ClusterAction is
    answered TOPIC_AUTHORIZATION_FAILED."""
    s = secured
    grant = [{"principal": "User:other", "operations": ["Read"], "resource_type": "Topic", "name": "az-session"}]
    grant_and_wait(s, tmp_path, grant)

    async def scenario() -> list[dict[str, Any]]:
        def conn(user: str) -> BrokerConnection:
            sec = ClientSecurity.from_properties(
                {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": user,
                    "sasl.password": f"{user}-pw",
                }
            )
            return BrokerConnection("127.0.0.1", s.sasl, security=sec)

        owner, intruder = conn("other"), conn("nobody")
        await owner.connect()
        await intruder.connect()
        try:
            opened = await owner.request(APIS[1], fetch_body("az-session", epoch=0), 11)
            sid = opened["session_id"]
            assert sid != 0 and opened["responses"][0]["partitions"][0]["error_code"] == 0
            assert opened["responses"][0]["partitions"][0]["records"]  # the three records
            steps = [opened]
            # the intruder: not found, whatever the epoch; its close (-1) closes nothing
            for epoch in (1, 2):
                steps.append(await intruder.request(APIS[1], fetch_body("az-session", sid, epoch, []), 11))
            steps.append(await intruder.request(APIS[1], fetch_body("az-session", sid, -1, []), 11))
            # the owner's session still answers at epoch 1
            steps.append(await owner.request(APIS[1], fetch_body("az-session", sid, 1, []), 11))
            # the ACL goes; the broker's view is waited for
            _revoke(s, tmp_path, grant)
            deadline = time.monotonic() + 90
            while await _sees(s, "other", "az-session"):  # the broker's own view of the revocation
                assert time.monotonic() < deadline, "timed out waiting for the revocation"
                await asyncio.sleep(0.3)
            steps.append(await owner.request(APIS[1], fetch_body("az-session", sid, 2, []), 11))
            return steps
        finally:
            await owner.close()
            await intruder.close()

    opened, lost1, lost2, intruder_close, still, revoked = asyncio.run(scenario())
    for lost in (lost1, lost2):
        assert lost["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and lost["responses"] == []
    assert intruder_close["session_id"] == 0
    assert still["error_code"] == 0 and still["session_id"] == opened["session_id"]
    assert revoked["error_code"] == 0
    [topic] = revoked["responses"]
    [partition] = topic["partitions"]
    assert (topic["topic"], partition["error_code"]) == ("az-session", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert not partition["records"]
    # a follower's fetch (replica_id >= 0) without ClusterAction: every partition refused, as Kafka
    # 2.3 answers it (the connection used to be closed), and no session is opened for it
    follower = s.call("nobody", 1, 11, {**fetch_body("az-session", epoch=0), "replica_id": 5})
    assert follower["session_id"] == 0
    assert first_partition_code()(follower) == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _revoke(s: Secured, tmp: Path, bindings: list[dict[str, Any]]) -> None:
    f = tmp / f"revoke-{time.monotonic_ns()}.json"
    f.write_text(json.dumps(bindings))
    assert cli_main(["acls", "--zookeeper", s.zk, "--remove", "--from-file", str(f)]) == 0


async def _sees(s: Secured, user: str, topic: str) -> bool:
    answer = await _call(s.sasl, user, 3, 7, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return bool(answer["topics"][0]["error_code"] == 0)


def test_m3_producer_ids_need_idempotent_write_and_clients_write_no_control_batches(
    secured: Secured, tmp_path: Path
) -> None:
    """Kafka 2.3 handleProduceRequest: a batch with a producer id needs IdempotentWrite on the
    Cluster (Write on the topic is not enough), a transactional batch Write on the request's
    TransactionalId; LogValidator refuses control batches from clients (CORRUPT_MESSAGE), super
    users included. Nothing is written on any refusal."""
    s = secured
    topic = "az-produce"
    bindings = [
        {"principal": f"User:{u}", "operations": ["Write"], "resource_type": "Topic", "name": topic}
        for u in ("producer", "idem", "txn")
    ]
    bindings += [
        {"principal": "User:idem", "operations": ["IdempotentWrite"], "resource_type": "Cluster", "name": CLUSTER_NAME},
        {"principal": "User:txn", "operations": ["Write"], "resource_type": "TransactionalId", "name": "az-tx"},
    ]
    grant_and_wait(s, tmp_path, bindings)
    idempotent = batch(producer_id=4242, producer_epoch=0, base_sequence=0)
    transactional = batch(producer_id=4243, producer_epoch=0, base_sequence=0, transactional=True)
    marker = encode_batch(
        [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", int(time.time() * 1000), ())], control=True
    )

    def code(user: str, records: bytes, tid: str | None = None) -> int:
        return first_partition_code()(s.call(user, 0, 7, produce_body(topic, records, tid)))

    for user, records, tid, expected in (
        ("producer", idempotent, None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ("producer", batch() + idempotent, None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # not only the first batch
        ("idem", transactional, "az-tx", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("txn", transactional, None, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),  # no transactional id
        ("admin", marker, None, ErrorCode.CORRUPT_MESSAGE),
    ):
        before = s.offsets(topic)
        assert code(user, records, tid) == expected, (user, expected)
        assert s.offsets(topic) == before, f"{user}: a refused produce wrote something"
    assert code("producer", batch()) == ErrorCode.NONE
    assert code("idem", idempotent) == ErrorCode.NONE
    assert code("txn", transactional, "az-tx") == ErrorCode.NONE


def test_m4_offset_fetch_shows_only_describable_topics(secured: Secured, tmp_path: Path) -> None:
    """Describe on the group alone: every partition (topics null) lists no topic it may not Describe;
    a listed partition of such a topic is TOPIC_AUTHORIZATION_FAILED with no offset or metadata."""
    s = secured
    grant_and_wait(
        s,
        tmp_path,
        [
            {
                "principal": "User:lister",
                "operations": ["Describe"],
                "resource_type": "Group",
                "name": "az-fetch-group",
            },
            {"principal": "User:lister", "operations": ["Describe"], "resource_type": "Topic", "name": "az-fetch"},
        ],
    )
    assert (
        s.call("admin", 8, 2, offset_commit_body("az-fetch-group", "az-fetch", 2))["topics"][0]["partitions"][0][
            "error_code"
        ]
        == 0
    )
    everything = s.call("admin", 9, 5, {"group_id": "az-fetch-group", "topics": None})
    assert {t["name"] for t in everything["topics"]} == {"az-committed", "az-fetch"}
    mine = s.call("lister", 9, 5, {"group_id": "az-fetch-group", "topics": None})
    assert mine["error_code"] == 0 and [t["name"] for t in mine["topics"]] == ["az-fetch"]
    listed = s.call(
        "lister",
        9,
        5,
        {"group_id": "az-fetch-group", "topics": [{"name": "az-committed", "partition_indexes": [0]}]},
    )
    [p] = listed["topics"][0]["partitions"]
    assert (p["error_code"], p["committed_offset"], p["metadata"]) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, "")


def test_l5_metadata_auto_creation_is_decided_per_topic(secured: Secured, tmp_path: Path) -> None:
    """Describe on two missing topics, Create on one: that one is created, the other answers
    TOPIC_AUTHORIZATION_FAILED and does not appear in ZooKeeper (it used to be all or nothing)."""
    s = secured
    grant_and_wait(
        s,
        tmp_path,
        [
            {"principal": "User:creator", "operations": ["Describe"], "resource_type": "Topic", "name": "az-auto-yes"},
            {"principal": "User:creator", "operations": ["Describe"], "resource_type": "Topic", "name": "az-auto-no"},
            {"principal": "User:creator", "operations": ["Create"], "resource_type": "Topic", "name": "az-auto-yes"},
        ],
    )
    answer = s.call(
        "creator",
        3,
        7,
        {"topics": [{"name": "az-auto-yes"}, {"name": "az-auto-no"}], "allow_auto_topic_creation": True},
    )
    codes = {t["name"]: t["error_code"] for t in answer["topics"]}
    assert codes["az-auto-no"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert codes["az-auto-yes"] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    assert s.kazoo.exists("/brokers/topics/az-auto-yes") and not s.kazoo.exists("/brokers/topics/az-auto-no")


def test_c1_refusals_say_nothing_about_existence(secured: Secured) -> None:
    """DeleteRecords, CreatePartitions, AlterConfigs and IncrementalAlterConfigs answer a principal
    without the ACL TOPIC_AUTHORIZATION_FAILED whether the topic exists or not (no existence oracle);
    a super user learns the topic does not exist."""
    s = secured
    for topic in ("az-records", "az-no-such-topic"):
        requests = {
            21: (
                1,
                {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout_ms": 5000},
                first_partition_code("topics"),
            ),
            37: (
                1,
                {
                    "topics": [{"name": topic, "count": 9, "assignments": None}],
                    "timeout_ms": 5000,
                    "validate_only": True,
                },
                first_code("results"),
            ),
            33: (1, config_resource(topic, "5", False), first_code("responses")),
            44: (0, config_resource(topic, "5", True), first_code("responses")),
        }
        for key, (version, body, code) in requests.items():
            assert code(s.call("reader", key, version, body)) == ErrorCode.TOPIC_AUTHORIZATION_FAILED, (key, topic)
            if topic == "az-no-such-topic":
                assert code(s.call("admin", key, version, body)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, key
