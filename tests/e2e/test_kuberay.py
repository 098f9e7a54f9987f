"""configs/kuberay/: the RayCluster and RayJob manifests parse, the RayJob runs the README's `ray job submit`
command, and every worker requests the accelerators it declares to Ray as the resource msopt reserves."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "configs" / "kuberay"
#: The device plugins' resource names and the Ray resource msopt reserves for each ([cluster] accelerator).
DEVICES = {"huawei.com/Ascend910": "NPU", "nvidia.com/gpu": "GPU"}


def manifest(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((KUBERAY / name).read_text(encoding="utf-8"))
    assert doc["apiVersion"] == "ray.io/v1"
    return doc


def readme_job_command() -> list[str]:
    """The msopt command of the README's `ray job submit ... -- msopt ...` line."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("ray job submit "))
    return shlex.split(line.split(" -- ", 1)[1].split("#")[0])


def ray_resources(params: dict[str, str]) -> dict[str, float]:
    """rayStartParams' resources ('"{\\"NPU\\": 8}"', KubeRay's quoting) and num-gpus, as Ray reads them."""
    out: dict[str, float] = {}
    if "resources" in params:
        inner = yaml.safe_load(params["resources"])  # the outer quotes: a JSON string
        out.update(yaml.safe_load(inner))
    if "num-gpus" in params:
        out["GPU"] = float(params["num-gpus"])
    return out


def cluster_specs() -> list[dict[str, Any]]:
    return [manifest("raycluster.yaml")["spec"], manifest("rayjob.yaml")["spec"]["rayClusterSpec"]]


def test_the_rayjob_runs_the_readme_command():
    job = manifest("rayjob.yaml")
    assert job["kind"] == "RayJob"
    assert shlex.split(job["spec"]["entrypoint"]) == readme_job_command()
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime["working_dir"]  # the repository: configs/quickstart.toml is relative to it
    argv = readme_job_command()
    assert argv[:2] == ["msopt", "optimize"] and argv[argv.index("--address") + 1] == "auto"
    assert (ROOT / argv[argv.index("-c") + 1]).is_file()


@pytest.mark.parametrize("spec", cluster_specs(), ids=["raycluster", "rayjob"])
def test_workers_request_what_they_declare_to_ray(spec):
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no trial on the head, which holds the driver
    argv = readme_job_command()
    runs = argv[argv.index("-o") + 1].replace("~", "/home/ray")
    mounts = [m["mountPath"] for c in head["template"]["spec"]["containers"] for m in c.get("volumeMounts", [])]
    assert runs in mounts  # the run directories live on the head, where the driver writes them
    config = tomllib.loads((ROOT / argv[argv.index("-c") + 1]).read_text(encoding="utf-8"))
    per_trial = config["cluster"]["devices_per_trial"]
    for group in spec["workerGroupSpecs"]:
        declared = ray_resources(group["rayStartParams"])
        (container,) = group["template"]["spec"]["containers"]
        res = container["resources"]
        assert res["requests"] == res["limits"]
        plugins = {k: v for k, v in res["limits"].items() if k in DEVICES}
        assert plugins, "a worker requests no accelerator"
        for plugin, count in plugins.items():
            ray_name = DEVICES[plugin]
            assert declared.get(ray_name) == count, (plugin, declared)
            assert ray_name == config["cluster"]["accelerator"].upper()
            assert count % per_trial == 0  # whole trials per node
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_the_manifests_are_the_same_cluster():
    a, b = cluster_specs()
    assert a["workerGroupSpecs"] == b["workerGroupSpecs"] and a["rayVersion"] == b["rayVersion"]
    assert a["headGroupSpec"]["rayStartParams"] == b["headGroupSpec"]["rayStartParams"]
    images = {c["image"] for s in (a, b) for g in (s["headGroupSpec"], *s["workerGroupSpecs"])
              for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1  # one image: msopt and the engine on every pod
