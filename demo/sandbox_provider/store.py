"""SQLite persistence: records, idempotency keys with stored responses, the effect ledger
and the callback outbox. WAL mode with synchronous=FULL, so a committed effect survives a
``kill -9`` and a power cut alike.

One connection, used only from the event loop thread (every statement is short, and
running them there makes each synchronous block atomic with respect to other requests);
callers wrap multi-statement changes in ``transaction()`` so an effect, its ledger count
and its stored response land together.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, cast

from .idempotency import StoredKey
from .records import KINDS, Kind, Record, Scope

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    reference TEXT,
    idempotency_key TEXT,
    details TEXT NOT NULL,
    is_async INTEGER NOT NULL,
    callback_twice INTEGER NOT NULL,
    commit_due REAL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    committed_at TEXT,
    compensated_at TEXT
);
CREATE INDEX IF NOT EXISTS records_by_key ON records (idempotency_key);
CREATE INDEX IF NOT EXISTS records_by_reference ON records (reference);
CREATE INDEX IF NOT EXISTS records_pending ON records (status) WHERE status = 'pending';

CREATE TABLE IF NOT EXISTS idempotency (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    in_flight INTEGER NOT NULL,
    status_code INTEGER,
    response BLOB,
    record_id TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE IF NOT EXISTS ledger (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    resource TEXT NOT NULL,
    effects INTEGER NOT NULL,
    UNIQUE (kind, key)
);

CREATE TABLE IF NOT EXISTS callbacks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    callback_id TEXT NOT NULL,
    record_id TEXT NOT NULL,
    copy INTEGER NOT NULL,
    body BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    state TEXT NOT NULL,
    last_error TEXT,
    trace TEXT
);
CREATE INDEX IF NOT EXISTS callbacks_due ON callbacks (next_at) WHERE state = 'pending';

CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class OutboxItem:
    seq: int
    callback_id: str
    record_id: str
    copy: int
    body: bytes
    attempts: int
    trace: dict[str, str]  # W3C headers of the request that caused it (empty: untraced)


class Store:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(cls, path: Path) -> Self:
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (BEGIN IMMEDIATE).
        conn = sqlite3.connect(str(path), isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        columns = {row["name"] for row in conn.execute("PRAGMA table_info(callbacks)")}
        if "trace" not in columns:
            # A database from before callbacks carried the caller's trace context.
            conn.execute("ALTER TABLE callbacks ADD COLUMN trace TEXT")
        return cls(conn)

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so a transaction never fails half-way
        # on lock upgrade.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def probe_write(self, now_iso: str) -> None:
        """Raise unless the database accepts a durable write."""
        with self.transaction():
            self._conn.execute(
                "INSERT INTO meta (k, v) VALUES ('ready_probe', ?) "
                "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (now_iso,),
            )

    # ------------------------------------------------------------------ idempotency

    def recover_in_flight(self) -> int:
        """Forget claims of requests that died before committing (nothing was written)."""
        with self.transaction():
            cursor = self._conn.execute("DELETE FROM idempotency WHERE in_flight = 1")
        return cursor.rowcount

    def get_key(self, scope: Scope, key: str) -> StoredKey | None:
        row = self._conn.execute(
            "SELECT fingerprint, in_flight, status_code, response, record_id "
            "FROM idempotency WHERE scope = ? AND key = ?",
            (scope, key),
        ).fetchone()
        if row is None:
            return None
        return StoredKey(
            fingerprint=row["fingerprint"],
            in_flight=bool(row["in_flight"]),
            status_code=row["status_code"],
            response=None if row["response"] is None else bytes(row["response"]),
            record_id=row["record_id"],
        )

    def claim_key(self, scope: Scope, key: str, fingerprint: str, now_iso: str) -> None:
        self._conn.execute(
            "INSERT INTO idempotency (scope, key, fingerprint, in_flight, created_at) "
            "VALUES (?, ?, ?, 1, ?)",
            (scope, key, fingerprint, now_iso),
        )

    def release_key(self, scope: Scope, key: str) -> None:
        self._conn.execute(
            "DELETE FROM idempotency WHERE scope = ? AND key = ? AND in_flight = 1", (scope, key)
        )

    def finish_key(
        self, scope: Scope, key: str, status_code: int, response: bytes, record_id: str | None
    ) -> None:
        self._conn.execute(
            "UPDATE idempotency SET in_flight = 0, status_code = ?, response = ?, record_id = ? "
            "WHERE scope = ? AND key = ?",
            (status_code, response, record_id, scope, key),
        )

    def key_in_flight(self, key: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM idempotency WHERE key = ? AND in_flight = 1 LIMIT 1", (key,)
        ).fetchone()
        return row is not None

    # ------------------------------------------------------------------ records

    def insert_record(self, record: Record) -> None:
        self._conn.execute(
            "INSERT INTO records (id, kind, status, tenant_id, user_id, resource, reference, "
            "idempotency_key, details, is_async, callback_twice, commit_due, created_at, "
            "updated_at, committed_at, compensated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                record.kind,
                record.status,
                record.tenant_id,
                record.user_id,
                record.resource,
                record.reference,
                record.idempotency_key,
                json.dumps(record.details, sort_keys=True),
                int(record.is_async),
                int(record.callback_twice),
                record.commit_due,
                record.created_at,
                record.updated_at,
                record.committed_at,
                record.compensated_at,
            ),
        )

    def update_record(self, record: Record) -> None:
        self._conn.execute(
            "UPDATE records SET status = ?, commit_due = ?, updated_at = ?, committed_at = ?, "
            "compensated_at = ? WHERE id = ?",
            (
                record.status,
                record.commit_due,
                record.updated_at,
                record.committed_at,
                record.compensated_at,
                record.id,
            ),
        )

    def get_record(self, record_id: str) -> Record | None:
        row = self._conn.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()
        return None if row is None else _record(row)

    def find_records(
        self, *, key: str | None, reference: str | None, kind: Kind | None, limit: int = 100
    ) -> list[Record]:
        clauses: list[str] = []
        params: list[Any] = []
        if key is not None:
            clauses.append("idempotency_key = ?")
            params.append(key)
        if reference is not None:
            clauses.append("reference = ?")
            params.append(reference)
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        where = " AND ".join(clauses) if clauses else "1 = 1"
        rows = self._conn.execute(
            f"SELECT * FROM records WHERE {where} ORDER BY seq LIMIT ?",  # noqa: S608
            (*params, limit),
        ).fetchall()
        return [_record(row) for row in rows]

    def pending_records(self) -> list[Record]:
        rows = self._conn.execute(
            "SELECT * FROM records WHERE status = 'pending' ORDER BY seq"
        ).fetchall()
        return [_record(row) for row in rows]

    # ------------------------------------------------------------------ ledger

    def add_effects(self, kind: Kind, key: str, resource: str, delta: int) -> int:
        """Count ``delta`` real effects (0 registers the key without an effect yet).

        Returns how many of them go beyond the first effect for the key: the duplicates.
        """
        row = self._conn.execute(
            "INSERT INTO ledger (kind, key, resource, effects) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (kind, key) DO UPDATE SET effects = effects + excluded.effects "
            "RETURNING effects",
            (kind, key, resource, delta),
        ).fetchone()
        total = int(row["effects"])
        return min(delta, max(0, total - 1))

    def ledger(self, *, kind: Kind | None = None, key: str | None = None) -> list[dict[str, Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        if key is not None:
            clauses.append("key = ?")
            params.append(key)
        where = " AND ".join(clauses) if clauses else "1 = 1"
        rows = self._conn.execute(
            f"SELECT key, kind, resource, effects FROM ledger WHERE {where} ORDER BY seq",  # noqa: S608
            params,
        ).fetchall()
        return [
            {"key": r["key"], "kind": r["kind"], "resource": r["resource"], "effects": r["effects"]}
            for r in rows
        ]

    # ------------------------------------------------------------------ callback outbox

    def enqueue_callback(
        self,
        callback_id: str,
        record_id: str,
        body: bytes,
        copies: int,
        now: float,
        *,
        trace: dict[str, str] | None = None,
    ) -> None:
        carried = json.dumps(trace) if trace else None
        for copy in range(1, copies + 1):
            self._conn.execute(
                "INSERT INTO callbacks (callback_id, record_id, copy, body, next_at, state, trace) "
                "VALUES (?, ?, ?, ?, ?, 'pending', ?)",
                (callback_id, record_id, copy, body, now, carried),
            )

    def due_callbacks(self, now: float, limit: int = 50) -> list[OutboxItem]:
        rows = self._conn.execute(
            "SELECT seq, callback_id, record_id, copy, body, attempts, trace FROM callbacks "
            "WHERE state = 'pending' AND next_at <= ? ORDER BY next_at, seq LIMIT ?",
            (now, limit),
        ).fetchall()
        return [
            OutboxItem(
                seq=r["seq"],
                callback_id=r["callback_id"],
                record_id=r["record_id"],
                copy=r["copy"],
                body=bytes(r["body"]),
                attempts=r["attempts"],
                trace=json.loads(r["trace"]) if r["trace"] else {},
            )
            for r in rows
        ]

    def next_callback_at(self) -> float | None:
        row = self._conn.execute(
            "SELECT MIN(next_at) AS next_at FROM callbacks WHERE state = 'pending'"
        ).fetchone()
        return None if row is None or row["next_at"] is None else float(row["next_at"])

    def callback_done(self, seq: int, attempts: int) -> None:
        self._conn.execute(
            "UPDATE callbacks SET state = 'delivered', attempts = ?, last_error = NULL "
            "WHERE seq = ?",
            (attempts, seq),
        )

    def callback_retry(self, seq: int, attempts: int, next_at: float, error: str) -> None:
        self._conn.execute(
            "UPDATE callbacks SET attempts = ?, next_at = ?, last_error = ? WHERE seq = ?",
            (attempts, next_at, error[:500], seq),
        )

    def callback_failed(self, seq: int, attempts: int, error: str) -> None:
        self._conn.execute(
            "UPDATE callbacks SET state = 'failed', attempts = ?, last_error = ? WHERE seq = ?",
            (attempts, error[:500], seq),
        )


def _record(row: sqlite3.Row) -> Record:
    kind = row["kind"]
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r} in database")
    return Record(
        id=row["id"],
        kind=cast(Kind, kind),
        status=row["status"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        resource=row["resource"],
        reference=row["reference"],
        idempotency_key=row["idempotency_key"],
        details=json.loads(row["details"]),
        is_async=bool(row["is_async"]),
        callback_twice=bool(row["callback_twice"]),
        commit_due=row["commit_due"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        committed_at=row["committed_at"],
        compensated_at=row["compensated_at"],
    )
