"""Native workloads (C, compiled on first use); see build.workload_path()."""
from futextrace.workload.build import workload_path

__all__ = ["workload_path"]
