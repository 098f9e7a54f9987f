"""Each engine writes its own sections of ``msopt init``'s config.toml (``EngineAdapter.write_init``,
msopt/engines/<name>/template.py); an engine without a template says so in one line. What the whole file holds
is tests/cli/test_init.py's."""

from __future__ import annotations

import tomllib

import pytest

from msopt.engines import get_engine
from msopt.engines.base import EngineAdapter
from msopt.engines.init_doc import InitChoice, InitContext, InitDoc, Machine, TraceWorkload
from msopt.errors import ConfigError
from msopt.sim.catalog_load import load_model

BUILT_IN = ("vllm", "sglang", "mindie")


def _context(engine: str) -> InitContext:
    spec = load_model("qwen3-8b")
    choice = InitChoice(tp=[1, 2, 4, 8], tp_value=1, pp=[1, 2, 4])
    machine = Machine("NPU" if engine == "mindie" else "GPU", 8, 64.0, "atlas-800i-a2", "--devices 8")
    workload = TraceWorkload(1024, 256, 1000, 64, None, "a chat-like closed loop")
    return InitContext(InitDoc(), choice, engine, spec, machine, "/models/Qwen3-8B", "Qwen3-8B", workload, 4096, True)


@pytest.mark.parametrize("engine", BUILT_IN)
def test_a_built_in_engine_writes_its_own_sections_and_fields(engine: str) -> None:
    ctx = _context(engine)
    get_engine(engine).write_init(ctx)
    data = tomllib.loads(ctx.doc.text())
    assert set(data) == {engine}  # its section alone: msopt init writes every other table
    assert data[engine]["command"]["served_model_name"] == "Qwen3-8B"
    names = [f["name"] for f in data[engine]["target_field"]]
    assert "tp" in names and "dp" in names, names  # eight devices: the layout is searched
    assert all(f["config_position"] for f in data[engine]["target_field"])


def test_an_engine_without_a_template_is_one_config_error() -> None:
    class Bare(EngineAdapter):
        name = "bare"

    with pytest.raises(ConfigError, match=r"msopt init has no template for engine 'bare'.*docs/plugins\.md"):
        Bare().write_init(_context("bare"))


def test_sglang_on_npus_is_written_as_ascend() -> None:
    """Issue 51 item 5: ``msopt init -e sglang`` on an NPU machine writes ``[sglang] platform = "ascend"``, so each
    trial gets its own HCCL port blocks (msopt/engines/sglang/adapter.py, on_ascend)."""
    ctx = _context("sglang")
    ctx = InitContext(ctx.doc, ctx.choice, "sglang", ctx.spec, Machine("NPU", 8, 64.0, "atlas-800i-a2", "--devices 8"),
                      ctx.served, ctx.name, ctx.workload, ctx.context, ctx.has_weights)
    get_engine("sglang").write_init(ctx)
    assert tomllib.loads(ctx.doc.text())["sglang"]["platform"] == "ascend"
    gpu = _context("sglang")
    get_engine("sglang").write_init(gpu)
    assert "platform" not in tomllib.loads(gpu.doc.text())["sglang"]
