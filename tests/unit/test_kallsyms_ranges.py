"""kallsyms read with a filter still gives each kept function's end (the next
text symbol's address), and the kprobe method takes its text ranges from the
model's copy instead of reading kallsyms again. The file is written here."""
from __future__ import annotations

from types import SimpleNamespace

from futextrace.kernel.kallsyms import Kallsyms, futex_kallsyms
from futextrace.loading import kprobes

KALLSYMS = """\
ffffffff81100000 T futex_hash
ffffffff81100000 t futex_hash_alias_at_same_address
ffffffff81100040 d some_data_between
ffffffff81100080 T unrelated_next_function
ffffffff81100100 t futex_private_hash_put
ffffffff81100180 t futex_private_hash_put.part.0
ffffffff81100200 T zzz_after
ffffffff82000000 D __futex_data
ffffffff82000100 b other_bss
"""


def test_each_kept_text_symbol_gets_the_next_text_address(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    ks = Kallsyms.from_file(path, containing="futex")
    assert [s.name for s in ks.symbols] == ["futex_hash", "futex_hash_alias_at_same_address",
                                            "futex_private_hash_put", "futex_private_hash_put.part.0",
                                            "__futex_data"]
    ends = {s.name: s.next_text for s in ks.symbols}
    assert ends["futex_hash"] == 0xffffffff81100080            # not the alias at the same address
    assert ends["futex_private_hash_put"] == 0xffffffff81100180
    assert ends["futex_private_hash_put.part.0"] == 0xffffffff81100200
    assert ends["__futex_data"] is None                       # no text after it


def test_the_kprobe_inputs_come_from_the_model(tmp_path, monkeypatch):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    ks = Kallsyms.from_file(path, containing="futex")
    model = SimpleNamespace(futex_symbols={s.name: [s.type, s.address or 0, s.next_text or 0]
                                           for s in ks.symbols})

    def no_read(*a, **k):
        raise AssertionError("kallsyms read again")
    monkeypatch.setattr(Kallsyms, "from_file", no_read)
    got = futex_kallsyms(model)
    assert kprobes.text_range(got, "futex_private_hash_put") == (0xffffffff81100100, 0xffffffff81100180)
    assert kprobes.global_table_flags(got) == [f"-DGLOBAL_TABLES={0xffffffff82000000 + 16:#x}ULL"]
    assert kprobes.text_range(got, "absent") == (0, 0)
