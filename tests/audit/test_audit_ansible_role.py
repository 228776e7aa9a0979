"""The ansible role's audit.properties (review security-2026-11-26, M7/M8): rendered from the role's
own template and defaults, the audit service accepts it and it puts the dashboard behind a login on
every address; with a signing key the events must be signed; ``audit_http_auth: none`` on every
address is refused by the service itself. Rendered with Jinja2 as ansible does (no hosts, no Docker:
tests/integration/test_ansible.py deploys the role for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from headwater.audit.config import AuditConfigError, parse
from headwater.properties import parse_properties

ROLE = Path(__file__).resolve().parents[2] / "deploy" / "ansible" / "roles" / "audit"


def _render(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values: dict[str, Any] = {
        **defaults,
        "ansible_managed": "managed",
        "groups": {"brokers": ["b1"], "dc1": ["b1"]},
        "hostvars": {"b1": {"ansible_host": "10.0.0.1"}},
        "headwater_secured": False,
        "headwater_broker_port": 9092,
        "headwater_config_dir": str(tmp_path),
        "audit_clusters": ["dc1"],
        "audit_aggregate_clusters": ["dc1"],
        "audit_store": f"sqlite:///{tmp_path / 'audit.db'}",
        "audit_topics": [".*"],
        **overrides,
    }
    text = env.from_string((ROLE / "templates" / "audit.properties.j2").read_text()).render(**values)
    return parse_properties(text)


def test_the_role_puts_the_dashboard_behind_a_login_on_every_address(tmp_path: Path) -> None:
    (tmp_path / "audit-http.password").write_text("from-the-vault\n")  # the role's task writes it
    props = _render(tmp_path, audit_http_password="from-the-vault")
    assert "from-the-vault" not in "".join(props.values())  # a file: reference, not the secret
    config = parse(props)
    assert config.http_host == "0.0.0.0"
    assert config.http_auth.scheme == "basic" and config.http_auth.accepts("Basic aGVhZHdhdGVyOmZyb20tdGhlLXZhdWx0")
    assert not config.signing.required and config.max_topics == 1000


def test_the_role_with_a_signing_key_requires_signed_events(tmp_path: Path) -> None:
    (tmp_path / "audit-http.token").write_text("a-bearer-token\n")
    (tmp_path / "audit-signing.key").write_text("k" * 32 + "\n")
    props = _render(
        tmp_path, audit_http_auth="bearer", audit_http_token="x", audit_signing_key="x", audit_signing_exempt=["gap"]
    )
    config = parse(props)
    assert config.signing.keys == (b"k" * 32,) and config.signing.exempt == {"gap"}
    assert config.http_auth.scheme == "bearer"


def test_the_role_without_a_login_on_every_address_is_refused_by_the_service(tmp_path: Path) -> None:
    with pytest.raises(AuditConfigError, match=r"http\.auth: none on http\.host '0\.0\.0\.0'"):
        parse(_render(tmp_path, audit_http_auth="none"))
    assert parse(_render(tmp_path, audit_http_auth="none", audit_http_host="127.0.0.1")).http_host == "127.0.0.1"
    assert (
        parse(_render(tmp_path, audit_http_auth="none", audit_http_allow_unauthenticated=True)).http_host == "0.0.0.0"
    )
