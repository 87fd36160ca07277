"""review36: other spellings of the operator's settings files, named by a server's caller (all held).

`serve/requests.confined` resolves each named file (links followed) and refuses a settings file by its
resolved name; these are the ways around a name check a caller has without writing files on the server:
a link the operator made, `..`, /proc's links back into the working dir, the start field and the problem's."""

from __future__ import annotations

import os
import shutil

import pytest

from kernelloop.config.settings import load_settings
from kernelloop.serve.requests import RequestError, SolveSettings, confined
from tests.graph.scripted import RELU_PROBLEM


@pytest.fixture
def operator_dir(tmp_path, monkeypatch):
    for name in ("KERNELLOOP_HOME", "KERNELLOOP_API_KEY", "KERNELLOOP_FILE_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / ".env").write_text("KERNELLOOP_API_KEY=sk-review36-operator\n")
    (project / "kernelloop.toml").write_text('api_key = "sk-review36-operator"\n')
    (project / "kernel.py").symlink_to(project / ".env")  # a link the operator made, with a kernel's name
    shutil.copy(RELU_PROBLEM, project / "relu.py")
    monkeypatch.chdir(project)
    return project


SPELLINGS = ["kernel.py", "./sub/../.env", "sub/../kernelloop.toml", "/proc/self/cwd/.env",
             f"/proc/{os.getpid()}/cwd/kernelloop.toml", "/proc/self/root{project}/.env", "{project}//.env",
             "{project}/./sub/../.env",
             # a case-insensitive filesystem (macOS's, Windows') opens these as the settings files
             "{project}/.ENV", "{project}/KernelLoop.TOML", "{project}/.Env."]


@pytest.mark.parametrize("field", ["start", "problem_path"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_no_spelling_of_a_settings_file_is_a_callers_file(operator_dir, field, spelling):
    settings = load_settings()
    value = spelling.format(project=operator_dir)
    request = SolveSettings(**{"problem_path": str(operator_dir / "relu.py"), field: value})
    with pytest.raises(RequestError, match="settings file"):
        confined(request, settings)


def test_the_proc_environ_of_the_server_is_outside_every_root(operator_dir):
    """/proc/self/environ (the key, where it is set in the environment) is never under a root (the working dir)."""
    with pytest.raises(RequestError, match="outside the dirs"):
        confined(SolveSettings(problem_path="/proc/self/environ"), load_settings())
