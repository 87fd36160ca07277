"""The one grammar for durations and speedup targets, for flags, env vars and the config file alike."""

from __future__ import annotations

import re

# '1h 30m', '1h30m', '15m', '90s', '90' (seconds), '1.5h'; spaces between parts are allowed.
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s?)?\s*$")


def parse_duration_s(text: str | float | int) -> float:
    """'1h 30m' -> 5400.0, '15m' -> 900.0, '90s' or '90' -> 90.0; a number is seconds already."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        total = float(text)
    else:
        match = _DURATION.match(str(text))
        if not str(text).strip() or match is None or not any(match.groups()):
            raise ValueError(f"{text!r} is not a duration: use e.g. 90s, 15m, 1h30m, 1h 30m or seconds")
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r}: a duration must be more than 0 s")
    return total


def format_duration(seconds: float) -> str:
    """900.0 -> '15m', 5400.0 -> '1h30m', 90.5 -> '90.5s': what parse_duration_s reads back."""
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value)


def parse_target(text: str | float | None) -> float | None:
    """'1.2x' or '1.2' -> 1.2; 'none', 'correct' or 'any' -> None (stop at the first correct kernel)."""
    if text is None or isinstance(text, (int, float)) and not isinstance(text, bool):
        value = text
    elif str(text).strip().lower() in ("none", "correct", "any"):
        return None
    else:
        try:
            value = float(str(text).strip().lower().removesuffix("x"))
        except ValueError:
            raise ValueError(f"{text!r} is not a speedup: use e.g. 1.2x, or 'none'") from None
    if value is not None and value <= 0:
        raise ValueError(f"{text!r}: the target speedup must be more than 0")
    return None if value is None else float(value)


def format_target(value: float | None) -> str:
    return "none" if value is None else f"{value:g}x"


_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


class Device(str):
    """Where the verifier runs: 'auto' (every GPU, else the CPU), 'cpu', 'cuda' or 'cuda:N'.

    Parsed once where a setting enters (Device.parse raises ValueError with one line) and then
    passed as is: a str, so the verifier side (torch alone) takes it unchanged, with the parts typed.
    """

    @classmethod
    def parse(cls, text: str | Device) -> Device:
        if isinstance(text, Device):
            return text
        match = _DEVICE.match(str(text).strip().lower())
        if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
            raise ValueError(f"{text!r} is not a device: use auto, cpu, cuda or cuda:N")
        return cls(match.group(0))

    @property
    def kind(self) -> str:
        """'auto', 'cpu' or 'cuda'."""
        return self.split(":", 1)[0]

    @property
    def gpu(self) -> int | None:
        """N of 'cuda:N'; None for every other device."""
        return int(self.split(":", 1)[1]) if ":" in self else None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> object:
        from pydantic_core import core_schema  # lazy: the verifier side imports this module without pydantic

        return core_schema.no_info_after_validator_function(
            cls.parse, core_schema.str_schema(), serialization=core_schema.plain_serializer_function_ser_schema(str))
