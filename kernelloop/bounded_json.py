"""JSON kernelloop did not write, parsed within bounds: size and depth are checked before `json`
sees the text (its decoder recurses per bracket, and 4,000 `[` raise RecursionError out of
whatever loop called it). A failure is one `JsonBoundError` line saying what was read, never a
traceback. Standard library only: the sandbox's parent and a bare GPU node import it."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # far more than any record kernelloop writes nests
MAX_FILE_BYTES = 64 << 20  # a user's JSON file (bench --list, a recording)

_MARK = re.compile(r'[\[\]{}"]')
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)  # possessive: no backtracking


class JsonBoundError(ValueError):
    """JSON over its size or depth bound (`over_bounds`), or not JSON: one line naming what was read."""

    def __init__(self, message: str, over_bounds: bool = False):
        super().__init__(message)
        self.over_bounds = over_bounds


def depth(text: str, enough: int = MAX_DEPTH) -> int:
    """How deep the brackets of `text` nest, strings skipped (an upper bound where it is not JSON);
    where it holds at most `enough` brackets, their count (cheap, and no deeper than that)."""
    if text.count("[") + text.count("{") <= enough:
        return text.count("[") + text.count("{")
    level = deepest = pos = 0
    while (mark := _MARK.search(text, pos)) is not None:
        char, pos = mark.group(), mark.end()
        if char == '"':
            string = _STRING.match(text, mark.start())
            if string is None:  # a string that never ends: the rest is not JSON, json says so
                break
            pos = string.end()
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def loads(text: str | bytes, what: str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)` where it is at most `max_bytes` long and nests at most `max_depth` deep;
    else, or where it is not JSON, a JsonBoundError naming `what`."""
    if len(text) > max_bytes:
        raise JsonBoundError(f"{what}: over {max_bytes} bytes of JSON", over_bounds=True)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonBoundError(f"{what}: not UTF-8") from None
    if depth(text, max_depth) > max_depth:
        raise JsonBoundError(f"{what}: JSON nested deeper than {max_depth} levels", over_bounds=True)
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise JsonBoundError(f"{what}: not JSON ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None


def read_bytes(path: str | Path, what: str = "", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A user-given file's bytes, read without following a link or blocking: a regular file of at most
    `max_bytes`, else one JsonBoundError line naming it."""
    where = what or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise JsonBoundError(f"{where}: can't be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JsonBoundError(f"{where}: not a regular file")
        if info.st_size > max_bytes:
            raise JsonBoundError(f"{where}: over {max_bytes} bytes of JSON")
        return handle.read(max_bytes + 1)


def load_file(path: str | Path, what: str = "", max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A user-given JSON file, read by `read_bytes`, then `loads`: every failure is one JsonBoundError
    line naming the file."""
    where = what or str(path)
    return loads(read_bytes(path, where, max_bytes), where, max_bytes, max_depth)
