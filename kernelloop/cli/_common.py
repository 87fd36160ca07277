"""What the commands share: the error line and exit 2, flag parsing, loading files named by flags, settings.

Kept free of torch, LangGraph and the verifier: `--help` and usage errors import only this
(torch loads only once a command has work to do).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from kernelloop.config import defaults
from kernelloop.config.units import Device, format_duration, format_target, parse_duration_s, parse_target
from kernelloop.safe_text import REASON_CHARS, one_line

if TYPE_CHECKING:
    from kernelloop.config.settings import Settings
    from kernelloop.problem import Candidate, Problem

errors = Console(stderr=True, soft_wrap=True)  # an error is one line, however narrow the terminal
DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)  # writes the disk refused

WORKSPACE_HELP = "workspace dir (default $KERNELLOOP_HOME, kernelloop.toml's home, or ./.kernelloop)"
FRESH_TIMING_HELP = ("every timed call on fresh values, outputs of timed calls picked at random checked (catches memos "
                     "of inputs seen before); --no-fresh-timing times the trial sets in turn, which a memo can fool")
DEVICE_HELP = f"auto (every GPU, else cpu), cpu (correctness only), cuda or cuda:N [default: {defaults.DEVICE}]"
BUDGET_HELP = f"wall-clock budget: 90s, 15m, 1h30m or 1h 30m [default: {format_duration(defaults.BUDGET_S)}]"
TARGET_HELP = (f"stop at this speedup over the baseline; 'none': the first correct kernel "
               f"[default: {format_target(defaults.TARGET_SPEEDUP)}]")
CANDIDATES_HELP = (f"candidates per round, written in parallel (1-{defaults.MAX_CANDIDATES}) "
                   f"[default: {defaults.CANDIDATES}]")
CHECKPOINTS_HELP = ("checkpoint DB: sqlite:///file or postgresql://... URL (or KERNELLOOP_CHECKPOINTS, kernelloop.toml's "
                    "checkpoints) [default: WORKSPACE/checkpoints.sqlite]")
ROUNDS_HELP = f"rounds at most [default: {defaults.MAX_ROUNDS}]"
SETTINGS_NOTE = ("Unset flags come from KERNELLOOP_* variables, .env or kernelloop.toml "
                 "(`kernelloop doctor` shows which).")


def plain(text: object, limit: int = REASON_CHARS, style: str = "") -> Text:
    """Text someone else wrote (a verdict's reason, a kernel's or a problem's name) for a Rich
    table or print: one line, bounded, no control characters, never read as markup."""
    return Text(one_line(text, limit), style=style)


def quoted(text: object, limit: int = REASON_CHARS) -> str:
    """The same, to go inside a string that is read as markup."""
    return escape(one_line(text, limit))


_JSON_ERRORS: list[bool] = [False]  # set once per process by a command run with --json


def json_errors(on: bool) -> None:
    """A command given --json calls this first: its errors are then also an object on stdout (fail_usage)."""
    _JSON_ERRORS[0] = on


def fail_usage(message: str, code: str = "usage", exit_code: int = 2) -> NoReturn:
    """Bad usage: one line on stderr, exit code 2; under --json (json_errors) also an error object as the
    last stdout line: {"error": {"code": ..., "message": ...}} (the MCP and LangChain tools' contract)."""
    if _JSON_ERRORS[0]:
        import json

        print(json.dumps({"error": {"code": code, "message": one_line(message, 4000)}}))
    errors.print(f"[red]error:[/red] {quoted(message, 4000)}", highlight=False)
    raise typer.Exit(exit_code)


def sigterm_as_ctrl_c() -> None:
    """A run's command treats SIGTERM (a scheduler, `kill`) as Ctrl-C: progress saved, the resume command printed."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def settings(**flags) -> Settings:
    """Flags (None: not given) over env, .env and kernelloop.toml; a bad setting is a usage error."""
    from kernelloop.config.settings import ConfigError, load_settings

    try:
        return load_settings(**flags)
    except ConfigError as exc:
        fail_usage(str(exc))


def duration_flag(text: str | None, flag: str = "--budget") -> float | None:
    """A duration flag in seconds (None when not given); a bad one is a usage error naming the flag."""
    try:
        return None if text is None else parse_duration_s(text)
    except ValueError as exc:
        fail_usage(f"{flag}: {exc}")


def target_flag(text: str | None, flag: str = "--target") -> float | None:
    """A speedup flag; 'none' -> None. Only call it for a flag that was given."""
    try:
        return parse_target(text)
    except ValueError as exc:
        fail_usage(f"{flag}: {exc}")


def device_flag(device: str | None, flag: str = "--device") -> str | None:
    """auto, cpu, cuda or cuda:N, checked before anything heavy loads."""
    try:
        return None if device is None else Device.parse(device)
    except ValueError:
        fail_usage(f"{flag} must be auto, cpu, cuda or cuda:N, not {device!r}")


def load_problem(path: Path, flag: str = "--problem") -> Problem:
    """A problem file; every way it can't be loaded is one line naming the flag and the file."""
    from kernelloop.problem import Problem, ProblemError

    try:
        return Problem.from_file(path)
    except ProblemError as exc:
        fail_usage(f"{flag}: {exc}")


def load_candidate(path: Path, flag: str = "CANDIDATE") -> Candidate:
    from kernelloop.problem import Candidate, ProblemError

    try:
        return Candidate.from_file(path)
    except ProblemError as exc:
        fail_usage(f"{flag}: {exc}")


def disk_error(exc: OSError, thread_id: str, workspace_flag: str = "") -> str:
    """One line for a write the disk refused (full, over a size limit, read-only)."""
    where = exc.filename or "the workspace"
    return (f"can't write {where}: {exc.strerror or exc}; free space (or pass --workspace on another disk), then "
            f"`kernelloop runs resume {thread_id}{workspace_flag}` continues from the last checkpoint")


def workspace_path(flag: Path | None) -> Path:
    """--workspace, else KERNELLOOP_HOME / .env / kernelloop.toml's home, else ./.kernelloop."""
    return settings(home=flag).home.expanduser().resolve()
