"""Checkpointers: SQLite in the workspace by default, Postgres by URL (optional extra).

    open_checkpointer(None, workspace)                 -> WORKSPACE/checkpoints.sqlite
    open_checkpointer("sqlite:///path/to.db", ...)      -> that file
    open_checkpointer("postgresql://user@host/db", ...) -> PostgresSaver (pip install 'kernelloop[postgres]')

SQLite runs in WAL mode so `kernelloop runs list` can read while a solve writes. A database
that can't be opened, a checkpoint that can't be read back and a write that fails (a full
disk) are CheckpointErrors: one line naming the file (and the thread), never a traceback.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

from kernelloop.config.endpoint import ConfigError
from kernelloop.errors import error_line

DB_NAME = "checkpoints.sqlite"


class CheckpointError(ConfigError):
    """The checkpoint DB can't be opened, read or written; the message names the file and the thread.

    A ConfigError so every command that reports configuration problems in one line reports this too."""


def _thread_of(config: Mapping[str, Any] | None) -> str:
    return str(((config or {}).get("configurable") or {}).get("thread_id", "?"))


class CheckedSqliteSaver(SqliteSaver):
    """SqliteSaver whose failures say which file and thread: a corrupt checkpoint of one thread
    fails that thread alone (the others read and resume as before), a full disk says so."""

    def __init__(self, conn: sqlite3.Connection, path: Path, runs_dir: Path):
        super().__init__(conn)
        self.path, self.runs_dir = path, runs_dir

    def _unreadable(self, thread: str, exc: BaseException) -> CheckpointError:
        why = error_line(exc)
        return CheckpointError(f"{self.path}: a checkpoint of thread {thread} can't be read ({why}); other threads "
                               f"are not affected, and this thread's files are in {self.runs_dir / thread}")

    def _checked(self, found: CheckpointTuple, thread: str) -> CheckpointTuple:
        checkpoint = found.checkpoint
        if not (isinstance(checkpoint, dict) and isinstance(checkpoint.get("channel_values"), dict)
                and isinstance(found.metadata, dict)):
            raise self._unreadable(thread, ValueError("it does not decode to a checkpoint"))
        return found

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            found = super().get_tuple(config)
        except Exception as exc:  # any decoding or SQLite failure: one error that names the file and thread
            raise self._unreadable(_thread_of(config), exc) from exc
        return self._checked(found, _thread_of(config)) if found is not None else None

    def list(self, config: RunnableConfig | None, **options: Any) -> Iterator[CheckpointTuple]:
        items = super().list(config, **options)
        while True:
            try:
                found = next(items)
            except StopIteration:
                return
            except Exception as exc:  # as in get_tuple
                raise self._unreadable(_thread_of(config), exc) from exc
            yield self._checked(found, found.config["configurable"]["thread_id"])

    def _writing(self, config: RunnableConfig, write, *args):
        try:
            return write(config, *args)
        except sqlite3.DatabaseError as exc:
            # SQLite says "database or disk is full" for ENOSPC, "disk I/O error" for a file-size limit
            thread = _thread_of(config)
            advice = (f": is the disk full? Free space, then `kernelloop runs resume {thread}` continues from the last "
                      "saved checkpoint" if "full" in str(exc) or "I/O" in str(exc) else "")
            raise CheckpointError(f"{self.path}: can't save a checkpoint of thread {thread} ({exc}){advice}") from exc

    def put(self, config, checkpoint, metadata, new_versions):
        return self._writing(config, super().put, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        return self._writing(config, super().put_writes, writes, task_id, task_path)


def sqlite_path(url: str | None, workspace: Path) -> Path | None:
    """The SQLite file a checkpoint URL names (None for a Postgres URL)."""
    if url is None:
        return Path(workspace) / DB_NAME
    if url.startswith(("postgres://", "postgresql://")):
        return None
    return Path(url.removeprefix("sqlite:///").removeprefix("sqlite://")).expanduser()


@contextmanager
def open_checkpointer(url: str | None, workspace: Path) -> Iterator[BaseCheckpointSaver]:
    """A checkpointer for the run, closed on exit. `url` None: SQLite in the workspace."""
    path = sqlite_path(url, workspace)
    if path is None:
        assert url is not None  # sqlite_path gives None only for a Postgres URL
        yield from _postgres(url)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Nodes run in worker threads; SqliteSaver serializes access with its own lock.
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
    try:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            saver = CheckedSqliteSaver(conn, path, Path(workspace) / "runs")
            saver.setup()
        except sqlite3.DatabaseError as exc:
            raise CheckpointError(f"{path}: the checkpoint database can't be opened ({exc}); move it aside to start "
                                  f"afresh (each thread's kernels and reports stay in {Path(workspace) / 'runs'}), "
                                  "or pass --checkpoints sqlite:///another.db") from exc
        yield saver
    finally:
        conn.close()


def _postgres(url: str) -> Iterator[BaseCheckpointSaver]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver  # optional extra, imported only when asked for
    except ImportError:
        raise ConfigError("a Postgres checkpoint URL needs the postgres extra: pip install 'kernelloop[postgres]'") \
            from None
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


def thread_ids(saver: BaseCheckpointSaver) -> list[str]:
    """Every thread in the checkpointer, most recently written first."""
    if isinstance(saver, SqliteSaver):
        with saver.cursor(transaction=False) as cur:
            cur.execute("SELECT thread_id, MAX(checkpoint_id) AS latest FROM checkpoints "
                        "WHERE checkpoint_ns = '' GROUP BY thread_id ORDER BY latest DESC")
            return [row[0] for row in cur.fetchall()]
    seen: dict[str, None] = {}
    for item in saver.list(None):  # newest first within a thread; good enough for other backends
        seen.setdefault(item.config["configurable"]["thread_id"], None)
    return list(seen)
