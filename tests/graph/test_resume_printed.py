"""The `runs resume` command a Ctrl-C prints works exactly as printed: the run remembers its endpoint
(base URL and model, never the key), so no flag or KERNELLOOP_* variable has to be given again.

The real CLI runs in subprocesses, against a local OpenAI-compatible server, with the real CPU verifier.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, Hang, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, WRONG_KERNEL, coder_reply

VENV_BIN = Path(sys.executable).parent


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    return env | {"PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "200"}


@pytest.mark.slow
def test_the_printed_resume_command_works_as_printed(tmp_path, ctrl_c_reaches_children):
    workspace, cwd = tmp_path / "ws", tmp_path / "elsewhere"  # no .env or kernelloop.toml to lean on
    cwd.mkdir()
    # Ctrl-C lands while the coder waits. Whether that call's late answer is kept (LangGraph lets a running
    # task finish) or asked again on resume, the next coder call gets the fixed kernel.
    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Hang(2.0, then=Reply(coder_reply(WRONG_KERNEL)), when=asks("candidate 1 of 1 in round 1")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("candidate 1 of 1 in round"))]
    with FakeOpenAIServer(script) as server:
        solve = subprocess.Popen(
            [str(VENV_BIN / "kernelloop"), "solve", str(RELU_PROBLEM), "--base-url", server.url, "--model",
             server.model, "--device", "cpu", "--candidates", "1", "--workspace", str(workspace), "--thread", "t1"],
            cwd=cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(server.chat_requests) < 2:  # the plan, then the coder's call (hanging)
            assert solve.poll() is None and time.monotonic() < deadline, solve.communicate()[1][-2000:]
            time.sleep(0.1)
        solve.send_signal(signal.SIGINT)
        _, err = solve.communicate(timeout=60)
        assert solve.returncode == 130, err[-2000:]
        printed = err[err.index("Resume with:"):].splitlines()[1].strip()
        assert printed == f"kernelloop runs resume t1 --workspace {workspace}"

        asked_before = len(server.chat_requests)
        resumed = subprocess.run(shlex.split(printed) + ["--json"], cwd=cwd, env=clean_env(), capture_output=True,
                                 text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert len(server.chat_requests) > asked_before  # the resume asked the remembered endpoint
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert result["status"] == "correct" and result["best_id"] in ("r1c0", "r2c0")
    assert (result["base_url"], result["model"]) == (server.url, server.model)
    assert "api_key" not in json.dumps(result) and "not-needed" not in json.dumps(result)
