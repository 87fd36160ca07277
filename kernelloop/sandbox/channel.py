"""The job's side of its channel to the parent (see zygote.py): JSON lines on two pipes the
zygote made before the job's code ran. Nothing here is secret from the candidate, which shares
the process: the parent treats every line as a claim and parses it defensively."""

from __future__ import annotations

import json
import os
from typing import Any


class ChannelClosed(EOFError):
    """The parent's end is gone: the job should end."""


class Channel:
    """`send` a message up, `receive` the parent's next message, mark a `phase`, report a `result`."""

    def __init__(self, down_fd: int, up_fd: int):
        self._down = os.fdopen(down_fd, "rb", buffering=0)
        self._up_fd = up_fd
        self._buffer = b""

    @classmethod
    def from_job(cls, job: dict) -> Channel:
        down_fd, up_fd = job["channel_fds"]
        return cls(down_fd, up_fd)

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        while data:
            data = data[os.write(self._up_fd, data):]

    def phase(self, name: str) -> None:
        """Tell the parent which phase runs now (it keeps only forward moves, each with its limit)."""
        self.send({"phase": name})

    def result(self, result: dict[str, Any]) -> None:
        """The job's final report."""
        self.send({"result": result})

    def put_back(self, message: dict[str, Any]) -> None:
        """`message` (one `receive` returned) is the next one `receive` returns again: read ahead by a
        step that expected another kind, it is left for the request loop."""
        self._buffer = (json.dumps(message) + "\n").encode() + self._buffer

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = self._down.read(65536)
            if not chunk:
                raise ChannelClosed("the parent closed the channel")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)
