"""The optional extras (``pip install 'headwater[audit]'``) and what a command says when one is missing.

A command that needs an extra checks for its modules before it starts (:func:`missing_for`), and a
module of an extra that turns out missing later, on a path the check did not foresee (the
PostgreSQL store's psycopg, say), is caught where the command runs (:func:`describe_missing`):
either way the operator reads one line naming the extra to install, and the exit code is 2.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable

__all__ = ["EXTRAS", "describe_missing", "missing_for"]

#: extra -> the top-level modules it installs (pyproject.toml's [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "audit": ("aiohttp", "psycopg"),
    "loader": ("pyspark", "pyarrow"),
    "deploy": ("ansible",),
}

_EXTRA_OF = {module: extra for extra, modules in EXTRAS.items() for module in modules}


def _service_property(args: argparse.Namespace, key: str) -> str:
    """A property of the service's configuration as it will run (its file, then --override), or ''."""
    from headwater.properties import parse_properties

    value = ""
    try:
        with open(args.config, encoding="utf-8") as f:
            value = parse_properties(f.read()).get(key, "")
    except (OSError, ValueError, TypeError):  # the command itself reports a bad or missing file
        pass
    for item in getattr(args, "override", None) or []:
        k, sep, v = str(item).partition("=")
        if sep and k.strip() == key:
            value = v.strip()
    return value


def _audit_modules(args: argparse.Namespace) -> tuple[str, ...]:
    # psycopg only for a PostgreSQL store (the default store is SQLite)
    postgres = _service_property(args, "store").startswith(("postgresql://", "postgres://"))
    return ("aiohttp", "psycopg") if postgres else ("aiohttp",)


#: (command, its action or None) -> (the extra, the modules it cannot start without, given its arguments)
_NEEDS: dict[tuple[str, str | None], tuple[str, Callable[[argparse.Namespace], tuple[str, ...]]]] = {
    ("audit", "serve"): ("audit", _audit_modules),
    ("load", None): ("loader", lambda args: ("pyspark", "pyarrow")),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package missing, or an import hook refusing it
        return False


def _message(prog: str, module: str, extra: str) -> str:
    return f"{prog}: error: {module} is not installed; install the {extra} extra: pip install 'headwater[{extra}]'"


def missing_for(args: argparse.Namespace) -> str | None:
    """The one-line error when the command ``args`` names needs an extra that is not installed."""
    command = getattr(args, "command", None)
    action = getattr(args, f"{command}_command", None)
    need = _NEEDS.get((str(command), action)) or _NEEDS.get((str(command), None))
    if need is None:
        return None
    extra, modules_for = need
    for module in modules_for(args):
        if not _installed(module):
            return _message(" ".join(["headwater", str(command), *([action] if action else [])]), module, extra)
    return None


def describe_missing(prog: str, error: BaseException) -> str | None:
    """The one-line error if ``error`` (or what caused it) is a module of an extra not installed."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ModuleNotFoundError) and e.name:
            top = e.name.split(".", 1)[0]
            if top in _EXTRA_OF:
                return _message(prog, top, _EXTRA_OF[top])
        e = e.__cause__ or e.__context__
    return None
