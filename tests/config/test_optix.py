"""Issue 51 item 14: msmodeling optix (Ascend/msmodeling at 84fec85, the original tool's successor): its config.toml
loads, its keys and CLI spellings are read as msopt's, its ``share`` dtype and its fitness are msopt's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.errors import ConfigError

#: optix/config.toml's keys msopt did not know (Ascend/msmodeling 84fec85: use_request_rate_calibration at line 12,
#: [benchmark_early_exit] at its end), with its MindIE load fields
OPTIX = '''n_particles = 8
iters = 4
ttft_penalty = 3
tpot_penalty = 1
success_rate_penalty = 5
ttft_slo = 2
tpot_slo = 0.05
use_request_rate_calibration = {calibrate}
[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 25
max = 300
dtype = "int"
[[mindie.target_field]]
name = "{concurrency}"
config_position = "env"
min = 1
max = 1001
dtype = "int"
value = 100
[[mindie.target_field]]
name = "REQUESTRATE"
config_position = "env"
min = 1
max = 1001
dtype = "float"
value = 100
[benchmark_early_exit]
enabled = false
action = "terminate"
metrics_url = "http://127.0.0.1:8000/metrics"
'''


def _load(tmp_path: Path, text: str, **kw):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_settings(path, "mindie", **kw)


def _fields(settings) -> dict:
    return {d.name: d for d in settings.fields}


def test_use_request_rate_calibration_holds_the_load_as_optix_does(tmp_path: Path) -> None:
    """optix/optimizer/optimizer.py:662-680 (adapter_target_field): REQUESTRATE at its max in both modes, with true
    CONCURRENCY (or MAXCONCURRENCY) too; msopt's [capacity] then looks for the highest rate (true) or concurrency."""
    on = _load(tmp_path, OPTIX.format(calibrate="true", concurrency="CONCURRENCY"), environ={})
    f = _fields(on)
    assert f["CONCURRENCY"].constant == 1001 and f["REQUESTRATE"].constant == 1001 and f["max_batch_size"].constant is None
    assert on.config.capacity.table["load"] == "request_rate" and on.config.capacity.table["enabled"] is True
    assert any("use_request_rate_calibration = true" in n for n in on.notes)
    assert any("[benchmark_early_exit] (optix's, switched off) ignored" in n for n in on.notes)
    off = _load(tmp_path, OPTIX.format(calibrate="false", concurrency="CONCURRENCY"), environ={})
    f = _fields(off)
    assert f["CONCURRENCY"].constant is None and f["REQUESTRATE"].constant == 1001
    assert off.config.capacity.table["load"] == "concurrency"
    mine = _load(tmp_path, OPTIX.format(calibrate="true", concurrency="CONCURRENCY") + '[capacity]\nload = "concurrency"\n',
                 environ={})
    assert mine.config.capacity.table["load"] == "concurrency"  # the user's own [capacity] wins


def test_maxconcurrency_is_the_concurrency(tmp_path: Path) -> None:
    """optix/config/constant.py:29 CONCURRENCYS = ("CONCURRENCY", "MAXCONCURRENCY"): the same load field."""
    s = _load(tmp_path, OPTIX.format(calibrate="false", concurrency="MAXCONCURRENCY"), environ={})
    assert "CONCURRENCY" in _fields(s) and "MAXCONCURRENCY" not in _fields(s)
    both = OPTIX.format(calibrate="false", concurrency="MAXCONCURRENCY") + (
        '[[mindie.target_field]]\nname = "CONCURRENCY"\nconfig_position = "env"\nmin = 1\nmax = 10\ndtype = "int"\n')
    with pytest.raises(ConfigError, match="both CONCURRENCY and MAXCONCURRENCY"):
        _load(tmp_path, both, environ={})


def test_optix_tables_msopt_does_otherwise_are_refused_in_one_line(tmp_path: Path) -> None:
    """optix/config.toml: [deploy] path_prefix (the deploy root, OPTIX_DEPLOY_PATH) and [benchmark_early_exit]."""
    base = OPTIX.format(calibrate="true", concurrency="CONCURRENCY")
    with pytest.raises(ConfigError, match=r"\[deploy\] path_prefix .* executable"):
        _load(tmp_path, base + '[deploy]\npath_prefix = "/opt/deploy"\n', environ={})
    with pytest.raises(ConfigError, match=r"\[benchmark_early_exit\] enabled = true .* max_launches"):
        _load(tmp_path, base.replace("enabled = false", "enabled = true"), environ={})
    assert _load(tmp_path, base + "[deploy]\n", environ={}).fields


def test_optix_environment_the_config_path_in_any_case_and_the_rest_named(tmp_path: Path) -> None:
    """optix/config/config.py: pydantic-settings with env prefix model_eval_state_ (any case); msopt reads the config
    path in both spellings and names every other such variable as not read."""
    layer = tmp_path / "layer.toml"
    layer.write_text("iters = 7\n")
    s = _load(tmp_path, OPTIX.format(calibrate="true", concurrency="CONCURRENCY").replace("iters = 4\n", ""),
              environ={"model_eval_state_config_path": str(layer), "MODEL_EVAL_STATE_N_PARTICLES": "3"})
    assert s.config.run.iters == 7 and s.config.run.n_particles == 8
    assert any("$MODEL_EVAL_STATE_N_PARTICLES: optix reads it as the key 'n_particles', msopt does not" in n
               for n in s.notes)


def test_msopt_optix_takes_optixs_flags_and_defaults() -> None:
    """docs/design/optix-service-parameter-optimizer-design.md "CLI 参数": --engine/-e (mindie), --benchmark_policy/-b
    (ais_bench), --config/-c, --backup, --load_breakpoint/-lb."""
    from msopt.cli.main import build_parser

    args = build_parser().parse_args(["optix", "-c", "x.toml", "--backup"])
    assert args.original_defaults and args.backup and args.config == "x.toml"
    args = build_parser().parse_args(["optix", "--engine", "vllm", "--benchmark_policy", "vllm_benchmark", "-lb"])
    assert args.engine == "vllm" and args.benchmark == "vllm_benchmark" and args.load_breakpoint


@pytest.mark.parametrize(("lo", "hi", "value"), [(1, 3, 1), (1, 3, 3), (0, 16, 5), (8, 64, 64)])
def test_share_is_optixs_for_integer_targets(lo: int, hi: int, value: int) -> None:
    """optix/config/config.py:606-612 (_update_share_field): int(target.min + target.max - target.value)."""
    from msopt.space import FieldDecl, SearchSpace

    fields = [FieldDecl(name="p", config_position="env", min=lo, max=hi, dtype="int", value=value),
              FieldDecl(name="d", config_position="env", min=lo, max=hi, dtype="share", dtype_param="p")]
    space = SearchSpace(fields)
    decoded = space.decode(space.encode({"p": value})).values
    assert decoded["d"] == int(lo + hi - value) and isinstance(decoded["d"], int)


def test_the_default_fitness_is_optixs() -> None:
    """optix/optimizer/performance_tunner.py:30-80 (PerformanceTuner.calculate_cost): 0.4 target/speed +
    0.2 exp(k_ttft (TTFT/slo - 1)) + 0.3 exp(k_tpot (TPOT/slo - 1)) + 0.1 exp(k_succ (slo/success - 1))."""
    from msopt.evaluate.objective import make_objective

    slo = {"generate_speed_target": 5300.0, "ttft_slo": 2.0, "tpot_slo": 0.05, "success_rate_slo": 1.0,
           "ttft_penalty": 3.0, "tpot_penalty": 1.0, "success_rate_penalty": 5.0}
    m = {"generate_speed": 3400.0, "time_to_first_token": 2.4, "time_per_output_token": 0.042, "success_rate": 0.98,
         "throughput": 2.0}
    optix = (0.4 * 5300.0 / 3400.0 + 0.2 * math.exp(3.0 * (2.4 / 2.0 - 1)) + 0.3 * math.exp(1.0 * (0.042 / 0.05 - 1))
             + 0.1 * math.exp(5.0 * (1.0 / 0.98 - 1)))
    assert make_objective("default", slo)(m) == pytest.approx(optix)
