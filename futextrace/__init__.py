"""futextrace: see what the Linux kernel's futex hash is doing."""

__version__ = "0.1.0"
