"""Early maps (futextrace/loading/earlymaps.py) against the real kernel: a
map the command line began creating is the one the replay uses when the
cache entry describes the same map, and is closed when it does not. The map's
type, sizes and flags are read back from the kernel (BPF_OBJ_GET_INFO_BY_FD),
decoded here."""
from __future__ import annotations

import ctypes
import json
import os
import struct

import pytest

from futextrace.loading import bcclite, bpfsys, earlymaps
from tests.helpers.earlymaps import BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_HASH, isolate, map_table

pytestmark = pytest.mark.root


def map_info(fd: int) -> tuple:
    """(type, key size, value size, max entries, flags, name) of a map fd, as the kernel says."""
    info = ctypes.create_string_buffer(80)
    bpfsys.bpf(bpfsys.BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, 80, ctypes.addressof(info)))
    map_type, _id, key, value, entries, flags, name = struct.unpack_from("<IIIIII16s", info.raw)
    return map_type, key, value, entries, flags, name.rstrip(b"\0").decode()


BIG = map_table("ft_early_big", BPF_MAP_TYPE_PERCPU_HASH, 24, 32, 16384)
SMALL = map_table("ft_early_small", BPF_MAP_TYPE_ARRAY, 4, 8, 4)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path)
    yield
    earlymaps.close_untaken()


def hint(tables) -> None:
    earlymaps.hint_path().parent.mkdir(parents=True, exist_ok=True)
    earlymaps.hint_path().write_text(json.dumps({"record": [list(earlymaps.spec_of(t)) for t in tables]}))


def test_the_replay_takes_the_early_map_made_for_its_table(fresh):
    hint([BIG])
    earlymaps.start("record")
    made = earlymaps._early[earlymaps.spec_of(BIG)].result()
    assert made is not None and map_info(made) == (5, 24, 32, 16384, 0, "ft_early_big")
    module = bcclite.CachedModule({"tables": [SMALL, BIG], "functions": {}, "license": "GPL",
                                   "kern_version": 0})
    try:
        assert module.early_maps == 1
        assert module.fds[1] == made            # the early map itself, not a second one
        assert map_info(module.fds[0])[:4] == (BPF_MAP_TYPE_ARRAY, 4, 8, 4)
    finally:
        module.destroy()


def test_an_early_map_no_table_matches_is_closed(fresh):
    hint([BIG])
    earlymaps.start("record")
    made = earlymaps._early[earlymaps.spec_of(BIG)].result()
    other = dict(BIG, max_entries=8192)          # the options changed: another size
    module = bcclite.CachedModule({"tables": [other], "functions": {}, "license": "GPL", "kern_version": 0})
    try:
        assert module.early_maps == 0
        assert map_info(module.fds[0])[3] == 8192
        earlymaps.close_untaken()
        with pytest.raises(OSError):
            os.fstat(made)
    finally:
        module.destroy()
