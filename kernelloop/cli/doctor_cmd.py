"""`kernelloop doctor`: check the install and say what works and what to fix.

Exit 0 when nothing failed (warnings allowed: a CPU machine, no ncu, a plain sandbox), 1 when
a check failed. With --json the last stdout line is a list of {name, status, detail, fix}.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from kernelloop.cli._app import app
from kernelloop.cli._common import WORKSPACE_HELP, settings

if TYPE_CHECKING:
    from kernelloop.config.settings import Settings

console = Console(soft_wrap=True)
MARK = {"ok": "[green]ok[/green]", "warn": "[yellow]warn[/yellow]", "fail": "[bold red]FAIL[/bold red]",
        "skip": "[dim]skip[/dim]"}


@app.command()
def doctor(
    base_url: str | None = typer.Option(None, help="endpoint to check (or KERNELLOOP_BASE_URL)"),
    model: str | None = typer.Option(None, help="model name to look for (or KERNELLOOP_MODEL)"),
    api_key: str | None = typer.Option(None, help="API key to try (or KERNELLOOP_API_KEY)"),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
    json_out: bool = typer.Option(False, "--json", help="print the checks as one JSON list on the last line"),
) -> None:
    """Check torch, triton, CUDA, NVML, ncu, the sandbox (bubblewrap or plain), the endpoint and the workspace."""
    from kernelloop.doctor import run_checks  # lazy: keeps `kernelloop --help` fast

    flags = {"base_url": base_url, "model": model, "api_key": api_key, "home": workspace}
    chosen = settings(**flags)  # a bad setting is one line and exit 2 here, as in every command
    checks = run_checks(chosen, **flags)
    if json_out:
        print(json.dumps([asdict(check) for check in checks]))
    else:
        table = Table("", "check", "what works", "what to do", box=None, padding=(0, 1))
        for check in checks:
            if check.name != "settings" or check.status != "ok":  # its values get their own table below
                table.add_row(MARK[check.status], check.name, check.detail, check.fix)
        console.print(table)
        _print_settings(chosen, **flags)
    raise typer.Exit(1 if any(check.status == "fail" for check in checks) else 0)


def _print_settings(chosen: Settings, **flags) -> None:
    """Each setting, its value and where it came from: flag > env > .env > kernelloop.toml > default."""
    from kernelloop.config.settings import origins
    from kernelloop.doctor import shown_value

    values = chosen.model_dump()
    where = origins(**flags)
    table = Table("setting", "value", "from", box=None, padding=(0, 1), title="settings", title_justify="left")
    for name, value in values.items():
        table.add_row(name, shown_value(name, value), where[name])
    console.print(table)
