"""What the parent knows to be secret never leaves in text a job wrote.

The sandbox hides the parent's environment and masks the files settings are read from, but a job
may find a secret somewhere the box shows it (a key pasted into a file the user left readable), and
its output tails travel in every verdict. So, as a backstop, the values of the parent's
secret-looking variables (and those in a .env the settings read) are cut out of every tail."""

from __future__ import annotations

import os
from pathlib import Path

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
MIN_SECRET_CHARS = 8  # shorter values ("1", "true") would cut ordinary text
SETTINGS_FILES = (".env", "kernelloop.toml")  # what pydantic-settings reads from the working dir


def secret_looking(name: str) -> bool:
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def _dotenv_values(path: Path) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and secret_looking(name):
            found.append(value.strip().strip("'\""))
    return found


def secrets() -> list[str]:
    """The values to cut, longest first (a value that holds another is cut whole)."""
    values = [v for k, v in os.environ.items() if secret_looking(k)]
    values += _dotenv_values(Path.cwd() / ".env")
    return sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def redact(text: str, known: list[str] | None = None) -> str:
    for value in secrets() if known is None else known:
        if value in text:
            text = text.replace(value, "[redacted]")
    return text
