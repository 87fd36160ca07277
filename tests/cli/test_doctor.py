"""`kernelloop doctor`: every check says what works or what to fix, and the exit code follows."""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from kernelloop import doctor
from kernelloop.cli import app
from kernelloop.sandbox import isolation
from kernelloop.sandbox.isolation import Probe, probe_bubblewrap
from tests.fakes.openai_server import FakeOpenAIServer

CHECK_NAMES = ["python", "torch", "triton", "cuda", "nvml", "ncu", "sandbox", "endpoint", "workspace", "settings"]
cli = CliRunner()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_SANDBOX",
                 "KERNELLOOP_GPU_MEMORY_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNELLOOP_HOME", str(tmp_path / "ws"))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Refuses(BaseHTTPRequestHandler):
    """An endpoint that rejects every key."""

    def do_GET(self) -> None:
        self.send_response(401)
        self.end_headers()

    def log_message(self, *args) -> None:
        """Silent."""


def test_every_check_runs_and_every_problem_comes_with_a_fix():
    checks = doctor.run_checks()
    assert [c.name for c in checks] == CHECK_NAMES
    assert all(c.status in ("ok", "warn", "fail", "skip") and c.detail for c in checks)
    assert all(c.fix for c in checks if c.status in ("warn", "fail")), [c for c in checks if not c.fix]
    by_name = {c.name: c for c in checks}
    assert by_name["torch"].status == by_name["triton"].status == "ok"
    assert by_name["endpoint"].status == "warn" and "KERNELLOOP_BASE_URL" in by_name["endpoint"].fix


def test_the_sandbox_check_names_the_mode_in_use(monkeypatch):
    usable = probe_bubblewrap().usable
    active = doctor.check_sandbox()
    assert active.status == ("ok" if usable else "warn")
    # What held for a real job: isolated in bubblewrap, or not, and why
    assert ("isolated: bubblewrap sandbox" if usable else "NOT ISOLATED (plain mode") in active.detail
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    plain = doctor.check_sandbox()
    assert (plain.status, plain.fix) == ("warn", "unset KERNELLOOP_SANDBOX")
    assert "NOT ISOLATED (plain mode" in plain.detail
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "bwrap")
    not_installed = Probe(False, None, "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(isolation, "probe_bubblewrap", lambda: not_installed)
    assert doctor.check_sandbox().status == "fail"
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "auto")
    missing = doctor.check_sandbox()
    assert (missing.status, missing.fix) == ("warn", "apt-get install bubblewrap")
    monkeypatch.setenv("KERNELLOOP_GPU_MEMORY_FRACTION", "2")
    assert doctor.check_sandbox().status == "fail"


def test_the_endpoint_check_tells_down_wrong_path_wrong_model_and_refused_key():
    down = doctor.check_endpoint(f"http://127.0.0.1:{closed_port()}/v1", "m")
    assert down.status == "fail" and "unreachable" in down.detail and "--base-url" in down.fix
    with FakeOpenAIServer([], model="fake-r1") as server:
        assert doctor.check_endpoint(server.url, "fake-r1").status == "ok"
        wrong_model = doctor.check_endpoint(server.url, "deepseek-reasoner")
        assert wrong_model.status == "warn" and "fake-r1" in wrong_model.detail
        no_v1 = doctor.check_endpoint(server.url.removesuffix("/v1"), "fake-r1")
        assert no_v1.status == "warn" and "/v1" in no_v1.fix
    refusing = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    try:
        refused = doctor.check_endpoint(f"http://127.0.0.1:{refusing.server_address[1]}/v1", "m", "sk-wrong")
    finally:
        refusing.shutdown()
        refusing.server_close()
    assert refused.status == "fail" and "refused the API key" in refused.detail and "sk-wrong" not in refused.detail


def test_a_corrupt_checkpoint_db_fails_the_workspace_check(tmp_path):
    (tmp_path / "checkpoints.sqlite").write_bytes(b"garbage" * 1000)
    broken = doctor.check_workspace(tmp_path)
    assert broken.status == "fail" and "can't be opened" in broken.detail and "move" in broken.fix
    (tmp_path / "checkpoints.sqlite").unlink()
    sqlite3.connect(tmp_path / "checkpoints.sqlite").close()
    assert doctor.check_workspace(tmp_path).status in ("ok", "warn")


def test_a_broken_torch_is_a_failed_check_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    check = doctor.check_torch()
    assert check.status == "fail" and "import failed" in check.detail and "pip install torch" in check.fix


def test_the_command_prints_the_checks_and_exits_1_only_on_a_failure():
    fine = cli.invoke(app, ["doctor", "--json"])
    checks = json.loads(fine.stdout.strip().splitlines()[-1])
    assert [c["name"] for c in checks] == CHECK_NAMES
    assert fine.exit_code == (1 if any(c["status"] == "fail" for c in checks) else 0)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    down = cli.invoke(app, ["doctor", "--base-url", url, "--model", "m", "--json"])
    endpoint = next(c for c in json.loads(down.stdout.strip().splitlines()[-1]) if c["name"] == "endpoint")
    assert down.exit_code == 1 and endpoint["status"] == "fail" and url in endpoint["detail"]
    table = cli.invoke(app, ["doctor", "--base-url", url, "--model", "m"])  # the same, for a person
    assert table.exit_code == 1 and "FAIL" in table.stdout and "endpoint" in table.stdout


def test_a_cpu_machine_hears_nothing_of_gpu_memory_caps(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    sandbox = doctor.check_sandbox()
    assert "GPU memory" not in sandbox.detail and "plain" in sandbox.detail
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "capped at 0.9 of GPU memory" in doctor.check_sandbox().detail
