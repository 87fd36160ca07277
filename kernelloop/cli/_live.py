"""The live progress view of `solve` and `runs`, and the interactive reviews.

Progress goes to stderr, so with --json the last stdout line stays the one result object.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.prompt import Prompt
from rich.table import Table

from kernelloop.cli._common import errors, plain, quoted

if TYPE_CHECKING:  # the graph loads only when a run starts, never for --help
    from kernelloop.graph.context import RunEvent
    from kernelloop.graph.report import RunSummary
    from kernelloop.graph.state import Review

_screen = Console(stderr=True)  # the live view wraps to the terminal; error lines (errors) never wrap
STYLE = {"correct": "bold green", "incorrect": "red", "rejected": "magenta", "compile_error": "yellow",
         "runtime_error": "yellow", "timeout": "yellow", "no_candidate": "dim", "unverified": "dim"}


class LiveView:
    """The terminal view of a running loop: round, attempts with verdicts, best speedup, time left."""

    def __init__(self, enabled: bool = True):
        self.summary: RunSummary | None = None
        self.rows: dict[str, list[str]] = {}
        self.note = "starting"
        self._synced_at = time.monotonic()
        self._live = Live(self._render(), console=_screen, refresh_per_second=4, transient=False) if enabled else None
        self._running = False

    def __enter__(self) -> LiveView:
        # On a terminal it shows at once (the verifier's workers and the checkpoints take seconds to open);
        # elsewhere it is drawn from the run's first report on, so an error before the run starts stands alone.
        if _screen.is_terminal:
            self.note = "starting: opening the verifier and the checkpoints"
            self._refresh()
            if self._live is not None:
                self._live.refresh()  # drawn now, not at the next tick
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._live is not None and self._running:
            self._live.update(self._render())
            self._live.stop()
            self._running = False
            if not _screen.is_terminal:  # rich ends a terminal's last frame with a newline, not a pipe's
                _screen.line()

    def start(self) -> None:
        if self._live is not None and not self._running:
            self._live.start()
            self._running = True

    def on_progress(self, summary: RunSummary) -> None:
        self.summary, self._synced_at = summary, time.monotonic()
        self._refresh()

    def on_event(self, event: RunEvent) -> None:
        if event.attempt_id:
            self.rows[event.attempt_id] = [event.attempt_id, event.kind, event.status or "",
                                           f"{event.speedup:.3g}x" if event.speedup is not None else "",
                                           event.message]
        self.note = {"planning": "planning", "planned": "plan ready", "critiqued": "critique ready",
                     "finished": f"finished: {event.message}", "retrying": f"model retrying: {event.message}",
                     "asked_live": event.message[:90], "reasoning": f"thinking: ...{event.message[-70:]}"
                     }.get(event.kind, self.note)
        self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            self.start()
            self._live.update(self._render())

    def _render(self) -> Group:
        s = self.summary
        if s is None:
            header = f"kernelloop: {quoted(self.note, 200)}"
        else:
            spent = s.spent_s + (time.monotonic() - self._synced_at if s.run_status == "running" else 0.0)
            left = f"{max(0.0, s.budget_s - spent) / 60:.1f} min left" if s.budget_s else f"{spent:.0f} s"
            best = f"{s.best_id} {s.status}" + (f" {s.best_speedup:.3g}x" if s.best_speedup is not None else "") \
                if s.best_id else "none yet"
            cost = f" ${s.tokens.cost_usd:.3f}" if s.tokens.cost_usd is not None else ""
            tokens = f"{s.tokens.total_tokens:,} tokens{cost}"
            header = (f"[bold]{quoted(s.thread_id)}[/] round {s.rounds} | {s.attempts} attempts | best {quoted(best)} | "
                      f"{left} | {tokens} | {quoted(self.note, 200)}")
        # A verdict's reason (the candidate's words as often as not) is shown as text, never as markup.
        table = Table("attempt", "step", "verdict", "speedup", "", box=None, padding=(0, 1))
        for row in list(self.rows.values())[-12:]:
            table.add_row(plain(row[0]), plain(row[1]), plain(row[2], style=STYLE.get(row[2], "")), row[3],
                          plain(row[4], 90))
        return Group(header, table)


def ask_review(payload: dict, view: LiveView | None = None) -> Review:
    """Answer an interrupt at the terminal: the plan (approve / edit / stop) or a round (continue / stop)."""
    from kernelloop.graph.state import Review

    if view is not None:
        view.stop()
    try:
        if payload.get("kind") == "plan":
            errors.print(Panel(payload.get("plan") or "(empty)", title=f"plan ({payload.get('backend')})"))
            action = Prompt.ask("approve, edit or stop", choices=["a", "e", "s"], default="a", console=errors)
            plan = click.edit(payload.get("plan") or "") if action == "e" else None  # typer does not re-export edit
            hint = Prompt.ask("hint for the coders (enter for none)", default="", console=errors)
            return Review(action={"a": "approve", "e": "edit" if plan else "approve", "s": "stop"}[action],
                          plan=plan, hint=hint or None)
        errors.print(f"round {payload.get('round')} done; best: {quoted(payload.get('best') or 'none')}; "
                     f"{payload.get('spent_s', 0):.0f}/{payload.get('budget_s', 0):.0f} s spent")
        action = Prompt.ask("continue or stop", choices=["c", "s"], default="c", console=errors)
        hint = Prompt.ask("hint for the coders (enter for none)", default="", console=errors) if action == "c" else ""
        return Review(action="continue" if action == "c" else "stop", hint=hint or None)
    finally:
        if view is not None:
            view.start()
