"""Speculative decoding: the engines' flags, the verify and draft cost, the acceptance length."""

from __future__ import annotations

from dataclasses import replace

import pytest

from msopt.engines.sglang.knobs import knobs_sglang
from msopt.engines.vllm.knobs import knobs_vllm
from msopt.errors import ConfigError, SimulationError
from msopt.launch.render import LaunchSpec
from msopt.sim import simulate, simulate_launch
from msopt.sim.speculative import default_accept_len, speculation_of

LOAD = {"input_len": 512, "output_len": 128, "num_prompts": 8, "concurrency": 4}


def test_sglang_flags_resolve_as_sglang_resolves_them():
    k = knobs_sglang(["--tp-size", "2", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "4",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"])
    assert (k.spec_method, k.spec_tokens, k.spec_verify_tokens) == ("eagle", 4, 5)  # topk 1: steps + 1
    assert k.max_num_seqs == 48 and not k.mixed_batch  # unset --max-running-requests -> 48
    k = knobs_sglang(["--speculative-algorithm", "NEXTN", "--max-running-requests", "64"])
    assert (k.spec_method, k.spec_tokens, k.spec_verify_tokens, k.max_num_seqs) == ("mtp", 3, 4, 64)
    assert knobs_sglang(["--speculative-algorithm", "NGRAM"]).spec_verify_tokens == 12
    with pytest.raises(SimulationError, match="tree drafts"):
        knobs_sglang(["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4"])
    assert knobs_sglang(["--tp-size", "2"]).spec_method == ""


def test_vllm_speculative_config_json():
    k = knobs_vllm(["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3, "model": "x"}'])
    assert (k.spec_method, k.spec_tokens) == ("eagle", 3)
    assert knobs_vllm(["--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'
                       ]).spec_method == "mtp"
    with pytest.raises(SimulationError, match="not JSON"):
        knobs_vllm(["--speculative-config", "{method: eagle"])
    with pytest.raises(SimulationError, match="not simulated"):
        knobs_vllm(["--speculative-config", '{"method": "medusa", "num_speculative_tokens": 2}'])


def test_accepted_tokens_cut_tpot_and_a_rejected_draft_costs_time():
    base = knobs_vllm(["-tp", "2"])
    plain = simulate(base, "h100-sxm", "qwen3-32b", LOAD)
    spec = replace(base, spec_method="eagle", spec_tokens=3)
    good = simulate(replace(spec, spec_accept_len=3.0), "h100-sxm", "qwen3-32b", LOAD)
    none = simulate(replace(spec, spec_accept_len=1.0), "h100-sxm", "qwen3-32b", LOAD)
    assert good.time_per_output_token < 0.5 * plain.time_per_output_token
    assert good.generate_speed > 1.8 * plain.generate_speed
    assert none.time_per_output_token > plain.time_per_output_token  # verify 4 tokens + 3 draft passes, keep 1
    assert good.assumed == () and plain.assumed == ()


def test_a_default_acceptance_length_is_reported_as_assumed():
    k = replace(knobs_vllm(["-tp", "2"]), spec_method="mtp", spec_tokens=2)
    res = simulate(k, "h100-sxm", "qwen3-32b", LOAD)
    s = speculation_of(k)
    assert s is not None and s.assumed and s.accept == pytest.approx(default_accept_len("mtp", 2))
    assert any("acceptance length" in a for a in res.assumed)
    assert any("efficiencies of h100-sxm" in a for a in simulate(knobs_vllm(["-tp", "2"]), "a100-sxm-80gb",
                                                                    "qwen3-32b", LOAD).assumed)


def test_sglang_ngram_does_not_start_on_an_npu():
    res = simulate(knobs_sglang(["--tp-size", "4", "--speculative-algorithm", "NGRAM"]), "atlas-800i-a2",
                   "qwen3-32b", LOAD)
    assert res.error == "ValueError: Ngram speculative decoding only supports CUDA, CPU, or XPU devices."


def test_simulator_spec_accept_len_is_read_and_checked():
    spec = LaunchSpec(engine="sglang", argv=["python", "-m", "sglang.launch_server", "--tp-size", "2",
                                             "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"])
    table = {"hardware": "h100-sxm", "model": "qwen3-32b", "workload": LOAD}
    assumed = simulate_launch(spec, table)
    given = simulate_launch(spec, table | {"spec_accept_len": 3.5})
    assert assumed.assumed and not given.assumed
    assert given.time_per_output_token < assumed.time_per_output_token
    with pytest.raises(ConfigError, match="spec_accept_len"):
        simulate_launch(spec, table | {"spec_accept_len": 0.5})


def test_speculative_steps_as_a_searched_sglang_field_gain_less_with_each_step():
    """A [[sglang.target_field]] on --speculative-num-steps is what the search tunes: each value
    is simulated with SGLang's own resolution (topk 1: steps + 1 verified) and the assumed
    acceptance of that many drafts; each added step buys less (the chain's acceptance is geometric)."""
    table = {"hardware": "h100-sxm", "model": "qwen3-32b", "workload": LOAD | {"concurrency": 8, "num_prompts": 16}}
    tpot = {}
    for steps in (1, 2, 3, 5, 8):
        argv = ["python", "-m", "sglang.launch_server", "--tp-size", "2", "--speculative-algorithm", "EAGLE3",
                "--speculative-num-steps", str(steps)]
        res = simulate_launch(LaunchSpec(engine="sglang", argv=argv), table)
        assert res.error is None and any(f"{steps + 1} token(s) verified" in line for line in res.log_lines)
        tpot[steps] = res.time_per_output_token
    per_step = [(tpot[a] - tpot[b]) / (b - a) for a, b in ((1, 2), (2, 3), (3, 5), (5, 8))]
    assert all(x > y for x, y in zip(per_step, per_step[1:])), tpot
