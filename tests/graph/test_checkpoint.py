"""Where checkpoints go: the workspace's SQLite file, another SQLite file by URL, Postgres by URL."""

import sys

import pytest

from kernelloop.config.endpoint import ConfigError
from kernelloop.graph.checkpoint import open_checkpointer, sqlite_path, thread_ids


def test_sqlite_lives_in_the_workspace_unless_a_url_names_another_file(tmp_path):
    assert sqlite_path(None, tmp_path) == tmp_path / "checkpoints.sqlite"
    assert sqlite_path(f"sqlite:///{tmp_path}/other.db", tmp_path) == tmp_path / "other.db"
    assert sqlite_path("postgresql://user@host/db", tmp_path) is None
    with open_checkpointer(f"sqlite:///{tmp_path}/other.db", tmp_path) as saver:
        assert thread_ids(saver) == []
    assert (tmp_path / "other.db").is_file() and not (tmp_path / "checkpoints.sqlite").exists()


def test_a_postgres_url_without_the_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.postgres", None)  # as if the extra were missing
    with pytest.raises(ConfigError, match=r"pip install 'kernelloop\[postgres\]'"):
        with open_checkpointer("postgresql://user@localhost/kernelloop", tmp_path):
            pass
