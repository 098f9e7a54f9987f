"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P ... others``."""

from __future__ import annotations

from msopt.engines.base import ENGINES
from msopt.engines.cmdline import CommandLineAdapter


class SglangAdapter(CommandLineAdapter):
    """SGLang's server; its boolean flags are store_true, so a false one is simply omitted."""

    name = "sglang"
    health_path = "/health"
    default_port = 30000
    default_executable = ("python", "-m", "sglang.launch_server")
    model_flag = "--model-path"
    negate_enable = False


ENGINES.register("sglang", SglangAdapter)
