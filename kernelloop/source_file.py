"""Reading a problem or candidate file that someone else may have put where we read.

A candidates or problems directory (bench's, an MCP client's path) is not ours: an entry named
relu.py may be a named pipe (an open or a read that blocks forever), a symlink (to the API key's
file, to /proc/self/environ, anywhere), a socket, a device (/dev/zero never ends), a directory,
or a file of gigabytes. So it is opened without following a link and without blocking, checked
on the open descriptor (fstat: not the name, which can be swapped in between) to be a regular
file of at most the limit, and read bounded into memory. Anything else is one line saying what
it is. Standard library only: the verifier imports problem.py on a bare GPU node.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernelloop.config import defaults

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISLNK, "a symlink"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


class SourceFileError(ValueError):
    """A file that is not a readable source file; the message is one line naming it."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def read_source_bytes(path: Path, what: str, limit: int = defaults.MAX_SOURCE_BYTES) -> bytes:
    """The bytes of the regular file at `path` (not followed if it is a link), at most `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise SourceFileError(f"{path}: no such {what} file") from None
    except OSError as exc:
        try:  # ELOOP: the name is a symlink; ENXIO: a socket or a pipe with no writer; say which
            kind = _kind(os.lstat(path).st_mode)
        except OSError:
            kind = exc.strerror or "unreadable"
        raise SourceFileError(f"{path}: is {kind}, not a {what} file (not followed, not read)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceFileError(f"{path}: is {_kind(info.st_mode)}, not a {what} file")
        if info.st_size > limit:
            raise SourceFileError(f"{path}: {info.st_size:,} bytes, over the {limit:,}-byte limit for a {what}")
        chunks, left = [], limit + 1  # one byte over the limit shows a file that grew after fstat
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except BlockingIOError:  # a regular file never blocks; this one changed under us
        raise SourceFileError(f"{path}: changed while it was read, not a {what} file") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise SourceFileError(f"{path}: grew past the {limit:,}-byte limit for a {what} while it was read")
    return data
