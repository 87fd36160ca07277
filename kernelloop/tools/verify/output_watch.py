"""A candidate's printed output, watched while it runs: a flood ends the job within a second.

The candidate's stdout and stderr go to files in its job dir (sandbox/zygote.py), and the parent
reads only their last few kilobytes. But nothing stopped the writing itself: a forward that
prints a 300 MB line held a verification for 304 s in a security review (300 s is the default
phase limit; on a GPU the timing loop calls forward thousands of times, and this CPU machine
reproduces it with a print loop: tests/fixtures/cheats/print_flood_forever.py). A job that has
written more than FLOOD_BYTES to either stream is flooding, and is killed at once and judged for
it (Code.output_flood), however it would have ended.

Sizes are read with fstatat on a copy of the job dir's descriptor, which the parent opened before
any job code ran, and never through a link: a job that renames its dir or swaps a stream for a
symlink can't point the watch elsewhere. (A job that unlinks its stdout.txt and writes on to the
open file is not seen here; its file size limit still stops it: see docs/architecture.md.)
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable

FLOOD_BYTES = 256 << 20  # over a 100 MB print at import (tests/fixtures/honest/huge_print.py: chatty, not a flood)
POLL_S = 0.2
STREAMS = ("stdout.txt", "stderr.txt")


def flooded(dir_fd: int, limit: int = FLOOD_BYTES) -> str | None:
    """'stdout: 70,254,592 bytes' for the first stream over `limit` in the dir, or None."""
    for name in STREAMS:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:  # not there yet, or the job removed it
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            return f"{name.removesuffix('.txt')}: {info.st_size:,} bytes"
    return None


class OutputWatch:
    """Polls a running job's streams in a thread and calls `kill` once one is over `limit`.
    `stop()` ends the polling (before the job's process group is gone, so a kill never outlives
    it); `found()` then looks once more, at what the job left, and says what flooded, if anything."""

    def __init__(self, dir_fd: int, kill: Callable[[], None], limit: int = FLOOD_BYTES, poll_s: float = POLL_S):
        self._fd = os.dup(dir_fd)  # its own reference: the session closes the job's when it ends
        self._kill, self._limit, self._poll_s = kill, limit, poll_s
        self._found: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            found = flooded(self._fd, self._limit)
            if found is not None:
                self._found = found
                with contextlib.suppress(OSError):  # the job may be gone already
                    self._kill()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def found(self) -> str | None:
        """What flooded, seen while it ran or in what it left (it may flood and exit between
        two polls); closes the watch. Call after stop()."""
        self.stop()
        if self._fd >= 0:
            self._found = self._found or flooded(self._fd, self._limit)
            os.close(self._fd)
            self._fd = -1
        return self._found
