"""Graph tests run with scripted models only: no endpoint variable may leak in from the shell."""

import signal

import pytest


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ctrl_c_reaches_children():
    """Processes these tests start get Ctrl-C as a user's would, however pytest itself was started: a
    suite run as a background job of a non-interactive shell (`cmd &`) inherits SIGINT ignored, and
    passes that on to every child, whose Python then never raises KeyboardInterrupt. A handler set
    here is reset to the default in each child at exec."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
