"""The warehouse layout and its run manifests, through Hadoop's FileSystem (any URI Spark writes to).

Layout under ``warehouse.path``::

    <topic>/run=<run>/date=YYYY-MM-DD/part-*.parquet      published data (hive partitioning: run, date)
    <topic>/run=<run>/date=YYYY-MM-DD/hour=HH/part-*.parquet   the same, hourly (headwater.loader.partitioning)
    <topic>/_staging-<run>-<token>/date=.../part-*.parquet  a run's output before it is published
    _headwater/manifests/<run>.pending                      a publish in progress
    _headwater/manifests/<run>.json                         a published run (written once, never rewritten)
    _headwater/manifests/<run>.audited                      its audit events went out (an empty marker)

``<run>`` is a 20-digit sequence number; ``<token>`` names the process that wrote the staging. A
manifest (JSON) holds::

    {"run": 7, "created": "2026-11-22T03:00:00Z",
     "ranges": {"page-views": {"0": [1200, 3400], ...}},    # [start, end) per partition, as read
     "files": [["<topic>/_staging-<run>-<token>", "<topic>/run=<run>"], ...],   # the renames
     "records": {"page-views": 2200}, "partition_records": {"page-views": {"0": 2200}},
     "bytes": {"page-views": 123456}, "staging": "<token>",
     "partitioning": {"granularity": "hour", "timezone": "UTC", "time_field": "header:origin.created"},
     "partitions": {"page-views": ["date=2026-11-22/hour=01", "date=2026-11-22/hour=02"]},  # written
     "bounded": {"by": "max.duration.per.run", "planned": 480, "left": 180, ...} or null,
     "losses": [{...gap event...}],                          # failOnDataLoss=false only
     "audit": [{...count or gap event...}]}

Publishing a run: write ``<run>.pending`` (it lists every rename), rename each topic's staging
directory to ``<topic>/run=<run>`` (one rename per topic: a reader of a topic sees all of the run's
data or none of it), rename ``<run>.pending`` to ``<run>.json``. The ``.json`` is the commit point:
the next run starts from the newest one's range ends; a reader that wants every topic at one commit
reads the ``run=`` directories of committed runs only (:meth:`Warehouse.committed_runs`). A crash
before the ``.pending`` exists leaves only staging (the run never happened; deleted once a later
commit takes its run number); a crash after it is rolled forward at the next start (renames are
idempotent: a directory already renamed is skipped). Leading ``_`` keeps Spark and pyarrow from
reading staging and ``_headwater`` as data.
"""

from __future__ import annotations

import json
from typing import Any

MANIFESTS = "_headwater/manifests"
STAGING_PREFIX = "_staging-"
LEGACY_STAGING = "_headwater/staging"  # where loaders before the per-topic staging wrote


def run_name(run: int) -> str:
    return f"{run:020d}"


class Warehouse:
    def __init__(self, spark: Any, root: str) -> None:
        self.root = root.rstrip("/")
        jvm = spark._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.org.apache.commons.io.IOUtils
        self.fs = self._Path(self.root).getFileSystem(spark._jsc.hadoopConfiguration())

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _p(self, rel: str) -> Any:
        return self._Path(self.path(rel))

    # -- files ---------------------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self._p(rel)))

    def children(self, rel: str) -> list[str]:
        if not self.exists(rel):
            return []
        return sorted(str(s.getPath().getName()) for s in self.fs.listStatus(self._p(rel)))

    def files_under(self, rel: str) -> list[str]:
        """Relative paths of the data files below ``rel`` (recursive; hidden and ``_`` files skipped)."""
        out: list[str] = []
        if not self.exists(rel):
            return out
        it = self.fs.listFiles(self._p(rel), True)
        base = str(self._p(rel).toUri().getPath()).rstrip("/")
        while it.hasNext():
            status = it.next()
            full = str(status.getPath().toUri().getPath())
            sub = full[len(base) + 1 :]
            if any(part.startswith(("_", ".")) for part in sub.split("/")):
                continue
            out.append(f"{rel}/{sub}")
        return sorted(out)

    def read_text(self, rel: str) -> str:
        stream = self.fs.open(self._p(rel))
        try:
            return bytes(self._io.toByteArray(stream)).decode()
        finally:
            stream.close()

    def create_once(self, rel: str, text: str) -> None:
        """Write a file that is never rewritten: whole under ``<rel>.tmp``, then renamed to ``rel``.

        Refuses when ``rel`` exists (a committed manifest is never replaced, so it is never absent,
        not even for an instant); a leftover ``.tmp`` from a crash is overwritten. A rename that
        returns False (HDFS, S3A) raises, leaving ``rel`` as it was.
        """
        if self.fs.exists(self._p(rel)):
            raise FileExistsError(f"{rel} exists in the warehouse and is never rewritten")
        tmp = self._p(rel + ".tmp")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if not self.fs.rename(tmp, self._p(rel)):
            raise OSError(f"could not rename {rel}.tmp into place")

    def move(self, src: str, dst: str) -> None:
        """Idempotent: a file already at ``dst`` (and gone from ``src``) counts as moved."""
        if not self.exists(src):
            if self.exists(dst):
                return
            raise FileNotFoundError(f"neither {src} nor {dst} exists in the warehouse")
        if self.exists(dst):  # a rename onto an existing directory would nest src inside it
            raise FileExistsError(f"{dst} exists in the warehouse: not moving {src} onto it")
        parent = self._p(dst).getParent()
        self.fs.mkdirs(parent)
        if not self.fs.rename(self._p(src), self._p(dst)):
            raise OSError(f"could not move {src} to {dst}")

    def staging_dirs(self) -> list[tuple[str, int]]:
        """Every ``<topic>/_staging-<run>-<token>`` directory, with its run number."""
        out = []
        for topic in self.children(""):
            if topic.startswith(("_", ".")):
                continue
            for name in self.children(topic):
                run = name[len(STAGING_PREFIX) :].split("-", 1)[0]
                if name.startswith(STAGING_PREFIX) and run.isdigit():
                    out.append((f"{topic}/{name}", int(run)))
        return out

    def delete(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.delete(self._p(rel), True)

    # -- manifests -----------------------------------------------------------------------------

    def manifests(self, suffix: str = ".json") -> list[int]:
        return sorted(
            int(n[: -len(suffix)])
            for n in self.children(MANIFESTS)
            if n.endswith(suffix) and n[: -len(suffix)].isdigit()
        )

    def committed_runs(self, topic: str) -> list[str]:
        """Paths of ``topic``'s data in committed runs only (``spark.read.option("basePath",
        wh.path(topic)).parquet(*paths)``): a snapshot consistent across topics, as of the newest
        ``.json``, even while a publish is in progress or was interrupted."""
        return [
            self.path(f"{topic}/run={run_name(run)}")
            for run in self.manifests()
            if self.exists(f"{topic}/run={run_name(run)}")
        ]

    def read_manifest(self, run: int, suffix: str = ".json") -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.read_text(f"{MANIFESTS}/{run_name(run)}{suffix}"))
        return data

    def write_manifest(self, run: int, manifest: dict[str, Any], suffix: str) -> None:
        self.create_once(f"{MANIFESTS}/{run_name(run)}{suffix}", json.dumps(manifest, indent=1, sort_keys=True))

    def drop_partial_manifests(self) -> list[str]:
        """Delete ``*.tmp`` files a crash left while writing a manifest or marker (never read)."""
        partial = [n for n in self.children(MANIFESTS) if n.endswith(".tmp")]
        for name in partial:
            self.delete(f"{MANIFESTS}/{name}")
        return partial

    def audited(self, run: int) -> bool:
        """Whether run's warehouse-tier audit events went out (``<run>.audited`` exists)."""
        return self.exists(f"{MANIFESTS}/{run_name(run)}.audited")

    def mark_audited(self, run: int) -> None:
        """``<run>.audited``: a separate marker, so the commit file ``<run>.json`` is written once."""
        if not self.audited(run):
            self.create_once(f"{MANIFESTS}/{run_name(run)}.audited", "")

    def claim(self, run: int, manifest: dict[str, Any]) -> None:
        """Write ``<run>.pending``, refusing a run number another load has published or is publishing."""
        if self.exists(f"{MANIFESTS}/{run_name(run)}.json"):
            raise FileExistsError(f"run {run} is published already (by another load of this warehouse?)")
        self.write_manifest(run, manifest, ".pending")

    def commit(self, run: int) -> None:
        """``<run>.pending`` becomes ``<run>.json``: the run is published."""
        src, dst = self._p(f"{MANIFESTS}/{run_name(run)}.pending"), self._p(f"{MANIFESTS}/{run_name(run)}.json")
        if self.fs.exists(dst):  # a local rename would replace it
            raise FileExistsError(f"run {run} is published already (by another load of this warehouse?)")
        if not self.fs.rename(src, dst):
            raise OSError(f"could not commit the manifest of run {run}")
