"""Benchmarks: the built-in workload runner, perf bench, bucket sweeps."""
