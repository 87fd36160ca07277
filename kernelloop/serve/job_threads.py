"""MCP optimization jobs are checkpointed threads: after a server restart, `job_status` still
finds them by their id.

A solve job's id is written beside its thread (WORKSPACE/runs/<thread>/job.json) when it
starts; a job the running server doesn't know is read back from the checkpointer and the run
dir. A thread that stopped before its end (the server went away) reads as `failed`, with the
command that continues it. No list shows these: the caller that started one went away with its
server, so its id is what a caller shows to read it (serve/callers.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kernelloop.graph.rundir import write_atomic
from kernelloop.serve.jobs import JobState, JobStatus, _best_kernel, no_such_job

JOB_FILE = "job.json"


def remember(workspace: Path, status: JobStatus) -> None:
    """Note a solve job's id beside its thread."""
    if status.thread_id:
        record = {"job_id": status.job_id, "problem": status.problem, "created_at": status.created_at}
        write_atomic(Path(workspace) / "runs" / status.thread_id / JOB_FILE, json.dumps(record))


def _recorded(workspace: Path) -> dict[str, tuple[str, dict]]:
    found = {}
    for path in sorted((Path(workspace) / "runs").glob(f"*/{JOB_FILE}")):
        record = json.loads(path.read_text())
        found[record["job_id"]] = (path.parent.name, record)
    return found


def recall(workspace: Path, job_id: str) -> JobStatus:
    """A solve job from an earlier server, as its checkpointed thread says it stands."""
    found = _recorded(workspace).get(job_id)
    if found is None:
        raise no_such_job(job_id)
    return _status(workspace, job_id, *found)


def _status(workspace: Path, job_id: str, thread: str, record: dict) -> JobStatus:
    from kernelloop.graph.build import build_graph  # lazy: the agent loop loads only when asked
    from kernelloop.graph.checkpoint import open_checkpointer
    from kernelloop.graph.report import summarize
    from kernelloop.graph.rundir import RunDir

    with open_checkpointer(None, workspace) as saver:
        values = build_graph(saver).get_state({"configurable": {"thread_id": thread}}).values
    run = RunDir(workspace, thread)
    summary = summarize(run, values) if values.get("settings") else None
    result = run.path("result.json")
    ended = json.loads(result.read_text()) if result.is_file() else {}
    state: JobState
    # A thread's first input carries its settings, so a finished thread always has a summary.
    if values.get("status") == "finished" and summary is not None:
        state, message = "succeeded", f"{summary.stop_reason}: best {summary.best_id or 'none'} ({summary.status})"
    elif ended.get("run_status") == "interrupted" and ended.get("stop_reason") == "cancelled":
        state, message = "cancelled", "cancelled on request"
    else:
        state, message = "failed", (f"the server stopped before the run ended; `kernelloop runs resume {thread}` "
                                    "continues it")
    return JobStatus(job_id=job_id, kind="solve", state=state, problem=record["problem"], message=message,
                     created_at=record["created_at"], finished_at=result.stat().st_mtime if result.is_file()
                     else time.time(), error=message if state == "failed" else None, thread_id=thread,
                     summary=summary, best_kernel=_best_kernel(summary) if summary else None)
