"""The exported best configuration follows the HCCL port plan its trials ran with (issue 51 item 6): where
CANN forbids HCCL_HOST_SOCKET_PORT_RANGE and HCCL_NPU_SOCKET_PORT_RANGE (CANN 9.0 hcclenvref_07_0020/0021,
"使用约束": Atlas A2 with MC² fused operators, "不支持配置此环境变量"), the exported launch sets neither and
unsets both, so the user's shell cannot supply them; elsewhere nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

from msopt.config import load_settings
from msopt.launch.hccl import HOST_RANGE, IF_BASE, NPU_RANGE
from msopt.report.export import export_best
from msopt.space import SearchSpace

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _export(name: str, tmp_path: Path) -> Path:
    config = load_settings(CONFIGS / name).config
    space = SearchSpace(config.engine.fields)
    export_best(config, dict(space.decode(space.default_position()).values), tmp_path)
    return tmp_path


def test_deepseek_v3_on_atlas_a2_exports_no_range_and_unsets_both(tmp_path: Path) -> None:
    """configs/deepseek_v3_atlas_multinode.toml: DeepSeek-V3 (MoE) on Atlas 800I A2, one script per node."""
    out = _export("deepseek_v3_atlas_multinode.toml", tmp_path)
    for script in ("best_command.sh", "best_command_node1.sh"):
        lines = (out / script).read_text().splitlines()
        assert f"unset {HOST_RANGE}" in lines and f"unset {NPU_RANGE}" in lines
        assert not any(line.startswith(f"export {HOST_RANGE}") or line.startswith(f"export {NPU_RANGE}")
                       for line in lines)
        assert any(line.startswith(f"export {IF_BASE}=") for line in lines)
    record = json.loads((out / "best_command.json").read_text())
    assert all(n["unset"] == [HOST_RANGE, NPU_RANGE] for n in record["nodes"])


def test_a_mindie_pd_export_unsets_them_per_instance(tmp_path: Path) -> None:
    """configs/mindie_pd_atlas_a2.toml: Qwen3-30B-A3B (MoE) on Atlas 800I A2, each instance's line."""
    out = _export("mindie_pd_atlas_a2.toml", tmp_path)
    lines = [ln for ln in (out / "best_command.sh").read_text().splitlines() if "mindieservice_daemon" in ln]
    assert lines and all(f"-u {HOST_RANGE} -u {NPU_RANGE} " in ln and f"{HOST_RANGE}=" not in ln for ln in lines)


def test_an_export_without_hccl_is_unchanged(tmp_path: Path) -> None:
    """The quick start (vLLM on a GPU) has no HCCL variable: no unset line."""
    out = _export("quickstart.toml", tmp_path)
    assert "unset " not in (out / "best_command.sh").read_text()
    assert "unset" not in json.loads((out / "best_command.json").read_text())
