"""Where kernelloop keeps its files: --workspace > KERNELLOOP_HOME > ./.kernelloop.

Kept apart from config.py (pydantic) because the verifier must import with torch alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelloop.config import defaults

DEFAULT_WORKSPACE = defaults.WORKSPACE


def pick(explicit, env_name: str, default=None):
    """explicit (when not None) > environment (when set and non-empty) > default."""
    if explicit is not None:
        return explicit
    value = os.environ.get(env_name)
    return value if value not in (None, "") else default


def workspace_dir(explicit: str | Path | None = None) -> Path:
    """The workspace (checkpoint DB, run dirs, caches): the argument, else the Settings' `home`
    (KERNELLOOP_HOME > .env > kernelloop.toml > ./.kernelloop: settings.py). The one function every
    caller uses; on a bare GPU node without pydantic-settings (the verifier alone) only
    KERNELLOOP_HOME is read, since there is no .env or kernelloop.toml reader there."""
    if explicit is not None:
        return Path(explicit).expanduser().resolve()
    try:
        from kernelloop.config.settings import load_settings
    except ImportError:  # the verifier alone: torch, triton, nvidia-ml-py
        return Path(pick(None, "KERNELLOOP_HOME", DEFAULT_WORKSPACE)).expanduser().resolve()
    return load_settings().workspace.root
