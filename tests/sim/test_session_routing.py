"""Sessions stay on their data-parallel replica where the engine keeps them (issue 52 item 7): the
simulator routes by the engine personality, as the engine does with msopt's client's
``X-Data-Parallel-Rank`` header (vLLM 0.32.0, SGLang 0.5.23), and spreads requests in turn otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msopt.run.validate import load
from msopt.sim import EngineKnobs, simulate
from msopt.sim.personality import get_personality
from msopt.sim.simulator import route
from msopt.workload.replay import conversation_keys, open_window, session_rank


def conversations(tmp_path: Path, chats: int = 16, turns: int = 4) -> Path:
    """Bailian-format multi-turn chats: turn t of chat c repeats the chat's whole history (hash ids of
    16-token blocks) and adds 4 blocks; every turn has its own chat_id and names its parent."""
    rows = []
    for t in range(turns):
        for c in range(chats):
            chat_id = 1000 * t + c
            parent = -1 if t == 0 else 1000 * (t - 1) + c
            blocks = [c * 100 + b for b in range(4 * (t + 1))]
            rows.append({"chat_id": chat_id, "parent_chat_id": parent, "timestamp": 2.0 * t + 0.05 * c,
                         "input_length": 16 * len(blocks), "output_length": 8, "type": "text", "turn": t + 1,
                         "hash_ids": blocks})
    p = tmp_path / "chats.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_a_bailian_turn_belongs_to_its_first_turns_conversation(tmp_path):
    reqs = open_window({"path": str(conversations(tmp_path, chats=2, turns=3))}, "t").requests
    assert conversation_keys(reqs) == ["0", "1", "0", "1", "0", "1"]


def test_route_keeps_sessions_and_spreads_the_rest_in_turn():
    assert route(5, 2).tolist() == [0, 1, 0, 1, 0]
    keys = ["a", None, "a", None, "b", "a"]
    out = route(6, 4, keys).tolist()
    assert out[0] == out[2] == out[5] == session_rank("a", 4) and out[4] == session_rank("b", 4)
    assert (out[1], out[3]) == (0, 1)


def test_the_engines_that_take_the_rank_header():
    assert get_personality("vllm").dp_rank_header and get_personality("sglang").dp_rank_header
    assert not get_personality("mindie").dp_rank_header


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_pinned_sessions_reach_the_prefix_ceiling_at_dp_4(tmp_path, engine):
    # 15 chats: turn t of chat c is request 15 t + c, so in turn it lands on replica (15 t + c) % 4, a new one
    # each turn; pinned, on its chat's
    path = str(conversations(tmp_path, chats=15))
    # every turn's blocks repeat its chat's earlier ones: 4 + 8 + 12 of 4 + 8 + 12 + 16 blocks
    ceiling = (4 + 8 + 12) / (4 + 8 + 12 + 16)
    knobs = EngineKnobs(engine=engine, dp=4, tp=1, block_size=16)
    wl = {"num_prompts": 60, "trace": {"path": path}}
    spread = simulate(knobs, "h100-sxm", "qwen3-8b", wl)
    pinned = simulate(knobs, "h100-sxm", "qwen3-8b", {**wl, "pin_sessions": True})
    hit = pinned.prefix_cache_hits / pinned.prefix_cache_queries
    assert hit == pytest.approx(ceiling, abs=0.01)     # hits cap at the prompt less one token, block aligned
    assert spread.prefix_cache_hits / spread.prefix_cache_queries < ceiling / 2
    keys = conversation_keys(open_window({"path": path}, "t").requests)
    replicas = pinned.requests["replica"]
    assert all(len({int(replicas[i]) for i, k in enumerate(keys) if k == key}) == 1 for key in set(keys))


def test_the_builtin_benchmark_pins_sessions_in_the_simulation(tmp_path):
    conversations(tmp_path)
    for bench, pinned in (("builtin", True), ("vllm_benchmark", False)):
        cfg = tmp_path / f"{bench}.toml"
        cfg.write_text(f'simulate = true\nbenchmark = "{bench}"\n[workload]\ntrace = "chats.jsonl"\n', encoding="utf-8")
        checked = load(cfg)
        assert "pin_sessions" not in checked.config.simulator.table["workload"]    # not written into the section
        assert checked.simulator is not None    # the simulator's setup: the resolved workload over the section
        assert checked.simulator.table["workload"].get("pin_sessions", False) is pinned


def test_mindie_spreads_sessions_in_turn(tmp_path):
    path = str(conversations(tmp_path))
    knobs = EngineKnobs(engine="mindie", dp=4, tp=1)
    wl = {"num_prompts": 64, "trace": {"path": path}}
    a = simulate(knobs, "atlas-800i-a2", "qwen3-8b", wl)
    b = simulate(knobs, "atlas-800i-a2", "qwen3-8b", {**wl, "pin_sessions": True})
    assert np.array_equal(a.requests["replica"], b.requests["replica"])
