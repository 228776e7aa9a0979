"""``meta.properties``: which broker a log dir belongs to, Kafka's file.

Each log dir holds one, a Java properties file (``key=value`` lines, ``#`` comments)::

    #
    #Fri Nov 27 09:25:01 UTC 2026
    version=0
    broker.id=3
    cluster.id=Xj3...        -- written by Headwater and Kafka 2.4+; Kafka 2.3 neither writes nor reads it

Version 0 is the only one (Kafka 2.3 refuses another). At start, before the logs are loaded
(:func:`check_log_dirs`): every dir's ``broker.id`` must be the same and equal to the configured
``broker.id`` (Kafka's InconsistentBrokerIdException: a dir another broker wrote, or data copied
from one), and a ``cluster.id``, where present, must be the cluster's in ZooKeeper (Kafka 2.4's
InconsistentClusterIdException: a dir of another cluster). After loading
(:func:`write_missing`), every online dir without the file gets one; an existing file is never
rewritten, so a dir Kafka 2.3 wrote keeps its file byte for byte and a rollback to Kafka finds it
as it left it. A file that cannot be parsed stops the broker, as it stops Kafka; one that cannot be
read or written (an I/O error) is logged and left to the log manager, which takes a failing dir
offline (Kafka's offline dirs).

Written atomically (``meta.properties.tmp``, fsync, rename, fsync the dir); a leftover ``.tmp`` is
deleted when read, as Kafka does.

Concurrency: called from the broker's start-up only, before anything else uses the dirs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from headwater.broker.storage.fs import FileSystem, read_file, write_file_atomically

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
VERSION = 0


class InconsistentBrokerMetadata(RuntimeError):
    """A log dir belongs to another broker or another cluster (the broker must not start)."""


@dataclass(frozen=True)
class BrokerMetadata:
    broker_id: int
    cluster_id: str | None = None


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines of a Java properties file; comments and blanks
    skipped. Enough for meta.properties (no escapes or continuation lines are ever written there)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut], line[cut + 1 :]) if cut >= 0 else (line, "")
        out[key.strip()] = value.strip()
    return out


def format_properties(metadata: BrokerMetadata) -> bytes:
    lines = ["#", f"version={VERSION}", f"broker.id={metadata.broker_id}"]
    if metadata.cluster_id is not None:
        lines.append(f"cluster.id={metadata.cluster_id}")
    return ("\n".join(lines) + "\n").encode()


def read_broker_metadata(fs: FileSystem, log_dir: str) -> BrokerMetadata | None:
    """The dir's meta.properties, None without one; ValueError when it is not a version 0 file."""
    path = os.path.join(log_dir, META_PROPERTIES)
    if fs.exists(path + ".tmp"):
        fs.unlink(path + ".tmp")
    if not fs.exists(path):
        return None
    props = parse_properties(read_file(fs, path).decode("latin-1"))
    version = props.get("version")
    if version != str(VERSION):
        raise ValueError(f"Unrecognized version of the server meta.properties file under {log_dir}: {version}")
    broker_id = props.get("broker.id", "")
    if not broker_id.isdigit():
        raise ValueError(f"meta.properties under {log_dir} has no valid broker.id: {broker_id!r}")
    return BrokerMetadata(int(broker_id), props.get("cluster.id") or None)


def check_log_dirs(fs: FileSystem, log_dirs: Sequence[str], broker_id: int, cluster_id: str) -> None:
    """Refuse dirs of another broker or cluster (rules in the module docstring)."""
    found: dict[str, BrokerMetadata] = {}
    for d in log_dirs:
        try:
            metadata = read_broker_metadata(fs, d)
        except ValueError as e:
            raise InconsistentBrokerMetadata(str(e)) from None
        except OSError as e:  # an unreadable dir: the log manager takes it offline (Kafka's offline dir)
            log.error("cannot read %s under %s: %s", META_PROPERTIES, d, e)
            continue
        if metadata is not None:
            found[d] = metadata
    ids = {m.broker_id for m in found.values()}
    if len(ids) > 1:
        raise InconsistentBrokerMetadata(
            f"Failed to match broker.id across log.dirs. This could happen if multiple brokers shared a log "
            f"directory (log.dirs) or partial data was manually copied from another broker. Found {sorted(ids)}"
        )
    if ids and ids != {broker_id}:
        raise InconsistentBrokerMetadata(
            f"Configured broker.id {broker_id} doesn't match stored broker.id {ids.pop()} in meta.properties. "
            "If you moved your data, make sure your configured broker.id matches. If you intend to create a "
            "new broker, you should remove all data in your data directories (log.dirs)."
        )
    for d, m in found.items():
        if m.cluster_id is not None and m.cluster_id != cluster_id:
            raise InconsistentBrokerMetadata(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {m.cluster_id} in meta.properties "
                f"of {d}. The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong."
            )


def write_missing(fs: FileSystem, log_dirs: Sequence[str], broker_id: int, cluster_id: str) -> None:
    """Write meta.properties into each of ``log_dirs`` that has none."""
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        try:
            if not fs.exists(path):
                write_file_atomically(fs, path, format_properties(BrokerMetadata(broker_id, cluster_id)))
        except OSError as e:  # the dir fails at its next write, where the log manager notices it
            log.error("cannot write %s under %s: %s", META_PROPERTIES, d, e)
