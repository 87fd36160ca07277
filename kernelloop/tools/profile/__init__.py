"""Timing and profiling instruments: the one timer, profiler, Nsight Compute, roofline, NVML."""
