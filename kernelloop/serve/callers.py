"""Whose job is whose on the MCP server: a caller lists, polls and cancels the jobs it started, never
another's. Every caller is untrusted, and one server (streamable HTTP above all) serves many.

A caller is the channel its requests come over, as the MCP SDK (2.x) shows it to a tool:
- a pipe (stdio, or an in-process client): one run of the server serves one client, and the server's
  lifespan is entered once per run, so a token drawn there (`Run`) names the caller;
- a streamable-HTTP session (the handshake protocols, as `kernelloop mcp --transport http` serves them):
  one run serves every client, so the run names no one; the transport's session id does (128 random bits
  the SDK issued and checks against the credential that opened the session);
- anything else (stateless HTTP: the 2026-07-28 protocol's single exchanges, or a server run stateless):
  nothing ties one request to the next, so the caller is anonymous (None).

An anonymous caller's job is owned by its id (a 128-bit secret only its starter was told): whoever shows
the id may poll or cancel it, and no list_jobs shows it. So is a solve job of an earlier server (its
checkpointed thread, job_threads.recall): the session that started it is gone with that server. An unknown
id and another caller's get the same one line (jobs.no_such_job), so an id's existence never shows.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context

Caller = str | None  # an opaque key naming a caller; None: anonymous


@dataclass(frozen=True)
class Run:
    """The server's lifespan state: one per run, so one per client of a pipe."""

    caller: str = field(default_factory=lambda: f"run-{secrets.token_hex(16)}")


@asynccontextmanager
async def one_run(_server: Any) -> AsyncIterator[Run]:
    """The MCP server's lifespan: a fresh Run (and so a fresh caller) each time a client's run starts."""
    yield Run()


def caller_of(ctx: Context, one_client_per_run: bool = True) -> Caller:
    """Who made this request. one_client_per_run: the server is served over a pipe (stdio, in-process),
    where a run is one client's; False (streamable HTTP) never takes the run for the caller, so an SDK that
    one day attaches no HTTP request to a request can only make a caller anonymous, never merge callers."""
    request = ctx.request_context
    if request.request is None and one_client_per_run:  # no HTTP request: a pipe
        run = request.lifespan_context
        return run.caller if isinstance(run, Run) else None
    # The SDK has no public accessor for the connection's session id (its own Context.session_id is not
    # what MCPServer hands a tool); a header would be the client's word, not the transport's, so it is
    # read here, and anything else (a renamed attribute) is an anonymous caller, never a shared one.
    connection = getattr(request.session, "_connection", None)
    session_id = getattr(connection, "session_id", None)
    if not isinstance(session_id, str) or not session_id:
        return None
    return "session-" + hashlib.sha256(session_id.encode()).hexdigest()  # the session's secret itself not kept


class Owners:
    """Which caller started which of this server's jobs (None: an anonymous caller, so the id owns it)."""

    def __init__(self) -> None:
        self._owners: dict[str, Caller] = {}
        self._lock = threading.Lock()

    def add(self, job_id: str, caller: Caller) -> None:
        with self._lock:
            self._owners[job_id] = caller

    def allows(self, job_id: str, caller: Caller) -> bool:
        """Whether `caller` may see job_id: its own, or an anonymous caller's (shown by its id). A job this
        server's tools did not start (the operator's own, through the JobManager) is no caller's."""
        with self._lock:
            if job_id not in self._owners:
                return False
            owner = self._owners[job_id]
        return owner is None or owner == caller

    def listed(self, job_id: str, caller: Caller) -> bool:
        """Whether list_jobs shows job_id to `caller`: its own, when it is someone (an anonymous job is
        nobody's to list)."""
        with self._lock:
            return caller is not None and self._owners.get(job_id) == caller
