"""What the candidate's process reports, read as claims: bounded, typed, and never one of the
numbers the parent measures itself (a claim may add to a verdict's cost report, never overwrite it)."""

from __future__ import annotations

import re
from collections.abc import Collection

MAX_CLAIMED_SECONDS = 1e10  # a number the child reports above this (or not finite) is dropped, not believed
MAX_CLAIMED_KEYS = 64  # seconds a child may report; the rest are dropped (thousands would bloat every verdict)
CLAIMED_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")  # what a claimed cost's name may be
# cost_s entries the parent measures (with phase_*): a child's claim of one is dropped, never believed
PARENT_COSTS = frozenset({"compare_s", "reference_s", "timing_s", "baselines_import_s", "baselines_build_s", "child_s",
                          "total_s", "exit_s", "fixed_s", "baselines_cached_at", "baselines_cache_stored",
                          "trusted_worker_import_s", "candidate_worker_import_s"})
# the child's timing setup step by step (harness.setup_timing), inside the parent's timing_s
TIMING_SETUP_COSTS = ("timing_setup_s", "timing_setup_pool_s", "timing_setup_buffers_s", "timing_setup_warm_values_s",
                      "timing_setup_warm_rounds_s")
CHILD_COSTS = ("first_call_s", "trials_s", *TIMING_SETUP_COSTS)  # the child's own work, left out of fixed_s


def claimed_seconds(raw: object, names: Collection[str] | None = None) -> dict[str, float]:
    """The {name: seconds} a child reports (its costs), keeping only finite, plausible numbers, at most
    MAX_CLAIMED_KEYS of them; `names`: only these. Never one the parent measures itself (PARENT_COSTS,
    phase_*): a claim may add to the verdict's cost report, never overwrite it."""
    if not isinstance(raw, dict):
        return {}
    kept: dict[str, float] = {}
    for key, value in raw.items():
        name = str(key)
        if not CLAIMED_KEY.fullmatch(name):  # a name, not text: no escapes or unencodable characters in a verdict
            continue
        if (names is None or name in names) and name not in PARENT_COSTS and not name.startswith("phase_") \
                and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and 0 <= value < MAX_CLAIMED_SECONDS:  # NaN fails too
            kept[name] = float(value)
            if len(kept) == MAX_CLAIMED_KEYS:
                break
    return kept


def claimed_counts(raw: object) -> dict[str, int]:
    """Names with counts (ops and how many times each ran): a dict of non-negative ints; a plain list
    of names counts each once; anything else is dropped."""
    if isinstance(raw, list):
        return {name: 1 for name in claimed_names(raw)}
    if not isinstance(raw, dict):
        return {}
    return {name[:200]: count for name, count in list(raw.items())[:10_000]
            if isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool) and count >= 0}


def claimed_names(raw: object) -> list[str]:
    """Names the child reports (ops, kernels): a list of strings, or the keys of a dict; else none."""
    items = raw.keys() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    return [item[:200] for item in items if isinstance(item, str)][:10_000]
