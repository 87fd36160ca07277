"""The critic's reading of the verifier's typed facts: where a wrong output is wrong
(results.Localisation) and where a correct kernel's time goes (results.Profile), each turned into
lines that name a fix. Pure functions of those records; nothing here reads a dict key by name,
so a fact the verifier does not produce cannot be read (tests/agents/test_critic_schema.py).
"""

from __future__ import annotations

from kernelloop.agents.causes import offered
from kernelloop.records import Localisation, NcuFacts, Profile, Verdict
from kernelloop.tools.verify.localise import describe

LOW_BANDWIDTH_PCT = 40.0  # a memory-bound kernel below this share of the datasheet bandwidth has room
HOST_BOUND_SHARE = 0.5  # more than half of a call's wall time with the device idle
LIBRARY_SHARE = 0.2
LOW_OCCUPANCY_PCT = 30.0
UNCOALESCED_SECTORS = 8.0  # global-load sectors per request: 4 is 32-bit coalesced, 32 is one per thread
BANK_CONFLICT_SHARE = 0.1  # conflicts per shared-memory wavefront


def wrong_output_fixes(loc: Localisation) -> list[str]:
    """The causes whose facts hold (agents/causes.py), first; then the facts as they are."""
    return [cause.says(loc) for cause in offered(loc)] + describe(loc)


def _roofline_lines(profile: Profile) -> list[str]:
    roof = profile.roofline
    if roof is None:
        return []
    lines = [f"achieved {roof.achieved_gb_per_s:.0f} GB/s, {roof.bandwidth_pct:.0f}% of {roof.peaks}'s memory "
             f"bandwidth, and {roof.achieved_tflops:.3g} TFLOP/s, {roof.flops_pct:.0f}% of its {roof.peak_key} peak; "
             f"{roof.bound}-bound; {roof.percent_of_limit:.0f}% of the roofline limit ({roof.floor_ms:.4g} ms)"]
    if roof.bound == "memory":
        lines.append("memory-bound: cut bytes moved (fuse, read each input once), vectorize loads with larger BLOCK "
                     "sizes, keep intermediates in registers")
        if roof.bandwidth_pct < LOW_BANDWIDTH_PCT:
            lines.append(f"far from the memory roofline ({roof.bandwidth_pct:.0f}% of the bandwidth): make loads "
                         "coalesced (adjacent lanes on adjacent addresses, unit stride along the fastest dimension), "
                         "wider (BLOCK >= 1024 elements per program) and enough programs to fill every SM")
    else:
        lines.append("compute-bound: use tl.dot / tensor cores with larger tiles, tune num_warps and num_stages")
    return lines


def _launch_lines(profile: Profile) -> list[str]:
    sms = profile.roofline.sm_count if profile.roofline else None
    lines = []
    for launch in profile.launches:
        programs = 1
        for size in launch.grid:
            programs *= size
        parts = [f"grid {tuple(launch.grid)} = {programs} programs" + (f" for {sms} SMs" if sms else "")]
        counts = ((launch.num_warps, "warps"), (launch.registers, "registers/thread"),
                  (launch.spills, "registers spilled"), (launch.shared_bytes, "B shared memory"))
        parts += [f"{value} {unit}" for value, unit in counts if value is not None]
        lines.append(f"{launch.kernel}: " + ", ".join(parts))
        if sms and launch.grid and programs < sms:
            lines.append(f"grid too small: {launch.kernel} runs {programs} programs on a GPU with {sms} SMs, so most "
                         "SMs idle; use smaller blocks per program or split the work (more programs than SMs)")
        if launch.spills:
            lines.append(f"register spills: {launch.kernel} spills {launch.spills} registers to local memory; use "
                         "smaller tiles, fewer live values per thread, or more warps")
    return lines


def _launches_per_call(profile: Profile) -> float | None:
    """Kernel launches per forward: the profiled calls are its device time over the time of one call."""
    hd = profile.host_device
    if hd is None or not hd.device_ms_per_call or not profile.device_ms_total or not profile.kernels:
        return None
    forwards = profile.device_ms_total / hd.device_ms_per_call
    return sum(kernel.calls for kernel in profile.kernels) / forwards if forwards >= 1 else None


def _ncu_lines(profile: Profile) -> list[str]:
    if not profile.ncu:
        return [profile.ncu_note] if profile.ncu_note else []
    lines = []
    # One entry per kernel, its longest launch: two launches of the same kernel say the same thing twice.
    distinct: dict[str, NcuFacts] = {}
    for facts in sorted(profile.ncu, key=lambda f: -(f.duration_ms or 0.0)):
        distinct.setdefault(facts.kernel, facts)
    for facts in list(distinct.values())[:2]:
        head = [f"occupancy {facts.occupancy_pct:.0f}%" if facts.occupancy_pct is not None else "",
                f"{facts.registers_per_thread} registers/thread" if facts.registers_per_thread is not None else "",
                f"{facts.shared_bytes_per_block:.0f} B shared/block"
                if facts.shared_bytes_per_block is not None else "",
                "throughput " + ", ".join(f"{level} {pct:.0f}%" for level, pct in facts.throughput_pct.items())
                if facts.throughput_pct else ""]
        lines.append(f"Nsight Compute, {facts.kernel[:60]}: " + "; ".join(part for part in head if part))
        if facts.top_stalls:
            lines.append("top warp stalls: " + ", ".join(f"{reason} {value:.2g}" for reason, value in facts.top_stalls))
        if facts.occupancy_pct is not None and facts.occupancy_pct < LOW_OCCUPANCY_PCT:
            lines.append(f"low occupancy ({facts.occupancy_pct:.0f}%): smaller tiles or fewer live values per thread")
        if facts.sectors_per_request is not None and facts.sectors_per_request > UNCOALESCED_SECTORS:
            lines.append(f"uncoalesced global loads: {facts.sectors_per_request:.1f} sectors per request (4 is "
                         "coalesced 32-bit): make adjacent threads read adjacent addresses")
        if facts.bank_conflicts and facts.shared_wavefronts and \
                facts.bank_conflicts > BANK_CONFLICT_SHARE * facts.shared_wavefronts:
            lines.append(f"shared-memory bank conflicts: {facts.bank_conflicts:.3g} conflicts over "
                         f"{facts.shared_wavefronts:.3g} wavefronts; pad the shared array (e.g. [32][33]) or swizzle")
        if facts.local_spill_requests:
            lines.append(f"local-memory traffic (spills): {facts.local_spill_requests:.3g} sectors")
    return lines


def profile_lines(profile: Profile | None, verdict: Verdict) -> list[str]:
    """What a correct kernel's profile says, as findings with their fixes."""
    if verdict.device == "cpu":
        return ["no GPU profile: the CPU (Triton interpreter) checks correctness only; the kernel table, roofline "
                "and Nsight Compute need a GPU"]
    if profile is None:
        return ["no profile for this attempt (not timed, or written in an older format)"]
    lines = []
    if profile.kernels:
        lines.append("kernels by device time: " + ", ".join(f"{k.kind} {k.name[:40]} {100 * k.share:.0f}%"
                                                            for k in profile.kernels[:4]))
    if profile.library_share > LIBRARY_SHARE:
        lines.append(f"{100 * profile.library_share:.0f}% of device time is in library kernels "
                     f"({', '.join(name[:40] for name in profile.library_kernels[:3])}): replace them with your own")
    hd = profile.host_device
    if hd is not None and hd.host_ms_per_call and hd.device_ms_per_call:
        lines.append(f"host/device: a call takes {hd.host_ms_per_call:.4f} ms by the parent's clock, "
                     f"{hd.device_ms_per_call:.4f} ms of device work")
        if hd.host_share is not None and hd.host_share > HOST_BOUND_SHARE:
            per_call = _launches_per_call(profile)
            if per_call is not None and per_call < 1.5:
                # One launch a call: there is nothing to merge; the launch's own host cost is what shows.
                lines.append(f"host-bound: the GPU idles {100 * hd.host_share:.0f}% of each call with one launch per "
                             "call: the launch's host cost (Triton's Python launcher, torch ops and allocations around "
                             "it) outweighs the device work; do less on the host per call and fuse neighbouring work "
                             "into the kernel")
            else:
                many = f" ({per_call:.0f} launches per call)" if per_call is not None else ""
                lines.append(f"host-bound: the GPU idles {100 * hd.host_share:.0f}% of each call{many}; launch fewer "
                             "kernels (one kernel over the whole tensor, no Python loop of launches, no .item() or "
                             "syncs)")
    lines += _roofline_lines(profile)
    lines += _launch_lines(profile)
    gpu = profile.gpu
    if gpu is not None and gpu.sm_clock_mhz:
        state = f"throttled ({', '.join(gpu.throttle_reasons)})" if gpu.throttled else "not throttled"
        lines.append(f"GPU {gpu.name}: SM clock {min(gpu.sm_clock_mhz)}-{max(gpu.sm_clock_mhz)} MHz, {state}")
    lines += _ncu_lines(profile)
    return lines
