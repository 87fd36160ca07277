"""Whether a problem's input sets and outputs fit the machine, and how many trial sets a huge one gets.

What one verification holds at once, as the verifier works today (verifier.trial_count):
  host    the parent: the reference's outputs of every set, and one set of the candidate's;
          the trusted job and the candidate's child: every set's inputs, each
  device  the trusted job and the candidate's child: every timed set's inputs, each (kept for
          timing); and one set's output beside the reference's (the forward, the compare); with
          fresh timing (opt-in, Verifier.fresh_timing) also the
          copies of timed calls' outputs kept for the checks (kept_outputs.py: up to 1 GiB, or
          one output where that is more), in both; donor sets (inputs only, where a problem gets
          one trial set, for fresh values to be drawn from), in both; a back-to-back window's
          input sets, one per call (fresh_values.Window: up to 1 GiB, none where a set is
          larger), in both
KernelBench's main branch has level-1 problems with 4-9 GB outputs and up to 17 GB of inputs per
set: three trial sets of those don't fit an 80 GB GPU, so such a problem gets one trial set (plus
the fresh one), and where even that can't fit, the error says so in one line: the size, the
limit, and what to do.
"""

from __future__ import annotations

from kernelloop.tools.verify.fresh_values import WINDOW_BYTES
from kernelloop.tools.verify.kept_outputs import capacity

LARGE_OUTPUT_BYTES = 1 << 30  # an output above this gets one trial set, plus the fresh set
FRESH_SETS = 1  # the set run after timing, on values the candidate has not seen
FEWEST_SETS = 1 + FRESH_SETS
DEVICE_SHARE = 0.9  # of the GPU's memory: the CUDA context, the allocator's slack and kernels' workspaces take the rest
HOST_SHARE = 0.8  # of the host's memory: the sandbox workers, their imports and the page cache need the rest


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def trial_sets_for(output_bytes_per_set: int, default_trials: int, budget_bytes: int,
                   input_bytes_per_set: int = 0) -> int:
    """How many trial sets to run (at least 1, at most `default_trials`): one for an output over
    LARGE_OUTPUT_BYTES, else as many sets of inputs and output as fit in `budget_bytes` with the
    fresh set beside them."""
    if output_bytes_per_set > LARGE_OUTPUT_BYTES:
        return 1
    per_set = output_bytes_per_set + input_bytes_per_set
    if per_set <= 0:
        return max(1, default_trials)
    fit = budget_bytes // per_set - FRESH_SETS
    return max(1, min(default_trials, fit))


def kept_bytes(output_bytes_per_set: int) -> int:
    """The copies of timed calls' outputs the candidate's child keeps, and the trusted job's the same
    size (it times that work alone)."""
    return 2 * capacity(output_bytes_per_set) * output_bytes_per_set if output_bytes_per_set > 0 else 0


def window_bytes(output_bytes_per_set: int, input_bytes_per_set: int) -> int:
    """A back-to-back window's input sets in the candidate's child and in the trusted job: as many
    as fit WINDOW_BYTES, no more than a request keeps outputs of (none where one set is larger)."""
    if input_bytes_per_set <= 0 or input_bytes_per_set > WINDOW_BYTES:
        return 0
    sets = min(capacity(output_bytes_per_set), WINDOW_BYTES // input_bytes_per_set)
    return 2 * sets * input_bytes_per_set


def host_bytes(output_bytes_per_set: int, n_sets: int, input_bytes_per_set: int = 0, donor_sets: int = 0,
               fresh: bool = False) -> int:
    """The parent's reference outputs of every set and one candidate set; two processes' inputs
    (`fresh` adds nothing on the host: its copies and window sets are on the device)."""
    return (n_sets + 1) * output_bytes_per_set + 2 * (n_sets + donor_sets) * input_bytes_per_set


def device_bytes(output_bytes_per_set: int, n_sets: int, input_bytes_per_set: int = 0, donor_sets: int = 0,
                 fresh: bool = False) -> int:
    """Two processes' device copies of the timed sets' inputs; one set's output and the reference's;
    with `fresh` timing, the kept copies of timed outputs and the back-to-back window's sets."""
    own = 2 * (n_sets + donor_sets) * input_bytes_per_set + 2 * output_bytes_per_set
    if not fresh:
        return own
    return own + kept_bytes(output_bytes_per_set) + window_bytes(output_bytes_per_set, input_bytes_per_set)


def check_fits(output_bytes_per_set: int, n_sets: int, device_total_bytes: int | None, host_total_bytes: int,
               input_bytes_per_set: int = 0, donor_sets: int = 0, fresh: bool = False) -> str | None:
    """One line saying why `n_sets` input sets (trials and fresh) of this size, and `donor_sets` more
    of inputs only, can't be verified here (the size, the limit, what to do), or None when they
    fit. `device_total_bytes` is None on the CPU, where the host's memory is the only limit.
    `fresh`: the timing runs on fresh values (its kept copies and window sets count)."""
    places = [("this machine's memory", host_bytes, host_total_bytes, HOST_SHARE, "a machine with more memory")]
    if device_total_bytes is not None:
        places.append(("this GPU", device_bytes, device_total_bytes, DEVICE_SHARE, "a GPU with more memory"))
    for where, need_of, total, share, bigger in places:
        need = need_of(output_bytes_per_set, n_sets, input_bytes_per_set, donor_sets, fresh)
        limit = int(total * share)
        if need <= limit:
            continue
        fewer = n_sets > FEWEST_SETS and need_of(output_bytes_per_set, FEWEST_SETS, input_bytes_per_set, 0, fresh) <= limit
        advice = "use fewer trial sets (trials=1)" if fewer else f"run on {bigger}"
        return (f"input sets too large for {where}: {n_sets} sets of {gb(input_bytes_per_set)} inputs and "
                f"{gb(output_bytes_per_set)} output need {gb(need)}, over the {gb(limit)} usable "
                f"({share:.0%} of {gb(total)}): {advice}")
    return None
