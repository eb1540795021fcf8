"""progcache's pure parts: finding map references in instructions, and which
cache files it trusts. Instructions are built here, byte by byte."""
from __future__ import annotations

import json
import os
import struct
from types import SimpleNamespace

from futextrace.loading import progcache


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def ld_map(fd: int, src: int = 1) -> bytes:
    return insn(0x18, dst=1, src=src, imm=fd) + insn(0)     # ld_imm64 takes two slots


EXIT = insn(0x95)


def test_each_map_reference_is_found_by_index():
    code = insn(0xb7, dst=0) + ld_map(7) + insn(0x85, imm=1) + ld_map(9) + EXIT
    assert progcache.map_references(code, {7: "futexes", 9: "events"}) == [[1, "futexes"], [4, "events"]]


def test_a_plain_64_bit_constant_is_not_a_map():
    assert progcache.map_references(ld_map(7, src=0) + EXIT, {7: "futexes"}) == []


def test_references_it_cannot_patch_make_the_program_uncacheable():
    assert progcache.map_references(ld_map(8) + EXIT, {7: "futexes"}) is None        # an unknown fd
    assert progcache.map_references(ld_map(7, src=2) + EXIT, {7: "futexes"}) is None  # a map value


def entry(tmp_path, mode=0o644, **extra):
    p = tmp_path / "e.json"
    p.write_text(json.dumps({"format": progcache.FORMAT, **extra}))
    os.chmod(p, mode)
    return p


def test_an_entry_is_read_back(tmp_path):
    assert progcache.read_entry(entry(tmp_path, functions={}))["functions"] == {}


def test_entries_it_does_not_trust_are_ignored(tmp_path):
    assert progcache.read_entry(entry(tmp_path, mode=0o664)) is None      # group-writable
    assert progcache.read_entry(entry(tmp_path, mode=0o646)) is None      # world-writable
    link = tmp_path / "link.json"
    link.symlink_to(entry(tmp_path))
    assert progcache.read_entry(link) is None
    other = tmp_path / "old.json"
    other.write_text(json.dumps({"format": progcache.FORMAT + 1}))
    assert progcache.read_entry(other) is None
    (tmp_path / "bad.json").write_text("{not json")
    assert progcache.read_entry(tmp_path / "bad.json") is None
    assert progcache.read_entry(tmp_path / "missing.json") is None


def test_the_key_follows_text_flags_and_header():
    key = progcache.cache_key("int f;", ["-DA=1"], "h")
    assert key == progcache.cache_key("int f;", ["-DA=1"], "h")
    assert len({key, progcache.cache_key("int g;", ["-DA=1"], "h"),
                progcache.cache_key("int f;", ["-DA=2"], "h"),
                progcache.cache_key("int f;", ["-DA=1"], "h2")}) == 4


def test_an_entry_is_refused_for_anything_it_was_not_built_for():
    wanted = progcache.built_for("int f;", ["-DA=1"], "h")
    assert progcache.mismatch({"built_for": dict(wanted)}, wanted) is None
    other = {"release": "0.0.1-other", "btf": "0" * 32, "bcc": "/other/libbcc.so:1:2",
             "kernel_source": "/elsewhere", "source": "1" * 32, "cflags": ["-DA=2"]}
    assert set(other) == set(wanted)
    for field, value in other.items():
        assert progcache.mismatch({"built_for": {**wanted, field: value}}, wanted) == field
    assert progcache.mismatch({}, wanted) == "built_for"        # written before it was recorded


def test_the_key_follows_the_kernel_and_its_btf(monkeypatch):
    key = progcache.cache_key("int f;", ["-DA=1"], "h")
    monkeypatch.setattr(progcache, "btf_digest", lambda: "another build")
    assert progcache.cache_key("int f;", ["-DA=1"], "h") != key
    monkeypatch.undo()
    monkeypatch.setattr(os, "uname", lambda: SimpleNamespace(release="0.0.1-another-kernel"))
    assert progcache.cache_key("int f;", ["-DA=1"], "h") != key


def test_the_btf_digest_is_of_the_file(tmp_path):
    import hashlib
    btf = tmp_path / "vmlinux"
    btf.write_bytes(b"\x9f\xeb" + bytes(range(256)))
    assert progcache.btf_digest(str(btf)) == hashlib.sha256(btf.read_bytes()).hexdigest()[:32]
    assert progcache.btf_digest(str(tmp_path / "none")) == "none"
