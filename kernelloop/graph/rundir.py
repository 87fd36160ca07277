"""The run directory WORKSPACE/runs/<thread_id>/: the blobs the state points at.

    problem.py              the reference, as the state holds it
    kernels/<attempt>.py    every candidate
    turns/<node>-<key>-<sha>.json   every model turn: the messages sent, the reply and its
                            reasoning, the tokens; never overwritten
    verdicts/<attempt>-<code sha>.json   the verdict journal: written right after each
                            verification, read back on resume so no attempt is verified twice
    best_kernel.py  result.json  report.md   written when the run ends, for any reason
    branches/<name>/        a fork's own best_kernel.py, result.json and report.md (the state's
                            `branch` names it); the parent's files stay as they were
    model_source.json       where the run's model turns come from (a recording or an endpoint), so
                            `runs resume` goes on with what the run was started with
    .lock                   pid of the process driving the thread

Writes are atomic (temp file + rename): a process killed mid-write leaves the old file or none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from kernelloop import bounded_json
from kernelloop.agents.records import Attempt
from kernelloop.agents.turns import ModelTurn, RecordedTurn, messages_sha256
from kernelloop.problem import Problem, sha256_text
from kernelloop.records import Verdict


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
    except OSError as exc:  # a full disk: no partial temp file left behind, and the error names the file
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    os.replace(tmp, path)


class ModelSource(BaseModel):
    """What a run's model turns come from, kept in the run dir so a resume reuses it."""

    kind: Literal["recording", "endpoint", "client"] = Field(description="a recording file, an OpenAI-compatible "
                                                             "endpoint (base_url and model are in the run's settings), "
                                                             "or a chat model given from Python")
    recording: str | None = Field(default=None, description="the recording's absolute path (kind 'recording')")


class RecordingHeader(BaseModel):
    """A recording's first line: the problem its turns answer (each turn names its prompt's hash)."""

    recording: int = Field(default=1, description="the format's version")
    problem: str = Field(default="", description="the problem's name")
    problem_sha256: str = Field(description="sha256 of the problem's source: a recording answers that problem only")


class Recording(BaseModel):
    """A recording as read: its header (None for a recording made before headers) and its turns."""

    header: RecordingHeader | None = None
    turns: list[RecordedTurn]


class RunDir:
    """Paths and blobs of one thread's run. Paths handed to the state are relative to `root`."""

    def __init__(self, workspace: Path, thread_id: str):
        self.root = Path(workspace) / "runs" / thread_id
        self.thread_id = thread_id

    def path(self, relative: str) -> Path:
        return self.root / relative

    def outputs(self, state: dict | None = None) -> Path:
        """Where the branch of `state` keeps best_kernel.py, result.json and report.md: the run dir for the
        first branch, branches/<name> for a fork's."""
        branch = (state or {}).get("branch")
        return self.root / "branches" / branch if branch else self.root

    def branch_files(self) -> dict[str, list[str]]:
        """Each branch's output files: '' (the first branch) and every fork's name -> file names."""
        names = ("best_kernel.py", "result.json", "report.md")
        found = {"": [n for n in names if (self.root / n).is_file()]}
        folder = self.root / "branches"
        for branch in sorted(folder.iterdir()) if folder.is_dir() else []:
            found[branch.name] = [n for n in names if (branch / n).is_file()]
        return found

    def new_branch_name(self) -> str:
        """fork1, fork2, ...: the next fork's folder under branches/."""
        folder = self.root / "branches"
        taken = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        name = next(f"fork{n}" for n in range(1, len(taken) + 2) if f"fork{n}" not in taken)
        (folder / name).mkdir(parents=True)  # taken now, whether or not the branch ever writes its files
        return name

    # -- the model source: what answers the run's model calls ----------------------------------
    def save_model_source(self, source: ModelSource) -> None:
        write_atomic(self.root / "model_source.json", source.model_dump_json(indent=1))

    def model_source(self) -> ModelSource | None:
        path = self.root / "model_source.json"
        return ModelSource.model_validate_json(path.read_text()) if path.is_file() else None

    # -- problem and kernels --------------------------------------------------------------------
    def problem(self, name: str, source: str, trusted: bool = True) -> Problem:
        """The reference as a Problem, loaded from the run dir's copy (written when missing or stale);
        `trusted` as the run began with it (False: never imported in this process)."""
        path = self.root / "problem.py"
        if not path.is_file() or path.read_text() != source:
            write_atomic(path, source)
        return Problem(path=path.resolve(), source=source, name=name, trusted=trusted)

    def write_kernel(self, attempt: Attempt) -> str:
        relative = f"kernels/{attempt.id}.py"
        write_atomic(self.root / relative, attempt.code)
        return relative

    # -- model turns ----------------------------------------------------------------------------
    def save_turn(self, key: str, turn: ModelTurn) -> tuple[str, str]:
        """Store one turn (the messages sent beside the reply) under a name that includes its hash;
        returns (relative path, sha256). The prompt hash is what an honest replay compares.

        A re-served turn is stored as the original (replayed=False): same reply, same file.
        """
        original = turn.model_copy(update={"replayed": False})
        prompt = messages_sha256(turn.messages) if turn.messages else ""
        text = RecordedTurn(key=key, prompt_sha256=prompt, turn=original).model_dump_json(indent=1)
        digest = sha256_text(text)
        relative = f"turns/{key.replace('/', '-')}-{digest[:12]}.json"
        if not (self.root / relative).is_file():
            write_atomic(self.root / relative, text)
        return relative, digest

    def load_turn(self, relative: str, sha256: str | None = None) -> RecordedTurn:
        text = (self.root / relative).read_text()
        if sha256 and sha256_text(text) != sha256:
            raise ValueError(f"{self.root / relative}: changed since it was recorded (hash mismatch)")
        return RecordedTurn.model_validate_json(text)

    # -- verdict journal ------------------------------------------------------------------------
    def _verdict_path(self, attempt: Attempt) -> Path:
        return self.root / "verdicts" / f"{attempt.id}-{attempt.code_sha256[:16]}.json"

    def save_verdict(self, attempt: Attempt, verdict: Verdict, verify_s: float) -> None:
        record = {"verify_s": verify_s, "verdict": verdict.model_dump()}
        write_atomic(self._verdict_path(attempt), json.dumps(record))

    def load_verdict(self, attempt: Attempt) -> tuple[Verdict, float] | None:
        path = self._verdict_path(attempt)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        return Verdict.model_validate(record["verdict"]), float(record["verify_s"])

    # -- the lock: one process drives a thread at a time ------------------------------------------
    def lock_holder(self) -> int | None:
        """pid of a live process driving this thread, or None."""
        try:
            pid = int((self.root / ".lock").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if pid == os.getpid():
            return pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def acquire(self) -> None:
        holder = self.lock_holder()
        if holder is not None and holder != os.getpid():
            raise RuntimeError(f"thread {self.thread_id} is being run by process {holder}; wait or stop it first")
        write_atomic(self.root / ".lock", str(os.getpid()))

    def release(self) -> None:
        if self.lock_holder() == os.getpid():
            (self.root / ".lock").unlink(missing_ok=True)


def turn_refs(state: dict) -> dict[str, dict]:
    """Every model turn a thread's state points at (plan, attempts, critiques), by key:
    'planner/plan', 'coder/r2c1', 'critic/r2' -> {'turn_file', 'turn_sha256'}."""
    refs = {"planner/plan": state.get("plan") or {}}
    refs |= {f"coder/{a['id']}": a for a in state.get("attempts") or []}
    refs |= {f"critic/r{c['round']}": c for c in state.get("critiques") or []}
    return {key: ref for key, ref in refs.items() if ref.get("turn_file")}


def recorded_turns(run: RunDir, state: dict) -> list[RecordedTurn]:
    """Every model turn a thread's state points at, for a keyed replay."""
    return [run.load_turn(ref["turn_file"], ref.get("turn_sha256")) for ref in turn_refs(state).values()]


def write_recording(path: Path, turns: list[RecordedTurn], header: RecordingHeader | None = None) -> None:
    """A recording file: the header (the problem it answers) then one RecordedTurn per line (JSON Lines)."""
    lines = ([header.model_dump_json()] if header is not None else []) + [t.model_dump_json() for t in turns]
    write_atomic(Path(path), "".join(line + "\n" for line in lines))


def load_recording(path: Path) -> Recording:
    """A recording file (.jsonl: an optional header line, then turns) or a run directory's turns/ folder
    (its problem.py gives the header); a file too big, nested too deep or not turns is one ValueError
    line (bounded_json.py), never a traceback."""
    path = Path(path)
    if path.is_dir():
        folder = path / "turns" if (path / "turns").is_dir() else path
        turns = [_recorded_turn(bounded_json.load_file(p), str(p)) for p in sorted(folder.glob("*.json"))]
        source = path / "problem.py"
        header = RecordingHeader(problem=path.name, problem_sha256=sha256_text(source.read_text())) \
            if source.is_file() else None
        return Recording(header=header, turns=turns)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such recording (a .jsonl file or a run directory)")
    try:
        text = bounded_json.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise bounded_json.JsonBoundError(f"{path}: not UTF-8") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    header = None
    if lines and '"problem_sha256"' in lines[0][1] and '"turn"' not in lines[0][1]:
        number, line = lines.pop(0)
        where = f"{path} line {number}"
        try:
            header = RecordingHeader.model_validate(bounded_json.loads(line, where, len(line.encode())))
        except ValidationError as exc:
            raise bounded_json.JsonBoundError(f"{where}: not a recording's header ({exc.errors()[0].get('msg', 'invalid')})") from None
    turns = [_recorded_turn(bounded_json.loads(line, f"{path} line {number}", len(line.encode())), f"{path} line {number}")
             for number, line in lines]
    return Recording(header=header, turns=turns)


def read_recording(path: Path) -> list[RecordedTurn]:
    """The turns of a recording file (.jsonl) or of a run directory's turns/ folder."""
    return load_recording(path).turns


def _recorded_turn(raw: object, where: str) -> RecordedTurn:
    try:
        return RecordedTurn.model_validate(raw)
    except ValidationError as exc:
        raise bounded_json.JsonBoundError(f"{where}: not a recorded turn ({exc.errors()[0].get('msg', 'invalid')})") from None
