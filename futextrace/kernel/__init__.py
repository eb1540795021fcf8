"""The running kernel: BTF, kallsyms, the futex model, topology, header trees, the kernel's hash formulas."""
