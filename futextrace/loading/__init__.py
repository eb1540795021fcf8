"""Compiling, loading and attaching the BPF programs: method choice, kprobes, tp_btf, raw bpf(2), the shared layout."""
