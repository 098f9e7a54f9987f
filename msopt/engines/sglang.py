"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P ... others``.

Flags: SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``, ``sglang/srt/server_args.py``; the
table msopt's tests check against is tests/data/engines/sglang_flags.txt).
"""

from __future__ import annotations

from types import MappingProxyType

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
    # sglang/srt/arg_groups/fields/parallel.py and model.py 0.5.23: aliases of the fields' flags
    aliases = MappingProxyType({"--tensor-parallel-size": "--tp-size", "--pipeline-parallel-size": "--pp-size",
                                "--data-parallel-size": "--dp-size", "--model": "--model-path"})


ENGINES.register("sglang", SglangAdapter)
