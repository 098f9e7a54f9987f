"""vLLM: ``vllm serve MODEL --host H --port P --served-model-name N --flag value ... others``."""

from __future__ import annotations

from msopt.engines.base import ENGINES
from msopt.engines.cmdline import CommandLineAdapter


class VllmAdapter(CommandLineAdapter):
    """vLLM's OpenAI-compatible server; a false ``--enable-x`` becomes ``--no-enable-x``."""

    name = "vllm"
    health_path = "/health"
    default_executable = ("vllm", "serve")
    model_flag = None
    negate_enable = True


ENGINES.register("vllm", VllmAdapter)
