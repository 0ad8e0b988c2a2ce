"""The run store: one SQLite file that every process (the app, the CLI, the runs) reads and writes.

    store = RunStore(paths.home() / "jobs")
    run = store.insert(Run(id=store.new_id(), name="finelip-synth", method="finelip", data="/data/world"))
    store.update(run.id, status="running", pid=1234)
    store.update_if(run.id, ("running",), status="failed", error="...")   # None when the status moved
    with store.transaction() as tx:                                        # BEGIN IMMEDIATE: one writer
        for queued in tx.runs(("queued",)): ...

``<root>/runs.sqlite3`` in WAL mode (readers never wait for the writer), with a busy timeout, and
every operation in its own short transaction on its own connection: safe from threads and from
several processes at once. A transaction that must read and then write without a race (the
queue claiming runs) takes the write lock first (``transaction()``). A record survives any
restart: nothing about a run lives only in a process's memory.

Settings shared by every process (the queue's limit, the GPU pool) are a key/value table beside
the runs (``get_setting`` / ``set_setting``).

Evaluation results are a third table, ``results``: one row per (evaluation record, dataset, metric) with
the model, task and sweep it belongs to (``RESULT_COLUMNS``; one evaluation may fill several datasets'
columns, as RefCOCO's fills the papers' seven), so that a comparison of any runs is
one query (``put_results`` / ``results``), and it goes with the records (a deleted run takes its rows).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from explorer.jobs.records import FIELDS, JobError, Run

DB_FILE = "runs.sqlite3"
SCHEMA_VERSION = 1
_RESULTS_TABLE = ("run_id TEXT, sweep TEXT, model TEXT, dataset TEXT, task TEXT, metric TEXT, value REAL, "
                  "PRIMARY KEY (run_id, dataset, metric)")


def _key_results_by_dataset(conn) -> None:
    """A store written when a result row was keyed by (run, metric) alone gets the (run, dataset, metric) key:
    the table is copied into one with the new key (SQLite cannot change a key in place)."""
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'results'").fetchone()
    if "PRIMARY KEY (run_id, metric)" not in sql:
        return
    conn.execute(f"CREATE TABLE results_keyed ({_RESULTS_TABLE})")
    conn.execute("INSERT INTO results_keyed SELECT run_id, sweep, model, dataset, task, metric, value FROM results")
    conn.execute("DROP TABLE results")
    conn.execute("ALTER TABLE results_keyed RENAME TO results")
BUSY_TIMEOUT_S = 30.0
JSON_FIELDS = frozenset({"config", "config_sources", "devices", "command", "evaluation", "notes", "slurm"})
NULLABLE_JSON = frozenset({"evaluation", "slurm"})
DEFAULTED = frozenset({"processes", "backend", "kind"})  # NULL in a store written before they existed: the default
BOOL_FIELDS = frozenset({"cancel_requested"})
RESULT_COLUMNS = ("run_id", "sweep", "model", "dataset", "task", "metric", "value")
_COLUMNS = ", ".join(f"{name} {'TEXT PRIMARY KEY' if name == 'id' else ''}".strip() for name in FIELDS)


class RunStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / DB_FILE
        with self._connect() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise JobError(f"{self.path} was written by a newer explorer (schema {version}); upgrade explorer.")
            conn.execute(f"CREATE TABLE IF NOT EXISTS runs ({_COLUMNS})")
            conn.execute("CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT)")
            conn.execute(f"CREATE TABLE IF NOT EXISTS results ({_RESULTS_TABLE})")
            _key_results_by_dataset(conn)
            known = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
            for name in FIELDS:  # a store written before a field existed gains its column
                if name not in known:
                    conn.execute(f"ALTER TABLE runs ADD COLUMN {name}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # ---- connections --------------------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def transaction(self) -> Iterator["Transaction"]:
        """Read and write under the write lock (other writers wait; readers do not)."""
        with self._connect() as conn:
            yield Transaction(conn)

    # ---- runs ---------------------------------------------------------------------------------

    def new_id(self) -> str:
        for _ in range(100):
            candidate = uuid.uuid4().hex[:8]
            with self._read() as conn:
                if conn.execute("SELECT 1 FROM runs WHERE id = ?", (candidate,)).fetchone() is None:
                    return candidate
        raise JobError("could not find a free run id")  # pragma: no cover - 16^8 ids

    def insert(self, run: Run) -> Run:
        if not run.created:
            run.created = time.time()
        names = ", ".join(FIELDS)
        marks = ", ".join("?" for _ in FIELDS)
        try:
            with self._connect() as conn:
                conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})",
                             [_encode(name, getattr(run, name)) for name in FIELDS])
        except sqlite3.IntegrityError as error:
            raise JobError(f"a run with id {run.id!r} already exists") from error
        return run

    def get(self, run_id: str) -> Run:
        """The run with this id, or the only one whose id starts with it (at least 4 characters)."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None and len(run_id) >= 4:
                rows = conn.execute("SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\'",
                                    (_like_prefix(run_id),)).fetchall()
                if len(rows) > 1:
                    raise JobError(f"{run_id!r} names {len(rows)} runs; give more of the id")
                row = rows[0] if rows else None
            columns = _column_names(conn)
        if row is None:
            raise JobError(f"no run with id {run_id!r} (explorer jobs list shows them)")
        return _decode(columns, row)

    def list(self, statuses: Iterable[str] | None = None) -> list[Run]:
        """Runs, oldest first (optionally only those in ``statuses``)."""
        with self._read() as conn:
            return Transaction(conn).runs(statuses)

    def update(self, run_id: str, **values: Any) -> Run:
        with self._connect() as conn:
            tx = Transaction(conn)
            if not tx.update(run_id, **values):
                raise JobError(f"no run with id {run_id!r}")
            return tx.get(run_id)

    def update_if(self, run_id: str, statuses: Iterable[str], expect: dict | None = None, **values: Any) -> Run | None:
        """Update only while the run's status is one of ``statuses`` (and its fields equal ``expect``);
        None, and nothing written, otherwise. Read and write are one transaction."""
        statuses = tuple(statuses)
        with self._connect() as conn:
            tx = Transaction(conn)
            run = tx.get(run_id)
            if run is None or run.status not in statuses:
                return None
            if any(getattr(run, name) != value for name, value in (expect or {}).items()):
                return None
            tx.update(run_id, **values)
            return tx.get(run_id)

    def delete(self, run_id: str) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            conn.execute("DELETE FROM results WHERE run_id = ?", (run_id,))

    # ---- evaluation results -------------------------------------------------------------------

    def put_results(self, run_id: str, rows: Iterable[dict]) -> int:
        """Replace the result rows of ``run_id`` (dicts with ``RESULT_COLUMNS`` but ``run_id``); their count."""
        values = [(run_id, *(row.get(name) for name in RESULT_COLUMNS[1:])) for row in rows]
        with self._connect() as conn:
            conn.execute("DELETE FROM results WHERE run_id = ?", (run_id,))
            conn.executemany(f"INSERT INTO results ({', '.join(RESULT_COLUMNS)}) VALUES "
                             f"({', '.join('?' for _ in RESULT_COLUMNS)})", values)
        return len(values)

    def results(self, run_ids: Iterable[str] | None = None) -> list[dict]:
        """Result rows of these runs (an evaluation's own, or every child's of a sweep); all when None."""
        query = f"SELECT {', '.join(RESULT_COLUMNS)} FROM results"
        params: tuple = ()
        if run_ids is not None:
            params = tuple(run_ids)
            marks = ", ".join("?" for _ in params) or "NULL"
            query += f" WHERE run_id IN ({marks}) OR sweep IN ({marks})"
            params = params + params
        with self._read() as conn:
            rows = conn.execute(query + " ORDER BY rowid", params).fetchall()
        return [dict(zip(RESULT_COLUMNS, row)) for row in rows]

    # ---- settings -----------------------------------------------------------------------------

    def get_setting(self, key: str, default: Any = None) -> Any:
        with self._read() as conn:
            return Transaction(conn).setting(key, default)

    def set_setting(self, key: str, value: Any) -> None:
        with self._connect() as conn:
            Transaction(conn).set_setting(key, value)


class Transaction:
    """Reads and writes on one connection (inside ``RunStore.transaction()``, under the write lock)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def runs(self, statuses: Iterable[str] | None = None) -> list[Run]:
        if statuses is None:
            rows = self.conn.execute("SELECT * FROM runs ORDER BY created, id").fetchall()
        else:
            statuses = tuple(statuses)
            marks = ", ".join("?" for _ in statuses)
            rows = self.conn.execute(f"SELECT * FROM runs WHERE status IN ({marks}) ORDER BY created, id",
                                     statuses).fetchall()
        columns = _column_names(self.conn)
        return [_decode(columns, row) for row in rows]

    def get(self, run_id: str) -> Run | None:
        row = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else _decode(_column_names(self.conn), row)

    def update(self, run_id: str, **values: Any) -> bool:
        unknown = sorted(set(values) - set(FIELDS) - {"id"})
        if unknown or "id" in values:
            raise ValueError(f"cannot set {unknown or ['id']} on a run record")
        if not values:
            return self.get(run_id) is not None
        assignments = ", ".join(f"{name} = ?" for name in values)
        cursor = self.conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?",
                                   [_encode(name, value) for name, value in values.items()] + [run_id])
        return cursor.rowcount > 0

    def setting(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_setting(self, key: str, value: Any) -> None:
        self.conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                          "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, json.dumps(value)))


def _column_names(conn: sqlite3.Connection) -> list[str]:
    return [row[1] for row in conn.execute("PRAGMA table_info(runs)")]


def _encode(name: str, value: Any) -> Any:
    if name in JSON_FIELDS:
        return json.dumps(value, default=_plain)
    if name in BOOL_FIELDS:
        return int(bool(value))
    return value


def _decode(columns: list[str], row: tuple) -> Run:
    values = {}
    for name, value in zip(columns, row):
        if name not in FIELDS:
            continue  # a column of a newer schema
        if name in JSON_FIELDS:
            value = json.loads(value) if value is not None else None
            if value is None and name not in NULLABLE_JSON:
                value = {} if name in ("config", "config_sources") else []
        elif name in BOOL_FIELDS:
            value = bool(value)
        elif value is None and name in DEFAULTED:
            continue
        values[name] = value
    return Run(**values)


def _plain(value):
    if isinstance(value, (Path, tuple)):
        return str(value) if isinstance(value, Path) else list(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


__all__ = ["DB_FILE", "RESULT_COLUMNS", "RunStore", "Transaction"]
