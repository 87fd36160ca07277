"""`kernelloop mcp`: serve the verify / profile / optimize tools to coding agents over MCP.

stdio by default (what an agent's .mcp.json launches); `--transport http` serves streamable
HTTP on a local port (http://HOST:PORT/mcp). Exit 2 for bad usage (unknown device, no Ray).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from kernelloop.cli._app import app
from kernelloop.cli._common import DEVICE_HELP, SETTINGS_NOTE, WORKSPACE_HELP, device_flag, fail_usage, settings


class Transport(str, Enum):
    stdio = "stdio"
    http = "http"


@app.command(epilog=SETTINGS_NOTE)
def mcp(
    transport: Transport = typer.Option(Transport.stdio, help="stdio, or http (streamable HTTP on --host:--port)"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (http)"),
    port: int = typer.Option(8765, min=1, max=65535, help="port to listen on (http); the endpoint is /mcp"),
    device: str | None = typer.Option(None, help="default verifier device: " + DEVICE_HELP, show_default=False),
    ray: str | None = typer.Option(None, "--ray", help="verify on a Ray cluster: auto, local or an ADDRESS"),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
) -> None:
    """Serve kernelloop's tools over MCP; optimization runs are background jobs that never block a call."""
    device_flag(device)
    chosen = settings(device=device, home=workspace)
    from kernelloop.serve.mcp import serve  # lazy: the MCP SDK loads only for this command

    try:
        serve(transport.value, host=host, port=port, ray=ray, settings=chosen)
    except ValueError as exc:  # PoolError: no such device, no Ray, no cluster
        fail_usage(str(exc).splitlines()[0])
