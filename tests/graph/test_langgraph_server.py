"""LangGraph Server (`langgraph dev`, the in-memory server of langgraph-cli[inmem]) loads the graph that
langgraph.json exports, generates every schema Studio reads, and runs a thread over HTTP against a local
OpenAI-compatible server; the verifier is the real one, on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kernelloop.problem import Problem
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, coder_reply

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = Path(sys.executable).with_name("langgraph")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, "langgraph dev exited while starting"
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"langgraph dev did not answer at {url} in {timeout_s:g} s")


@pytest.mark.slow
@pytest.mark.skipif(not LANGGRAPH.is_file(), reason="needs langgraph-cli[inmem] (the dev extra)")
def test_langgraph_dev_serves_the_graph_and_runs_a_thread_over_http(tmp_path):
    # The server keeps its state in ./.langgraph_api: run it from a scratch dir with a copy of langgraph.json
    # whose paths point back into the repository.
    spec = json.loads((ROOT / "langgraph.json").read_text())
    spec["dependencies"] = [str(ROOT)]
    spec["graphs"] = {name: str(ROOT / path.removeprefix("./")) for name, path in spec["graphs"].items()}
    (tmp_path / "langgraph.json").write_text(json.dumps(spec))
    port, home = free_port(), tmp_path / "home"
    script = [Reply(PLAN_REPLY, reasoning="memory-bound", when=lambda m: "You are planning" in m[-1]["content"]),
              Reply(coder_reply(FIXED_KERNEL), reasoning="use tl.maximum", reasoning_tokens=4)]
    with FakeOpenAIServer(script) as model:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")} | {
            "KERNELLOOP_BASE_URL": model.url, "KERNELLOOP_MODEL": model.model, "KERNELLOOP_HOME": str(home)}
        server = subprocess.Popen([str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port),
                                   "--config", "langgraph.json"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "server.log", "w"), start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_up(url, server)
            api = httpx.Client(base_url=url, timeout=300)
            (assistant,) = api.post("/assistants/search", json={"graph_id": "kernelloop"}).json()
            schemas = api.get(f"/assistants/{assistant['assistant_id']}/schemas").json()
            for name in ("input_schema", "output_schema", "state_schema", "context_schema"):
                assert schemas[name] and schemas[name]["properties"], name  # what Studio draws its forms from
            assert {"base_url", "model", "device"} <= set(schemas["context_schema"]["properties"])

            problem = Problem.from_file(RELU_PROBLEM)
            thread = api.post("/threads", json={}).json()["thread_id"]
            final = api.post(f"/threads/{thread}/runs/wait", json={
                "assistant_id": "kernelloop", "context": {"device": "cpu"},
                "input": {"problem": {"name": problem.name, "path": str(problem.path), "source": problem.source,
                                      "sha256": problem.sha256},
                          "settings": {"candidates": 1, "device": "cpu", "target_speedup": None}}}).json()
            assert model.unserved == 0  # the plan and the coder came from the OpenAI-compatible server
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # the server and its workers: a group of its own
            server.wait(timeout=30)
    assert (final["status"], final["stop_reason"], final["best_id"]) == ("finished", "target_met", "r1c0"), \
        (tmp_path / "server.log").read_text()[-3000:]
    assert [u["key"] for u in final["usage"]] == ["planner/plan", "coder/r1c0"]
    result = json.loads((home / "runs" / thread / "result.json").read_text())
    assert result["status"] == "correct" and result["tokens"]["reasoning_tokens"] == 4
    shutil.rmtree(tmp_path / ".langgraph_api", ignore_errors=True)
