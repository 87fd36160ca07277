"""MCP progress from verify_kernel and profile_kernel: with a progress token, each phase the verifier
reports (the hook `kernelloop verify` prints on stderr) goes out as a notification naming it; without
one, the same calls answer as before. Driven by the MCP SDK's in-process client."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
from mcp import Client

from kernelloop import progress
from kernelloop.records import Code, Profile, Status, Verdict
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.mcp import MAX_WAIT_S, build_server

ROOT = Path(__file__).resolve().parents[2]
RELU_PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "relu.py"
RELU_KERNEL = ROOT / "tests" / "fixtures" / "honest" / "relu_triton.py"
FINISHED = ("succeeded", "failed", "cancelled")
Notes = list[tuple[float, str | None]]


def recorder(into: Notes):
    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        into.append((done, message))
    return on_progress


async def until_finished(client: Client, status: dict) -> dict:
    deadline = time.monotonic() + 120
    while status["state"] not in FINISHED and time.monotonic() < deadline:
        status = (await client.call_tool("job_status", {"job_id": status["job_id"], "wait_s": MAX_WAIT_S})
                  ).structured_content
    return status


def test_verify_sends_each_phase_as_progress_and_works_without_a_token(tmp_path):
    """The real verifier on the CPU (Triton interpreter): reference, compile, trials, fresh inputs."""
    notes: Notes = []
    args = {"problem_path": str(RELU_PROBLEM), "candidate_path": str(RELU_KERNEL), "device": "cpu",
            "wait_s": MAX_WAIT_S}

    async def session(manager: JobManager) -> tuple[dict, dict]:
        async with Client(build_server(manager, "cpu")) as client:
            with_token = await client.call_tool("verify_kernel", args, progress_callback=recorder(notes))
            assert not with_token.is_error, with_token.content[0].text
            first = await until_finished(client, with_token.structured_content)
            without = await client.call_tool("verify_kernel", args)  # no callback: no progress token is sent
            assert not without.is_error, without.content[0].text
            return first, await until_finished(client, without.structured_content)

    with JobManager(tmp_path) as manager:
        first, second = anyio.run(session, manager)
    assert first["state"] == "succeeded" and first["verdict"]["status"] == "correct"
    assert second["state"] == "succeeded" and second["verdict"]["status"] == "correct"
    assert len(notes) >= 2, notes
    done = [d for d, _ in notes]
    assert done == sorted(done) and len(set(done)) == len(done)  # strictly increasing
    words = set(progress.PHASES.values())
    named = [message for _, message in notes if message in words]
    assert named, notes  # at least one notification names the verifier's phase in `kernelloop verify`'s words
    assert first["events"] >= len(named)  # the job counted every phase it heard, seen or not


class PhasedPool:
    """A GPU pool stand-in: verifying reports the phases a timed verification goes through, a beat
    apart (the server polls the job every 0.1 s), then a correct verdict with a profile."""

    device = "cuda"
    steps = [("reference", "compile"), ("candidate", "compile"), ("candidate", "trials"), ("candidate", "timing"),
             ("candidate", "fresh")]

    def __init__(self, *args, **kwargs):
        self.threads: set[str] = set()

    def verify(self, candidate, problem, time_left_s=None):
        self.threads.add(threading.current_thread().name)
        for kind, phase in self.steps:
            progress.report(kind, phase)  # what the sandbox's job sessions call
            time.sleep(0.3)
        return Verdict(status=Status.correct, reason="correct", code=Code.correct, device="cuda", trials=3,
                       speedup=1.4, profile=Profile(own_share=0.9))

    def close(self):
        pass


def test_profile_sends_each_phase_as_progress(tmp_path, monkeypatch):
    monkeypatch.setattr("kernelloop.serve.jobs.local_devices", lambda device: ["cuda:0"])  # this machine has no GPU
    notes: Notes = []

    async def session(manager: JobManager) -> dict:
        async with Client(build_server(manager, "cuda")) as client:
            result = await client.call_tool("profile_kernel", {"problem_path": str(RELU_PROBLEM),
                                                               "candidate_path": str(RELU_KERNEL), "wait_s": MAX_WAIT_S},
                                            progress_callback=recorder(notes))
            assert not result.is_error, result.content[0].text
            return result.structured_content

    with JobManager(tmp_path, pool_factory=PhasedPool) as manager:
        answer = anyio.run(session, manager)
    assert answer["available"] and answer["job"]["state"] == "succeeded"
    assert answer["job"]["verdict"]["speedup"] == 1.4 and answer["job"]["profile"] == Profile(own_share=0.9).model_dump()
    done = [d for d, _ in notes]
    assert len(notes) >= 4 and done == sorted(done) and len(set(done)) == len(done), notes
    messages = [message for _, message in notes]
    assert progress.describe("candidate", "timing") in messages  # the timing phase, in verify's words
    assert messages.index(progress.describe("candidate", "compile")) < messages.index(
        progress.describe("candidate", "timing"))
    assert answer["job"]["events"] == len(PhasedPool.steps)


def test_a_listener_hears_only_its_own_threads_verifications():
    """Two MCP jobs verify at once, each in its own thread: each job's listener gets its own phases only."""
    heard: dict[str, list[str]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def job(name: str) -> None:
        with progress.listening(lambda kind, phase: heard[name].append(f"{kind}/{phase}")):
            barrier.wait()
            for step in ("compile", "trials"):
                progress.report(name, step)
                time.sleep(0.01)

    threads = [threading.Thread(target=job, args=(name,)) for name in heard]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert heard == {"a": ["a/compile", "a/trials"], "b": ["b/compile", "b/trials"]}
    progress.report("a", "compile")  # no listener in this thread: nothing happens, nothing raises
