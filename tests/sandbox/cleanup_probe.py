"""What a hostile job leaves in its dir, and its cleanup, run as whoever imports it: as root by
tests/sandbox/test_job_dir_cleanup.py, and as nobody under the system's Python (no pytest here)."""

from __future__ import annotations

import os
from pathlib import Path

from kernelloop.sandbox.runner import new_job_dir, remove_job_dir


def leave_locked_dirs(job_dir: Path) -> None:
    """What a hostile job leaves: files under a 000 dir, a note in a 0111 dir, a link out."""
    (job_dir / "big" / "deeper").mkdir(parents=True)
    for number in range(200):
        (job_dir / "big" / "deeper" / f"f{number}").write_bytes(b"x" * 4096)
    (job_dir / "drop").mkdir()
    (job_dir / "drop" / "note-for-the-next-run").write_text("hello")
    (job_dir / "out").symlink_to(job_dir.parent.parent / "outside")
    (job_dir / "big" / "deeper").chmod(0o000)
    (job_dir / "big").chmod(0o000)
    (job_dir / "drop").chmod(0o111)


def scenario(base: str) -> dict:
    """As whoever runs it: a locked job dir and an honest one removed, the outside dir untouched."""
    base_path = Path(base)
    (base_path / "outside").mkdir(mode=0o700)
    root = base_path / "jobs"
    locked, honest = new_job_dir(root, "cand-"), new_job_dir(root, "cand-")
    leave_locked_dirs(locked)
    (honest / "stdout.txt").write_text("ok")
    gone = [remove_job_dir(locked), remove_job_dir(honest)]
    following = new_job_dir(root, "cand-").name.startswith("cand-")
    return {"gone": gone, "left": sorted(os.listdir(root)), "outside_mode": (base_path / "outside").stat().st_mode & 0o777,
            "next": following}
