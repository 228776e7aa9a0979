"""The audit service's state: counts per (topic, window, datacenter, tier), the count events seen
(de-duplicated by guid), the offsets and watermarks each tier's counting reached, rejected events,
the mirror's gaps and the alerts — all in one database.

Tables (SQLite by default, PostgreSQL by DSN; the same SQL)::

    audit_counts    (topic, window_start, datacenter, tier) -> count, unaudited, late, updated_ms
    audit_events    guid -> tier, topic, window_start, datacenter, host, application, count, received_ms
    audit_offsets   (cluster, topic, partition) -> next_offset, watermark_ms
                    next_offset: where counting resumes; watermark_ms: the tier has counted this
                    partition up to this creation time (see counter.py)
    audit_alerts    (topic, window_start, datacenter, tier) -> status, alerted_ms, payload, delivered_ms,
                    attempts, next_attempt_ms                     (an outbox: sent until a 2xx)
    audit_rejected  (cluster, topic, partition, record_offset) -> reason, value, received_ms
    audit_gaps      guid -> tier, hop, datacenter, topic, partition, from_offset, to_offset, records,
                    reason, detected_ms, received_ms, payload, delivered_ms, attempts, next_attempt_ms
    audit_stats     name -> value                                  (rejected events, ...)
    audit_completion (topic, window_start, datacenter, tier) -> completed_ms, latency_ms
                    when the tier's count first reached the producers' (see service.py)
    audit_heartbeats (cluster, source) -> newest_ms
                    the newest mirror heartbeat from datacenter ``source`` seen in ``cluster`` (counter.py)

    audit_schema_version version -> description, applied_ms       (the migrations applied, see below)

Schema migrations are versioned (:data:`MIGRATIONS`): numbered, applied in order at start, each in
its own transaction together with its row in ``audit_schema_version`` — a crash in the middle of one
leaves the store at the previous version, and the next start applies it again. A migration's
statements are idempotent (CREATE ... IF NOT EXISTS, ADD COLUMN when missing), so a store written
before versioning (no ``audit_schema_version``: version 0) is brought up by applying every migration
from 1, whatever it already had. Two instances starting at once take turns (PostgreSQL: an advisory
lock in the transaction; SQLite: BEGIN IMMEDIATE) and the second finds nothing left to do. A store
whose version is newer than this code knows is refused (:class:`SchemaTooNew`): an older audit must
not write into a schema it does not know.

Exactly once: the counts a fetch produced and the offsets it reached are written in ONE transaction
(:meth:`Store.apply`) that first checks each partition's stored offset is still the one the counter
started from (compare-and-set). A crash loses both or neither; a second service instance on the same
database, or a retry of a transaction whose commit was in fact done, finds the offsets moved and adds
nothing (:class:`OffsetConflict`).

Connection faults (PostgreSQL restarted, SQLite locked past its busy timeout) raise
:class:`StoreUnavailable`; the connection is dropped and opened again by the next call.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

UNAUDITED_DC = "-"
MAX_VALUE_CHARS = 2000  # of a rejected event's value kept in audit_rejected

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS audit_counts (
        topic TEXT NOT NULL, window_start BIGINT NOT NULL, datacenter TEXT NOT NULL, tier TEXT NOT NULL,
        count BIGINT NOT NULL, unaudited BIGINT NOT NULL DEFAULT 0, late BIGINT NOT NULL DEFAULT 0,
        updated_ms BIGINT NOT NULL,
        PRIMARY KEY (topic, window_start, datacenter, tier))""",
    """CREATE TABLE IF NOT EXISTS audit_events (
        guid TEXT PRIMARY KEY, tier TEXT NOT NULL, topic TEXT NOT NULL, window_start BIGINT NOT NULL,
        datacenter TEXT NOT NULL, host TEXT, application TEXT, count BIGINT NOT NULL, received_ms BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS audit_offsets (
        cluster TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset BIGINT NOT NULL,
        PRIMARY KEY (cluster, topic, partition))""",
    """CREATE TABLE IF NOT EXISTS audit_alerts (
        topic TEXT NOT NULL, window_start BIGINT NOT NULL, datacenter TEXT NOT NULL, tier TEXT NOT NULL,
        status TEXT NOT NULL, alerted_ms BIGINT NOT NULL,
        PRIMARY KEY (topic, window_start, datacenter, tier))""",
    """CREATE TABLE IF NOT EXISTS audit_stats (name TEXT PRIMARY KEY, value BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS audit_rejected (
        cluster TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, record_offset BIGINT NOT NULL,
        reason TEXT NOT NULL, value TEXT, received_ms BIGINT NOT NULL,
        PRIMARY KEY (cluster, topic, partition, record_offset))""",
    """CREATE TABLE IF NOT EXISTS audit_gaps (
        guid TEXT PRIMARY KEY, tier TEXT NOT NULL, hop TEXT NOT NULL, datacenter TEXT NOT NULL, topic TEXT NOT NULL,
        partition INTEGER NOT NULL, from_offset BIGINT NOT NULL, to_offset BIGINT NOT NULL, records BIGINT NOT NULL,
        reason TEXT NOT NULL, detected_ms BIGINT NOT NULL, received_ms BIGINT NOT NULL, payload TEXT,
        delivered_ms BIGINT, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_ms BIGINT NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS audit_completion (
        topic TEXT NOT NULL, window_start BIGINT NOT NULL, datacenter TEXT NOT NULL, tier TEXT NOT NULL,
        completed_ms BIGINT NOT NULL, latency_ms BIGINT NOT NULL,
        PRIMARY KEY (topic, window_start, datacenter, tier))""",
    """CREATE TABLE IF NOT EXISTS audit_heartbeats (
        cluster TEXT NOT NULL, source TEXT NOT NULL, newest_ms BIGINT NOT NULL,
        PRIMARY KEY (cluster, source))""",
    "CREATE INDEX IF NOT EXISTS audit_events_by_dc ON audit_events (tier, datacenter)",
    "CREATE INDEX IF NOT EXISTS audit_events_by_window ON audit_events (tier, topic, window_start, datacenter)",
    "CREATE INDEX IF NOT EXISTS audit_gaps_by_topic ON audit_gaps (topic, detected_ms)",
]

# Columns added after a table's first version: (table, column, type and default).
_ADDED_COLUMNS = [
    ("audit_offsets", "watermark_ms", "BIGINT NOT NULL DEFAULT 0"),
    ("audit_alerts", "payload", "TEXT"),
    ("audit_alerts", "delivered_ms", "BIGINT"),
    ("audit_alerts", "attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("audit_alerts", "next_attempt_ms", "BIGINT NOT NULL DEFAULT 0"),
]

# After the added columns exist (an index on a new column).
_SCHEMA_AFTER = [
    "CREATE INDEX IF NOT EXISTS audit_alerts_pending ON audit_alerts (delivered_ms, next_attempt_ms)",
]


@dataclass(frozen=True)
class Migration:
    """One numbered step of the schema: idempotent statements; ``columns`` are (table, column, type)
    added when missing (SQLite has no ADD COLUMN IF NOT EXISTS)."""

    version: int
    description: str
    statements: tuple[str, ...] = ()
    columns: tuple[tuple[str, str, str], ...] = ()
    after: tuple[str, ...] = ()  # statements that need the added columns


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the schema before versioning: counts, events, offsets and watermarks, alerts outbox, stats, "
        "rejected events, gaps, completion latency, heartbeats",
        tuple(_SCHEMA),
        tuple(_ADDED_COLUMNS),
        tuple(_SCHEMA_AFTER),
    ),
    Migration(
        2,
        "indexes for the hourly retention prune (deletes by window start and by receive time)",
        (
            "CREATE INDEX IF NOT EXISTS audit_counts_by_window ON audit_counts (window_start)",
            "CREATE INDEX IF NOT EXISTS audit_events_by_start ON audit_events (window_start)",
            "CREATE INDEX IF NOT EXISTS audit_completion_by_window ON audit_completion (window_start)",
            "CREATE INDEX IF NOT EXISTS audit_rejected_by_received ON audit_rejected (received_ms)",
        ),
    ),
)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS audit_schema_version (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_ms BIGINT NOT NULL)"""
_MIGRATION_LOCK = 0x68770A0D17  # pg_advisory_xact_lock key of the audit's migrations


class SchemaTooNew(Exception):
    """The store was migrated by a newer version of the audit service than this one."""


CountKey = tuple[str, int, str, str]  # topic, window_start, datacenter, tier
TopicPartition = tuple[str, int]


class StoreUnavailable(Exception):
    """The database cannot be reached or is locked; the next call reconnects. Retry with backoff."""


class OffsetConflict(Exception):
    """A partition's stored offset is not the one the counter started from: another writer (a second
    service instance) counted it, or a reset moved it. Nothing of the transaction was written."""


@dataclass(frozen=True)
class CountRow:
    topic: str
    window_start: int
    datacenter: str
    tier: str
    count: int
    unaudited: int
    late: int
    updated_ms: int = 0  # the last write to this count


@dataclass(frozen=True)
class Rejected:
    """A count event that was not counted (kept in audit_rejected)."""

    topic: str
    partition: int
    offset: int
    reason: str
    value: bytes | None


@dataclass(frozen=True)
class Gap:
    """Records a mirror could not copy (its "gap" event on `__audit`; docs/audit.md, "Gaps reported by the mirror")."""

    guid: str
    tier: str
    hop: str
    datacenter: str
    topic: str
    partition: int
    from_offset: int
    to_offset: int
    records: int
    reason: str
    detected_ms: int

    def describe(self) -> str:
        return (
            f"lost at mirror {self.hop}: {self.reason}, {self.records} records, "
            f"offsets {self.from_offset}-{self.to_offset - 1}"
        )


@dataclass(frozen=True)
class PendingAlert:
    """An alert (a window's status, or a gap) not yet delivered to the webhook."""

    kind: str  # "window" | "gap"
    key: tuple[Any, ...]  # the window's CountKey, or (guid,)
    payload: str
    attempts: int


def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg

        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:  # pragma: no cover - psycopg is a dependency of the service
        pass
    return tuple(errors)


_TRANSIENT = _transient_errors()


class Store:
    def __init__(
        self, dsn: str, *, busy_timeout_s: float = 5.0, migrations: tuple[Migration, ...] = MIGRATIONS
    ) -> None:
        self.dsn = dsn
        self.migrations = migrations
        self.migrated: list[int] = []  # the migrations this instance applied
        self.sqlite = dsn.startswith("sqlite:///")
        self.mark = "?" if self.sqlite else "%s"
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._conn: Any = None
        with self._lock:
            self._guarded(self._migrate)

    # -- the connection ------------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._conn is None:
            conn: Any
            if self.sqlite:
                path = self.dsn[len("sqlite:///") :]
                conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=self.busy_timeout_s)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            else:
                import psycopg

                conn = psycopg.connect(
                    self.dsn.replace("postgres://", "postgresql://", 1), autocommit=True, connect_timeout=10
                )
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection may not close cleanly; it is gone either way
                pass

    def _guarded(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(conn, *args)`` (the lock held); a connection fault drops the connection and raises
        :class:`StoreUnavailable`."""
        try:
            return fn(self._connect(), *args)
        except _TRANSIENT as e:
            self._drop()
            raise StoreUnavailable(f"{type(e).__name__}: {e}".strip()) from e

    def _migrate(self, conn: Any) -> None:
        """Apply the migrations newer than the store's version, in order, one transaction each."""
        known = max((m.version for m in self.migrations), default=0)
        for m in sorted(self.migrations, key=lambda m: m.version):
            self._begin(conn)
            try:
                if not self.sqlite:  # instances starting at once take turns (SQLite: BEGIN IMMEDIATE)
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(_VERSION_TABLE)
                if self._version(conn) < m.version:
                    self._apply_migration(conn, m)
                    self.migrated.append(m.version)
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except Exception:  # the connection broke: the transaction is gone with it
                    pass
                raise
        conn.execute(_VERSION_TABLE)  # (no migrations given)
        version = self._version(conn)
        if version > known:
            raise SchemaTooNew(
                f"the audit store {self._where()} is at schema version {version}, newer than this audit "
                f"service knows ({known}): run the newer version, or restore the store"
            )

    def _begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE" if self.sqlite else "BEGIN")

    def _where(self) -> str:
        return self.dsn.split("@")[-1] if not self.sqlite else self.dsn  # no password in the message

    def _version(self, conn: Any) -> int:
        row = conn.execute("SELECT MAX(version) FROM audit_schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def schema_version(self) -> int:
        with self._lock:
            return int(self._guarded(self._version))

    def _apply_migration(self, conn: Any, m: Migration) -> None:
        for stmt in m.statements:
            conn.execute(stmt)
        for table, column, kind in m.columns:
            if column not in self._columns(conn, table):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        for stmt in m.after:
            conn.execute(stmt)
        conn.execute(
            self._sql("INSERT INTO audit_schema_version (version, description, applied_ms) VALUES (?, ?, ?)"),
            (m.version, m.description, int(time.time() * 1000)),
        )

    def _columns(self, conn: Any, table: str) -> set[str]:
        if self.sqlite:
            return {r[1] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()}
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND table_schema = current_schema()",
            (table,),
        ).fetchall()
        return {r[0] for r in rows}

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.mark)

    def _write(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(cursor, *args)`` in one transaction: committed when it returns, rolled back when it raises."""

        def tx(conn: Any) -> Any:
            if self.sqlite:
                conn.execute("BEGIN IMMEDIATE")
                cur = conn.cursor()
                try:
                    result = fn(cur, *args)
                except BaseException:
                    cur.close()
                    conn.execute("ROLLBACK")
                    raise
                cur.close()
                conn.execute("COMMIT")
                return result
            with conn.transaction(), conn.cursor() as cur:
                return fn(cur, *args)

        with self._lock:
            return self._guarded(tx)

    # -- writes (one transaction each) ------------------------------------------------------------

    def apply(
        self,
        cluster: str,
        offsets: Mapping[TopicPartition, int],
        counts: Mapping[CountKey, tuple[int, int]],
        now_ms: int,
        closed_before_ms: int | Mapping[str, int],
        events: Iterable[Mapping[str, Any]] = (),
        rejected: Iterable[Rejected] | int = (),
        *,
        previous: Mapping[TopicPartition, int | None] | None = None,
        watermarks: Mapping[TopicPartition, int] | None = None,
        gaps: Iterable[Gap] = (),
        heartbeats: Mapping[str, int] | None = None,
        closed_before_dc: Mapping[tuple[str, str], int] | None = None,
    ) -> int:
        """Add ``counts`` ((count, unaudited) per key), the count ``events`` not seen before (returns
        how many were new), the ``rejected`` events and the ``gaps``, and move ``cluster``'s offsets
        (and ``watermarks``) — atomically.

        With ``previous`` (the offsets the counter started from, None for a partition never stored),
        each offset moves only from that value (compare-and-set). When every partition already stands
        at the new offset (a retry of a commit that was done), nothing is written and 0 returned; any
        other difference raises :class:`OffsetConflict`.

        A count for a window that started before ``closed_before_ms`` (one value, or one per topic,
        ``__audit``'s for the events) is also recorded as late: that tier had closed the window;
        ``closed_before_dc`` overrides it per (topic, datacenter) (an aggregate tier that holds a
        datacenter's windows open until its heartbeats arrive). ``heartbeats``: per source datacenter,
        the newest heartbeat timestamp this cluster's ``heartbeats`` topic has shown (kept as a maximum).
        """
        return int(
            self._write(
                self._apply,
                cluster,
                offsets,
                counts,
                now_ms,
                closed_before_ms,
                list(events),
                rejected,
                previous,
                watermarks or {},
                list(gaps),
                heartbeats or {},
                closed_before_dc or {},
            )
        )

    def _apply(
        self,
        cur: Any,
        cluster: str,
        offsets: Mapping[TopicPartition, int],
        counts: Mapping[CountKey, tuple[int, int]],
        now_ms: int,
        closed_before_ms: int | Mapping[str, int],
        events: list[Mapping[str, Any]],
        rejected: Iterable[Rejected] | int,
        previous: Mapping[TopicPartition, int | None] | None,
        watermarks: Mapping[TopicPartition, int],
        gaps: list[Gap],
        heartbeats: Mapping[str, int],
        closed_before_dc: Mapping[tuple[str, str], int],
    ) -> int:
        if previous is not None and not self._move_offsets(cur, cluster, offsets, previous, watermarks):
            return 0
        if previous is None:
            for (topic, partition), offset in offsets.items():
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_offsets (cluster, topic, partition, next_offset, watermark_ms) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (cluster, topic, partition) "
                        "DO UPDATE SET next_offset = excluded.next_offset, watermark_ms = excluded.watermark_ms"
                    ),
                    (cluster, topic, partition, offset, watermarks.get((topic, partition), 0)),
                )

        def closed_before(topic: str) -> int:
            if isinstance(closed_before_ms, int):
                return closed_before_ms
            return closed_before_ms.get(topic, -(2**62))

        new_events = 0
        totals: dict[CountKey, list[int]] = {k: [n, u] for k, (n, u) in counts.items()}
        for e in events:
            cur.execute(
                self._sql(
                    "INSERT INTO audit_events (guid, tier, topic, window_start, datacenter, host, application, "
                    "count, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (guid) DO NOTHING"
                ),
                (
                    e["guid"],
                    e["tier"],
                    e["topic"],
                    e["window_start"],
                    e["datacenter"],
                    e.get("host"),
                    e.get("application"),
                    e["count"],
                    now_ms,
                ),
            )
            if cur.rowcount == 1:
                new_events += 1
                key = (e["topic"], int(e["window_start"]), e["datacenter"], e["tier"])
                totals.setdefault(key, [0, 0])[0] += int(e["count"])
        for (topic, window_start, dc, tier), (n, unaudited) in totals.items():
            source = "__audit" if tier in ("producer", "warehouse") else topic
            closed_at = closed_before_dc.get((topic, dc)) if tier not in ("producer", "warehouse") else None
            late = n if window_start < (closed_before(source) if closed_at is None else closed_at) else 0
            cur.execute(
                self._sql(
                    "INSERT INTO audit_counts (topic, window_start, datacenter, tier, count, unaudited, late, "
                    "updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (topic, window_start, datacenter, tier) "
                    "DO UPDATE SET count = audit_counts.count + excluded.count, "
                    "unaudited = audit_counts.unaudited + excluded.unaudited, "
                    "late = audit_counts.late + excluded.late, updated_ms = excluded.updated_ms"
                ),
                (topic, window_start, dc, tier, n, unaudited, late, now_ms),
            )
        n_rejected = rejected if isinstance(rejected, int) else 0
        if not isinstance(rejected, int):
            for r in rejected:
                n_rejected += 1
                value = None if r.value is None else r.value[: MAX_VALUE_CHARS * 4].decode("utf-8", "replace")
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_rejected (cluster, topic, partition, record_offset, reason, value, "
                        "received_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (cluster, topic, partition, record_offset) DO NOTHING"
                    ),
                    (
                        cluster,
                        r.topic,
                        r.partition,
                        r.offset,
                        r.reason,
                        None if value is None else value[:MAX_VALUE_CHARS],
                        now_ms,
                    ),
                )
        if n_rejected:
            cur.execute(
                self._sql(
                    "INSERT INTO audit_stats (name, value) VALUES ('rejected_events', ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = audit_stats.value + excluded.value"
                ),
                (n_rejected,),
            )
        for g in gaps:
            cur.execute(
                self._sql(
                    "INSERT INTO audit_gaps (guid, tier, hop, datacenter, topic, partition, from_offset, to_offset, "
                    "records, reason, detected_ms, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (guid) DO NOTHING"
                ),
                (
                    g.guid,
                    g.tier,
                    g.hop,
                    g.datacenter,
                    g.topic,
                    g.partition,
                    g.from_offset,
                    g.to_offset,
                    g.records,
                    g.reason,
                    g.detected_ms,
                    now_ms,
                ),
            )
        for source, newest in heartbeats.items():
            cur.execute(
                self._sql(
                    "INSERT INTO audit_heartbeats (cluster, source, newest_ms) VALUES (?, ?, ?) "
                    "ON CONFLICT (cluster, source) DO UPDATE SET newest_ms = "
                    "CASE WHEN excluded.newest_ms > audit_heartbeats.newest_ms THEN excluded.newest_ms "
                    "ELSE audit_heartbeats.newest_ms END"
                ),
                (cluster, source, newest),
            )
        return new_events

    def _move_offsets(
        self,
        cur: Any,
        cluster: str,
        offsets: Mapping[TopicPartition, int],
        previous: Mapping[TopicPartition, int | None],
        watermarks: Mapping[TopicPartition, int],
    ) -> bool:
        """Compare-and-set every partition's offset. False: all were already at their new offsets."""
        conflicts: list[str] = []
        already = 0
        for tp, offset in offsets.items():
            prev = previous.get(tp)
            wm = watermarks.get(tp, 0)
            if prev is None:
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_offsets (cluster, topic, partition, next_offset, watermark_ms) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (cluster, topic, partition) DO NOTHING"
                    ),
                    (cluster, tp[0], tp[1], offset, wm),
                )
            else:
                cur.execute(
                    self._sql(
                        "UPDATE audit_offsets SET next_offset = ?, watermark_ms = ? "
                        "WHERE cluster = ? AND topic = ? AND partition = ? AND next_offset = ?"
                    ),
                    (offset, wm, cluster, tp[0], tp[1], prev),
                )
            if cur.rowcount == 1:
                continue
            cur.execute(
                self._sql("SELECT next_offset FROM audit_offsets WHERE cluster = ? AND topic = ? AND partition = ?"),
                (cluster, *tp),
            )
            row = cur.fetchone()
            stored = None if row is None else int(row[0])
            if stored == offset:
                already += 1
            else:
                conflicts.append(f"{tp[0]}-{tp[1]}: stored {stored}, expected {prev}")
        if conflicts or (already and already < len(offsets)):
            raise OffsetConflict(f"{cluster}: offsets moved by another writer ({'; '.join(conflicts) or 'partly'})")
        return not (offsets and already == len(offsets))

    def record_alert(self, key: CountKey, status: str, now_ms: int, payload: str = "") -> bool:
        """True the first time a (window, tier) is alerted with this status: the alert is then pending
        delivery (:meth:`pending_alerts`) until :meth:`alert_delivered`."""

        def tx(cur: Any) -> bool:
            cur.execute(
                self._sql(
                    "SELECT status FROM audit_alerts WHERE topic = ? AND window_start = ? AND datacenter = ? AND tier = ?"
                ),
                key,
            )
            row = cur.fetchone()
            if row is not None and row[0] == status:
                return False
            cur.execute(
                self._sql(
                    "INSERT INTO audit_alerts (topic, window_start, datacenter, tier, status, alerted_ms, payload, "
                    "delivered_ms, attempts, next_attempt_ms) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 0, 0) "
                    "ON CONFLICT (topic, window_start, datacenter, tier) DO UPDATE SET status = excluded.status, "
                    "alerted_ms = excluded.alerted_ms, payload = excluded.payload, delivered_ms = NULL, "
                    "attempts = 0, next_attempt_ms = 0"
                ),
                (*key, status, now_ms, payload),
            )
            return True

        return bool(self._write(tx))

    def alerted(self, since: int | None = None) -> dict[CountKey, str]:
        """The status last alerted per window and tier (windows starting at ``since`` or later)."""
        sql = "SELECT topic, window_start, datacenter, tier, status FROM audit_alerts"
        args: tuple[Any, ...] = ()
        if since is not None:
            sql += " WHERE window_start >= ?"
            args = (since,)
        return {(t, int(w), dc, tier): s for t, w, dc, tier, s in self._query(sql, args)}

    def pending_alerts(self, now_ms: int, limit: int = 100) -> list[PendingAlert]:
        """Alerts and gaps not yet delivered whose next attempt is due."""
        out = [
            PendingAlert("window", (t, int(w), dc, tier), str(p or ""), int(a))
            for t, w, dc, tier, p, a in self._query(
                "SELECT topic, window_start, datacenter, tier, payload, attempts FROM audit_alerts "
                "WHERE delivered_ms IS NULL AND payload IS NOT NULL AND next_attempt_ms <= ? "
                "ORDER BY alerted_ms LIMIT ?",
                (now_ms, limit),
            )
        ]
        out += [
            PendingAlert("gap", (g,), str(p or ""), int(a))
            for g, p, a in self._query(
                "SELECT guid, payload, attempts FROM audit_gaps WHERE delivered_ms IS NULL AND payload IS NOT NULL "
                "AND next_attempt_ms <= ? ORDER BY received_ms LIMIT ?",
                (now_ms, limit),
            )
        ]
        return out

    def alert_delivered(self, alert: PendingAlert, now_ms: int, payload: str) -> None:
        """Mark delivered — unless the alert changed meanwhile (its payload is no longer the one sent)."""
        self._alert_update(alert, "delivered_ms = ?", (now_ms,), payload)

    def alert_failed(self, alert: PendingAlert, next_attempt_ms: int, payload: str) -> None:
        self._alert_update(alert, "attempts = attempts + 1, next_attempt_ms = ?", (next_attempt_ms,), payload)

    def _alert_update(self, alert: PendingAlert, assignments: str, values: tuple[Any, ...], payload: str) -> None:
        if alert.kind == "gap":
            where, args = "guid = ?", alert.key
            table = "audit_gaps"
        else:
            where, args = "topic = ? AND window_start = ? AND datacenter = ? AND tier = ?", alert.key
            table = "audit_alerts"
        sql = self._sql(f"UPDATE {table} SET {assignments} WHERE {where} AND payload = ?")
        self._write(lambda cur: cur.execute(sql, (*values, *args, payload)))

    def set_gap_payload(self, guid: str, payload: str) -> None:
        """Queue a gap's alert (once: only while it has none)."""
        self._write(
            lambda cur: cur.execute(
                self._sql("UPDATE audit_gaps SET payload = ? WHERE guid = ? AND payload IS NULL"), (payload, guid)
            )
        )

    def record_completions(self, found: Mapping[CountKey, tuple[int, int]]) -> list[CountKey]:
        """Record when each (window, datacenter, tier) reached 100 % ((completed_ms, latency_ms)), in
        one transaction; returns the keys recorded now (not already there)."""

        def tx(cur: Any) -> list[CountKey]:
            out = []
            for key, (completed_ms, latency_ms) in found.items():
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_completion (topic, window_start, datacenter, tier, completed_ms, latency_ms) "
                        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic, window_start, datacenter, tier) DO NOTHING"
                    ),
                    (*key, completed_ms, latency_ms),
                )
                if cur.rowcount == 1:
                    out.append(key)
            return out

        return list(self._write(tx))

    def record_completion(self, key: CountKey, completed_ms: int, latency_ms: int) -> bool:
        """True the first time a (window, datacenter, tier) is recorded as having reached 100 %."""
        return bool(self.record_completions({key: (completed_ms, latency_ms)}))

    def prune(self, before_ms: int) -> dict[str, int]:
        """Delete what is older than ``before_ms``: counts, count events, completion latencies and
        alerts of windows that started before it, gaps detected and rejected events received before
        it. Alerts and gaps not yet delivered to the webhook are kept (the outbox loses nothing; an
        alert without a payload was written by an older version and is never sent).
        Offsets and watermarks are never pruned. Returns the rows deleted per table."""
        deletes = [
            ("audit_counts", "window_start < ?"),
            ("audit_events", "window_start < ?"),
            ("audit_completion", "window_start < ?"),
            ("audit_alerts", "window_start < ? AND (delivered_ms IS NOT NULL OR payload IS NULL)"),
            ("audit_gaps", "detected_ms < ? AND delivered_ms IS NOT NULL"),
            ("audit_rejected", "received_ms < ?"),
        ]

        def tx(cur: Any) -> dict[str, int]:
            out = {}
            for table, where in deletes:
                cur.execute(self._sql(f"DELETE FROM {table} WHERE {where}"), (before_ms,))
                out[table] = max(int(cur.rowcount), 0)
            return out

        return dict(self._write(tx))

    # -- reads ---------------------------------------------------------------------------------

    def recent_alerts(self, since_ms: int, limit: int = 100) -> list[dict[str, Any]]:
        """The window alerts recorded since ``since_ms``, newest first, with their delivery state."""
        rows = self._query(
            "SELECT topic, window_start, datacenter, tier, status, alerted_ms, delivered_ms, attempts, payload "
            "FROM audit_alerts WHERE alerted_ms >= ? ORDER BY alerted_ms DESC LIMIT ?",
            (since_ms, limit),
        )
        return [
            {
                "topic": t,
                "window_start": int(w),
                "datacenter": dc,
                "tier": tier,
                "status": st,
                "alerted_ms": int(at),
                "delivered_ms": None if d is None else int(d),
                "attempts": int(a),
                "sent": p is not None,
            }
            for t, w, dc, tier, st, at, d, a, p in rows
        ]

    def completions(
        self, topic: str | None = None, since: int | None = None, until: int | None = None
    ) -> dict[CountKey, int]:
        """Per (topic, window, datacenter, tier): ms after the window's end at which the tier reached 100 %."""
        where, args = _window_filter(topic, since, until)
        sql = "SELECT topic, window_start, datacenter, tier, latency_ms FROM audit_completion" + where
        return {(t, int(w), dc, tier): int(lat) for t, w, dc, tier, lat in self._query(sql, args)}

    def offsets(self, cluster: str) -> dict[TopicPartition, int]:
        rows = self._query("SELECT topic, partition, next_offset FROM audit_offsets WHERE cluster = ?", (cluster,))
        return {(t, int(p)): int(o) for t, p, o in rows}

    def watermarks(self) -> dict[tuple[str, str], dict[int, int]]:
        """Per (cluster, topic): each partition's watermark (ms)."""
        out: dict[tuple[str, str], dict[int, int]] = {}
        for c, t, p, wm in self._query("SELECT cluster, topic, partition, watermark_ms FROM audit_offsets", ()):
            out.setdefault((c, t), {})[int(p)] = int(wm)
        return out

    def heartbeats(self, cluster: str) -> dict[str, int]:
        """Per source datacenter: the newest heartbeat timestamp (ms) seen in ``cluster``."""
        rows = self._query("SELECT source, newest_ms FROM audit_heartbeats WHERE cluster = ?", (cluster,))
        return {s: int(ms) for s, ms in rows}

    def counts(self, topic: str | None = None, since: int | None = None, until: int | None = None) -> list[CountRow]:
        where, args = _window_filter(topic, since, until)
        sql = "SELECT topic, window_start, datacenter, tier, count, unaudited, late, updated_ms FROM audit_counts"
        return [
            CountRow(t, int(w), dc, tier, int(n), int(u), int(late), int(upd))
            for t, w, dc, tier, n, u, late, upd in self._query(sql + where + " ORDER BY window_start", args)
        ]

    def warehouse_reach(self) -> dict[str, int]:
        """Per topic, the latest window the warehouse counted."""
        rows = self._query(
            "SELECT topic, MAX(window_start) FROM audit_counts WHERE tier = 'warehouse' GROUP BY topic", ()
        )
        return {t: int(w) for t, w in rows}

    def newest_window(self, topic: str) -> int | None:
        """The latest window counted for ``topic`` at any tier (the primary key's index answers it)."""
        rows = self._query("SELECT MAX(window_start) FROM audit_counts WHERE topic = ?", (topic,))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def topics(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT topic FROM audit_counts ORDER BY topic", ())]

    def datacenters(self) -> set[str]:
        """The producers' datacenters: one index seek per datacenter (a loose index scan), not a
        DISTINCT over every count event."""
        out: set[str] = set()
        last = ""
        while True:
            rows = self._query(
                "SELECT MIN(datacenter) FROM audit_events WHERE tier = 'producer' AND datacenter > ?", (last,)
            )
            if not rows or rows[0][0] is None:
                return out
            last = str(rows[0][0])
            out.add(last)

    def producer_hosts(self, topic: str, window_start: int, datacenter: str) -> list[tuple[str, str, int, int]]:
        """(host, application, count, events) of the producer tier for one window."""
        rows = self._query(
            "SELECT host, application, SUM(count), COUNT(*) FROM audit_events WHERE tier = 'producer' AND topic = ? "
            "AND window_start = ? AND datacenter = ? GROUP BY host, application ORDER BY host",
            (topic, window_start, datacenter),
        )
        return [(str(h or ""), str(a or ""), int(n), int(e)) for h, a, n, e in rows]

    def rejected(self, limit: int = 100) -> list[tuple[str, str, int, int, str, str | None]]:
        """(cluster, topic, partition, offset, reason, value) of rejected events, newest first."""
        rows = self._query(
            "SELECT cluster, topic, partition, record_offset, reason, value FROM audit_rejected "
            "ORDER BY received_ms DESC LIMIT ?",
            (limit,),
        )
        return [(str(c), str(t), int(p), int(o), str(r), v) for c, t, p, o, r, v in rows]

    def gaps(self, topic: str | None = None, limit: int = 200) -> list[Gap]:
        sql = (
            "SELECT guid, tier, hop, datacenter, topic, partition, from_offset, to_offset, records, reason, "
            "detected_ms FROM audit_gaps"
        )
        args: tuple[Any, ...] = ()
        if topic is not None:
            sql += " WHERE topic = ?"
            args = (topic,)
        rows = self._query(sql + " ORDER BY detected_ms DESC LIMIT ?", (*args, limit))
        return [
            Gap(g, ti, h, dc, t, int(p), int(f), int(to), int(n), r, int(d))
            for g, ti, h, dc, t, p, f, to, n, r, d in rows
        ]

    def unalerted_gaps(self) -> list[Gap]:
        rows = self._query(
            "SELECT guid, tier, hop, datacenter, topic, partition, from_offset, to_offset, records, reason, "
            "detected_ms FROM audit_gaps WHERE payload IS NULL ORDER BY received_ms",
            (),
        )
        return [
            Gap(g, ti, h, dc, t, int(p), int(f), int(to), int(n), r, int(d))
            for g, ti, h, dc, t, p, f, to, n, r, d in rows
        ]

    def stat(self, name: str) -> int:
        rows = self._query("SELECT value FROM audit_stats WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        def read(conn: Any) -> list[tuple[Any, ...]]:
            cur = conn.cursor()
            try:
                cur.execute(self._sql(sql), args)
                return [tuple(r) for r in cur.fetchall()]
            finally:
                cur.close()

        with self._lock:
            return list(self._guarded(read))


def _window_filter(topic: str | None, since: int | None, until: int | None) -> tuple[str, tuple[Any, ...]]:
    """`` WHERE ...`` and its arguments for an optional topic and window range ``[since, until)``."""
    clauses: list[str] = []
    args: list[Any] = []
    for clause, value in (("topic = ?", topic), ("window_start >= ?", since), ("window_start < ?", until)):
        if value is not None:
            clauses.append(clause)
            args.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)
