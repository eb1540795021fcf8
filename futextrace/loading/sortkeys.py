"""Rows of integer columns as one sortable key each, for numpy.

numpy sorts and searches structured arrays field by field, through a
generic comparison: slow (a searchsorted of 4,000 lock-wait rows among
16,000 took ~5 ms). Packed big-endian, a row's bytes sort as its numbers
do, so the rows can be matched and sorted as opaque byte strings (np.void),
which numpy compares with memcmp. Used by the exporter's wait book
(export/waitarrays.py) and `record -i`'s futex matching (record/live_arrays.py).
"""
from __future__ import annotations

import numpy as np


def layout(*fields: tuple[str, str]) -> np.dtype:
    """A packed big-endian layout: (name, ">u4" or ">u8") per field, in sort order."""
    return np.dtype(list(fields))


def byte_keys(cols: dict[str, np.ndarray], dtype: np.dtype) -> np.ndarray:
    """`cols`' rows as byte strings of `dtype` (a layout()): sortable, and
    viewable back as fields with .view(dtype)."""
    out = np.zeros(len(cols[dtype.names[0]]), dtype=dtype)
    for f in dtype.names:
        out[f] = cols[f]
    return out.view(np.dtype((np.void, dtype.itemsize)))
