"""Run a Triton launch's programs in a shuffled order under the CPU interpreter.

Triton's interpreter (TRITON_INTERPRET=1) runs a grid's programs one after another, in grid
order (x outermost, z innermost). A kernel that races across programs -- program i reads what
program i+1 writes, program 0 of a row initialises what the others accumulate into, a block
reads the carry of the previous block without waiting for it -- therefore gives the
sequential, "right" answer on the CPU and a wrong one on a GPU, where programs run at once and
in no fixed order.

`install(seed)` makes every interpreted launch run its programs in an order drawn from
`random.Random(seed)`: a kernel whose result depends on the order of its programs then fails
on the CPU too. What it catches is order dependence between whole programs, the common case.
It does not catch races that need two programs to interleave inside one launch: each program
still runs to completion before the next starts, so a read-modify-write of one location by
several programs without atomics (every program adds its partial sum to out[row]) still comes
out right whatever the order. Hence the caveat CPU verdicts of Triton kernels carry (`CAVEAT`).

How: the interpreter's grid loop (`GridExecutor.__call__`, the same in triton 3.2 to 3.9) calls
`interpreter_builder.set_grid_dim(*grid)` once per launch, then
`interpreter_builder.set_grid_idx(x, y, z)` before each program; `tl.program_id` reads what
the latter stored. The patch wraps `InterpreterBuilder.set_grid_dim` / `set_grid_idx`: when
called from the grid loop, set_grid_dim draws a permutation of the launch's programs and
set_grid_idx relabels the loop's k-th program as the permutation's k-th. The loop is unchanged
and still visits every index once, so each program still runs exactly once, in shuffled order.
Calls from anywhere else (tools that re-enter the builder) pass through untouched. If the
installed triton lacks these internals, `install` patches nothing and returns False.
"""

from __future__ import annotations

import math
import random
import sys
import threading
from types import CodeType

CAVEAT = ("CPU (Triton interpreter): programs run one at a time (in shuffled order), so races "
          "between programs that a GPU would expose may not show; check on a GPU")
_CAVEAT_UNSHUFFLED = ("CPU (Triton interpreter): programs run one at a time, in grid order, so races "
                      "between programs that a GPU would expose may not show; check on a GPU")

# Grids up to this many programs get a fully shuffled list; larger ones (which the interpreter
# would take hours over anyway) a random affine permutation k -> (a*k + b) mod n, which costs no memory.
_MAX_SHUFFLED = 1 << 20
_MARK = "_kernelloop_shuffled"

_lock = threading.Lock()
_state: dict = {"rng": None, "seed": None, "originals": None, "dim_codes": frozenset(), "idx_codes": frozenset()}


def caveat(shuffled: bool = True) -> str:
    """The caveat a CPU verdict of a Triton kernel carries; `shuffled` is what install() returned."""
    return CAVEAT if shuffled else _CAVEAT_UNSHUFFLED


def installed() -> bool:
    """Whether the shuffle is in place in this process."""
    return _state["originals"] is not None


def install(seed: int) -> bool:
    """Shuffle the program order of every interpreted Triton launch from now on, reproducibly.

    Every launch draws its own order from one `random.Random(seed)`, so a run is the same each
    time for one seed. Calling it again patches nothing twice; it restarts the order stream from
    the new seed. Returns True when the shuffle is in place, False when this triton's interpreter
    lacks the expected internals (then nothing was changed). Import triton first or not: this
    imports `triton.runtime.interpreter` itself. Only interpreted launches (TRITON_INTERPRET=1,
    set before triton is imported) are affected; compiled GPU launches never reach this code.
    """
    with _lock:
        if _state["originals"] is not None:
            _state["rng"], _state["seed"] = random.Random(seed), seed
            return True
        try:
            from triton.runtime import interpreter
        except Exception:
            return False
        builder_cls = getattr(interpreter, "InterpreterBuilder", None)
        executor_cls = getattr(interpreter, "GridExecutor", None)
        if builder_cls is None or executor_cls is None:
            return False
        set_dim = builder_cls.__dict__.get("set_grid_dim")
        set_idx = builder_cls.__dict__.get("set_grid_idx")
        if not callable(set_dim) or not callable(set_idx):
            return False
        if getattr(set_idx, _MARK, False):  # patched by another copy of this module
            return True
        dim_codes = _codes_calling(executor_cls, "set_grid_dim")
        idx_codes = _codes_calling(executor_cls, "set_grid_idx")
        if not dim_codes or not idx_codes:
            return False
        _state.update(rng=random.Random(seed), seed=seed, dim_codes=dim_codes, idx_codes=idx_codes,
                      originals=(builder_cls, set_dim, set_idx))
        builder_cls.set_grid_dim = _wrap_set_grid_dim(set_dim)
        builder_cls.set_grid_idx = _wrap_set_grid_idx(set_idx)
        return True


def uninstall() -> None:
    """Put the interpreter's own methods back (for tests)."""
    with _lock:
        if _state["originals"] is None:
            return
        builder_cls, set_dim, set_idx = _state["originals"]
        builder_cls.set_grid_dim, builder_cls.set_grid_idx = set_dim, set_idx
        _state.update(rng=None, seed=None, originals=None, dim_codes=frozenset(), idx_codes=frozenset())


def _codes_calling(executor_cls, name: str) -> frozenset:
    """Code objects of GridExecutor's methods (or functions nested in them) that use `name`."""
    found = set()

    def walk(code: CodeType) -> None:
        if name in code.co_names:
            found.add(code)
        for const in code.co_consts:
            if isinstance(const, CodeType):
                walk(const)

    for value in vars(executor_cls).values():
        code = getattr(value, "__code__", None)
        if isinstance(code, CodeType):
            walk(code)
    return frozenset(found)


def _called_from(codes: frozenset) -> bool:
    # frame 0: this function, 1: the wrapper, 2: whoever called the builder
    return sys._getframe(2).f_code in codes


def _wrap_set_grid_dim(original):
    def set_grid_dim(self, nx, ny, nz):
        original(self, nx, ny, nz)
        if _called_from(_state["dim_codes"]):  # a launch starts: draw its order
            rng, dims = _state["rng"], tuple(int(n) for n in (nx, ny, nz))
            self._kernelloop_order = None if rng is None else (dims, _permutation(math.prod(dims), rng))

    setattr(set_grid_dim, _MARK, True)
    set_grid_dim.__wrapped__ = original
    return set_grid_dim


def _wrap_set_grid_idx(original):
    def set_grid_idx(self, x, y, z):
        order = getattr(self, "_kernelloop_order", None)
        if order is not None and _called_from(_state["idx_codes"]) and order[0] == tuple(self.grid_dim):
            (_, ny, nz), permutation = order
            k = permutation((int(x) * ny + int(y)) * nz + int(z))
            x, rest = divmod(k, ny * nz)
            y, z = divmod(rest, nz)
        original(self, x, y, z)

    setattr(set_grid_idx, _MARK, True)
    set_grid_idx.__wrapped__ = original
    return set_grid_idx


def _permutation(n: int, rng: random.Random):
    """A random bijection of range(n), as a function."""
    if n <= 1:
        return lambda k: k
    if n <= _MAX_SHUFFLED:
        order = list(range(n))
        rng.shuffle(order)
        return order.__getitem__
    while True:
        a = rng.randrange(1, n)
        if math.gcd(a, n) == 1:
            break
    b = rng.randrange(n)
    return lambda k: (a * k + b) % n
