"""The model endpoint and the workspace, with one precedence everywhere:
explicit argument > KERNELLOOP_* environment > .env > kernelloop.toml > default (settings.py).

Environment names are part of the stable interface: KERNELLOOP_BASE_URL, KERNELLOOP_MODEL,
KERNELLOOP_API_KEY, KERNELLOOP_HOME (docs/architecture.md).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field, SecretStr

from kernelloop.config.settings import ConfigError, load_settings  # noqa: F401  (ConfigError re-exported)
from kernelloop.config.workspace import DEFAULT_WORKSPACE, workspace_dir  # noqa: F401  (re-exported: the one resolution)


class EndpointConfig(BaseModel):
    """Where the reasoning model lives: any OpenAI-compatible chat endpoint."""

    base_url: str = Field(description="e.g. https://api.deepseek.com/v1 or http://localhost:8000/v1")
    model: str = Field(description="e.g. deepseek-reasoner, deepseek-ai/DeepSeek-R1")
    api_key: SecretStr = Field(default=SecretStr("not-needed"), description="sent as a bearer token")
    temperature: float = 0.6
    timeout_s: float = 600.0
    max_retries: int = 4
    max_concurrency: int = 4

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                **overrides) -> EndpointConfig:
        """Flags win over KERNELLOOP_* environment, .env and kernelloop.toml; a missing endpoint is one clear error."""
        settings = load_settings(base_url=base_url, model=model, api_key=api_key)
        url, name, key = settings.base_url, settings.model, settings.api_key.get_secret_value()
        missing = [flag for flag, value in (("--base-url / KERNELLOOP_BASE_URL", url),
                                            ("--model / KERNELLOOP_MODEL", name)) if not value]
        if missing or url is None or name is None:
            raise ConfigError(f"no model endpoint configured: set {' and '.join(missing)}, or put them in "
                              ".env or kernelloop.toml (any OpenAI-compatible server: DeepSeek API, NIM, vLLM, "
                              "SGLang, Ollama)")
        return cls(base_url=url, model=name, api_key=SecretStr(key), **overrides)


def shown_endpoint(url: str | None) -> str | None:
    """The endpoint as anyone but its operator may see it (a server's caller, an error line):
    scheme://host[:port]/path. A credential can ride in a URL's userinfo (https://user:key@gateway/v1),
    query (?api-key=...) or fragment, so those are cut; None where there is no endpoint or it is no
    http(s) URL this can take apart (then nothing of it is shown rather than something wrong)."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port  # .port raises on a port that is no number
    except ValueError:  # an unclosed IPv6 bracket, a bad port
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    host = f"[{host}]" if ":" in host else host  # an IPv6 literal keeps its brackets
    return urlunsplit((parts.scheme.lower(), host if port is None else f"{host}:{port}", parts.path, "", ""))
