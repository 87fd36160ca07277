"""`kernelloop mcp`: serve the verify / profile / optimize tools to coding agents over MCP.

stdio by default (what an agent's .mcp.json launches); `--transport http` serves streamable
HTTP on a local port (http://HOST:PORT/mcp). Exit 2 for bad usage (unknown device, no Ray).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from kernelloop.cli._app import app

errors = Console(stderr=True)


class Transport(str, Enum):
    stdio = "stdio"
    http = "http"


@app.command()
def mcp(
    transport: Transport = typer.Option(Transport.stdio, help="stdio, or http (streamable HTTP on --host:--port)"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (http)"),
    port: int = typer.Option(8765, min=1, max=65535, help="port to listen on (http); the endpoint is /mcp"),
    device: str = typer.Option("auto", help="default verifier device: auto, cpu, cuda or cuda:N"),
    ray: str | None = typer.Option(None, "--ray", help="verify on a Ray cluster: auto, local or an ADDRESS"),
    workspace: Path | None = typer.Option(None, help="workspace dir (default $KERNELLOOP_HOME or ./.kernelloop)"),
) -> None:
    """Serve kernelloop's tools over MCP; optimization runs are background jobs that never block a call."""
    from kernelloop.mcp_server import serve  # lazy: the MCP SDK loads only for this command
    from kernelloop.tools.verify.pool import PoolError

    try:
        serve(transport.value, host=host, port=port, device=device, ray=ray,
              workspace=str(workspace) if workspace else None)
    except PoolError as exc:
        errors.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
