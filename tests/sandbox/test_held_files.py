"""held_files: the disk a process tree holds in files it unlinked, read through /proc from outside."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kernelloop.sandbox import held_files

HOLDER = r"""
import mmap, os, sys, time
directory, mode = sys.argv[1], sys.argv[2]
path = os.path.join(directory, "held")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.posix_fallocate(fd, 0, 8 << 20)
os.unlink(path)
if mode == "mapped":  # only a map keeps it: the descriptor goes
    kept = mmap.mmap(fd, 8 << 20)
    os.close(fd)
if mode == "child":  # a grandchild holds it
    if os.fork():
        os.close(fd)
        time.sleep(60)
print("ready", flush=True)
time.sleep(60)
"""


def _hold(tmp_path, mode: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), mode], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    time.sleep(0.1)
    return process


def test_an_unlinked_file_held_open_mapped_or_by_a_child_is_counted_once(tmp_path):
    device = os.stat(tmp_path).st_dev
    for mode in ("open", "mapped", "child"):
        holder = _hold(tmp_path, mode)
        try:
            tree = held_files.descendants(holder.pid)
            assert holder.pid in tree and (mode != "child" or len(tree) == 2)
            assert 8 << 20 <= held_files.unlinked_bytes(tree, device) < 9 << 20, mode
            assert held_files.unlinked_bytes(tree, device + 1) == 0  # another filesystem's files are not the job dir's
        finally:
            holder.kill()
            holder.wait()
    assert not os.listdir(tmp_path)  # the walk of names sees nothing: only /proc shows it


def test_a_process_outside_the_tree_is_not_counted(tmp_path):
    holder = _hold(tmp_path, "open")
    try:
        assert held_files.unlinked_bytes(held_files.descendants(os.getpid()), os.stat(tmp_path).st_dev) >= 8 << 20
        lone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert held_files.unlinked_bytes(held_files.descendants(lone.pid), os.stat(tmp_path).st_dev) == 0
        finally:
            lone.kill()
            lone.wait()
    finally:
        holder.kill()
        holder.wait()


MANY = r"""
import os, sys, time
fds = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(int(sys.argv[2]))]
print("ready", flush=True)
time.sleep(60)
"""


def test_the_walk_stops_after_its_entries_however_many_a_job_holds(tmp_path, monkeypatch):
    """Issue 35 c: 40 processes holding 20,000 descriptors each made one walk take seconds. The walk
    reads at most max_entries descriptors and mappings, then says it could not finish (None); a
    process holding a few is still walked whole."""
    (tmp_path / "f").write_text("x")
    holder = subprocess.Popen([sys.executable, "-c", MANY, str(tmp_path / "f"), "600"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        device, stats, real_stat = os.stat(tmp_path).st_dev, [], os.stat
        monkeypatch.setattr(held_files.os, "stat", lambda path, *a, **k: stats.append(path) or real_stat(path, *a, **k))
        assert held_files.unlinked_bytes([holder.pid], device, max_entries=200) is None
        assert len(stats) <= 200  # bounded work, not a bounded time
        assert held_files.unlinked_bytes([holder.pid], device, max_entries=100_000) == 0  # the honest twin: walked whole
    finally:
        holder.kill()
        holder.wait()
