"""Test-only entry point: `kernelloop.serve.runs.solve` with the scripted model and verifier of scripted.py.

Subprocess tests (SIGKILL, Ctrl-C) run this file, never a product command, so no test hook
ships with kernelloop. Knobs, all read from the environment by this file only:
    KERNELLOOP_TEST_DELAYS   "coder/r2c1=60,coder/r2c0=0.5": seconds the scripted model sleeps per key
    KERNELLOOP_TEST_VERIFY_LOG   file: each verification appends "<attempt> <code sha>"
    KERNELLOOP_TEST_MODEL_LOG    file: each model call appends its key
    KERNELLOOP_TEST_CHECKPOINTS  checkpoint URL (default: SQLite in the workspace)
Usage: python tests/graph/_solve_entry.py WORKSPACE THREAD_ID [--resume]
The result's JSON is the last stdout line.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernelloop.serve.runs import resume, solve  # noqa: E402
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier  # noqa: E402


def _delays() -> dict[str, float]:
    pairs = [item.split("=") for item in os.environ.get("KERNELLOOP_TEST_DELAYS", "").split(",") if item]
    return {key: float(value) for key, value in pairs}


def _path(name: str) -> Path | None:
    return Path(os.environ[name]) if os.environ.get(name) else None


def main() -> None:
    workspace, thread_id = Path(sys.argv[1]), sys.argv[2]
    client = ScriptedChatClient(delays_s=_delays(), call_log=_path("KERNELLOOP_TEST_MODEL_LOG"))
    verifier = ScriptedVerifier(log=_path("KERNELLOOP_TEST_VERIFY_LOG"))
    options = dict(chat_client=client, verifier=verifier, workspace=workspace, analyze=lambda problem: None,
                   checkpoint_url=os.environ.get("KERNELLOOP_TEST_CHECKPOINTS") or None)
    if "--resume" in sys.argv:
        result = resume(thread_id, **options)
    else:
        result = solve(RELU_PROBLEM, candidates=2, thread_id=thread_id, **options)
    print(result.model_dump_json())


if __name__ == "__main__":
    main()
