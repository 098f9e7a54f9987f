"""vLLM: ``vllm serve MODEL --host H --port P --served-model-name N --flag value ... others``.

Flags: vLLM 0.33.0 (``vllm/engine/arg_utils.py``, ``vllm/entrypoints/common/cli_args.py``; the
table msopt's tests check against is tests/data/engines/vllm_flags.txt).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from types import MappingProxyType

from msopt.engines.base import ENGINES
from msopt.engines.cmdline import CommandLineAdapter


def is_vllm_serve(exe: Sequence[str]) -> bool:
    """True when the command line runs ``vllm serve`` (possibly behind a wrapper such as numactl)."""
    items = list(exe)
    return any(PurePath(a).name == "vllm" and b == "serve" for a, b in zip(items, items[1:], strict=False))


class VllmAdapter(CommandLineAdapter):
    """vLLM's OpenAI-compatible server; a false ``--enable-x`` becomes ``--no-enable-x``."""

    name = "vllm"
    health_path = "/health"
    default_executable = ("vllm", "serve")
    model_flag = None
    negate_enable = True
    # vllm/engine/arg_utils.py 0.33.0: "--tensor-parallel-size", "-tp", ...
    aliases = MappingProxyType({"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
                                "-dp": "--data-parallel-size"})

    def model_args(self, exe: Sequence[str], model: str) -> list[str]:
        """``vllm serve MODEL``; ``--model MODEL`` for every other entry point.

        Only ``vllm serve`` copies its positional ``model_tag`` into ``args.model``
        (vllm/entrypoints/cli/serve.py, 0.33.0); ``python -m vllm.entrypoints.openai.api_server``
        (vllm/entrypoints/launchers/api_server/entry.py) never does and silently serves its default.
        """
        return [model] if is_vllm_serve(exe) else ["--model", model]


ENGINES.register("vllm", VllmAdapter)
