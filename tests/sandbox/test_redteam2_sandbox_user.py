"""Red team, round 2: KERNELLOOP_SANDBOX_USER values that are root in disguise.

As root, the sandbox worker drops to KERNELLOOP_SANDBOX_USER (UID or UID:GID) and refuses root ("0",
"0:65534", "65534:0"). But -1 and 4294967295 are the "leave it unchanged" value of setresuid/setresgid:
measured on the dev box (bubblewrap, root), "-1" or "4294967295" left the job host root (it read
/etc/shadow; the box said uid 0, no pid namespace of its own, "not isolated" - judged anyway unless
--strict), and "65534:-1" or "65534:4294967295" left it in group root (gid 0: it read a 0640 root:root
file) while the verdict said `isolated: true` with no warning. Only the environment sets it (a .env
or kernelloop.toml in the working dir does not), so this is an operator's slip, not a candidate's
move; the same refusal as "0" meets it now (isolation.sandbox_user), and the worker checks the ids
it reached after the drop (zygote._drop_to).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.sandbox.isolation import IsolationError, probe_bubblewrap

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BWRAP = probe_bubblewrap()
CASES = [
    pytest.param("0", id="root-refused"),
    pytest.param("65534:0", id="group-root-refused"),
    pytest.param("-1", id="minus-one"),
    pytest.param("4294967295", id="uint32-minus-one"),
    pytest.param("65534:-1", id="group-minus-one"),
    pytest.param("65534:4294967295", id="group-uint32-minus-one"),
]


@pytest.mark.skipif(not BWRAP.usable, reason=f"bubblewrap unusable here: {BWRAP.note}")
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="the drop to a sandbox user happens only as root")
@pytest.mark.parametrize("user", CASES)
def test_a_sandbox_user_that_keeps_root_is_refused(user, tmp_path, monkeypatch):
    from kernelloop.tools.verify.verifier import Verifier

    monkeypatch.setenv("KERNELLOOP_SANDBOX_USER", user)
    candidate = Candidate.from_file(FIXTURES / "honest" / "relu_triton.py")
    problem = Problem.from_file(FIXTURES / "problems" / "relu.py")
    with pytest.raises(IsolationError, match="root|UID"):
        with Verifier(device="cpu", workspace=tmp_path, time_it=False, compile_timeout_s=60, run_timeout_s=60) as verifier:
            verifier.verify(candidate, problem)
