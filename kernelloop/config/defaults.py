"""The one place the defaults and limits of a run are stated.

The CLI, the Python API (kernelloop.solve), the MCP server, the LangChain tool, the graph's
RunSettings and the config file all read these names; tests/config/test_defaults.py fails when
any of them states its own value. Plain constants, so the verifier side can import them with
torch alone.
"""

from __future__ import annotations

from typing import Final

BUDGET_S = 900.0  # wall-clock budget of one run, s (15m)
MAX_BUDGET_S = 7 * 24 * 3600.0  # a week: a longer budget is a typo, not a plan
CANDIDATES = 4  # kernels written in parallel per round
MAX_CANDIDATES = 32  # each is a model call at once: more is an accident
TARGET_SPEEDUP: float | None = 1.2  # over BASELINE; None: stop at the first correct kernel
BASELINE = "eager"
MAX_ROUNDS = 8
MAX_ROUNDS_LIMIT = 100
BACKEND: Final = "triton"  # Final: typed as the literal, so it fits Literal["triton", "cuda", "auto"]
BACKENDS = ("triton", "cuda", "auto")
DEVICE = "auto"  # auto, cpu, cuda or cuda:N
WORKSPACE = ".kernelloop"  # checkpoints, run dirs, caches: --workspace > KERNELLOOP_HOME > .env > kernelloop.toml > this
COMPILE_TIMEOUT_S = 180.0  # a candidate's compile phase, s (nvcc or Triton); every entry point, the CLI too
RUN_TIMEOUT_S = 300.0  # a candidate's run phase (trials, checks, timing), s
MAX_SOURCE_BYTES = 1 << 20  # a problem or candidate file; kernels are kilobytes, a megabyte is not code
# A caller's hints go into every coder prompt of every round, sent with the operator's key: advice is a few
# lines, so a handful of them and a few pages in all (the CLI's own --hint is the operator's, not capped).
MAX_HINTS = 16
MAX_HINTS_BYTES = 16 << 10
# A candidate is parsed and linted in the server's own process before any sandbox: about 75 us of CPU a token,
# so a megabyte of one-line statements held it for 40 s. The largest of the 413 KernelBench leaderboard
# kernels has 3,960 tokens (a C++ source in a string is one); 5x that is refused in the token pass.
MAX_CANDIDATE_TOKENS = 20_000
START: str | None = None  # the kernel a run begins from (attempt 0): None from scratch, a file, or START_AUTO
START_AUTO = "auto"  # `--start auto`: the problem family's hand-written starter (kernelloop/starts.py)
