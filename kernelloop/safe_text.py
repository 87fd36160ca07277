"""Text a candidate or a problem wrote, made safe to keep and to show.

Verdict reasons, feedback and output tails come from code the verifier does not trust, so any
character can be in them: a terminal escape, a carriage return that rewrites what was printed, a
line break that Python's splitlines() sees and a reader does not (a Markdown report read back
line by line would start a new block there), or a megabyte of text. Kept, such text is bounded
and stripped of control characters (`clean`, `one_line`); shown, it is escaped for where it goes
(`md_cell` for Markdown; Rich and HTML escape in their sinks). Nothing here reads a file:
candidate text is never a path.

Standard library only: the verifier's records use it on a bare GPU node.
"""

from __future__ import annotations

import re

REASON_CHARS = 1000  # a verdict's one line
TEXT_CHARS = 32_000  # feedback for the coder: the reason, where it is wrong, the end of stderr
TAIL_CHARS = 8_000  # a captured stream's end (the parent reads its last 4000 bytes)
ITEM_CHARS = 500  # one entry of a verdict's lists (warnings, kernel names)
MAX_ITEMS = 200

# Terminal escape sequences (CSI, OSC, and two-character ones), removed whole so no "[31m" is left.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])?")
# C0 controls but tab and newline, DEL, C1 controls (NEL among them), the Unicode line and
# paragraph separators, bidirectional overrides (text that reads as other than it is), and BOM.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
# Lone UTF-16 surrogates: a Python str may hold them (a "\\ud800" escape in JSON, chr(0xd800)), but
# no UTF-8 writer takes them, so one in a reason would stop a JSON record, a terminal or a whole run.
_SURROGATES = re.compile("[\ud800-\udfff]")
_BREAKS = re.compile(r"[\n\t]+")
# What would change the structure of a Markdown line: its escape, code spans, links and images
# ([ ]), raw HTML and autolinks (< >), entities (&), and table cells (|). Emphasis (* _) only
# changes how text looks, and problem names are full of underscores: left as they are.
_MARKDOWN = re.compile(r"([\\`\[\]<>&|])")
_MARKDOWN_NOTE = re.compile(r"([\\\[\]<>&|])")
_CODE_SPAN = re.compile(r"(`[^`]+`)")


def _cut(text: str, limit: int, keep: str, total: int = 0) -> str:
    """At most `limit` characters, saying how many of the `total` the original had were cut."""
    if len(text) <= limit:
        return text
    note = f" [... {max(total, len(text)) - limit:,} characters cut ...] "
    room = max(0, limit - len(note))
    return (text[:room] + note.rstrip()) if keep == "head" else (note.lstrip() + text[len(text) - room:])


def utf8(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so any UTF-8 writer takes it: candidate
    text, and file names, which Python decodes with surrogates standing for bytes that aren't UTF-8."""
    return _SURROGATES.sub("\ufffd", text)


def printable(text: str) -> str:
    """`text` without terminal escapes and control characters, whole (a recorded model turn)."""
    text = utf8(text)
    return _CONTROL.sub("", _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n"))


def clean(text: object, limit: int = TEXT_CHARS, keep: str = "head") -> str:
    """`text` with terminal escapes and control characters removed (\\r becomes a line break),
    at most `limit` characters: the start kept, or with keep="tail" the end (a stream's tail)."""
    text = text if isinstance(text, str) else str(text)
    total = len(text)
    # Bound the work first: the patterns below never see more than a few times the limit.
    text = text[: 4 * limit + 64] if keep == "head" else text[-(4 * limit + 64):]
    return _cut(printable(text), limit, keep, total)


def one_line(text: object, limit: int = REASON_CHARS) -> str:
    """`clean`, on one line: every line break and tab becomes a space."""
    total = len(text) if isinstance(text, str) else 0
    return _cut(_BREAKS.sub(" ", clean(text, 4 * limit + 64)).strip(), limit, "head", total)


def items(values: object, limit: int = ITEM_CHARS) -> list[str]:
    """A list of short texts (warnings, kernel names), each one line and bounded, at most MAX_ITEMS."""
    if not isinstance(values, (list, tuple)):
        return []
    return [one_line(value, limit) for value in values[:MAX_ITEMS]]


def md_cell(text: object, limit: int = REASON_CHARS) -> str:
    """One line of untrusted text for a Markdown table cell or list item: no line break, and
    nothing in it can make a link, an image, raw HTML, a code span or a new cell."""
    return _MARKDOWN.sub(r"\\\1", one_line(text, limit))


def md_note(text: object, limit: int = TEXT_CHARS) -> str:
    """`md_cell` for a report's notes, whose `code spans` (written by a person in notes.md) stay
    as they are; a code span shows its text literally, so nothing in one needs escaping."""
    parts = _CODE_SPAN.split(one_line(text, limit))
    return "".join(part if index % 2 else _MARKDOWN_NOTE.sub(r"\\\1", part) for index, part in enumerate(parts))
