"""The serving tests drive servers whose callers name fake endpoints (FakeOpenAIServer) and files in
the repository and pytest's tmp dirs: the operator's settings that allow it, for every test here
(tests/serve/test_caller_trust.py sets its own to test the defaults)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def operator_allows_the_tests_callers(monkeypatch):
    monkeypatch.setenv("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "true")
    monkeypatch.setenv("KERNELLOOP_FILE_ROOTS", os.pathsep.join([str(ROOT), tempfile.gettempdir()]))
