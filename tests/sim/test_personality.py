"""The simulator sits below the engines: the built-in personalities live in the engine folders and load by
name, as a plugin's entry point does (issue 34 item 4), and a launch is read by the personality its adapter
names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msopt.engines.base import sim_personality_of
from msopt.engines.launch import LaunchSpec
from msopt.errors import SimulationError
from msopt.sim.personality import PERSONALITIES, get_personality, knobs_from_launch

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
