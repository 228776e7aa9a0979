"""Kafka's log: partitions as directories of segment files holding record batches as produced.

Public surface for the broker server:

* :class:`~headwater.broker.storage.log_manager.LogManager` — every log of the broker, the
  recovery-point checkpoints, the clean-shutdown markers, and ``tick()`` for periodic work;
* :class:`~headwater.broker.storage.log.Log` — one partition: ``append``, ``read``,
  ``offset_for_timestamp``, ``legacy_offsets_before``, truncation, retention, flush;
* :class:`~headwater.broker.storage.log.LogConfig` — Kafka's log settings;
* :mod:`~headwater.broker.storage.fs` and :mod:`~headwater.broker.storage.clock` — the injected
  file system and clock.

The on-disk formats are documented in ``segment.py`` (``.log``), ``index.py`` (``.index``,
``.timeindex``) and ``log_manager.py`` (the checkpoint and marker files).
"""

from headwater.broker.storage.clock import Clock, ManualClock, SystemClock
from headwater.broker.storage.fs import FileSystem, OsFileSystem
from headwater.broker.storage.log import AppendInfo, FetchData, Log, LogConfig
from headwater.broker.storage.log_manager import LogManager

__all__ = [
    "AppendInfo",
    "Clock",
    "FetchData",
    "FileSystem",
    "Log",
    "LogConfig",
    "LogManager",
    "ManualClock",
    "OsFileSystem",
    "SystemClock",
]
