"""`kernelloop doctor`: what works on this machine, and what to fix for what doesn't.

Each check returns a Check: `ok`, `warn` (works with less: no GPU, no ncu, plain sandbox),
`fail` (kernelloop can't do its job until fixed) or `skip` (not applicable here), with one line
of detail and, when not ok, one line saying what to do. Checks import what they test lazily,
so a broken torch shows as a failed check rather than a crash.

probe_endpoint is also solve's preflight: a model endpoint nothing answers at is one clear
error before a run starts, not a run that ends as `model_unavailable`.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kernelloop.errors import error_line

if TYPE_CHECKING:
    from kernelloop.config.settings import Settings

Status = Literal["ok", "warn", "fail", "skip"]
ENDPOINT_TIMEOUT_S = 5.0
LOW_DISK_BYTES = 2 << 30  # below this the workspace may fill mid-run (references, caches, ncu reports)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class EndpointProbe:
    """What one GET {base_url}/models answered: reachable means something answered at all (any
    HTTP status); `error` says why not, or what the answer means."""

    reachable: bool
    http_status: int | None = None
    models: list[str] = field(default_factory=list)
    error: str = ""


def probe_endpoint(base_url: str, api_key: str | None = None, timeout_s: float = ENDPOINT_TIMEOUT_S) -> EndpointProbe:
    """GET {base_url}/models with the key, honouring proxy variables as the model client does."""
    import httpx  # the openai client's own transport; lazy: only live runs and doctor need it

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        if isinstance(exc, httpx.ConnectTimeout):
            return EndpointProbe(False, error=f"no connection within {timeout_s:g} s")
        return EndpointProbe(True, error=f"connected, but no answer within {timeout_s:g} s")
    except httpx.HTTPError as exc:  # refused, DNS, TLS, proxy: nothing to talk to
        return EndpointProbe(False, error=error_line(exc))
    models: list[str] = []
    if response.status_code == 200:
        try:
            models = [str(item.get("id")) for item in response.json().get("data", []) if isinstance(item, dict)]
        except ValueError:
            return EndpointProbe(True, 200, error="answered /models with something that is not JSON")
    return EndpointProbe(True, response.status_code, models)


# --------------------------------------------------------------------------- the checks


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def check_python() -> Check:
    if sys.version_info < (3, 11):  # noqa: UP036 - doctor is what tells a user on an older Python
        return Check("python", "fail", f"Python {sys.version.split()[0]}", "kernelloop needs Python 3.11 or newer")
    return Check("python", "ok", f"Python {sys.version.split()[0]} at {sys.executable}")


def _import_or_fail(name: str, fix: str):
    """(module, None), or (None, a failing Check) when the import fails in any way: that is the finding."""
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # any import failure is the finding
        return None, Check(name, "fail", f"import failed: {error_line(exc)}", fix)


def check_torch() -> Check:
    torch, failed = _import_or_fail("torch", "pip install torch (a CUDA build on a GPU machine)")
    if failed:
        return failed
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    return Check("torch", "ok", f"torch {torch.__version__} ({build})")


def check_triton() -> Check:
    triton, failed = _import_or_fail("triton", "pip install triton (the version your torch was built with)")
    return failed or Check("triton", "ok", f"triton {triton.__version__}")


def check_cuda() -> Check:
    try:
        import torch
    except Exception:  # reported by check_torch
        return Check("cuda", "skip", "torch does not import")
    if not torch.cuda.is_available():
        why = "torch is a CPU-only build" if not torch.version.cuda else "torch sees no CUDA device"
        return Check("cuda", "warn", f"{why}: Triton runs in its interpreter, correctness only, no speed",
                     "run on a machine with an NVIDIA GPU and a CUDA build of torch to time kernels")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check("cuda", "ok", f"{len(names)} GPU(s): {', '.join(names)}")


def check_nvml() -> Check:
    from kernelloop.tools.profile.gpu import nvml_problem

    problem = nvml_problem()
    if problem is None:
        return Check("nvml", "ok", "NVML reads clocks, temperature, power and throttling")
    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return Check("nvml", "skip", f"no NVIDIA driver here ({problem})")
    return Check("nvml", "warn", problem, "install nvidia-ml-py and check the driver (nvidia-smi must work)")


def check_ncu() -> Check:
    from kernelloop.tools.profile.ncu import ncu_available

    usable, note = ncu_available()
    if usable:
        return Check("ncu", "ok", note)
    if "not found" in note:
        return Check("ncu", "warn", note, "install Nsight Compute for per-kernel profiles (the critic works without)")
    return Check("ncu", "warn", note, "run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0")


def check_sandbox() -> Check:
    """Which isolation mode a verifier would use, and what actually holds for a job: one job run
    through a real worker, its box measured from outside (user namespace, uid, capabilities,
    seccomp, pid namespace)."""
    from kernelloop.sandbox.isolation import IsolationError, choose_mode, gpu_memory_fraction, probe_bubblewrap

    try:
        mode, note = choose_mode()
        fraction = gpu_memory_fraction()
    except IsolationError as exc:
        return Check("sandbox", "fail", str(exc), "install bubblewrap, or set KERNELLOOP_SANDBOX=auto")
    # The GPU memory cap means nothing where there is no GPU: said only where torch sees one.
    limits = f"; children capped at {fraction:g} of GPU memory" if _has_cuda() else ""
    box, failed = _measure_a_job()
    if failed:
        return Check("sandbox", "fail", f"{note}, but a job does not run in it: {failed}",
                     "report this with `kernelloop doctor --json`; KERNELLOOP_SANDBOX=plain runs without bubblewrap")
    held = describe_box(box)
    if box.get("isolated"):
        return Check("sandbox", "ok", f"isolated: {held}{limits}")
    why = str(box.get("why", ""))
    if mode == "plain":
        fix = ("apt-get install bubblewrap" if probe_bubblewrap().path is None
               else "allow unprivileged user namespaces (sysctl user.max_user_namespaces>0, "
                    "kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0, or a "
                    "container that permits them)") if "KERNELLOOP_SANDBOX=plain" not in note else "unset KERNELLOOP_SANDBOX"
    elif "namespace" in why:
        fix = ("allow nested unprivileged user namespaces (sysctl user.max_user_namespaces>0, "
               "kernel.apparmor_restrict_unprivileged_userns=0) so each job gets its own")
    elif "seccomp" in why:
        fix = "a kernel with seccomp filters (CONFIG_SECCOMP_FILTER) on x86_64 or aarch64"
    else:
        fix = "see docs/architecture.md, 'The sandbox'"
    return Check("sandbox", "warn", f"NOT ISOLATED ({why}): {held}{limits}", fix)


def describe_box(box: dict) -> str:
    """One line of what held for a job: sandbox, uid on the host, capabilities, seccomp, namespaces."""
    if "capabilities" not in box:
        return f"{box.get('sandbox', '?')} sandbox, nothing measured"
    caps = "no capabilities" if not int(box["capabilities"] or "0", 16) else f"capabilities {box['capabilities']}"
    spaces = ", ".join(box.get("own_namespaces", [])) or "none"
    return (f"{box.get('sandbox', '?')} sandbox, uid {box.get('host_uid', '?')} on the host, {caps}, "
            f"seccomp {'on' if box.get('seccomp') else 'off'}, no_new_privs {'on' if box.get('no_new_privs') else 'off'}, "
            f"own namespaces: {spaces}")


def _measure_a_job() -> tuple[dict, str]:
    """(the box of one job run through a real worker, '' or what went wrong)."""
    import tempfile

    from kernelloop.sandbox.runner import SandboxError, Zygote

    with tempfile.TemporaryDirectory(prefix="kernelloop-doctor-") as work:
        work_dir = Path(work) / "verifier" / "cpu"
        try:
            zygote = Zygote("kernelloop.sandbox.box_probe", "cpu", work_dir, hide=[Path(work)])
        except (SandboxError, OSError) as exc:
            return {}, str(exc).splitlines()[0]
        try:
            outcome = zygote.run({"kind": "probe"}, work_dir / "jobs" / "probe", 60, 60)
        finally:
            zygote.close()
    if outcome.exit_code != 0:
        tail = outcome.stderr_tail.strip().splitlines()
        return outcome.box, f"exit code {outcome.exit_code}{': ' + tail[-1] if tail else ''}"
    return outcome.box, ""


def _has_cuda() -> bool:
    try:
        import torch
    except Exception:  # noqa: BLE001 - reported by check_torch
        return False
    return torch.cuda.is_available()


def check_settings(settings: Settings, **flags) -> Check:
    """Each setting's value and where it came from (flag, env, .env, kernelloop.toml, default). A bad
    setting never reaches here: `kernelloop doctor` refuses it first, in one line with exit 2."""
    from kernelloop.config.settings import origins

    values = settings.model_dump()
    where = origins(**flags)
    shown = ", ".join(f"{name}={shown_value(name, value)} ({where[name]})" for name, value in values.items())
    return Check("settings", "ok", shown)


def shown_value(name: str, value) -> str:
    from kernelloop.config.units import format_duration, format_target

    if name == "api_key":
        return "set" if value.get_secret_value() != "not-needed" else "unset"
    if name == "budget":
        return format_duration(value)
    if name == "target":
        return format_target(value)
    return str(value)


def check_endpoint(base_url: str | None = None, model: str | None = None, api_key: str | None = None) -> Check:
    from kernelloop.config.endpoint import ConfigError, EndpointConfig

    try:
        config = EndpointConfig.resolve(base_url, model, api_key)
    except ConfigError as exc:
        return Check("endpoint", "warn", "no model endpoint configured (solve needs one; verify, bench "
                                         "--candidates and --recorded runs don't)", str(exc).split(": ", 1)[-1])
    probe = probe_endpoint(config.base_url, config.api_key.get_secret_value())
    where = config.base_url
    if not probe.reachable:
        return Check("endpoint", "fail", f"{where} is unreachable: {probe.error}",
                     "start the server, or fix --base-url / KERNELLOOP_BASE_URL")
    if probe.http_status in (401, 403):
        return Check("endpoint", "fail", f"{where} refused the API key (HTTP {probe.http_status})",
                     "set a valid key: --api-key or KERNELLOOP_API_KEY")
    if probe.http_status == 404:
        return Check("endpoint", "warn", f"{where} answers, but has no /models (HTTP 404)",
                     "does the base URL end in /v1?")
    if probe.error or probe.http_status != 200:
        return Check("endpoint", "warn", f"{where} answers /models with HTTP {probe.http_status} {probe.error}".strip(),
                     "check the server's logs")
    if probe.models and config.model not in probe.models:
        return Check("endpoint", "warn", f"{where} does not list model {config.model!r} "
                                         f"(it has: {', '.join(probe.models[:5])})", "fix --model / KERNELLOOP_MODEL")
    return Check("endpoint", "ok", f"{where} answers; model {config.model}")


def check_workspace(space: Path) -> Check:
    """The workspace is writable, has room, and its checkpoint DB (if any) opens."""
    existing = next((p for p in (space, *space.parents) if p.exists()), Path("/"))
    if not os.access(existing, os.W_OK):
        return Check("workspace", "fail", f"{space} is not writable", "pass --workspace or set KERNELLOOP_HOME")
    free = shutil.disk_usage(existing).free
    db = space / "checkpoints.sqlite"
    if db.is_file():
        from kernelloop.graph.checkpoint import CheckpointError, open_checkpointer

        try:
            with open_checkpointer(None, space):
                pass
        except CheckpointError as exc:
            return Check("workspace", "fail", str(exc), f"move {db} aside")
    detail = f"{space} ({free / 2**30:.1f} GiB free)"
    if free < LOW_DISK_BYTES:
        return Check("workspace", "warn", detail + ": little room left", "free space or pass --workspace elsewhere")
    return Check("workspace", "ok", detail)


def run_checks(settings: Settings | None = None, **flags) -> list[Check]:
    """Every check, in the order a person would fix them. settings: the entry point's (None: made here from
    `flags`, the same way; a bad setting raises ConfigError)."""
    from kernelloop.config.settings import load_settings

    chosen = settings if settings is not None else load_settings(**flags)
    key = chosen.api_key.get_secret_value()
    checks: list[Callable[[], Check]] = [
        check_python, check_torch, check_triton, check_cuda, check_nvml, check_ncu, check_sandbox,
        lambda: check_endpoint(chosen.base_url, chosen.model, None if key == "not-needed" else key),
        lambda: check_workspace(chosen.workspace.root), lambda: check_settings(chosen, **flags)]
    return [check() for check in checks]
