"""Tokens the model used: per turn (in the state's `usage` list), totalled per round and per run.

Every model call appends one TurnUsage to the state, as the server reported it. Completion
tokens include the reasoning tokens (the OpenAI/DeepSeek convention), so a cost needs two
prices: per million prompt tokens and per million completion tokens. Replayed turns are
counted (they are the run's tokens) but cost nothing now: `live` says which were paid for.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from kernelloop.agents.turns import ModelTurn


class Prices(BaseModel):
    """USD per million tokens."""

    prompt_per_m: float = Field(ge=0)
    completion_per_m: float = Field(ge=0)

    @classmethod
    def parse(cls, text: str) -> Prices:
        """'0.55,2.19' -> prompt 0.55, completion 2.19 (USD per million tokens)."""
        try:
            prompt, completion = (float(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"{text!r} is not two prices: use PROMPT,COMPLETION in USD per million tokens, "
                             "e.g. 0.55,2.19") from None
        return cls(prompt_per_m=prompt, completion_per_m=completion)


class Usage(BaseModel):
    """Token counts of some model calls, and their cost when prices are known."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = Field(default=None, description="of the live (not replayed) calls, with prices given")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def line(self) -> str:
        """'3 calls, 1,234 prompt + 5,678 completion tokens (4,000 reasoning), $0.0123'."""
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        return (f"{self.calls} calls, {self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens "
                f"({self.reasoning_tokens:,} reasoning){cost}")


class TurnUsage(BaseModel):
    """One model call's tokens, as the server reported them."""

    key: str = Field(description="'planner/plan', 'coder/r2c1', 'critic/r2'")
    round: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    live: bool = Field(default=True, description="False when the reply was re-served from a recording")

    @classmethod
    def of(cls, key: str, round_: int, turn: ModelTurn) -> TurnUsage:
        return cls(key=key, round=round_, prompt_tokens=turn.prompt_tokens, completion_tokens=turn.completion_tokens,
                   reasoning_tokens=turn.reasoning_tokens, live=not turn.replayed)


def total(turns: Iterable[TurnUsage | dict], prices: Prices | None = None) -> Usage:
    """The sum of some turns; the cost counts live turns only."""
    items = [t if isinstance(t, TurnUsage) else TurnUsage.model_validate(t) for t in turns]
    usage = Usage(calls=len(items), prompt_tokens=sum(t.prompt_tokens for t in items),
                  completion_tokens=sum(t.completion_tokens for t in items),
                  reasoning_tokens=sum(t.reasoning_tokens for t in items))
    if prices is not None:
        live = [t for t in items if t.live]
        usage.cost_usd = (sum(t.prompt_tokens for t in live) * prices.prompt_per_m
                          + sum(t.completion_tokens for t in live) * prices.completion_per_m) / 1e6
    return usage


def by_round(turns: Iterable[TurnUsage | dict], prices: Prices | None = None) -> dict[int, Usage]:
    """Totals per round (round 0: the plan)."""
    items = [t if isinstance(t, TurnUsage) else TurnUsage.model_validate(t) for t in turns]
    return {r: total([t for t in items if t.round == r], prices) for r in sorted({t.round for t in items})}
