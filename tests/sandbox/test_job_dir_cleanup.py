"""Job dirs are removed whatever modes their job left (issue 35 e): run as a user (or as nobody, the
uid a root parent drops its jobs to), a job could leave a dir of mode 000 (200 MiB left per run)
or 0111 (a note carried to a later run's candidate). The parent gives its dirs back to their owner
before removing them, checks they are gone, and refuses a jobs root it could not clean. Tried as
root and as nobody, the way test_containment's unprivileged run does it. Counts and sizes only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelloop.sandbox.runner import UNCLEAN, new_job_dir
from tests.sandbox.cleanup_probe import scenario

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _as_nobody(script: str, home: Path) -> subprocess.CompletedProcess:
    """`script` run as nobody: this interpreter, or the system's of the same version where nobody
    can't reach this one (pyenv under /root); the script needs the standard library alone."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    for python in (sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        try:
            return subprocess.run([python, "-c", script], user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                                  capture_output=True, text=True, timeout=300, env=env)
        except PermissionError:
            continue
    pytest.skip("no Python that nobody can run")


def test_a_locked_job_dir_is_removed_as_root_and_an_honest_one_too(tmp_path):
    found = scenario(str(tmp_path))
    assert found["gone"] == [True, True] and found["outside_mode"] == 0o700 and found["next"]
    assert UNCLEAN not in found["left"] and len(found["left"]) == 1  # only the next job's fresh dir


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to nobody needs root")
def test_a_locked_job_dir_is_removed_when_an_unprivileged_user_runs_us():
    base = Path(tempfile.mkdtemp(prefix="kernelloop-cleanup-"))
    base.chmod(0o777)
    try:
        script = (f"import json, sys; sys.path[:0] = [{str(ROOT)!r}]; "
                  "from tests.sandbox.cleanup_probe import scenario; "
                  f"print(json.dumps(scenario({str(base)!r})))")
        done = _as_nobody(script, base)
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["gone"] == [True, True] and found["outside_mode"] == 0o700 and found["next"]
        assert UNCLEAN not in found["left"] and len(found["left"]) == 1  # only the next job's fresh dir
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="a dir its user can't remove needs another owner")
def test_a_jobs_root_holding_a_dir_that_cant_be_removed_is_refused_until_it_is_gone():
    base = Path(tempfile.mkdtemp(prefix="kernelloop-unclean-"))
    base.chmod(0o777)
    try:
        root = base / "jobs"
        root.mkdir()
        root.chmod(0o777)
        stuck = root / "cand-stuck"
        (stuck / "roots").mkdir(parents=True)
        (stuck / "roots" / "file").write_text("root's")
        stuck.chmod(0o777)
        script = (f"import sys; sys.path[:0] = [{str(ROOT)!r}]; from pathlib import Path; "
                  "from kernelloop.sandbox.runner import remove_job_dir, new_job_dir, SandboxError\n"
                  f"print(remove_job_dir(Path({str(stuck)!r})))\n"
                  f"try:\n    new_job_dir(Path({str(root)!r}), 'cand-')\nexcept SandboxError as exc:\n    print('refused', exc)")
        done = _as_nobody(script, base)
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 2, (done.stdout, done.stderr[-1500:])
        assert lines[0] == "False" and lines[1].startswith("refused") and "could not remove" in lines[1], done
        assert (root / UNCLEAN).read_text().split() == ["cand-stuck"]
        # Root can remove it: the next new_job_dir cleans the leftover, drops the list and goes on.
        assert new_job_dir(root, "cand-").name.startswith("cand-")
        assert not stuck.exists() and not (root / UNCLEAN).exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)

