"""tests/vm/vmkernels.py and kernels.py without network: mirror discovery, package choice,
the CI kernel selection."""
import json
from pathlib import Path

import kernels
import vmkernels as vk

DEB822 = """\
Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_main_archive_is_found():
    entries = list(vk._deb822_entries(DEB822))
    assert ("http://mirror.example/debian", "bookworm") in entries
    assert ("http://mirror.example/debian-security", "bookworm-security") in entries


def test_one_line_sources_with_options():
    text = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n"
    assert list(vk._one_line_entries(text)) == [("http://m.example/debian", "bookworm")]


def test_packages_per_packaging_generation():
    # 6.16-6.18: one package; 7.2+: binary + modules; 6.19-7.1: no modules package, unusable.
    assert vk._packages_for("6.18.15+deb13-amd64", {"image": {"x"}}) == ["linux-image-6.18.15+deb13-amd64"]
    assert vk._packages_for("7.3.4+deb13-amd64", {"image": {"x"}, "binary": {"x"}, "modules": {"x"}}) == [
        "linux-binary-7.3.4+deb13-amd64", "linux-modules-7.3.4+deb13-amd64"]
    assert vk._packages_for("7.0.12+deb13-amd64", {"image": {"x"}, "binary": {"x"}}) is None


def test_abi_pattern_keeps_only_the_standard_flavour():
    assert vk._ABI.match("linux-image-7.3.4+deb13-amd64")
    assert not vk._ABI.match("linux-image-7.3.4+deb13-cloud-amd64")
    assert not vk._ABI.match("linux-image-7.3.4+deb13-rt-amd64")
    assert not vk._ABI.match("linux-image-7.3.4+deb13-amd64-dbg")


def test_version_order_is_numeric():
    assert vk._version_key("6.18.15+deb13-amd64") > vk._version_key("6.18.9+deb13-amd64")


def _futex_hash_returns(digest: Path) -> str:
    """'PTR' or 'STRUCT': futex_hash's return type kind in a kernel's BTF digest,
    read here without futextrace (FUNC -> FUNC_PROTO -> return type, typedefs skipped)."""
    types = {t["id"]: t for t in json.loads(digest.read_text())["types"]}
    func = next(t for t in types.values() if t["kind"] == "FUNC" and t["name"] == "futex_hash")
    ret = types[types[func["ref"]]["ref"]]
    while ret["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        ret = types[ret["ref"]]
    return ret["kind"]


def test_ci_boots_one_kernel_of_each_layout(monkeypatch):
    """Unset FUTEXTRACE_VM_KERNELS (what ./test.sh runs): one kernel whose futex_hash
    returns a bucket pointer (6.17-7.1, hb->priv) and one returning the bucket ref by
    value (7.2+), as the BTF digests of those Debian kernels say."""
    monkeypatch.delenv("FUTEXTRACE_VM_KERNELS", raising=False)
    digests = Path(__file__).resolve().parents[1] / "data" / "btf"
    layouts = {}
    for spec in kernels.selected():
        digest = next(digests.glob(f"debian-{spec.series}.*.json"))
        layouts[_futex_hash_returns(digest)] = spec.series
    assert set(layouts) == {"PTR", "STRUCT"}, layouts
    monkeypatch.setenv("FUTEXTRACE_VM_KERNELS", "none")
    assert kernels.selected() == []
    monkeypatch.setenv("FUTEXTRACE_VM_KERNELS", "all")
    assert len(kernels.selected()) == len(kernels.MATRIX)


def test_time_limit_override(monkeypatch):
    monkeypatch.setenv("FUTEXTRACE_VM_KERNELS", "6.18,7.3")
    assert [s.timeout_s for s in kernels.selected()] == [kernels.GuestSpec("x").timeout_s] * 2
    monkeypatch.setenv("FUTEXTRACE_VM_TIMEOUT_S", "3600")
    assert [(s.series, s.timeout_s) for s in kernels.selected()] == [("6.18", 3600), ("7.3", 3600)]
