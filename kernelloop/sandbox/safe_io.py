"""Reading files a job could have tampered with, without trusting them.

A job's dir is writable by the candidate's process: anything the parent opens there may have been
swapped for a symlink (to /proc/self/environ, or a file the sandbox hides), a FIFO (an open that
blocks forever), a directory, or a file that grows or shrinks while it is read (a memory map of
it dies with SIGBUS). So the parent opens with O_NOFOLLOW | O_NONBLOCK, accepts regular files
only, reads at most a stated number of bytes into its own memory, and never maps them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path


class UnsafeFileError(OSError):
    """A job file that can't be read safely; the message is one line saying why."""


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symlink; ENXIO: a FIFO with no writer; EISDIR is not raised for O_RDONLY
        raise UnsafeFileError(f"{path.name} is not a regular file ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path.name} is not a regular file (a {_kind(info.st_mode)})")
    return fd, info


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "named pipe"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "special file"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def open_bounded(path: Path, limit_bytes: int):
    """A binary file object on a regular file of at most `limit_bytes` (no link followed, no
    FIFO opened, no directory), for readers that stream into this process's memory. Raises
    FileNotFoundError when it is missing, UnsafeFileError when it is anything else or larger.
    The size is checked at open; a file that grows later is read only as far as its reader goes."""
    fd, info = _open_regular(path)
    if info.st_size > limit_bytes:
        os.close(fd)
        raise UnsafeFileError(f"{path.name} is {info.st_size} bytes, over the {limit_bytes} expected")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_tail(path: Path, limit_bytes: int) -> str:
    """The last `limit_bytes` of a captured stream as text ('' when missing), with a note of what
    was cut; a non-regular file reads as a one-line note, never as its target's contents."""
    try:
        fd, info = _open_regular(path)
    except FileNotFoundError:
        return ""
    except UnsafeFileError as exc:
        return f"[{exc}: not read]"
    try:
        size = info.st_size
        os.lseek(fd, max(0, size - limit_bytes), os.SEEK_SET)
        text = _read_at_most(fd, limit_bytes).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return (f"[... {size - limit_bytes} bytes cut ...]\n" if size > limit_bytes else "") + text


class JobDir:
    """A job's dir as the parent holds it: opened once, before any job code runs, and every later
    read or hand-over goes through that descriptor, so a job that renames its dir or swaps it for
    a symlink (to a host dir its sandbox can't see) moves nothing the parent opens."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def _at(self, name: str) -> str:
        if "/" in name or name in ("", ".", ".."):
            raise UnsafeFileError(f"{name!r} is not a plain name in the job dir")
        return f"/proc/self/fd/{self.fd}/{name}"

    def read_tail(self, name: str, limit_bytes: int) -> str:
        return read_tail(Path(self._at(name)), limit_bytes)

    def open_bounded(self, name: str, limit_bytes: int):
        return open_bounded(Path(self._at(name)), limit_bytes)

    def put(self, source: Path, name: str) -> Path:
        """Move the parent's file `source` in as `name` (a rename: whatever the job left under that
        name is replaced, a link is not followed; across filesystems, a copy under a fresh name
        renamed into place); UnsafeFileError when that can't be done (the job put a directory
        there). Returns the path the job sees."""
        try:
            try:
                os.replace(source, name, dst_dir_fd=self.fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                staged = f".{name}.{secrets.token_hex(8)}"
                with open(source, "rb") as src, open(staged, "xb", opener=self._opener) as dst:
                    shutil.copyfileobj(src, dst, 1 << 24)
                os.replace(staged, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
                os.unlink(source)
        except OSError as exc:
            raise UnsafeFileError(f"could not hand over {name}: {exc.strerror}") from None
        return self.path / name

    def _opener(self, name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NOFOLLOW, 0o644, dir_fd=self.fd)

    def __enter__(self) -> JobDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
