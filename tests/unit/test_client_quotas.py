"""Client quotas (broker/quotas.py): Kafka 2.3's eight levels of precedence, the sensors they name,
Kafka's Rate over quota.window.num samples and the throttle time it gives. The clock is injected."""

from __future__ import annotations

import pytest

from headwater.broker.quotas import SENSOR_EXPIRY_S, ClientQuotas, Rate
from headwater.quotas import entity_key, validate_quota_config


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


LEVELS = [
    # (entity holding producer_byte_rate, the sensor's tags (user, client-id) for alice/app)
    (entity_key("alice", "app"), ("alice", "app")),
    (entity_key("alice", "<default>"), ("alice", "app")),
    (entity_key("alice", None), ("alice", "")),
    (entity_key("<default>", "app"), ("alice", "app")),
    (entity_key("<default>", "<default>"), ("alice", "app")),
    (entity_key("<default>", None), ("alice", "")),
    (entity_key(None, "app"), ("", "app")),
    (entity_key(None, "<default>"), ("", "app")),
]


def test_the_eight_levels_first_match_wins_and_names_the_sensor() -> None:
    q = ClientQuotas(None, clock=Clock())
    # every level set, each with its own bound: level i binds once levels < i are removed
    for i, (key, _tags) in enumerate(LEVELS):
        q.configs.set_entity(key, {"producer_byte_rate": str(1000 * (i + 1))})
    for i, (key, tags) in enumerate(LEVELS):
        assert q.produce.resolve("alice", "app") == (tags, 1000.0 * (i + 1)), key
        q.configs.set_entity(key, {})
    assert q.produce.resolve("alice", "app") == (("", "app"), None)


def test_a_quota_type_only_sees_the_entities_that_set_it() -> None:
    q = ClientQuotas(None, clock=Clock())
    q.configs.set_entity(entity_key("alice", None), {"consumer_byte_rate": "500", "SCRAM-SHA-256": "salt=..."})
    q.configs.set_entity(entity_key(None, "app"), {"producer_byte_rate": "700"})
    assert q.fetch.resolve("alice", "app") == (("alice", ""), 500.0)
    assert q.produce.resolve("alice", "app") == (("", "app"), 700.0)
    assert q.produce.resolve("bob", "other") == (("", "other"), None)


def test_names_are_sanitized_as_kafka_stores_them() -> None:
    assert entity_key("alice@X", "my app") == "users/alice%40X/clients/my%20app"
    q = ClientQuotas(None, clock=Clock())
    q.configs.set_entity(entity_key("alice@X", "my app"), {"producer_byte_rate": "10"})
    assert q.produce.resolve("alice%40X", "my app") == (("alice%40X", "my app"), 10.0)


def test_static_default_applies_below_clients_default_only() -> None:
    q = ClientQuotas(None, clock=Clock(), producer_default=100.0)
    assert q.produce.resolve("alice", "app") == (("", "app"), 100.0)
    q.configs.set_entity(entity_key(None, "<default>"), {"producer_byte_rate": "300"})
    assert q.produce.resolve("alice", "app") == (("", "app"), 300.0)


def test_rate_pads_to_num_minus_one_windows_and_slides() -> None:
    clock = Clock()
    r = Rate(11, 1.0, clock.now)
    r.record(10_000, clock.now)
    assert r.window_size(clock.now) == pytest.approx(10.0)  # a new sensor: (11 - 1) windows
    assert r.measure(clock.now) == pytest.approx(1000.0)
    for _ in range(30):  # 1000 B/s for 30 s: the rate is 1000 B/s whatever the window
        clock.now += 1.0
        r.record(1000, clock.now)
    assert r.measure(clock.now) == pytest.approx(1000.0, rel=0.11)
    clock.now += 11.0  # every sample expired
    assert r.measure(clock.now) == 0.0


def test_throttle_time_is_kafkas_formula_and_muting_brings_the_rate_back() -> None:
    clock = Clock()
    q = ClientQuotas(None, clock=clock)
    q.configs.set_entity(entity_key(None, "app"), {"producer_byte_rate": "1000"})
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 5000)  # within 10 s x 1000 B/s
    assert throttle_ms == 0
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 10_000)  # 15000 B over 10 s: 1500 B/s
    assert throttle_ms == round((1500 - 1000) / 1000 * 10.0 * 1000)
    q.produce.throttled(sensor, throttle_ms)
    assert sensor.throttle.measure(clock.now) == throttle_ms
    # steady state (the window no longer padded): muted for the throttle time, the rate is the quota
    for _ in range(20):
        clock.now += 1.0
        q.produce.record("ANONYMOUS", "app", 900)
    clock.now += 0.5
    sensor, throttle_ms = q.produce.record("ANONYMOUS", "app", 3000)
    assert 0 < throttle_ms < 5000
    clock.now += throttle_ms / 1000.0
    assert sensor.rate.measure(clock.now) == pytest.approx(1000.0, rel=0.1)


def test_validation_as_kafka() -> None:
    assert validate_quota_config("producer_byte_rate", "1024") is None
    assert validate_quota_config("request_percentage", "12.5") is None
    assert validate_quota_config("producer_byte_rate", "0") is not None
    assert validate_quota_config("producer_byte_rate", "1.5") is not None
    assert validate_quota_config("consumer_byte_rate", "x") is not None
    assert validate_quota_config("request_percentage", "-1") is not None
    assert validate_quota_config("producer_rate", "1") is not None


def test_the_fast_check_never_lets_a_rate_above_the_quota_through() -> None:
    import random

    rng = random.Random(42)
    clock = Clock()
    r = Rate(11, 1.0, clock.now)
    for _ in range(5000):
        clock.now += rng.choice([0.001, 0.05, 0.3, 1.0, 4.0])
        r.record(rng.randint(0, 5000), clock.now)
        bound = rng.choice([100.0, 500.0, 1000.0, 5000.0])
        if r.surely_within(bound):
            assert r.measure(clock.now) <= bound + 1e-9


# -- request_percentage (KIP-124) ----------------------------------------------------------------


class Conn:
    principal = "User:alice"
    throttle_ms = 0


def _encode(r: dict[str, object]) -> list[object]:
    return [r]


def test_loop_time_counts_a_connections_own_steps_not_its_waits() -> None:
    """network.LoopTime drives a connection's task: a request's cost is now() at its end minus now()
    at its start — its own steps, not the time it waited nor what other tasks ran meanwhile."""
    import asyncio

    from headwater.broker.network import LoopTime

    clock = Clock()
    lt = LoopTime(clock)
    seen: list[float] = []

    async def connection(fut: asyncio.Future[int]) -> int:
        clock.now += 1.0  # reading the socket before the request: not the request's
        start = lt.now()
        clock.now += 0.02  # decoding, handling before its await
        got = await fut
        clock.now += 0.03  # after it, encoding
        seen.append(lt.now() - start)
        return got

    async def main() -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(lt.timed(connection(fut)))
        await asyncio.sleep(0)
        clock.now += 5.0  # the loop runs other connections while this one waits
        fut.set_result(7)
        return await task

    assert asyncio.run(main()) == 7
    assert seen == [pytest.approx(0.05)]
    assert lt.busy == pytest.approx(1.05) and not lt.running


def test_request_time_throttles_capped_at_one_window_and_exempts_as_kafka() -> None:
    clock = Clock()
    q = ClientQuotas(None, clock=clock)
    q.configs.set_entity(entity_key("alice", None), {"request_percentage": "1"})  # 10 ms a second
    conn = Conn()
    # 50 ms of Metadata handling within 10 s x 1 %: allowed
    assert q.after_request(conn, "app", 3, {}, {"throttle_time_ms": 0}, 10, ["m"], _encode, 0.05) == ["m"]
    assert conn.throttle_ms == 0
    # 2 s more: 205 % over 10 s, far above 1 %: throttled, at most one window (1000 ms)
    out = q.after_request(conn, "app", 3, {}, {"throttle_time_ms": 0}, 10, ["m"], _encode, 2.0)
    assert out == [{"throttle_time_ms": 1000}]
    assert conn.throttle_ms == 1000
    assert q.request.sensors[("alice", "")].throttle.measure(clock.now) == 1000
    conn.throttle_ms = 0
    # exempt: ClusterAction APIs and follower fetches, their time counted as exempt
    assert q.after_request(conn, "app", 6, {}, {"error_code": 0}, 10, ["u"], _encode, 3.0) == ["u"]
    fetch = {"replica_id": 2}
    assert q.after_request(conn, "app", 1, fetch, {"error_code": 0}, 10, ["f"], _encode, 3.0) == ["f"]
    assert conn.throttle_ms == 0
    assert q.exempt.total(clock.now) == pytest.approx(600.0)
    # acks=0 Produce: request time not recorded (no response)
    before = q.request.sensors[("alice", "")].rate.total(clock.now)
    assert q.after_request(conn, "app", 0, {}, None, 10, None, _encode, 5.0) is None
    assert q.request.sensors[("alice", "")].rate.total(clock.now) == before
    # a consumer Fetch over its request quota is answered empty with the throttle
    consumer = {"replica_id": -1}
    response = {"throttle_time_ms": 0, "error_code": 0, "session_id": 5, "responses": ["data"]}
    out = q.after_request(conn, "app", 1, consumer, response, 10, [b"xx"], _encode, 1.0)
    assert out == [{"throttle_time_ms": 1000, "error_code": 0, "session_id": 5, "responses": []}]
    # another user has no quota: never throttled
    conn2 = Conn()
    conn2.principal = "User:bob"
    assert q.after_request(conn2, "app", 3, {}, {"throttle_time_ms": 0}, 10, ["m"], _encode, 9.0) == ["m"]
    assert conn2.throttle_ms == 0


def test_a_connection_resolves_its_quota_once_and_again_after_any_change() -> None:
    """after_request resolves a connection's sensors and bounds once (conn.quota_slots): a quota
    change, another client id, another principal and an expired sensor each apply to its very next
    request, as when every request looked its entity up."""
    clock = Clock()
    q = ClientQuotas(None, clock=clock)
    conn = Conn()

    def produce(client: str, size: int) -> int:
        conn.throttle_ms = 0
        q.after_request(conn, client, 0, {}, {"throttle_time_ms": 0}, size, ["p"], _encode)
        return conn.throttle_ms

    assert produce("app", 10**6) == 0 and q.produce.sensors == {}  # no quota: nothing measured
    q.configs.set_entity(entity_key(None, "app"), {"producer_byte_rate": "1000"})
    assert produce("app", 5000) == 0  # within 10 s x 1000 B/s
    assert produce("app", 10_000) == round((1500 - 1000) / 1000 * 10.0 * 1000)  # the new quota binds
    assert produce("other", 10**6) == 0  # another client id: its own (unlimited) sensor
    assert set(q.produce.sensors) == {("", "app"), ("", "other")}
    assert produce("app", 1) > 0  # back to app's
    q.configs.set_entity(entity_key("bob", None), {"producer_byte_rate": "1000000"})
    conn.principal = "User:bob"  # authenticated as another user: bob's own quota
    assert produce("app", 1) == 0
    assert ("bob", "") in q.produce.sensors
    # an hour idle: a new sensor (carol's) drops the idle ones; the connection records into a new one
    clock.now += SENSOR_EXPIRY_S + 61.0
    carol = Conn()
    carol.principal = "User:carol"
    q.after_request(carol, "x", 0, {}, {"throttle_time_ms": 0}, 7, ["p"], _encode)
    assert set(q.produce.sensors) == {("", "x")}
    assert produce("app", 3) == 0
    assert q.produce.sensors[("bob", "")].rate.total(clock.now) == 3
