"""The BPF headers stay readable: one concern each, none over 300 lines, and
every header the loader pastes exists (docs/architecture.md, "The kernel side")."""
from futextrace.kernel.layout import bpf_dir
from futextrace.loading.loader import HOT_PATH_HEADERS

MAX_LINES = 300


def test_no_header_is_over_300_lines():
    long = {h.name: n for h in bpf_dir().glob("*.h") if (n := len(h.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def test_the_loader_pastes_every_header_but_the_layouts():
    headers = {h.name for h in bpf_dir().glob("*.h")}
    # futextrace.h declares no map (a real #include); lock_waits.h is appended.
    assert set(HOT_PATH_HEADERS) == headers - {"futextrace.h", "lock_waits.h"}


def test_every_program_includes_only_headers_the_loader_pastes():
    for src in bpf_dir().glob("trace_*.bpf.c"):
        included = [ln.split('"')[1] for ln in src.read_text().splitlines() if ln.startswith('#include "')]
        assert included and set(included) <= set(HOT_PATH_HEADERS), src.name
        assert included == sorted(included, key=HOT_PATH_HEADERS.index), f"{src.name}: the loader's order"
