"""Every test's verifier keeps its trusted cache (on by default with bubblewrap) in one throwaway
dir of this session, never in the user's ~/.cache; tests of the setting itself set it themselves."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "KERNELLOOP_TRUSTED_CACHE" not in os.environ:
    _session_cache = tempfile.mkdtemp(prefix="kernelloop-test-trusted-")
    atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)
    os.environ["KERNELLOOP_TRUSTED_CACHE"] = _session_cache


import pytest  # noqa: E402 - after the environment above, which imports may read


@pytest.fixture(autouse=True)
def _errors_as_text():
    """A CLI command run in this process with --json turns on JSON errors for the rest of it
    (cli._common.json_errors: once per process, as a real run is); each test starts without."""
    from kernelloop.cli import _common

    _common._JSON_ERRORS[0] = False
    yield
