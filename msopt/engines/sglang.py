"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P ... others``.

Flags: SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``, ``sglang/srt/server_args.py``; the
table msopt's tests check against is tests/data/engines/sglang_flags.txt).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from msopt.engines.base import ENGINES, TrialNode
from msopt.engines.cmdline import CommandLineAdapter, int_flag
from msopt.errors import EvaluationError


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


    # sglang/srt/server_args.py 0.5.23: --nnodes, --node-rank, --dist-init-addr HOST:PORT on every node;
    # ranks >= 1 run the scheduler only (no HTTP server)
    node_flags = ("--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr")

    def node_args(self, argv: Sequence[str], node: TrialNode, nodes: Sequence[TrialNode],
                  rendezvous_port: int) -> list[str]:
        """``--nnodes N --node-rank r --dist-init-addr LEADER:PORT``; tp x pp must fill the nodes."""
        n = len(nodes)
        tp = int_flag(argv, 1, "--tp-size", "--tp", "--tensor-parallel-size")
        pp = int_flag(argv, 1, "--pp-size", "--pipeline-parallel-size")
        dp_attention = "--enable-dp-attention" in argv
        dp = int_flag(argv, 1, "--dp-size", "--dp", "--data-parallel-size")
        world = tp * pp * (1 if dp_attention else dp)
        per_node = len(node.devices)
        if per_node and world != per_node * n:
            raise EvaluationError(f"SGLang world {world} (tp {tp} x pp {pp}"
                                  + ("" if dp_attention else f" x dp {dp}")
                                  + f") does not equal the trial's {n} nodes x {per_node} devices")
        host = nodes[0].address
        addr = f"[{host}]:{rendezvous_port}" if ":" in host else f"{host}:{rendezvous_port}"
        return ["--nnodes", str(n), "--node-rank", str(node.rank), "--dist-init-addr", addr]


ENGINES.register("sglang", SglangAdapter)
