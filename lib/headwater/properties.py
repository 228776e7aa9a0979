"""Java ``.properties`` files, as Kafka, MirrorMaker 2 and our services read them. No I/O."""

from __future__ import annotations

import re

__all__ = ["parse_overrides", "parse_properties"]


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties``: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` continuations."""
    props: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", entry)
        if m:
            props[m.group(1)] = m.group(2).strip()
        else:
            props[entry.strip()] = ""
    return props


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--override key=value`` arguments; raises ValueError naming the first one without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out
