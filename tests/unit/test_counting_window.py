"""The kprobe method's counting window without a kernel: futex_hash's return
probe (where lookups are counted) is attached last and stamped, and
Program.stop_counting detaches it first, under the event name BCC gave it.
(The tracepoint method's path runs for real in tests/host/test_window.py.)"""
from futextrace.loading import kprobes
from futextrace.loading.loader import Program


class _Fn:
    def __init__(self, name):
        self.has_symbol, self.symbol = True, name


class _Model:
    bucket_has_priv = False
    futex_symbols: dict = {}
    functions = {p[0]: _Fn(p[0]) for p in kprobes.PROBES}


class _RecordingBpf:
    """BCC's attach/detach calls, in order, with BCC's own event names."""

    def __init__(self):
        self.calls, self.kprobe_fds = [], {}
        self.tracepoint_fds, self.raw_tracepoint_fds = {}, {b"task_newtask": 1}

    def attach_kprobe(self, event, fn_name):
        self.calls.append(("attach", fn_name))
        self.kprobe_fds[b"p_" + event.encode().replace(b".", b"_")] = {fn_name: 1}

    def attach_kretprobe(self, event, fn_name, maxactive=0):
        self.calls.append(("attach", fn_name))
        self.kprobe_fds[b"r_" + event.encode().replace(b".", b"_")] = {fn_name: 1}

    def detach_kprobe_event(self, ev):
        self.calls.append(("detach", ev))
        del self.kprobe_fds[ev]

    def detach_raw_tracepoint(self, tp):
        self.calls.append(("detach", tp))
        del self.raw_tracepoint_fds[tp]


def test_the_counting_probe_goes_last_and_is_stamped():
    bpf, stamps = _RecordingBpf(), {}
    kprobes.attach_kprobes(bpf, _Model(), "kprobe", stamps)
    attached = [fn for what, fn in bpf.calls if what == "attach"]
    assert attached[-1] == "kr_futex_hash" and "kp_futex_hash" in attached[:-1]
    lo, hi = stamps["counting"]
    assert 0 < lo <= hi
    assert stamps["event"] in bpf.kprobe_fds and bpf.kprobe_fds[stamps["event"]] == {"kr_futex_hash": 1}


def test_stop_counting_detaches_the_counting_probe_first_then_everything():
    bpf, stamps = _RecordingBpf(), {}
    kprobes.attach_kprobes(bpf, _Model(), "kprobe", stamps)
    prog = object.__new__(Program)
    prog._bpf, prog._tp_btf, prog._hot_kprobe, prog.counting_until = bpf, [], stamps["event"], None
    bpf.calls.clear()
    lo, hi = prog.stop_counting()
    assert bpf.calls[0] == ("detach", stamps["event"]) and 0 < lo <= hi
    assert bpf.kprobe_fds == {} and bpf.raw_tracepoint_fds == {}
    assert prog.stop_counting() == (lo, hi)     # once: a second call changes nothing
