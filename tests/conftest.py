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
