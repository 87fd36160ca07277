"""The child side of the compile stage (build_stage.py): build a candidate's extensions ahead of
the GPU, and serve them to its run job.

A build job imports the candidate in a sandboxed CPU job (no GPU visible), with every
load_inline call recorded: each call's key (a hash of its arguments) and the module it built, or
the error it raised. Importing is what builds: KernelBench-style candidates call load_inline at
module level. A call made later (in ModelNew's constructor or forward) is not seen here; its run
job builds it as before. Triton kernels are not compiled here: Triton JITs at the first launch,
for the GPU it launches on, with the launch's argument types, none of which a CPU job has.

A run job is handed the trusted parent's copy of those modules (read-only, checked by hash just
before the job started: build_store.py) as `job["prebuilt"]`; a load_inline call whose key
matches one of them loads that module's library directly, without ninja and without the build
dir's lock file, so a run never rebuilds what its build job built, whatever path either job ran
at. A call that matches nothing builds as before, in the job's own caches.

What a build job reports is a claim: the parent takes only files it finds where a build puts
them, regular files with plain names, and keys them by the candidate's source, never by the claim.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelloop.errors import error_line
from kernelloop.problem import import_source
from kernelloop.records import Code

MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
LIBRARY_SUFFIX = ".so"
NOT_KEYED = ("verbose",)  # arguments that change nothing the build makes


def call_key(load_inline: Callable, args: tuple, kwargs: dict) -> str | None:
    """The key of one load_inline call: a hash of every argument that shapes the build (sources,
    names, flags), by name with defaults filled in. None for a call that can't be served from a
    product: an explicit build_directory (the candidate chose where to build), arguments that are
    not plain data, or arguments load_inline would refuse."""
    try:
        bound = inspect.signature(load_inline).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values = {name: value for name, value in bound.arguments.items() if name not in NOT_KEYED}
    if values.get("build_directory"):
        return None
    try:
        text = json.dumps(values, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def run_build(job: dict[str, Any], channel: object) -> dict[str, Any]:
    """A build job: import the candidate with every load_inline call recorded. Returns
    {"status": "built", "calls": [...]}, or a compile_error when a load_inline call failed,
    or {"status": "not_built"} when the import failed otherwise (left to the run job to judge:
    the import may need a GPU)."""
    import torch.utils.cpp_extension as cpp_extension

    if job.get("nice"):  # a GPU pool's builds yield the CPU to the job it times
        os.nice(int(job["nice"]))
    os.environ.update({str(k): str(v) for k, v in (job.get("build_env") or {}).items()})
    original = cpp_extension.load_inline
    calls: list[dict[str, Any]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        key = call_key(original, args, kwargs)
        try:
            module = original(*args, **kwargs)
        except Exception as exc:
            calls.append({"key": key, "failed": error_line(exc)[:2000]})
            raise
        where = getattr(module, "__file__", None)
        if key is not None and isinstance(module, ModuleType) and isinstance(where, str):
            calls.append({"key": key, "module": module.__name__, "file": where})
        return module

    cpp_extension.load_inline = recorded
    try:
        import_source(Path(job["candidate_path"]), "kernelloop_candidate")
    except BaseException as exc:  # noqa: BLE001 - whatever the candidate raised, this job reports it
        if isinstance(exc, KeyboardInterrupt):
            raise
        failed = next((call["failed"] for call in calls if "failed" in call), None)
        if failed is not None:
            return {"status": "compile_error", "code": Code.compile_failed.value,
                    "reason": f"compile: load_inline could not build the candidate's extension: {failed}"}
        return {"status": "not_built", "reason": error_line(exc)[:500]}
    return {"status": "built", "calls": [call for call in calls if "module" in call]}


def serve(load_inline: Callable, prebuilt: dict[str, Any] | None, served: list[str]) -> Callable:
    """load_inline for a run job: a call whose key is in `prebuilt` loads that module from the
    product dir; any other call builds as `load_inline` does. Names of served modules go to `served`."""
    if not prebuilt:
        return load_inline
    where = Path(str(prebuilt.get("dir", "")))
    by_key = {str(call["key"]): str(call["module"]) for call in prebuilt.get("calls", [])
              if isinstance(call, dict) and "key" in call and MODULE_NAME.fullmatch(str(call.get("module", "")))}

    def served_load_inline(*args: Any, **kwargs: Any) -> Any:
        module_name = by_key.get(call_key(load_inline, args, kwargs) or "")
        if module_name is None:
            return load_inline(*args, **kwargs)
        try:
            module = load_library(module_name, where / f"{module_name}{LIBRARY_SUFFIX}")
        except Exception as exc:  # noqa: BLE001 - never a verdict of the stage's making: build it here instead
            print(f"kernelloop: the built {module_name} did not load ({error_line(exc)}); building it", file=sys.stderr)
            return load_inline(*args, **kwargs)
        served.append(module_name)
        return module

    return served_load_inline


def load_library(module_name: str, path: Path) -> ModuleType:
    """An extension module from its built library, as load_inline's last step does (no build, no lock)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
