"""The simulator sits below the engines: the built-in personalities live in the engine folders and load by
name, as a plugin's entry point does (issue 34 item 4), and a launch is read by the personality its adapter
names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msopt.engines.base import sim_personality_of
from msopt.errors import SimulationError
from msopt.launch.render import LaunchSpec
from msopt.sim.personality import PERSONALITIES, MeasuredLayout, Personality, get_personality, knobs_from_launch

ROOT = Path(__file__).resolve().parents[2]


def test_the_simulator_finds_the_built_in_personalities_without_importing_an_engine_itself():
    code = ("import sys\nfrom msopt.sim.personality import get_personality\n"
            "from msopt.sim import simulate_launch\n"
            "assert not [m for m in sys.modules if m.startswith('msopt.engines')], 'the simulator imported an engine'\n"
            "print(*(type(get_personality(n)).__module__ for n in ('vllm', 'sglang', 'mindie')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"msopt.engines.{n}.personality" for n in ("vllm", "sglang", "mindie")]


def test_each_built_in_engine_names_its_own_folders_personality():
    for name in ("vllm", "sglang", "mindie"):
        personality = get_personality(sim_personality_of(name) or "")
        assert personality.name == name and type(personality).__module__ == f"msopt.engines.{name}.personality"
    assert sim_personality_of("no-such-engine") is None
    assert {"vllm", "sglang", "mindie"} <= set(PERSONALITIES.names())


def test_a_launch_is_read_by_the_personality_its_adapter_names():
    """A plugin engine that reuses vLLM's personality under its own name (``sim_personality = "vllm"``)."""
    spec = LaunchSpec(engine="my-vllm-fork", argv=("vllm", "serve", "m", "--max-num-seqs", "48"))
    assert knobs_from_launch(spec, "vllm").max_num_seqs == 48
    with pytest.raises(SimulationError, match="the simulator models engines .*'vllm'.*not 'my-vllm-fork'"):
        knobs_from_launch(spec)


def _layout(**kw: object) -> MeasuredLayout:
    base: dict[str, object] = dict(tp=4, pp=2, dp=2, ep=1, max_seqs=64, batched_tokens=None, chunked_off=False,
                                   chunk=None, notes="", is_moe=False, devices_per_node=8)
    return MeasuredLayout(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PERSONALITIES.names()))
def test_a_measured_rows_layout_reads_back_through_the_engines_own_command_line(name: str) -> None:
    """Each personality that reads public measured rows (msopt/sim/measured.py) renders a row's layout as flags that
    its own command-line reader gives back; one that does not says why, or names no engine cell at all."""
    p = get_personality(name)
    if not p.measured_names or p.measured_skip:
        assert p.measured_skip or not p.measured_names
        with pytest.raises(SimulationError, match="reads no measured rows"):
            Personality().measured_argv(_layout())
        return
    argv, _ = p.measured_argv(_layout())
    knobs = p.knobs_from_argv(argv)
    assert knobs is not None
    assert (knobs.tp, knobs.pp, knobs.dp, knobs.max_num_seqs) == (4, 2, 2, 64), argv
    off = p.knobs_from_argv(p.measured_argv(_layout(chunked_off=True, batched_tokens=8192))[0])
    assert off is not None and off.max_num_seqs == 64
    # aiconfigurator's generator bounds the batch at the row's concurrency (calibrate's "aiconfigurator" rule)
    gen = p.knobs_from_argv(p.aiconfigurator_argv(16, 1000, 200))
    assert gen is not None and gen.max_num_seqs == 16


def test_speculative_decoding_of_a_measured_row_is_each_engines_own_flags() -> None:
    vllm, sglang = get_personality("vllm"), get_personality("sglang")
    assert vllm.knobs_from_argv(vllm.speculative_argv("mtp", 3, 4) or []).spec_tokens == 3  # type: ignore[union-attr]
    sg = sglang.knobs_from_argv(sglang.speculative_argv("eagle", 3, 4) or [])
    assert sg is not None and (sg.spec_tokens, sg.spec_verify_tokens) == (3, 4)
    assert sglang.speculative_argv("ngram", 3, 4) is None  # not modelled: the row is skipped, saying so
