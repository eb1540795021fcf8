"""deploy/kubernetes/daemonset.yaml: valid for the Kubernetes API, offline, and consistent
with the systemd unit, the image and the exporter's command line.

kubernetes-validate (PyPI) ships the API's JSON schemas: every document is checked in
strict mode (unknown fields are errors) against each Kubernetes version it ships."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.helpers.deployfiles import DAEMONSET, containerfile_instructions, unit_capabilities

kv = pytest.importorskip("kubernetes_validate", reason="pip install -e .[test] (kubernetes-validate)")
yaml = pytest.importorskip("yaml")

SCHEMAS = Path(kv.__file__).parent / "kubernetes-json-schema"
VERSIONS = sorted({d.name.split("-")[0].lstrip("v") for d in SCHEMAS.iterdir() if d.name.endswith("-local-strict")},
                  key=lambda v: tuple(map(int, v.split("."))))


def documents() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one document of each kind"
    return by_kind


def pod_spec() -> dict:
    return documents()["DaemonSet"]["spec"]["template"]["spec"]


def container() -> dict:
    (c,) = pod_spec()["containers"]
    return c


@pytest.mark.parametrize("version", VERSIONS)
def test_every_document_is_valid_for_the_api(version):
    for kind, doc in documents().items():
        kv.validate(doc, version, strict=True)


def test_the_validator_rejects_a_misspelt_field():
    ds = copy.deepcopy(documents()["DaemonSet"])
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilites"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, VERSIONS[-1], strict=True)


def test_capabilities_are_the_units():
    sc = container()["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sorted(sc["capabilities"]["add"]) == sorted(c.removeprefix("CAP_") for c in unit_capabilities())
    assert sc["runAsUser"] == 0 and sc["allowPrivilegeEscalation"] is False   # NoNewPrivileges
    assert pod_spec()["hostPID"] is True          # labels are host PIDs


def test_args_are_a_serve_command_the_cli_accepts():
    from futextrace.commands.serve import command
    args = container()["args"]
    assert args[0] == "serve"
    ctx = command.make_context("serve", list(args[1:]))
    addr, port = ctx.params["listen"].rsplit(":", 1)
    assert addr == "0.0.0.0"
    (p,) = container()["ports"]
    assert p["containerPort"] == int(port)
    annotations = documents()["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == port
    svc = documents()["Service"]["spec"]
    assert svc["ports"][0]["targetPort"] == p["name"] and svc["ports"][0]["port"] == int(port)


def test_the_image_entrypoint_runs_futextrace():
    entry = dict(containerfile_instructions())["ENTRYPOINT"]
    assert entry.strip('[]"').endswith("/.venv/bin/futextrace")
    assert container()["image"].split("/")[-1].startswith("futextrace:")


def test_labels_service_account_and_volumes_fit_together():
    docs = documents()
    ds, svc, sa = docs["DaemonSet"], docs["Service"], docs["ServiceAccount"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert pod_spec()["serviceAccountName"] == sa["metadata"]["name"]
    assert {d["metadata"]["namespace"] for d in docs.values()} == {ds["metadata"]["namespace"]}
    volumes = {v["name"] for v in pod_spec()["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}
    assert set(mounts) == volumes
    # The root filesystem is read-only: the cache the exporter writes must be a volume.
    assert container()["securityContext"]["readOnlyRootFilesystem"] is True
    assert "/var/cache/futextrace" in mounts.values() and "/tmp" in mounts.values()   # the default cache
