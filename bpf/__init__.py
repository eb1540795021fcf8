"""BPF C sources of futextrace, shipped as package data (futextrace.bpf)."""
