"""Whether this process is the `kernelloop` program itself, not a test or another program that
imports the CLI: read when kernelloop.cli first loads (under `python -m kernelloop.cli`, argv[0]
is "-m" only while the package loads)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

AS_PROGRAM = Path(sys.argv[0]).name in ("kernelloop", "-m")


def finish(code: int) -> NoReturn:
    """End the command with `code`. As the program, once its output is flushed, without the
    interpreter's teardown (torch's and the CUDA context's: about a second that no one waits for
    in a `verify`; its sandbox workers are already stopped). Elsewhere, the usual typer exit."""
    if AS_PROGRAM:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    import typer

    raise typer.Exit(code)
