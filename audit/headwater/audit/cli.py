"""``headwater audit serve -c audit.properties [--override key=value]``."""

from __future__ import annotations

import argparse
import sys

from headwater.cli.service import add_service_arguments, overrides_of, setup_logging, stop_on_signals

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="the audit service: counts every tier, reconciles, serves the dashboard")
    actions = p.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    serve = actions.add_parser("serve", help="count, reconcile and serve the dashboard in the foreground")
    add_service_arguments(serve, "audit.properties")
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from headwater.audit.config import AuditConfigError, load
    except ImportError as e:  # pragma: no cover - the audit extra is missing
        print(f"headwater audit: needs the audit extra (pip install 'headwater[audit]'): {e}", file=sys.stderr)
        return 2
    try:
        config = load(args.config, overrides_of(args))
    except (AuditConfigError, ValueError) as e:
        print(f"headwater audit: configuration error: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    import uvloop

    from headwater.audit.service import AuditService

    async def main() -> int:
        try:
            service = AuditService(config)
        except Exception as e:
            print(f"headwater audit: cannot open the store {config.store}: {e}", file=sys.stderr)
            return 2
        stop = stop_on_signals()
        await service.run(stop)
        return 0

    return uvloop.run(main())
