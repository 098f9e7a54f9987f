"""vLLM: ``vllm serve MODEL --host H --port P --served-model-name N --flag value ... others``.

Flags: vLLM 0.33.0 (``vllm/engine/arg_utils.py``, ``vllm/entrypoints/common/cli_args.py``; the
table msopt's tests check against is tests/data/engines/vllm_flags.txt).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from types import MappingProxyType

from msopt.engines.base import ENGINES, TrialNode
from msopt.engines.cmdline import CommandLineAdapter, int_flag
from msopt.errors import EvaluationError


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


    # vllm/engine/arg_utils.py 0.33.0 (EngineArgs, create_engine_config) and vllm/config/parallel.py:
    # --data-parallel-size-local/-start-rank/-address/-rpc-port with --headless on the other nodes
    # (data-parallel ranks over nodes, each node its own share of ranks); --nnodes/--node-rank/
    # --master-addr/--master-port (mp backend: one tp x pp engine over nodes), --headless beyond rank 0
    node_flags = ("--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                  "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp", "--headless",
                  "--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port")

    def node_args(self, argv: Sequence[str], node: TrialNode, nodes: Sequence[TrialNode],
                  rendezvous_port: int) -> list[str]:
        """Data-parallel ranks split evenly over the nodes when they can be, else ``--nnodes``."""
        n = len(nodes)
        dp = int_flag(argv, 1, "--data-parallel-size", "-dp")
        tp = int_flag(argv, 1, "--tensor-parallel-size", "-tp")
        pp = int_flag(argv, 1, "--pipeline-parallel-size", "-pp")
        leader = nodes[0].address
        per_node = len(node.devices)
        if dp > 1 and dp % n == 0:
            local = dp // n
            if per_node and local * tp * pp != per_node:
                raise EvaluationError(f"vLLM data parallel {dp} x tp {tp} x pp {pp} does not fill {n} nodes of "
                                      f"{per_node} devices ({local} ranks per node)")
            out = ["--data-parallel-size-local", str(local), "--data-parallel-address", leader,
                   "--data-parallel-rpc-port", str(rendezvous_port)]
            if node.rank:
                out += ["--headless", "--data-parallel-start-rank", str(node.rank * local)]
            return out
        if per_node and dp * tp * pp != per_node * n:
            raise EvaluationError(f"vLLM world dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp} does not equal the "
                                  f"trial's {n} nodes x {per_node} devices")
        out = ["--nnodes", str(n), "--node-rank", str(node.rank), "--master-addr", leader,
               "--master-port", str(rendezvous_port)]
        return out + (["--headless"] if node.rank else [])


ENGINES.register("vllm", VllmAdapter)
