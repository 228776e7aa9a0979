"""Pieces every long-running service shares: supervised tasks and health (see supervisor.py)."""
