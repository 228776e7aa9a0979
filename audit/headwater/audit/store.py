"""The audit service's state: counts per (topic, window, datacenter, tier), the count events seen
(de-duplicated by guid), and the offsets each tier's counting reached — all in one database.

Tables (SQLite by default, PostgreSQL by DSN; the same SQL)::

    audit_counts   (topic, window_start, datacenter, tier) -> count, unaudited, late, updated_ms
    audit_events   guid -> tier, topic, window_start, datacenter, host, application, count, received_ms
    audit_offsets  (cluster, topic, partition) -> next_offset     where counting resumes
    audit_alerts   (topic, window_start, datacenter, tier) -> status, alerted_ms
    audit_stats    name -> value                                  (rejected events, ...)

Exactly once across restarts: the counts a fetch produced and the offsets it reached are written in
ONE transaction (:meth:`Store.apply`), so a crash loses both or neither, and a restart resumes from
the offsets with the counts that match them. ``datacenter`` ``-`` holds records without origin
headers (written by other clients), counted at the cluster where they were read, as unaudited.

One writer (the service's event loop, through a worker thread); SQLite runs in WAL mode so the
dashboard's reads do not block it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

UNAUDITED_DC = "-"

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
]

CountKey = tuple[str, int, str, str]  # topic, window_start, datacenter, tier


@dataclass(frozen=True)
class CountRow:
    topic: str
    window_start: int
    datacenter: str
    tier: str
    count: int
    unaudited: int
    late: int


class Store:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._lock = threading.Lock()
        if dsn.startswith("sqlite:///"):
            path = dsn[len("sqlite:///") :]
            self.conn: Any = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.mark = "?"
            self.sqlite = True
        else:
            import psycopg

            self.conn = psycopg.connect(dsn.replace("postgres://", "postgresql://", 1), autocommit=True)
            self.mark = "%s"
            self.sqlite = False
        with self._lock:
            for stmt in _SCHEMA:
                self.conn.execute(stmt)

    def close(self) -> None:
        self.conn.close()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.mark)

    def _tx(self) -> Any:
        return _Transaction(self)

    # -- writes (one transaction each) ------------------------------------------------------------

    def apply(
        self,
        cluster: str,
        offsets: Mapping[tuple[str, int], int],
        counts: Mapping[CountKey, tuple[int, int]],
        now_ms: int,
        closed_before_ms: int,
        events: Iterable[Mapping[str, Any]] = (),
        rejected: int = 0,
    ) -> int:
        """Add ``counts`` ((count, unaudited) per key) and the count ``events`` not seen before
        (returns how many were new), and move ``cluster``'s offsets — atomically. Counts for
        windows that started before ``closed_before_ms`` are also recorded as late."""
        new_events = 0
        with self._tx() as cur:
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
                late = n if window_start < closed_before_ms else 0
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
            for (topic, partition), offset in offsets.items():
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_offsets (cluster, topic, partition, next_offset) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (cluster, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
                    ),
                    (cluster, topic, partition, offset),
                )
            if rejected:
                cur.execute(
                    self._sql(
                        "INSERT INTO audit_stats (name, value) VALUES ('rejected_events', ?) "
                        "ON CONFLICT (name) DO UPDATE SET value = audit_stats.value + excluded.value"
                    ),
                    (rejected,),
                )
        return new_events

    def record_alert(self, key: CountKey, status: str, now_ms: int) -> bool:
        """True the first time a (window, tier) is alerted with this status."""
        with self._tx() as cur:
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
                    "INSERT INTO audit_alerts (topic, window_start, datacenter, tier, status, alerted_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic, window_start, datacenter, tier) "
                    "DO UPDATE SET status = excluded.status, alerted_ms = excluded.alerted_ms"
                ),
                (*key, status, now_ms),
            )
            return True

    # -- reads ---------------------------------------------------------------------------------

    def offsets(self, cluster: str) -> dict[tuple[str, int], int]:
        rows = self._query("SELECT topic, partition, next_offset FROM audit_offsets WHERE cluster = ?", (cluster,))
        return {(t, int(p)): int(o) for t, p, o in rows}

    def counts(self, topic: str | None = None, since: int | None = None, until: int | None = None) -> list[CountRow]:
        sql = "SELECT topic, window_start, datacenter, tier, count, unaudited, late FROM audit_counts WHERE 1 = 1"
        args: list[Any] = []
        if topic is not None:
            sql += " AND topic = ?"
            args.append(topic)
        if since is not None:
            sql += " AND window_start >= ?"
            args.append(since)
        if until is not None:
            sql += " AND window_start < ?"
            args.append(until)
        return [
            CountRow(t, int(w), dc, tier, int(n), int(u), int(late))
            for t, w, dc, tier, n, u, late in self._query(sql + " ORDER BY window_start", tuple(args))
        ]

    def topics(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT topic FROM audit_counts ORDER BY topic", ())]

    def datacenters(self) -> set[str]:
        return {r[0] for r in self._query("SELECT DISTINCT datacenter FROM audit_events WHERE tier = 'producer'", ())}

    def producer_hosts(self, topic: str, window_start: int, datacenter: str) -> list[tuple[str, str, int, int]]:
        """(host, application, count, events) of the producer tier for one window."""
        rows = self._query(
            "SELECT host, application, SUM(count), COUNT(*) FROM audit_events WHERE tier = 'producer' AND topic = ? "
            "AND window_start = ? AND datacenter = ? GROUP BY host, application ORDER BY host",
            (topic, window_start, datacenter),
        )
        return [(str(h or ""), str(a or ""), int(n), int(e)) for h, a, n, e in rows]

    def stat(self, name: str) -> int:
        rows = self._query("SELECT value FROM audit_stats WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            cur = self.conn.cursor()
            try:
                cur.execute(self._sql(sql), args)
                return [tuple(r) for r in cur.fetchall()]
            finally:
                cur.close()


class _Transaction:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> Any:
        self.store._lock.acquire()
        try:
            if self.store.sqlite:
                self.store.conn.execute("BEGIN IMMEDIATE")
                self.cur = self.store.conn.cursor()
            else:
                self.tx = self.store.conn.transaction()
                self.tx.__enter__()
                self.cur = self.store.conn.cursor()
        except BaseException:
            self.store._lock.release()
            raise
        return self.cur

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.cur.close()
            if self.store.sqlite:
                self.store.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
            else:
                self.tx.__exit__(exc_type, exc, tb)
        finally:
            self.store._lock.release()
