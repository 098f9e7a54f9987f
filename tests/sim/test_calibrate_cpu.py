"""``msopt calibrate`` on real runs msopt measured itself: the vLLM CPU build (issue 27 item 3).

tests/data/vllm_cpu_runs/ holds the run directories of ``msopt optimize -c configs/vllm_cpu.toml``
(``python scripts/research/cpu_calibration_runs.py``), trimmed to what ``calibrate`` reads: config.toml,
run.json and journal.jsonl. The odd configurations were fitted into the shipped ``cpu-x86`` entry,
the even ones are held out (docs/simulator.md, "The CPU build of vLLM").
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from msopt.cli.calibrate import measurements_from_run
from msopt.cli.main import main
from msopt.sim import load_hardware
from msopt.sim.calibrate import mape, simulate_measurements
from msopt.sim.catalog_load import hardware_toml

RUNS = Path(__file__).resolve().parents[1] / "data" / "vllm_cpu_runs"
FIT = ("c01", "c03", "c05", "c07", "c09")
HELD_OUT = ("c02", "c04", "c06", "c08", "c12")
#: the shipped entry's MAPE on the held-out half, as docs/simulator.md publishes it
PUBLISHED = {"ttft": 0.266, "tpot": 0.390, "tokens_per_s": 0.218}


def _rows(names: tuple[str, ...]) -> list:
    out = []
    for name in names:
        rows, hw = measurements_from_run(RUNS / name, "vllm")
        assert hw == "cpu-x86" and len(rows) == 1
        out += rows
    return out


@pytest.mark.slow
def test_calibrate_fits_an_entry_on_real_run_directories(tmp_path: Path, capsys: pytest.CaptureFixture):
    """Started away from the shipped fit (no [engines.vllm], 1.5 ms per streamed token), it moves back."""
    start = dataclasses.replace(load_hardware("cpu-x86"), engine_overrides={}, frontend_us_per_output_token=1500.0)
    (tmp_path / "start.toml").write_text(hardware_toml(start, "a start away from the fit"))
    out = tmp_path / "cpu-mine.toml"
    rc = main(["calibrate", *(str(RUNS / n) for n in FIT), "--held-out", *(str(RUNS / n) for n in HELD_OUT),
               "--hardware", str(tmp_path / "start.toml"), "--folds", "0", "--rounds", "1", "-o", str(out),
               "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["rows"] == len(FIT) and len(res["held_out_rows"]) == len(HELD_OUT)

    def objective(err: dict) -> float:
        return err["ttft"] + err["tpot"] + err["tokens_per_s"]

    assert objective(res["after"]) < objective(res["before"])
    assert res["factors"]["vllm.frontend_us_per_output_token"] > 1500.0
    hw = load_hardware(out)
    assert hw.name == "cpu-mine" and hw.memory_kind == "CPU"
    assert "held out (5 runs, not fitted)" in out.read_text()


def test_the_runs_are_read_as_they_were_launched():
    (m,) = _rows(("c05",))
    assert (m.knobs.max_num_seqs, m.knobs.max_num_batched_tokens, m.knobs.chunked_prefill) == (8, 2048, False)
    assert m.knobs.kv_cache_gib == 1.0  # VLLM_CPU_KVCACHE_SPACE of configs/vllm_cpu.toml
    assert (m.input_len, m.output_len, m.concurrency, m.num_prompts) == (128, 32, 16, 80)


def test_the_repeats_are_read():
    """The repeats of c04 and c09 (the noise beside the error table) are runs of those configurations."""
    for base, names in (("c04", ("c04r2", "c04r3", "c04r4")), ("c09", ("c09r2", "c09r3"))):
        (ref,) = _rows((base,))
        for m in _rows(names):
            assert m.configuration == ref.configuration and m.num_prompts == ref.num_prompts


def test_the_shipped_cpu_entry_reproduces_the_held_out_runs():
    rows = _rows(HELD_OUT)
    err = mape(rows, simulate_measurements(rows, load_hardware("cpu-x86")))
    assert err["refused"] == 0
    for key, published in PUBLISHED.items():
        assert err[key] <= published + 0.005, (key, err[key], published)
