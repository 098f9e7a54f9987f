"""Issue 36 item 7: vllm-ascend's release candidates on newer vLLM (v0.25.1rc1 on 0.25.1, releases/v0.26.0rc
on 0.26.0, main on 0.27.1): their flag and --additional-config key tables, [vllm] version, and preflight picking
the tables of the installed vLLM."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from msopt.engines import get_engine
from msopt.engines.vllm.adapter import additional_config_keys, check_installed_additional_config, flag_table
from msopt.engines.vllm.target import ASCEND_RELEASES, VLLM_VERSIONS, target
from msopt.errors import ConfigError
from msopt.space.fields import parse_field

ROOT = Path(__file__).parents[2]


def test_every_pair_has_both_tables() -> None:
    assert {"0.25.1", "0.26.0", "0.27.1"} <= set(ASCEND_RELEASES) <= set(VLLM_VERSIONS)
    for version, release in ASCEND_RELEASES.items():
        assert "--additional-config" in flag_table(version) and "--max-num-seqs" in flag_table(version)
        assert "eplb_config" in additional_config_keys(release)
    assert target({"platform": "ascend", "version": "0.27.1"}) == ("ascend", "0.27.1")
    with pytest.raises(ConfigError, match="msopt knows vllm-ascend only on vLLM 0.23.0, 0.25.1, 0.26.0, 0.27.1"):
        target({"platform": "ascend", "version": "0.33.0"})


def _field(position: str) -> list:
    return [parse_field({"name": "x", "config_position": position, "dtype": "bool", "min": 0, "max": 1},
                        source="t.toml", section="vllm", index=0)]


def test_each_release_checks_its_own_keys() -> None:
    vllm = get_engine("vllm")
    # main (vLLM 0.27.1) reads dynamic_spec_config; v0.25.1rc1 does not (it would be ignored there)
    vllm.check(_field("additional_config.dynamic_spec_config.method"), {"platform": "ascend", "version": "0.27.1"})
    with pytest.raises(ConfigError, match="'dynamic_spec_config' is not read by vllm-ascend 0.25.1rc1"):
        vllm.check(_field("additional_config.dynamic_spec_config.method"), {"platform": "ascend", "version": "0.25.1"})
    # from 0.25 the scheduler's tables are read under scheduler_config too
    vllm.check(_field("additional_config.scheduler_config.profiling_chunk_config.enabled"),
               {"platform": "ascend", "version": "0.26.0"})
    with pytest.raises(ConfigError, match="'scheduler_config' is not read by vllm-ascend 0.23.0.post1"):
        vllm.check(_field("additional_config.scheduler_config.profiling_chunk_config.enabled"),
                   {"platform": "ascend", "version": "0.23.0"})


def test_preflight_checks_the_installed_vllms_tables() -> None:
    argv = ["vllm", "serve", "M", "--additional-config", json.dumps({"dynamic_spec_config": {"method": "x"}})]
    ok, detail = check_installed_additional_config(argv, "0.27.1")
    assert ok and "vllm-ascend main-182b75ea" in detail
    ok, detail = check_installed_additional_config(argv, "vllm 0.25.1")
    assert not ok and "'dynamic_spec_config' is not read by vllm-ascend 0.25.1rc1" in detail
    ok, detail = check_installed_additional_config(argv, "0.33.0")
    assert ok and "not checked" in detail
    assert check_installed_additional_config(["vllm", "serve", "M"], "0.27.1") is None
    checks = get_engine("vllm").version_checks([*argv, "--max-num-seqs", "8"], "vllm 0.25.1", 1)
    assert [c[0] for c in checks] == ["flags", "additional_config"] and checks[0][1] and not checks[1][1]


def _source(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm_ascend-x/vllm_ascend/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_script_reads_the_scheduler_tables_of_the_newer_layout(tmp_path: Path) -> None:
    # the layout of vllm-ascend main (vllm_ascend/ascend_config.py, 182b75ea): a table under scheduler_config,
    # also read at the top level through SchedulerConfig._get_config_value
    config = '''
class AscendConfig:
    def __init__(self, vllm_config):
        additional_config = vllm_config.additional_config or {}
        eplb_config = additional_config.get("eplb_config", {})
        self.eplb_config = EplbConfig(eplb_config)
        self.scheduler_config = SchedulerConfig(additional_config, balance_env_value=0)

class EplbConfig:
    def __init__(self, user_config):
        self.n = user_config.get("num_redundant_experts", 0)

class ProfilingChunkConfig:
    def __init__(self, config):
        self.enabled = config.get("enabled", False)

class SchedulerConfig:
    def __init__(self, additional_config, balance_env_value):
        scheduler_config = additional_config.get("scheduler_config") or {}
        self.profiling_chunk_config = ProfilingChunkConfig(
            self._get_config_value(scheduler_config, additional_config, "profiling_chunk_config", {}))

    @staticmethod
    def _get_config_value(scheduler_config, additional_config, key, default):
        return scheduler_config.get(key, additional_config.get(key, default))
'''
    sdist = tmp_path / "va.tar.gz"
    sdist.write_bytes(_source({"ascend_config.py": config, "__init__.py": ""}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "generators" / "ascend_config_keys.py"), str(sdist)],
                         capture_output=True, text=True, check=True).stdout
    keys = {ln for ln in out.splitlines() if ln and not ln.startswith("#")}
    assert {"eplb_config.num_redundant_experts", "scheduler_config", "profiling_chunk_config",
            "profiling_chunk_config.enabled", "scheduler_config.profiling_chunk_config.enabled"} <= keys
    assert not any(k.startswith("weight_prefetch_config") for k in keys)  # no such class: not listed
