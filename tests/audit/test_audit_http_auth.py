"""``http.auth``: the audit dashboard and API behind basic or bearer authentication.

The real service (``AuditService.run``: its aiohttp app on a real port) runs with clusters that do
not answer -- the HTTP side does not need them; /healthz then says 503 with the reasons, which is
still an answer without credentials.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import ClientSession

from headwater.audit.config import AuditConfigError, parse
from headwater.audit.http_auth import HttpAuth, parse_http_auth
from headwater.audit.service import AuditService

PROTECTED = ["/", "/topic?topic=t", "/api/v1/overview", "/api/v1/completeness", "/api/v1/topics", "/api/v1/gaps"]
OPEN = ["/healthz", "/metrics"]


def props(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "clusters": "dc1",
        "dc1.bootstrap.servers": "127.0.0.1:1",
        "store": f"sqlite:///{tmp_path / 'audit.db'}",
        "http.host": "127.0.0.1",
        "http.port": "0",
        **extra,
    }


@asynccontextmanager
async def running(service: AuditService) -> AsyncIterator[str]:
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    deadline = time.monotonic() + 60
    while getattr(service, "http_port", 0) in (0, None):
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, "the audit's HTTP server did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{service.http_port}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def statuses(base: str, headers: dict[str, str] | None) -> dict[str, tuple[int, str | None]]:
    out = {}
    async with ClientSession() as http:
        for path in PROTECTED + OPEN:
            async with http.get(base + path, headers=headers or {}) as r:
                await r.read()
                out[path] = (r.status, r.headers.get("WWW-Authenticate"))
    return out


def check(got: dict[str, tuple[int, str | None]], protected: Callable[[int, str | None], bool], why: str) -> None:
    for path in PROTECTED:
        assert protected(*got[path]), (why, path, got[path])
    for path in OPEN:
        assert got[path][0] in (200, 503) and got[path][1] is None, (why, path, got[path])  # 503: no cluster


def test_basic_auth_guards_the_dashboard_and_api_but_not_healthz_and_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "http.password"
    secret.write_text("pa55-from-file\n")
    config = parse(
        props(tmp_path, **{"http.auth": "basic", "http.auth.username": "ops", "http.auth.password": f"file:{secret}"})
    )
    assert "pa55" not in repr(config)
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        async with running(AuditService(config)) as base:
            challenge = 'Basic realm="headwater-audit", charset="UTF-8"'
            check(await statuses(base, None), lambda s, h: s == 401 and h == challenge, "no credentials")
            check(await statuses(base, basic("ops", "wrong")), lambda s, h: s == 401 and h == challenge, "wrong")
            check(await statuses(base, basic("root", "pa55-from-file")), lambda s, h: s == 401, "wrong user")
            check(await statuses(base, {"Authorization": "Basic !!notbase64"}), lambda s, h: s == 401, "garbage")
            check(await statuses(base, {"Authorization": "Bearer pa55-from-file"}), lambda s, h: s == 401, "scheme")
            check(await statuses(base, basic("ops", "pa55-from-file")), lambda s, h: s == 200, "right")

    asyncio.run(scenario())
    assert "pa55" not in caplog.text
    assert "http.auth=basic" in caplog.text


def test_bearer_token_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AUDIT_HTTP_TOKEN", "t0ken-from-env")
    config = parse(props(tmp_path, **{"http.auth": "bearer", "http.auth.token": "env:AUDIT_HTTP_TOKEN"}))
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        async with running(AuditService(config)) as base:
            check(
                await statuses(base, None),
                lambda s, h: s == 401 and h == 'Bearer realm="headwater-audit"',
                "no token",
            )
            check(
                await statuses(base, {"Authorization": "Bearer wrong"}),
                lambda s, h: s == 401 and h == 'Bearer realm="headwater-audit", error="invalid_token"',
                "wrong token",
            )
            check(await statuses(base, basic("t0ken-from-env", "")), lambda s, h: s == 401, "basic instead")
            check(await statuses(base, {"Authorization": "Bearer t0ken-from-env"}), lambda s, h: s == 200, "right")
            check(await statuses(base, {"Authorization": "bearer  t0ken-from-env "}), lambda s, h: s == 200, "case")

    asyncio.run(scenario())
    assert "t0ken" not in caplog.text


def test_without_http_auth_everything_is_open(tmp_path: Path) -> None:
    config = parse(props(tmp_path))
    assert config.http_auth == HttpAuth()

    async def scenario() -> None:
        async with running(AuditService(config)) as base:
            check(await statuses(base, None), lambda s, h: s == 200 and h is None, "open")

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"http.auth": "digest"}, "http.auth: 'digest' is not one of none, basic, bearer"),
        ({"http.auth": "basic", "http.auth.username": "ops"}, "http.auth.password: required with http.auth = basic"),
        ({"http.auth": "bearer"}, "http.auth.token: required with http.auth = bearer"),
        ({"http.auth.token": "abc"}, "http.auth.token: set, but http.auth = none does not use it"),
        ({"http.auth": "bearer", "http.auth.token": "env:HW_AUDIT_UNSET"}, "environment variable HW_AUDIT_UNSET"),
        (
            {"http.auth": "basic", "http.auth.username": "a:b", "http.auth.password": "x"},
            "http.auth.username: must not contain ':'",
        ),
    ],
)
def test_bad_http_auth_settings_name_the_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], message: str
) -> None:
    monkeypatch.delenv("HW_AUDIT_UNSET", raising=False)
    with pytest.raises(AuditConfigError) as e:
        parse(props(tmp_path, **extra))
    assert message in str(e.value)


def test_secrets_are_not_in_repr_or_errors() -> None:
    auth = parse_http_auth({"http.auth": "bearer", "http.auth.token": "s3cret-token"})
    assert "s3cret" not in repr(auth)
    assert auth.accepts("Bearer s3cret-token") and not auth.accepts("Bearer s3cret-toke")
