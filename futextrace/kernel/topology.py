"""CPUs and NUMA nodes from /sys/devices/system (what the kernel itself counts)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

SYS = Path("/sys/devices/system")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass
class Topology:
    online_cpus: list[int]
    possible_cpus: int
    cpu_node: dict[int, int]
    nodes: list[int]                  # online nodes
    possible_nodes: list[int]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cpu_node"] = {str(k): v for k, v in self.cpu_node.items()}
        return d


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except OSError:
        return None


def nr_cpu_ids(sys_root: Path = SYS) -> int:
    """One more than the highest possible CPU number: the range of
    bpf_get_smp_processor_id()."""
    possible = parse_cpulist(_read(sys_root / "cpu/possible") or "") or [os.cpu_count() - 1]
    return max(possible) + 1


def read(sys_root: Path = SYS) -> Topology:
    online = parse_cpulist(_read(sys_root / "cpu/online") or "0")
    possible = parse_cpulist(_read(sys_root / "cpu/possible") or "") or online
    # Without CONFIG_NUMA there is no node directory: everything is node 0.
    nodes = parse_cpulist(_read(sys_root / "node/online") or "0")
    pnodes = parse_cpulist(_read(sys_root / "node/possible") or "") or nodes
    cpu_node = {c: 0 for c in online}
    for n in nodes:
        cpus = _read(sys_root / f"node/node{n}/cpulist")
        for c in parse_cpulist(cpus or ""):
            cpu_node[c] = n
    return Topology(online, len(possible), cpu_node, nodes, pnodes)


def node_macros(possible_nodes: list[int]) -> dict[str, str | int]:
    """The BPF side's view of node_possible_map, as the kernel's __futex_hash()
    uses it: NR_NODE_IDS (highest possible node + 1), NODE_POSSIBLE(n), and
    NODE_WRAP(n), which moves a node that is not possible to the next possible
    one, wrapping (find_next_bit_wrap). Both are the identity on the usual
    dense node maps."""
    possible = sorted(set(possible_nodes)) or [0]
    nr = possible[-1] + 1
    holes = [n for n in range(nr) if n not in possible]
    wrap, test = "(n)", "1"
    for n in reversed(holes):
        nxt = next(p for p in possible if p > n)   # the last node is possible: no wrap needed
        wrap = f"((n) == {n} ? {nxt} : {wrap})"
        test = f"((n) != {n} && {test})"
    return {"NR_NODE_IDS": nr, "NODE_POSSIBLE(n)": f"((n) < {nr} && {test})", "NODE_WRAP(n)": wrap}
