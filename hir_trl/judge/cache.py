"""The judge's verdict cache: an in-memory LRU, backed by SQLite (WAL) shared by runs and processes."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path


class VerdictCache:
    """Parsed judge verdicts by cache key: an in-memory LRU, backed by SQLite when a directory is given.

    The in-memory layer keeps the ``memory_entries`` most recently used verdicts (about 200 bytes each);
    without a directory it is the whole cache, so older verdicts may be asked again. The database is ``<cache_dir>/judge_cache.sqlite3`` in WAL mode with a 30 s busy timeout, so several
    processes (torchrun ranks) may read and write it at once. It stores the key (a SHA-256 hex digest),
    the verdict, the raw answer, P(YES) in log-prob mode, the model and a timestamp; never a key or header.
    The directory must be on a local filesystem (SQLite WAL does not work over NFS).

    Raises:
        OSError: ``cache_dir`` cannot be created (e.g. it is a file); sqlite3.Error: the database file is not one.
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None, memory_entries: int = 200_000) -> None:
        self.path = None if cache_dir is None else Path(cache_dir) / "judge_cache.sqlite3"
        self.memory_entries = memory_entries
        self._memory: OrderedDict[str, tuple[bool, str | None, float | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if self.path is not None:
            from filelock import FileLock

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            # Switching a database to WAL can fail at once with "database is locked" (no busy wait) while another
            # connection opens it, so processes and threads set it up one at a time.
            try:
                with FileLock(f"{self.path}.lock", timeout=60):
                    self._conn.execute("PRAGMA journal_mode=WAL")
                    self._conn.execute("PRAGMA synchronous=NORMAL")
                    with self._conn:
                        self._conn.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, passed "
                                           "INTEGER NOT NULL, answer TEXT, p_yes REAL, model TEXT, created REAL)")
            except BaseException:  # e.g. a file that is not a SQLite database: do not leave the connection open
                self._conn.close()
                self._conn = None
                raise

    def get_many(self, keys: Iterable[str]) -> dict[str, tuple[bool, str | None, float | None]]:
        """The cached ``(passed, answer, p_yes)`` of every key that has one."""
        found: dict[str, tuple[bool, str | None, float | None]] = {}
        missing = []
        with self._lock:
            for key in keys:
                if key in self._memory:
                    found[key] = self._memory[key]
                    self._memory.move_to_end(key)
                else:
                    missing.append(key)
            if self._conn is not None:
                for start in range(0, len(missing), 500):
                    chunk = missing[start:start + 500]
                    rows = self._conn.execute(f"SELECT key, passed, answer, p_yes FROM verdicts WHERE key IN "
                                              f"({','.join('?' * len(chunk))})", chunk).fetchall()
                    for key, passed, answer, p_yes in rows:
                        found[key] = (bool(passed), answer, p_yes)
                self._remember({key: found[key] for key in missing if key in found})
        return found

    def _remember(self, entries: Mapping[str, tuple[bool, str | None, float | None]]) -> None:
        self._memory.update(entries)
        while len(self._memory) > self.memory_entries:
            self._memory.popitem(last=False)

    def put_many(self, entries: Mapping[str, tuple[bool, str | None, float | None]], model: str) -> None:
        """Store parsed verdicts (never failures)."""
        if not entries:
            return
        with self._lock:
            self._remember(entries)
            if self._conn is not None:
                now = time.time()
                with self._conn:
                    self._conn.executemany("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                                           [(k, int(p), a, py, model, now) for k, (p, a, py) in entries.items()])

    def __len__(self) -> int:
        with self._lock:
            if self._conn is None:
                return len(self._memory)
            return self._conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
