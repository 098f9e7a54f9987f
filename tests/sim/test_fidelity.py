"""The simulator against 90 measured vLLM runs (Qwen3-32B bf16, H100 SXM, vLLM 0.12 defaults)."""

from __future__ import annotations

import pytest

from tests.sim.fidelity import DATA, load_rows, mape, simulate_rows

# targets from the project issue; the figures reached are in docs/simulator.md
TTFT_MAPE = 0.30
TPOT_MAPE = 0.15
TOKENS_PER_S_MAPE = 0.15


@pytest.fixture(scope="module")
def result():
    rows = load_rows()
    return rows, simulate_rows(rows)


def test_reference_data_is_complete():
    assert DATA.is_file()
    assert len(load_rows()) == 90


def test_tpot_within_target(result):
    rows, sim = result
    assert mape(rows, sim)["tpot"] < TPOT_MAPE


def test_output_tokens_per_second_within_target(result):
    rows, sim = result
    assert mape(rows, sim)["tokens_per_s"] < TOKENS_PER_S_MAPE


def test_ttft_within_target(result):
    rows, sim = result
    assert mape(rows, sim)["ttft"] < TTFT_MAPE


def test_kv_cache_cliff_at_tp2_is_reproduced(result):
    """tp 2 leaves ~280k KV tokens: 128 x (4096 + 1024) do not fit and TTFT explodes, as measured."""
    rows, sim = result
    for row, s in zip(rows, sim):
        if row.tp == 2 and row.input_len == 4096 and row.concurrency == 128:
            assert row.ttft_s > 10 and s[0] > 10
