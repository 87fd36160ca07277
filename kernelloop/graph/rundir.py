"""The run directory WORKSPACE/runs/<thread_id>/: the blobs the state points at.

    problem.py              the reference, as the state holds it
    kernels/<attempt>.py    every candidate
    turns/<node>-<key>-<sha>.json   every model turn: the messages sent, the reply and its
                            reasoning, the tokens; never overwritten
    verdicts/<attempt>-<code sha>.json   the verdict journal: written right after each
                            verification, read back on resume so no attempt is verified twice
    best_kernel.py  result.json  report.md   written when the run ends, for any reason
    .lock                   pid of the process driving the thread

Writes are atomic (temp file + rename): a process killed mid-write leaves the old file or none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

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


class RunDir:
    """Paths and blobs of one thread's run. Paths handed to the state are relative to `root`."""

    def __init__(self, workspace: Path, thread_id: str):
        self.root = Path(workspace) / "runs" / thread_id
        self.thread_id = thread_id

    def path(self, relative: str) -> Path:
        return self.root / relative

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


def write_recording(path: Path, turns: list[RecordedTurn]) -> None:
    """A recording file: one RecordedTurn per line (JSON Lines)."""
    write_atomic(Path(path), "".join(t.model_dump_json() + "\n" for t in turns))


def read_recording(path: Path) -> list[RecordedTurn]:
    """Turns from a recording file (.jsonl) or from a run directory's turns/ folder; a file too big,
    nested too deep or not turns is one ValueError line (bounded_json.py), never a traceback."""
    path = Path(path)
    if path.is_dir():
        folder = path / "turns" if (path / "turns").is_dir() else path
        return [_recorded_turn(bounded_json.load_file(p), str(p)) for p in sorted(folder.glob("*.json"))]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such recording (a .jsonl file or a run directory)")
    try:
        text = bounded_json.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise bounded_json.JsonBoundError(f"{path}: not UTF-8") from None
    return [_recorded_turn(bounded_json.loads(line, f"{path} line {number}", len(line.encode())), f"{path} line {number}")
            for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _recorded_turn(raw: object, where: str) -> RecordedTurn:
    try:
        return RecordedTurn.model_validate(raw)
    except ValidationError as exc:
        raise bounded_json.JsonBoundError(f"{where}: not a recorded turn ({exc.errors()[0].get('msg', 'invalid')})") from None
