"""The mixed-cluster fixture (tests.mixed.cluster) for the modules here."""

from tests.mixed.cluster import mixed

__all__ = ["mixed"]
