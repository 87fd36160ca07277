"""One Settings, from flags, KERNELLOOP_* environment variables, `.env` and `kernelloop.toml`.

Precedence, highest first: a flag (or an argument), the environment, `.env`, `kernelloop.toml`
(both read from the current directory), then kernelloop.config.defaults. Every entry point (the CLI,
kernelloop.solve / verify, the graph's context, MCP, the LangChain tools, LangGraph Server)
makes it once, with `load_settings`, and passes it (or the part a callee needs: a Device, a
Workspace, JobLimits) down. `kernelloop doctor` shows where each value came from. A bad value,
an unknown key in kernelloop.toml or a TOML syntax error is one ConfigError line. Example:

    base_url = "http://localhost:8000/v1"
    model = "deepseek-ai/DeepSeek-R1"
    budget = "1h 30m"
    candidates = 8
    target = "1.5x"
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from kernelloop.config import defaults
from kernelloop.config.fields import Backend, BudgetS, Candidates, MaxRounds, TargetSpeedup
from kernelloop.config.units import Device, parse_duration_s, parse_target

ENV_PREFIX = "KERNELLOOP_"
DOTENV = ".env"
TOML = "kernelloop.toml"


class ConfigError(ValueError):
    """Missing or inconsistent configuration; the message (one line) says what to set."""


class Workspace(BaseModel):
    """Where a run's files live: checkpoints (SQLite here unless `checkpoints` is a URL), run dirs, caches."""

    model_config = ConfigDict(frozen=True)

    root: Path = Field(description="absolute: WORKSPACE/runs/<thread>, WORKSPACE/checkpoints.sqlite")
    checkpoints: str | None = Field(default=None, description="sqlite:///file or postgresql://...; None: SQLite "
                                                              "in the workspace")


class JobLimits(BaseModel):
    """How long one verification's phases may take, seconds."""

    model_config = ConfigDict(frozen=True)

    compile_timeout_s: float = Field(default=defaults.COMPILE_TIMEOUT_S, gt=0)
    run_timeout_s: float = Field(default=defaults.RUN_TIMEOUT_S, gt=0)


class Settings(BaseSettings):
    """Everything a person may set once instead of passing each time."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=DOTENV, env_file_encoding="utf-8",
                                      env_ignore_empty=True, extra="ignore")

    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint")
    model: str | None = Field(default=None, description="model name at the endpoint")
    api_key: SecretStr = Field(default=SecretStr("not-needed"), description="sent as a bearer token")
    home: Path = Field(default=Path(defaults.WORKSPACE), description="workspace: checkpoints, runs, caches")
    checkpoints: str | None = Field(default=None, description="checkpoint DB URL (sqlite:///file, postgresql://...); "
                                                              "unset: SQLite in the workspace")
    device: Device = Field(default=Device(defaults.DEVICE), description="auto, cpu, cuda or cuda:N")
    backend: Backend = defaults.BACKEND
    budget: BudgetS = Field(default=defaults.BUDGET_S, description="seconds, or a duration like '1h 30m'")
    candidates: Candidates = defaults.CANDIDATES
    target: TargetSpeedup = Field(default=defaults.TARGET_SPEEDUP, description="'1.2x'; 'none': first correct")
    max_rounds: MaxRounds = defaults.MAX_ROUNDS
    compile_timeout: float = Field(default=defaults.COMPILE_TIMEOUT_S, gt=0,
                                   description="seconds for a candidate's compile phase (a duration)")
    run_timeout: float = Field(default=defaults.RUN_TIMEOUT_S, gt=0,
                               description="seconds for a candidate's run phase (a duration)")
    # Serving (the MCP server, the LangChain tools): what a caller, an agent, may choose.
    allow_caller_endpoints: bool = Field(default=False, description="let a server's caller choose base_url; such an "
                                                                    "endpoint never gets api_key")
    file_roots: str | None = Field(default=None, description="dirs a server's caller may name files in, joined by "
                                                             f"'{os.pathsep}'; unset: the current directory")

    @field_validator("budget", "compile_timeout", "run_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration_s(value)

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, value: Any) -> float | None:
        return parse_target(value)

    @property
    def workspace(self) -> Workspace:
        return Workspace(root=self.home.expanduser().resolve(), checkpoints=self.checkpoints)

    @property
    def caller_file_roots(self) -> list[Path]:
        """Where a server's caller may name files (links followed): `file_roots`, else the current directory."""
        given = [part for part in (self.file_roots or "").split(os.pathsep) if part.strip()]
        return [Path(part).expanduser().resolve() for part in given or [os.getcwd()]]

    @property
    def limits(self) -> JobLimits:
        return JobLimits(compile_timeout_s=self.compile_timeout, run_timeout_s=self.run_timeout)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, dotenv_settings, TomlSource(settings_cls)


class TomlSource(PydanticBaseSettingsSource):
    """kernelloop.toml in the current directory: a syntax error or an unknown key is one ConfigError."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        return read_toml()


def read_toml(path: Path = Path(TOML)) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{TOML} ({path.resolve()}): not TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{TOML} ({path.resolve()}): can't read it: {exc.strerror or exc}") from None
    for key in values:
        if key not in Settings.model_fields:
            raise ConfigError(f"{TOML} ({path.resolve()}): unknown setting {key!r}{_did_you_mean(key)}")
    return values


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), list(Settings.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; the settings are {', '.join(Settings.model_fields)}"


def _misspelt_env() -> None:
    """A KERNELLOOP_* variable (environment or .env) one typo away from a setting is an error: it would
    be ignored silently. Other KERNELLOOP_* names (KERNELLOOP_SANDBOX, ...) are the process's, not settings."""
    names = set(os.environ)
    if Path(DOTENV).is_file():
        names |= set(DotEnvSettingsSource(Settings, env_prefix="").env_vars)  # every name in .env, as written
    for name in names:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper.removeprefix(ENV_PREFIX).lower() in Settings.model_fields:
            continue
        close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX).lower(), list(Settings.model_fields),
                                          n=1, cutoff=0.85)
        if close:
            raise ConfigError(f"unknown setting {upper}; did you mean {ENV_PREFIX}{close[0].upper()}?")


# the Python API's names where they differ from the settings'
PYTHON_ARGUMENTS = {"budget": "budget_s", "target": "target_speedup", "home": "workspace",
                    "checkpoints": "checkpoint_url", "compile_timeout": "timeout_s", "run_timeout": "timeout_s"}


def load_settings(*, python_api: bool = False, **flags: Any) -> Settings:
    """The one way every entry point makes its Settings: the flags given (None: not given) on top.
    A bad value is a one-line ConfigError naming the setting and where it came from (python_api: a given
    value is named as the Python argument it came from, `device='gpu'`, not as a flag)."""
    unknown = sorted(set(flags) - set(Settings.model_fields))
    if unknown:  # a caller's typo, not a person's: still one line
        raise ConfigError(f"unknown setting {unknown[0]!r}{_did_you_mean(unknown[0])}")
    _misspelt_env()
    try:
        return Settings(**{name: value for name, value in flags.items() if value is not None})
    except ValidationError as exc:
        where = origins(**flags)
        raise ConfigError("; ".join(f"{_named(str(e['loc'][0]), where, python_api)}: "
                                    f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())) from None


def override(settings: Settings, **flags: Any) -> Settings:
    """The entry point's Settings with a call's own values (None: not given) on top, validated the same
    way: an MCP or LangChain call's budget over the server's. A bad value is one ConfigError line."""
    given = {name: value for name, value in flags.items() if value is not None}
    if not given:
        return settings
    unknown = sorted(set(given) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r}{_did_you_mean(unknown[0])}")
    try:
        return Settings(**(dict(settings) | given))  # every field given: the files are not what decides
    except ValidationError as exc:
        raise ConfigError("; ".join(f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}"
                                    for e in exc.errors())) from None


def _named(name: str, where: dict[str, str], python_api: bool = False) -> str:
    """'--budget' for a flag ('budget_s=' for a Python argument), 'budget (from env KERNELLOOP_BUDGET)' for the
    rest: where to fix it."""
    origin = where.get(name, "default")
    if origin == "flag" and python_api:
        return f"argument {PYTHON_ARGUMENTS.get(name, name)}="
    return f"--{name.replace('_', '-')}" if origin == "flag" else f"{name} (from {origin})"


def origins(**flags: Any) -> dict[str, str]:
    """Where each setting's value comes from: 'flag', 'env KERNELLOOP_X', '.env', 'kernelloop.toml', 'default'."""
    layers: list[tuple[str, dict[str, Any]]] = [
        ("flag", {name: value for name, value in flags.items() if value is not None}),
        ("env", EnvSettingsSource(Settings)()),
        (f"{DOTENV} ({Path(DOTENV).resolve()})", DotEnvSettingsSource(Settings)()),
        (f"{TOML} ({Path(TOML).resolve()})", read_toml()),
    ]
    found = {}
    for name in Settings.model_fields:
        where = next((label for label, values in layers if name in values), "default")
        found[name] = f"env {ENV_PREFIX}{name.upper()}" if where == "env" else where
    return found
