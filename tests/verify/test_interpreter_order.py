"""interpreter_order.install: interpreted Triton launches run their programs in a shuffled order.

Each test runs a script in a fresh interpreter with TRITON_INTERPRET=1 set before triton is
imported (this process may have imported triton already, compiled or not). The script is a file,
not `python -c`: @triton.jit reads its kernels' source back from their file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kernelloop.tools.verify import interpreter_order

REPO = Path(__file__).resolve().parents[2]

_PRELUDE = '''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import torch
import triton
import triton.language as tl
from kernelloop.tools.verify import interpreter_order as order


@triton.jit
def shift_kernel(buf_ptr, BLOCK: tl.constexpr):
    # in place: block i <- block i+1, which program i+1 overwrites (a race across programs)
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offsets, tl.load(buf_ptr + offsets + BLOCK))


def shift(n_blocks=8, block=4):
    buf = torch.arange((n_blocks + 1) * block, dtype=torch.float32)
    shift_kernel[(n_blocks,)](buf, BLOCK=block)
    return buf[:n_blocks * block].tolist()


@triton.jit
def split_rowsum_kernel(x_ptr, out_ptr, n_cols, FIRST_STORES: tl.constexpr, BLOCK: tl.constexpr):
    # grid (rows, splits): each program sums one chunk of its row into out[row], no atomics
    row, split = tl.program_id(0), tl.program_id(1)
    cols = split * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0), axis=0)
    if FIRST_STORES and split == 0:
        tl.store(out_ptr + row, part)  # "split 0 initialises the row": order-dependent
    else:
        tl.store(out_ptr + row, tl.load(out_ptr + row) + part)  # read-modify-write


def split_rowsum(first_stores, rows=6, cols=40, block=16):
    x = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) % 7
    out = torch.zeros(rows)
    split_rowsum_kernel[(rows, triton.cdiv(cols, block))](x, out, cols, FIRST_STORES=first_stores, BLOCK=block)
    return out.tolist(), x.sum(dim=1).tolist()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


def honest():
    torch.manual_seed(0)
    x, y = torch.randn(1000), torch.randn(1000)
    added = torch.empty_like(x)
    add_kernel[(triton.cdiv(1000, 128),)](x, y, added, 1000, BLOCK=128)
    s = torch.randn(9, 50)
    soft = torch.empty_like(s)
    softmax_kernel[(9,)](s, soft, 50, BLOCK=64)
    return added, soft, x + y, torch.softmax(s, dim=1)


@triton.jit
def ticket_kernel(counter_ptr, out_ptr):
    # out[program] = the how-many-th program it was to run
    pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    tl.store(out_ptr + pid, tl.atomic_add(counter_ptr, 1))


def run_order(gx=5, gy=3):
    counter = torch.zeros(1, dtype=torch.int32)
    out = torch.full((gx * gy,), -1, dtype=torch.int32)
    ticket_kernel[(gx, gy)](counter, out)
    return out.tolist()
'''


def _run(tmp_path: Path, body: str) -> dict:
    """Run the prelude plus `body` (which prints one JSON line last) under the interpreter."""
    script = tmp_path / "script.py"
    script.write_text(_PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_racy_kernels_pass_in_grid_order_and_fail_shuffled(tmp_path):
    got = _run(tmp_path, '''
        sequential = shift()
        first_sequential = split_rowsum(True)
        installed = order.install(0)
        shuffled = [shift() for _ in range(3)]
        first_shuffled = split_rowsum(True)
        print(json.dumps(dict(sequential=sequential, shuffled=shuffled, installed=installed,
                              first_sequential=first_sequential, first_shuffled=first_shuffled)))
    ''')
    assert got["installed"] is True
    # In grid order the in-place shift is right: block i holds what block i+1 held.
    expected = [float(v) for v in range(4, 9 * 4)]
    assert got["sequential"] == expected
    # Shuffled, some program i+1 runs before program i, which then reads the shifted-in block.
    # (Only the identity order, 1 in 8!, would give the right answer; the seed is fixed.)
    assert all(result != expected for result in got["shuffled"])
    # "split 0 initialises the row, the others add": right in grid order, wrong once a later split
    # runs first and split 0's store wipes its partial sum.
    out, ref = got["first_sequential"]
    assert out == ref
    out, ref = got["first_shuffled"]
    assert out != ref


def test_unordered_read_modify_write_is_not_caught(tmp_path):
    """The documented limit: programs still run one at a time, so every program adding its partial
    sum to out[row] without atomics is right in any order; only a GPU's interleaving breaks it."""
    got = _run(tmp_path, '''
        order.install(0)
        print(json.dumps(split_rowsum(False)))
    ''')
    out, ref = got
    assert out == ref


def test_honest_kernels_give_identical_results(tmp_path):
    got = _run(tmp_path, '''
        before = honest()
        installed = order.install(7)
        after = honest()
        print(json.dumps(dict(
            installed=installed,
            identical=all(torch.equal(a, b) for a, b in zip(before[:2], after[:2])),
            right=all(torch.allclose(a, b, atol=1e-6) for a, b in zip(after[:2], after[2:])))))
    ''')
    assert got == {"installed": True, "identical": True, "right": True}


def test_install_is_idempotent_reproducible_and_seed_dependent(tmp_path):
    got = _run(tmp_path, '''
        from triton.runtime.interpreter import InterpreterBuilder
        plain = run_order()
        first = order.install(3)
        a = run_order()
        second = order.install(3)  # no second patch; the order stream starts over
        a_again = run_order()
        double_wrapped = hasattr(InterpreterBuilder.set_grid_idx.__wrapped__, "__wrapped__")
        order.install(4)
        b = run_order()
        later = [run_order() for _ in range(3)]
        order.uninstall()
        unpatched = not hasattr(InterpreterBuilder.set_grid_idx, "__wrapped__")
        restored = run_order()
        print(json.dumps(dict(plain=plain, first=first, second=second, a=a, a_again=a_again, b=b,
                              later=later, double_wrapped=double_wrapped, unpatched=unpatched,
                              restored=restored)))
    ''')
    identity = list(range(15))
    assert got["plain"] == identity and got["restored"] == identity and got["unpatched"]
    assert got["first"] is True and got["second"] is True and not got["double_wrapped"]
    for result in [got["a"], got["b"], *got["later"]]:
        assert sorted(result) == identity  # every program ran exactly once
    assert got["a"] != identity
    assert got["a_again"] == got["a"]  # same seed, same order
    assert got["b"] != got["a"]  # another seed, another order
    assert len({tuple(r) for r in [got["b"], *got["later"]]}) == 4  # each launch draws its own order


def test_install_declines_without_the_expected_internals(tmp_path):
    got = _run(tmp_path, '''
        import triton.runtime.interpreter as interpreter
        interpreter.GridExecutor = type("GridExecutor", (), {})  # as if a triton had moved its grid loop
        installed = order.install(0)
        print(json.dumps(dict(installed=installed, patched=order.installed(),
                              wrapped=hasattr(interpreter.InterpreterBuilder.set_grid_idx, "__wrapped__"))))
    ''')
    assert got == {"installed": False, "patched": False, "wrapped": False}


def test_caveat_text():
    for text in (interpreter_order.CAVEAT, interpreter_order.caveat(), interpreter_order.caveat(False)):
        assert text.startswith("CPU (Triton interpreter)") and "check on a GPU" in text
    assert "shuffled" in interpreter_order.caveat(True) and "shuffled" not in interpreter_order.caveat(False)
