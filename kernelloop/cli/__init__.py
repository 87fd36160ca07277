"""The `kernelloop` command. Each subcommand lives in its own module and registers on `app`.

Every module here imports only typer, rich and kernelloop.cli._common at the top, so `--help` and
usage errors never load torch or LangGraph; each command imports its work when it runs.
"""

# Importing a command module registers its commands.
from kernelloop.cli import bench_cmd, doctor_cmd, mcp_cmd, profile_cmd, runs_cmd, solve_cmd, verify_cmd  # noqa: F401
from kernelloop.cli._app import app

__all__ = ["app"]
