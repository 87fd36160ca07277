"""Settings from flags, KERNELLOOP_* environment variables, `.env` and `kernelloop.toml`.

Precedence, highest first: a flag (or an argument), the environment, `.env`, `kernelloop.toml`
(both read from the current directory), then kernelloop.defaults. `kernelloop doctor` shows
where each value came from. Example kernelloop.toml:

    base_url = "http://localhost:8000/v1"
    model = "deepseek-ai/DeepSeek-R1"
    budget = "1h 30m"
    candidates = 8
    target = "1.5x"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from kernelloop import defaults
from kernelloop.requests import Backend, BudgetS, Candidates, MaxRounds, TargetSpeedup
from kernelloop.units import parse_duration_s, parse_target
from kernelloop.workspace import DEFAULT_WORKSPACE

ENV_PREFIX = "KERNELLOOP_"
DOTENV = ".env"
TOML = "kernelloop.toml"


class ConfigError(ValueError):
    """Missing or inconsistent configuration; the message (one line) says what to set."""


class Settings(BaseSettings):
    """Everything a person may set once instead of passing each time."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=DOTENV, env_file_encoding="utf-8",
                                      toml_file=TOML, env_ignore_empty=True, extra="ignore")

    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint")
    model: str | None = Field(default=None, description="model name at the endpoint")
    api_key: SecretStr = Field(default=SecretStr("not-needed"), description="sent as a bearer token")
    home: Path = Field(default=Path(DEFAULT_WORKSPACE), description="workspace: checkpoints, runs, caches")
    device: str = Field(default=defaults.DEVICE, description="auto, cpu, cuda or cuda:N")
    backend: Backend = defaults.BACKEND
    budget: BudgetS = Field(default=defaults.BUDGET_S, description="seconds, or a duration like '1h 30m'")
    candidates: Candidates = defaults.CANDIDATES
    target: TargetSpeedup = Field(default=defaults.TARGET_SPEEDUP, description="'1.2x'; 'none': first correct")
    max_rounds: MaxRounds = defaults.MAX_ROUNDS

    @field_validator("budget", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_s(value)

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, value: Any) -> float | None:
        return parse_target(value)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, dotenv_settings, TomlConfigSettingsSource(settings_cls)


def load_settings(**flags: Any) -> Settings:
    """Settings with the flags given (None: not given) on top; a bad value is a one-line ConfigError
    naming the setting and where it came from."""
    try:
        return Settings(**{name: value for name, value in flags.items() if value is not None})
    except ValidationError as exc:
        where = origins(**flags)
        raise ConfigError("; ".join(f"{_named(str(e['loc'][0]), where)}: {e['msg'].removeprefix('Value error, ')}"
                                    for e in exc.errors())) from None


def _named(name: str, where: dict[str, str]) -> str:
    """'--budget' for a flag, 'budget (from env KERNELLOOP_BUDGET)' for the rest: where to fix it."""
    origin = where.get(name, "default")
    return f"--{name.replace('_', '-')}" if origin == "flag" else f"{name} (from {origin})"


def origins(**flags: Any) -> dict[str, str]:
    """Where each setting's value comes from: 'flag', 'env KERNELLOOP_X', '.env', 'kernelloop.toml', 'default'."""
    layers: list[tuple[str, dict[str, Any]]] = [
        ("flag", {name: value for name, value in flags.items() if value is not None}),
        ("env", EnvSettingsSource(Settings)()),
        (f"{DOTENV} ({Path(DOTENV).resolve()})", DotEnvSettingsSource(Settings)()),
        (f"{TOML} ({Path(TOML).resolve()})", TomlConfigSettingsSource(Settings)()),
    ]
    found = {}
    for name in Settings.model_fields:
        where = next((label for label, values in layers if name in values), "default")
        found[name] = f"env {ENV_PREFIX}{name.upper()}" if where == "env" else where
    return found
