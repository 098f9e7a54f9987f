from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msopt.errors import ConfigError
from msopt.sim import Workload, workload_from_mapping


def test_defaults_and_fixed_lengths():
    w = workload_from_mapping({"input_len": 100, "output_len": 20, "num_prompts": 5, "concurrency": 2})
    i, o = w.sample_lengths(np.random.default_rng(0))
    assert i.tolist() == [100] * 5 and o.tolist() == [20] * 5
    assert w.sample_arrivals(np.random.default_rng(0)).tolist() == [0.0] * 5


def test_distributions_are_seeded_and_bounded():
    w = workload_from_mapping({"input_len": {"dist": "uniform", "low": 10, "high": 20},
                               "output_len": {"dist": "lognormal", "mean": 200, "sigma": 0.5},
                               "num_prompts": 2000})
    a = w.sample_lengths(np.random.default_rng(1))
    b = w.sample_lengths(np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a[0].min() >= 10 and a[0].max() <= 20
    assert a[1].mean() == pytest.approx(200, rel=0.1) and a[1].min() >= 1


def test_open_loop_and_capped():
    w = workload_from_mapping({"request_rate": 10.0, "num_prompts": 5000})
    assert w.concurrency is None
    gaps = np.diff(w.sample_arrivals(np.random.default_rng(0)))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    both = workload_from_mapping({"request_rate": 10.0, "concurrency": 4})
    assert both.concurrency == 4 and both.request_rate == 10.0


@pytest.mark.parametrize("table, key", [
    ({"input_len": 0}, "input_len"),
    ({"output_len": "many"}, "output_len"),
    ({"num_prompts": 1.5}, "num_prompts"),
    ({"concurrency": -1}, "concurrency"),
    ({"request_rate": 0}, "request_rate"),
    ({"input_len": {"dist": "normal"}}, "input_len"),
    ({"input_len": {"dist": "uniform", "low": 5}}, "input_len"),
    ({"input_len": {"dist": "uniform", "low": 9, "high": 5}}, "input_len"),
    ({"output_len": {"dist": "list", "values": []}}, "output_len"),
    ({"output_len": {"dist": "list", "values": [3, 0]}}, "output_len"),
    ({"rate": 3}, "rate"),
])
def test_errors_name_the_key(table, key):
    with pytest.raises(ConfigError, match=key):
        workload_from_mapping(table)


def test_overrides():
    w = Workload().with_overrides({"concurrency": 8, "num_prompts": 16, "request_rate": float("inf")})
    assert (w.concurrency, w.num_prompts) == (8, 16)
    assert w.sample_arrivals(np.random.default_rng(0)).max() == 0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 50), st.integers(1, 50), st.integers(1, 100))
def test_round_trip(i, o, n):
    w = workload_from_mapping({"input_len": i, "output_len": o, "num_prompts": n, "concurrency": 3})
    assert workload_from_mapping(w.as_mapping()) == w


def test_warmup_is_a_workload_key_read_from_num_warmups():
    from msopt.sim.knobs import benchmark_overrides

    w = workload_from_mapping({"num_prompts": 80, "concurrency": 16, "warmup": 32})
    assert w.warmup == 32 and w.as_mapping()["warmup"] == 32
    assert "warmup" not in workload_from_mapping({}).as_mapping()  # 0: the table stays as it was
    argv = ["vllm", "bench", "serve", "--num-prompts", "80", "--num-warmups", "32"]
    assert benchmark_overrides(argv) == {"num_prompts": 80, "warmup": 32}
    assert workload_from_mapping({}).with_overrides(benchmark_overrides(argv)).warmup == 32


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_warmup_must_be_a_count(bad):
    with pytest.raises(ConfigError, match=r"simulator\.workload\.warmup"):
        workload_from_mapping({"warmup": bad})


def test_a_waited_out_warmup_leaves_the_simulated_figures_as_they_were():
    """The benchmarks wait their warm-up out, and the simulated server keeps no state between
    requests: the measured requests see exactly what they see without a warm-up."""
    from msopt.sim import EngineKnobs, simulate

    knobs = EngineKnobs(engine="vllm", max_num_seqs=8, max_num_batched_tokens=512)
    table = {"input_len": 128, "output_len": 16, "num_prompts": 40, "concurrency": 8}
    cold = simulate(knobs, "cpu-x86", "llama-tiny-2l-128", table)
    warm = simulate(knobs, "cpu-x86", "llama-tiny-2l-128", {**table, "warmup": 16})
    assert warm.error is None and warm.num_prompts == 40
    assert (warm.time_to_first_token, warm.time_per_output_token, warm.generate_speed) == (
        cold.time_to_first_token, cold.time_per_output_token, cold.generate_speed)


def test_a_list_replays_recorded_lengths_in_order_whatever_the_seed():
    w = workload_from_mapping({"input_len": {"dist": "list", "values": [10, 20, 30]},
                               "output_len": {"dist": "list", "values": [5, 6, 7]}, "num_prompts": 5})
    for seed in (0, 1):
        i, o = w.sample_lengths(np.random.default_rng(seed))
        assert i.tolist() == [10, 20, 30, 10, 20] and o.tolist() == [5, 6, 7, 5, 6]
