"""msopt.sim.calibrate and ``msopt calibrate``: measurements in, fitted hardware TOML out."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

from msopt.cli.main import main
from msopt.errors import ConfigError
from msopt.sim import EngineKnobs, load_hardware, simulate
from msopt.sim.calibrate import Measurement, fit_hardware, load_measurements_csv, mape, simulate_measurements
from msopt.sim.catalog_load import hardware_toml
from msopt.sim.launch_rules import LAUNCH_RULES

REFERENCE = Path(__file__).resolve().parents[1] / "data"
SGLANG_CSV = REFERENCE / "sglang_measured_qwen3_32b_h100.csv"
VLLM_CSV = REFERENCE / "vllm_measured_qwen3_32b_h100.csv"


def _small_csv(tmp_path: Path, rows: int = 6) -> Path:
    lines = SGLANG_CSV.read_text().splitlines()
    path = tmp_path / "measured.csv"
    path.write_text("\n".join(lines[: rows + 1]) + "\n")
    return path


def test_reference_csvs_load_with_their_engines():
    sg = load_measurements_csv(SGLANG_CSV)
    vl = load_measurements_csv(VLLM_CSV)
    assert len(sg) == 84 and {m.engine for m in sg} == {"sglang"}
    assert len(vl) == 90 and {m.engine for m in vl} == {"vllm"}
    assert all(m.model == "qwen3-32b" for m in sg + vl)
    assert load_measurements_csv(SGLANG_CSV, engine="vllm") == []
    m = sg[0]
    assert math.isclose(m.tokens_per_s, m.concurrency * m.output_len / (m.ttft_s + m.tpot_s * (m.output_len - 1)))


def test_sglang_runs_every_measured_configuration():
    """SGLang ran all 84 (tp 1 included): the simulator must not refuse any of them."""
    rows = load_measurements_csv(SGLANG_CSV)
    sim = simulate_measurements(rows, load_hardware("h100-sxm"), prompts_per_slot=2)
    assert not np.isnan(sim).any()
    assert mape(rows, sim)["refused"] == 0


def test_sglang_keeps_its_own_message_when_nothing_fits():
    """Qwen3-32B's 61 GiB of bf16 weights exceed 0.7 x 80 GiB: SGLang's KV sizing has no budget left and says so
    (sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3043-3058)."""
    wl = {"input_len": 128, "output_len": 8, "num_prompts": 4, "concurrency": 2}
    res = simulate(EngineKnobs(engine="sglang", tp=1, memory_fraction=0.7), "h100-sxm", "qwen3-32b", wl)
    assert res.error is not None
    assert res.error.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                "--mem-fraction-static=0.7.")
    assert "max_model_len" not in res.error


def test_sglang_below_context_length_warns_and_serves():
    res = simulate(EngineKnobs(engine="sglang", tp=1), "h100-sxm", "qwen3-32b",
                   {"input_len": 1024, "output_len": 64, "num_prompts": 8, "concurrency": 4})
    assert res.error is None and res.success_rate == 1.0
    assert any("fewer than --context-length" in line for line in res.log_lines)
    assert 0 < res.kv_cache_tokens < 40960


def test_bad_csv_names_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.csv"
    text = SGLANG_CSV.read_text().splitlines()
    path.write_text(text[0] + "\n" + text[1].replace(",16,", ",sixteen,", 1) + "\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:2"):
        load_measurements_csv(path)
    (tmp_path / "cols.csv").write_text("model,engine\nx,vllm\n")
    with pytest.raises(ConfigError, match="missing column"):
        load_measurements_csv(tmp_path / "cols.csv")


@pytest.mark.slow
def test_fit_recovers_a_perturbed_entry():
    """Rows 'measured' on an entry with a slower step overhead: the fit moves toward it."""
    truth = dataclasses.replace(load_hardware("h100-sxm"), step_overhead_ms=9.0)
    knobs = [EngineKnobs(engine="vllm", tp=tp) for tp in (2, 4, 8)]
    rows = []
    for k in knobs:
        for c in (8, 32):
            rows.append(Measurement(knobs=k, model="qwen3-32b", input_len=1024, output_len=64, concurrency=c,
                                    ttft_s=1.0, tpot_s=1.0, tokens_per_s=1.0))
    sim = simulate_measurements(rows, truth, prompts_per_slot=3)
    rows = [dataclasses.replace(m, ttft_s=s[0], tpot_s=s[1], tokens_per_s=s[2]) for m, s in zip(rows, sim)]
    cal = fit_hardware(rows, load_hardware("h100-sxm"), rounds=2, folds=2, prompts_per_slot=3)
    assert cal.after["tpot"] < cal.before["tpot"] / 2
    assert cal.factors["vllm.step_overhead_ms"] > 5.0
    assert cal.hardware.engine_overrides["vllm"]["step_overhead_ms"] == cal.factors["vllm.step_overhead_ms"]
    assert set(cal.cross_validated) >= {"ttft", "tpot", "tokens_per_s", "refused"}
    assert cal.cross_validated["tpot"] < cal.before["tpot"]


def test_hardware_toml_round_trip(tmp_path: Path):
    hw = dataclasses.replace(load_hardware("h100-sxm"), name="mine", compute_eff=0.7123,
                             description='a "quoted" \\ name\nsecond line',
                             engine_overrides={"sglang": {"step_overhead_ms": 2.5, "reserve_gib": 1.0}})
    path = tmp_path / "mine.toml"
    path.write_text(hardware_toml(hw, "a header\nsecond line"))
    assert load_hardware(path) == hw
    assert load_hardware(str(path)).for_engine("sglang").step_overhead_ms == 2.5
    assert load_hardware(path).for_engine("vllm").step_overhead_ms == hw.step_overhead_ms


def test_engine_overrides_reject_unknown_keys(tmp_path: Path):
    text = hardware_toml(load_hardware("h100-sxm")) + "\n[engines.vllm]\ncompute = 0.5\n"
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"engines\.vllm: unknown key"):
        load_hardware(path)


def test_cli_calibrate_writes_a_usable_hardware_file(tmp_path: Path, capsys: pytest.CaptureFixture):
    out = tmp_path / "cal" / "h100-fit.toml"
    rc = main(["calibrate", str(_small_csv(tmp_path)), "--rounds", "1", "--folds", "2",
               "--prompts-per-slot", "2", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "MAPE before" in text and "MAPE after" in text and "2-fold cross-validated" in text
    hw = load_hardware(out)
    assert hw.name == "h100-fit" and "sglang" in hw.engine_overrides
    res = simulate(EngineKnobs(engine="sglang", tp=4), str(out), "qwen3-32b",
                   {"input_len": 512, "output_len": 32, "num_prompts": 8, "concurrency": 4})
    assert res.error is None


@pytest.mark.parametrize("argv, needle", [
    (["-o", "x.txt"], ".toml"),
    (["-e", "mindie", "-o", "x.toml"], "no usable measurements"),
])
def test_cli_calibrate_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, argv, needle):
    rc = main(["calibrate", str(_small_csv(tmp_path)), "--folds", "0", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_calibrate_from_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture):
    """A journal of real evaluations: metrics 30 % slower than the catalog simulates them."""
    from msopt.config import load_settings
    from msopt.evaluate.evaluator import Evaluator
    from msopt.evaluate.results import EvalRequest, EvaluationResult
    from msopt.run.store import RunStore
    from msopt.space import DecodeContext, SearchSpace

    text = (Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    for key, new in (("sample_size", "32"), ("num_prompts", "48"), ("concurrency", "16")):
        text, k = re.subn(rf"^{key} = .*$", f"{key} = {new}", text, count=1, flags=re.M)
        assert k == 1, key
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(text)
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "out", settings.config, run_id="measured")
    evaluator = Evaluator(settings.config, simulate=True)
    rng = np.random.default_rng(3)
    low, high = space.bounds
    n = 0
    for i in range(30):
        d = space.decode(rng.uniform(low, high), DecodeContext(i % 4, 4, i // 4))
        res = evaluator.evaluate(EvalRequest(i, "search", i % 4, i // 4, tuple(d.position.tolist())))
        if res.error:
            continue
        m = dict(res.metrics)
        m["time_to_first_token"] *= 1.3
        m["time_per_output_token"] *= 1.3
        m["generate_speed"] /= 1.3
        store.append(EvaluationResult(eval_id=i, phase="search", particle=i % 4, iteration=i // 4,
                                      position_in=list(d.position), position=list(d.position),
                                      values=res.values, metrics=m, fitness=1.0, num_prompts=res.num_prompts))
        n += 1
        if n == 5:
            break
    store.close()
    assert n == 5
    out = tmp_path / "fit.toml"
    rc = main(["calibrate", str(store.run_dir), "--rounds", "1", "--folds", "0", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "5 measured runs (vllm), starting from atlas-800i-a2" in text
    before = float(text.split("MAPE before:")[1].split("TTFT")[1].split("%")[0])
    after = float(text.split("MAPE after (in-sample):")[1].split("TTFT")[1].split("%")[0])
    assert before > 15 and after < before
    assert load_hardware(out).name == "fit"


def test_aiconfigurator_rule_renders_the_generators_flags():
    """aiconfigurator 0.5.0-0.12.0 generator/rule_plugin/vllm.rule: tokens = batch + ISL + 1500."""
    rule = LAUNCH_RULES.get("aiconfigurator")
    assert rule("vllm", 1024, 128, 64) == ["--max-num-seqs", "64", "--max-num-batched-tokens", "2588",
                                           "--max-model-len", "2652"]
    assert rule("sglang", 4096, 512, 8) == ["--max-running-requests", "8", "--max-prefill-tokens", "5596"]
    vl = load_measurements_csv(VLLM_CSV)
    assert {(m.knobs.max_num_seqs, m.knobs.max_num_batched_tokens) for m in vl[:1]} == {
        (vl[0].concurrency, vl[0].concurrency + vl[0].input_len + 1500)}
    sg = load_measurements_csv(SGLANG_CSV)
    assert all(m.knobs.max_prefill_tokens == m.input_len + 1500 for m in sg)
    plain = load_measurements_csv(VLLM_CSV, launch_rule="engine-defaults")
    assert all(m.knobs.max_num_batched_tokens is None and m.knobs.max_num_seqs is None for m in plain)
    assert [m.knobs.tp for m in plain] == [m.knobs.tp for m in vl]


def test_server_args_column_wins_over_the_rule(tmp_path: Path):
    lines = VLLM_CSV.read_text().splitlines()
    path = tmp_path / "flags.csv"
    path.write_text("\n".join([lines[0] + ",server_args", lines[1] + ",\"--max-num-batched-tokens 512 "
                               "--max-num-seqs 4\"", lines[2] + ","]) + "\n")
    given, ruled = load_measurements_csv(path)
    assert (given.knobs.max_num_batched_tokens, given.knobs.max_num_seqs) == (512, 4)
    assert ruled.knobs.max_num_batched_tokens == ruled.concurrency + ruled.input_len + 1500
    path.write_text("\n".join([lines[0] + ",server_args", lines[1] + ",--max-num-seqs lots"]) + "\n")
    with pytest.raises(ConfigError, match=r"flags\.csv:2: .*max-num-seqs"):
        load_measurements_csv(path)


def test_launch_rule_changes_what_is_simulated():
    """The reference rows were launched with aiconfigurator's flags; with vLLM's own defaults the
    simulated TTFT is far off (docs/simulator.md has both figures)."""
    hw = load_hardware("h100-sxm")
    rows = [m for m in load_measurements_csv(VLLM_CSV) if m.input_len == 1024 and m.concurrency >= 64]
    plain = load_measurements_csv(VLLM_CSV, launch_rule="engine-defaults")
    plain = [m for m in plain if m.input_len == 1024 and m.concurrency >= 64]
    ruled = mape(rows, simulate_measurements(rows, hw, prompts_per_slot=4))["ttft"]
    default = mape(plain, simulate_measurements(plain, hw, prompts_per_slot=4))["ttft"]
    assert ruled < default


def test_cli_calibrate_rejects_an_unknown_launch_rule(tmp_path: Path, capsys: pytest.CaptureFixture):
    rc = main(["calibrate", str(_small_csv(tmp_path)), "--launch-rule", "aiconfigurater", "-o",
               str(tmp_path / "x.toml")])
    err = capsys.readouterr().err
    assert rc == 2 and "aiconfigurator" in err and "engine-defaults" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.toml").exists()


GAP_VLLM = REFERENCE / "vllm_measured_gap_analysis.csv"


def test_gap_analysis_rows_name_their_hardware():
    rows = load_measurements_csv(GAP_VLLM, engine="vllm")
    assert {(m.model, m.hardware) for m in rows} == {
        ("qwen3-32b", "h100-sxm"), ("qwen3-235b-a22b", "h200-sxm"), ("llama-3.1-8b", "h200-sxm")}


def test_on_hardware_keeps_the_datasheet_and_takes_the_factors():
    from msopt.sim.calibrate import on_hardware

    fitted = dataclasses.replace(load_hardware("h100-sxm"), compute_eff=0.5, step_overhead_ms=7.0,
                                 engine_overrides={"vllm": {"api_overhead_ms": 9.0}})
    moved = on_hardware(fitted, load_hardware("h200-sxm"))
    assert (moved.name, moved.hbm_tb_s, moved.hbm_gib) == ("h200-sxm", 4.8, 139.8)
    assert (moved.compute_eff, moved.step_overhead_ms) == (0.5, 7.0)
    assert moved.engine_overrides == {"vllm": {"api_overhead_ms": 9.0}}


def test_per_row_hardware_simulates_each_row_on_its_own_entry():
    rows = [m for m in load_measurements_csv(GAP_VLLM, engine="vllm") if m.model == "llama-3.1-8b"][:2]
    h100 = load_hardware("h100-sxm")
    own = simulate_measurements(rows, h100, prompts_per_slot=2, per_row_hardware=True)
    on_h200 = simulate_measurements(rows, load_hardware("h200-sxm"), prompts_per_slot=2)
    on_h100 = simulate_measurements(rows, h100, prompts_per_slot=2)
    assert np.allclose(own, on_h200) and not np.allclose(own, on_h100)


def test_grouped_cross_validation_leaves_one_group_out():
    """group_of with folds=0: one fold per group; every row gets a held-out prediction."""
    rows = load_measurements_csv(GAP_VLLM, engine="vllm")
    rows = [m for m in rows if m.model == "llama-3.1-8b"][:2] + [m for m in rows if m.model == "qwen3-32b"][:2]
    seen: list[str] = []
    cal = fit_hardware(rows, load_hardware("h100-sxm"), rounds=1, folds=0, prompts_per_slot=2,
                       group_of=lambda m: (m.model, m.hardware), per_row_hardware=True, max_evaluations=3,
                       progress=seen.append)
    assert sum(line.startswith("fold ") for line in seen) == 2
    assert any("2 rows fitted, 2 held out" in line for line in seen)
    assert cal.cross_validated_sim is not None and not np.isnan(cal.cross_validated_sim).any()
    assert cal.cross_validated == mape(rows, cal.cross_validated_sim)
