"""The `kernelloop` command. Each subcommand lives in its own module and registers on `app`.

Every module here imports only typer, rich and kernelloop.cli._common at the top, so `--help` and
usage errors never load torch or LangGraph; each command imports its work when it runs.
"""

import sys

from kernelloop.cli._program import AS_PROGRAM
from kernelloop.tools.verify.trusted_cache import use_kept_bytecode_early

# Run as the program, before typer, pydantic and torch load: where torch came without bytecode,
# every module from here on is read from (and compiled into) the trusted cache's bytecode dir, not
# compiled from source in every run (trusted_cache.py, "Bytecode"). Not for --help, which imports
# little, nor where another program imports this package.
# A command that verifies also has the spare cores fill that dir the first time (precompile.py).
if AS_PROGRAM and len(sys.argv) > 1 and not {"--help", "-h"} & set(sys.argv[1:]):
    use_kept_bytecode_early(fill=sys.argv[1] in ("verify", "solve", "bench"))

# Importing a command module registers its commands.
from kernelloop.cli import bench_cmd, doctor_cmd, mcp_cmd, profile_cmd, runs_cmd, solve_cmd, verify_cmd  # noqa: F401
from kernelloop.cli._app import app, escape_help

escape_help(app)
__all__ = ["app"]
