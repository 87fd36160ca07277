"""The knobs' types with their caps, shared by the Settings, the request models and the MCP tools' parameters
(the values themselves are config/defaults.py's)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from kernelloop.config import defaults

# The fields' types with their limits: the models below and the MCP tool's parameters share them.
BudgetS = Annotated[float, Field(gt=0, le=defaults.MAX_BUDGET_S, description="wall-clock budget, s")]
Candidates = Annotated[int, Field(ge=1, le=defaults.MAX_CANDIDATES,
                                  description="kernels written in parallel per round")]
TargetSpeedup = Annotated[float | None, Field(gt=0, description="stop at this speedup over eager; "
                                                                "null: at the first correct kernel")]
MaxRounds = Annotated[int, Field(ge=1, le=defaults.MAX_ROUNDS_LIMIT, description="rounds at most")]
StartChoice = Annotated[str | None, Field(description=f"the kernel to begin from (verified as attempt 0): a kernel "
                                                      f"file, or '{defaults.START_AUTO}' for the problem family's "
                                                      f"hand-written starter; null: from scratch")]
StartSource = Annotated[str | None, Field(description="the start kernel's text (class ModelNew), instead of start")]
Backend = Literal["triton", "cuda", "auto"]
FROM_SETTINGS = " (absent: the server's setting, KERNELLOOP_* > .env > kernelloop.toml > kernelloop.config.defaults)"
TargetChoice = Annotated[float | Literal["none"] | None, Field(
    description="stop at this speedup over eager; 'none': at the first correct kernel" + FROM_SETTINGS)]


def _hints_fit(hints: list[str]) -> list[str]:
    """Hints within MAX_HINTS_BYTES in all (their count is the list's max_length)."""
    size = sum(len(hint.encode("utf-8", "surrogatepass")) for hint in hints)
    if size > defaults.MAX_HINTS_BYTES:
        raise ValueError(f"{size:,} bytes in all, over the {defaults.MAX_HINTS_BYTES:,}-byte limit for hints")
    return hints


Hints = Annotated[list[str], Field(max_length=defaults.MAX_HINTS,
                                   description=f"advice for the coders from the first round (at most "
                                               f"{defaults.MAX_HINTS} hints, {defaults.MAX_HINTS_BYTES:,} bytes in all)"),
                  AfterValidator(_hints_fit)]
