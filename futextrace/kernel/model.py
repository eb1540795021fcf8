"""What the running kernel's futex hash looks like, learned from BTF and kallsyms.

Nothing is keyed on `uname -r`: stable kernels mix layouts (a backport can carry
7.1's mm->futex.phash into a 6.18 release; tests/data/btf holds five such
layouts), so every fact comes from BTF, kallsyms,
/sys and, for `clone_rule`, from watching a real clone.

`load(btf_path)` also accepts a JSON digest (tests/data/btf/*.json), so the model
can be built for kernels we only have a digest of.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field

from futextrace.kernel import topology as topo_mod
from futextrace.kernel.btf import Btf, BtfError, Digest, TypeSource
from futextrace.errors import EnvironmentProblem, FileProblem
from futextrace.kernel.sizing import roundup_pow_of_two
from futextrace.kernel.kallsyms import Kallsyms, Symbol
from futextrace.workload.build import workload_path

VMLINUX_BTF = "/sys/kernel/btf/vmlinux"

# Functions of interest, in rough call order.
FUNCTIONS = [
    "futex_hash", "__futex_hash", "__futex_hash_private", "futex_private_hash",
    "futex_private_hash_get", "futex_private_hash_put", "futex_hash_get", "futex_hash_put",
    "futex_ref_get", "futex_ref_put", "futex_ref_is_dead", "futex_ref_drop", "futex_ref_rcu",
    "futex_hash_allocate", "futex_hash_allocate_default", "futex_pivot_hash",
    "__futex_pivot_hash", "futex_rehash_private", "futex_hash_free", "futex_mm_init",
    "futex_hash_prctl", "get_futex_key", "futex_wait", "futex_wake",
]

# Offset key -> (struct, [candidate member paths, first that exists wins]).
OFFSETS = {
    "task_struct.mm": ("task_struct", ["mm"]),
    "task_struct.tgid": ("task_struct", ["tgid"]),
    "task_struct.pid": ("task_struct", ["pid"]),
    "task_struct.signal": ("task_struct", ["signal"]),
    "task_struct.comm": ("task_struct", ["comm"]),                  # task iterator
    "task_struct.group_leader": ("task_struct", ["group_leader"]),  # task iterator
    "bpf_iter_meta.seq": ("bpf_iter_meta", ["seq"]),                 # task iterator
    "signal_struct.nr_threads": ("signal_struct", ["nr_threads"]),
    # 6.17-7.1 (and some stable kernels): flat fields; 7.2+: mm->futex.phash.*
    "mm_struct.futex_phash": ("mm_struct", ["futex_phash", "futex.phash.hash"]),
    "mm_struct.futex_phash_new": ("mm_struct", ["futex_phash_new", "futex.phash.hash_new"]),
    "mm_struct.futex_atomic": ("mm_struct", ["futex_atomic", "futex.phash.atomic"]),
    "mm_struct.futex_ref": ("mm_struct", ["futex_ref", "futex.phash.ref"]),
    "futex_private_hash.state": ("futex_private_hash", ["state"]),
    "futex_private_hash.hash_mask": ("futex_private_hash", ["hash_mask"]),
    "futex_private_hash.mm": ("futex_private_hash", ["mm"]),
    "futex_private_hash.custom": ("futex_private_hash", ["custom"]),
    "futex_private_hash.queues": ("futex_private_hash", ["queues"]),
    "futex_hash_bucket.priv": ("futex_hash_bucket", ["priv"]),
    # hb->lock: lock:contention_begin reports its address (raw_lock, or RT's
    # rt_mutex, is spinlock_t's first member in every config; lock_waits.h).
    "futex_hash_bucket.lock": ("futex_hash_bucket", ["lock"]),
    "futex_bucket_ref.hb": ("futex_bucket_ref", ["hb"]),
    "futex_bucket_ref.fph": ("futex_bucket_ref", ["fph"]),
    "futex_key.both.offset": ("futex_key", ["both.offset"]),
    "futex_key.both.node": ("futex_key", ["both.node"]),
    "futex_key.private.address": ("futex_key", ["private.address"]),
}
for _r in ("di", "si", "dx", "r10", "r8", "r9", "ax", "orig_ax"):
    OFFSETS[f"pt_regs.{_r}"] = ("pt_regs", [_r])

# Tracepoints attached as tp_btf: sys_enter (tracepoint method), the lock
# contention pair (every method, bpf/lock_waits.h).
TP_BTF = ["sys_enter", "contention_begin", "contention_end"]
ITERATORS = ["task"]     # BPF iterators (BTF func bpf_iter_<name>) snapshot reads
# Functions the fentry method may attach to (loading/fentry.py): their BTF FUNC ids.
FENTRY_FUNCS = ["futex_hash", "futex_private_hash", "futex_hash_get", "futex_hash_put",
                "futex_private_hash_put", "futex_hash_allocate", "__futex_pivot_hash"]

SIZES = ["futex_hash_bucket", "futex_private_hash", "futex_key", "futex_bucket_ref"]


@dataclass
class FuncInfo:
    name: str
    in_btf: bool
    has_symbol: bool
    symbol: str | None            # the name to attach to (may be a .isra/.constprop clone)
    return_kind: str | None       # "pointer" | "struct" | "int" | "bool" | "void" | None
    return_type: str | None
    return_size: int | None
    params: list[tuple[str, str]] = field(default_factory=list)
    symbol_is_clone: bool = False  # GCC clone: entry probes work, argument ABI may differ
    fragments: list[str] = field(default_factory=list)   # .part/.cold pieces seen

    @property
    def probeable(self) -> bool:
        return self.has_symbol


@dataclass
class GlobalHash:
    buckets_per_node: int | None
    shift: int | None
    nodes: int | None
    source: str                   # "formula+dmesg", "formula", "dmesg", "unknown"
    formula_buckets: int | None = None
    dmesg_buckets: int | None = None


def global_hash_formula(possible_cpus: int, possible_nodes: int) -> int:
    """futex_init(): roundup_pow_of_two(max(4, 256 * cpus / nodes)) buckets per node."""
    return roundup_pow_of_two(max(4, 256 * possible_cpus // max(1, possible_nodes)))


DMESG_RE = re.compile(r"futex hash table entries: (\d+) \(.*?on (\d+) NUMA nodes")


def read_dmesg_line() -> tuple[int, int] | None:
    """(entries, nodes) from the boot log, if readable (dmesg_restrict may hide it)."""
    texts = []
    try:
        texts.append(subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    for m in (DMESG_RE.search(t) for t in texts):
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


@dataclass
class KernelModel:
    release: str
    btf_source: str
    private_hash: bool
    mm_layout: str | None
    hash_returns: str | None
    bucket_has_priv: bool
    functions: dict[str, FuncInfo]
    offsets: dict[str, int | None]
    sizes: dict[str, int | None]
    global_hash: GlobalHash | None
    data_symbol: int | None
    topology: topo_mod.Topology | None
    clone_rule: str | None
    clone_rule_source: str = "unknown"
    symbols_source: str = "none"      # "kallsyms", "system-map", "digest", "btf" (FUNC implies a symbol)
    notes: list[str] = field(default_factory=list)
    # BTF ids of the running kernel's `btf_trace_<tp>` typedefs: tp_btf attach points.
    tp_btf_ids: dict[str, int] = field(default_factory=dict)
    # BTF ids of the running kernel's `bpf_iter_<target>` funcs: iterator attach points.
    iter_btf_ids: dict[str, int] = field(default_factory=dict)
    # Every kallsyms symbol with "futex" in its name, where addresses are visible:
    # name -> [type, address, next text symbol's address or 0]. The kprobe method's
    # inputs (global tables, put text ranges) without reading kallsyms again.
    futex_symbols: dict[str, list] = field(default_factory=dict)
    # BTF ids of the running kernel's FUNCs in FENTRY_FUNCS: fentry/fexit attach points.
    func_btf_ids: dict[str, int] = field(default_factory=dict)

    def probeable(self, name: str) -> bool:
        f = self.functions.get(name)
        return bool(f and f.has_symbol)

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.topology is not None:
            d["topology"] = self.topology.to_dict()
        return json.loads(json.dumps(d))   # tuples -> lists

    @classmethod
    def from_dict(cls, d: dict) -> "KernelModel":
        """The model `to_dict` wrote (kernel/modelcache.py keeps one per boot)."""
        d = dict(d)
        d["functions"] = {name: FuncInfo(**{**f, "params": [tuple(p) for p in f["params"]]})
                          for name, f in d["functions"].items()}
        if d["global_hash"] is not None:
            d["global_hash"] = GlobalHash(**d["global_hash"])
        if d["topology"] is not None:
            t = dict(d["topology"])
            t["cpu_node"] = {int(k): v for k, v in t["cpu_node"].items()}
            d["topology"] = topo_mod.Topology(**t)
        return cls(**d)


def _open_btf(btf_path: str | None) -> TypeSource:
    path = btf_path or VMLINUX_BTF
    if not os.path.exists(path):
        if btf_path is None:
            raise EnvironmentProblem(
                f"no kernel BTF at {VMLINUX_BTF}: futextrace needs a kernel built with "
                "CONFIG_DEBUG_INFO_BTF=y (Debian's kernels are)")
        raise FileProblem(f"BTF file {path} does not exist")
    try:
        return Btf.from_file(path)
    except (BtfError, ValueError, IndexError, KeyError) as e:
        raise FileProblem(f"{path} is not a BTF file, an ELF with .BTF, or a futextrace digest ({e})") from None
    except OSError as e:
        raise FileProblem(f"cannot read {path}: {e.strerror}") from None


def _symbols(btf: TypeSource, kallsyms_path: str | None, live: bool) -> tuple[Kallsyms | None, str]:
    if kallsyms_path:
        ks = Kallsyms.from_file(kallsyms_path)
        return ks, ("kallsyms" if "kallsyms" in kallsyms_path else "system-map")
    if isinstance(btf, Digest) and btf.meta.get("symbols") is not None:
        syms = [Symbol(s.split(" ", 1)[1], s.split(" ", 1)[0], None) for s in btf.meta["symbols"]]
        return Kallsyms(syms), "digest"
    if live:
        try:
            # Every symbol the model asks about has "futex" in its name.
            return Kallsyms.from_file("/proc/kallsyms", containing="futex"), "kallsyms"
        except OSError:
            pass
    # pahole emits BTF FUNCs only for functions with a symbol: a fair stand-in.
    return None, "btf"


def _learn_clone_rule() -> tuple[str | None, str]:
    """Run cloneprobe: which clones allocate the hash? vfork, then a CLONE_VM
    clone without CLONE_THREAD, then a pthread, stopping at the first that does."""
    try:
        out = subprocess.run([str(workload_path("cloneprobe"))], capture_output=True,
                             text=True, timeout=10)
        res = json.loads(out.stdout)
    except Exception as e:   # noqa: BLE001 - any failure just leaves the rule unknown
        return None, f"cloneprobe failed: {e}"
    if res.get("after_vfork", 0) > 0:
        return "vm", "cloneprobe: a vfork (CLONE_VM|CLONE_VFORK) allocated the hash"
    if res["after_vm_clone"] > 0:
        return "vm-not-vfork", ("cloneprobe: a vfork did not allocate the hash, a CLONE_VM clone "
                                "without CLONE_THREAD did")
    if res["after_thread"] > 0:
        return "thread+vm", "cloneprobe: only the pthread clone allocated the hash"
    return None, "cloneprobe: no clone allocated a private hash"


def load(btf_path: str | None = None, kallsyms_path: str | None = None, live: bool = True) -> KernelModel:
    """Build the model. live=True also reads /proc, /sys, dmesg and runs cloneprobe;
    it is meant for the running kernel (btf_path None)."""
    btf = _open_btf(btf_path)
    ks, sym_source = _symbols(btf, kallsyms_path, live)
    notes: list[str] = []
    functions = {name: _func_info(btf, ks, name) for name in FUNCTIONS}
    offsets, mm_layout = _offsets(btf)
    sizes = {s: btf.size_of_struct(s) for s in SIZES}

    fh = functions["futex_hash"]
    hash_returns = {"pointer": "pointer", "struct": "bucket_ref"}.get(fh.return_kind or "")
    private_hash = sizes["futex_private_hash"] is not None and mm_layout is not None
    if not private_hash and btf.struct("futex_private_hash") is not None:
        notes.append("struct futex_private_hash exists but mm_struct has no futex hash pointer")

    topology = gh = None
    data_symbol = None
    clone_rule, clone_src = None, "not probed (not the live kernel)"
    release = btf.meta.get("release", "") if isinstance(btf, Digest) else ""
    if live:
        release = os.uname().release
        topology = topo_mod.read()
        gh = _global_hash(topology, notes)
        if ks is not None:
            s = ks.lookup("__futex_data") or ks.lookup("__futex_queues")
            data_symbol = s.address if s else None
        if private_hash:
            clone_rule, clone_src = _learn_clone_rule()
        else:
            clone_src = "no private hash"

    # BTF ids are only meaningful for the BTF the kernel loaded.
    loaded = live and btf_path is None
    tp_btf_ids = _tp_btf_ids(btf) if loaded else {}
    iter_btf_ids = _func_ids(btf, ITERATORS, "bpf_iter_") if loaded else {}
    func_btf_ids = _func_ids(btf, FENTRY_FUNCS) if loaded else {}

    return KernelModel(release, btf_path or VMLINUX_BTF, private_hash, mm_layout, hash_returns,
                       offsets["futex_hash_bucket.priv"] is not None, functions, offsets, sizes,
                       gh, data_symbol, topology, clone_rule, clone_src, sym_source, notes,
                       tp_btf_ids, iter_btf_ids, _futex_symbols(ks) if live else {}, func_btf_ids=func_btf_ids)


def _func_info(btf: TypeSource, ks, name: str) -> FuncInfo:
    """One function of FUNCTIONS: its prototype (BTF) and symbol (kallsyms;
    without kallsyms, taken as present when BTF has it)."""
    proto = btf.func(name)
    if ks is not None:
        sym, clone = ks.function(name)
        frags = ks.fragments(name)
    else:
        sym, clone, frags = (name if proto else None), False, []
    return FuncInfo(
        name, proto is not None, sym is not None, sym,
        proto.return_kind if proto else None, proto.return_type if proto else None,
        proto.return_size if proto else None, proto.params if proto else [], clone, frags)


def _offsets(btf: TypeSource) -> tuple[dict[str, int | None], str | None]:
    """Each of OFFSETS from the first of its paths BTF has, and mm_struct's
    futex hash layout ("flat", "nested", or None: no futex_phash)."""
    offsets: dict[str, int | None] = {}
    mm_layout = None
    for key, (sname, paths) in OFFSETS.items():
        offsets[key] = None
        for i, p in enumerate(paths):
            try:
                off = btf.offsetof(sname, p)
            except KeyError:   # digest without that struct's members
                off = None
            if off is not None:
                offsets[key] = off
                if key == "mm_struct.futex_phash":
                    mm_layout = "flat" if i == 0 else "nested"
                break
    return offsets, mm_layout


def _global_hash(topology, notes: list[str]) -> GlobalHash:
    """The global hash's size: the kernel's formula, checked against its boot
    message when dmesg still has it (a difference goes to `notes`)."""
    formula = global_hash_formula(topology.possible_cpus, len(topology.possible_nodes))
    seen = read_dmesg_line()
    if seen is None:
        return GlobalHash(formula, formula.bit_length() - 1, len(topology.possible_nodes), "formula", formula)
    n, nodes = seen
    src = "formula+dmesg" if n == formula else "dmesg"
    if n != formula:
        notes.append(f"dmesg says {n} global buckets per node, the formula gave {formula}")
    return GlobalHash(n, n.bit_length() - 1, nodes, src, formula, n)


def _tp_btf_ids(btf: TypeSource) -> dict[str, int]:
    """tracepoint -> BTF id of its btf_trace_<tp> typedef, for TP_BTF's that BTF has."""
    out = {}
    for tp in TP_BTF:
        ids = btf.ids_named(f"btf_trace_{tp}")
        if ids:
            out[tp] = ids[0]
    return out


def _func_ids(btf: TypeSource, names: list[str], prefix: str = "") -> dict[str, int]:
    """name -> BTF id of the FUNC `prefix + name`, for those BTF has."""
    out = {}
    for name in names:
        funcs = [i for i in btf.ids_named(prefix + name) if btf.get(i).kind == "FUNC"]
        if funcs:
            out[name] = funcs[0]
    return out


def _futex_symbols(ks: Kallsyms | None) -> dict[str, list]:
    if ks is None or not ks.addresses_visible:
        return {}
    return {s.name: [s.type, s.address or 0, s.next_text or 0] for s in ks.symbols if "futex" in s.name}
