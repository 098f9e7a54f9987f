"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P ... others``.

Flags: SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``, ``sglang/srt/server_args.py``; the
table msopt's tests check against is tests/data/engines/sglang_flags.txt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.engines.base import ENGINES, TrialNode
from msopt.engines.cmdline import CommandLineAdapter, int_flag
from msopt.engines.pd import (
    ROLES,
    PdLaunch,
    check_fields,
    count,
    pd_table,
    role_fields,
    router_spec,
    split_devices,
    without_pd,
)
from msopt.errors import EvaluationError
from msopt.space.fields import FieldDecl


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


    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """As every command-line engine; with ``[sglang.pd]`` each kind of instance is checked on
        its own fields (``prefill:`` / ``decode:`` prefixes, see :mod:`msopt.engines.pd`)."""
        pd = pd_table(section, self.name)
        if pd is None:
            super().check(fields, section)
            return
        check_fields(fields, pd, self.name)
        for role in ROLES:
            super().check(role_fields(fields, role), without_pd(section))

    def render_pd(self, values: Mapping[str, Any], fields: Sequence[FieldDecl], section: Mapping[str, Any], *,
                  ports: Sequence[int], devices: Sequence[str] = (), workdir: Path | None = None,
                  nodes: Sequence[TrialNode] = ()) -> PdLaunch:
        """Prefill and decode servers (``--disaggregation-mode``, sglang/srt/server_args.py 0.5.23) and the
        router; ``ports`` holds at least ``2 x instances + 1`` free ports (servers, bootstrap, router)."""
        pd = pd_table(section, self.name)
        if pd is None:
            raise EvaluationError("render_pd needs an [sglang.pd] table")
        n_p, n_d = count(pd, "prefill_instances", values), count(pd, "decode_instances", values)
        inner = without_pd(section)
        backend = str(pd.get("transfer_backend", "mooncake"))
        free = list(ports)
        if len(free) < 2 * n_p + n_d + 1:
            raise EvaluationError(f"render_pd needs {2 * n_p + n_d + 1} ports, got {len(free)}")
        specs, boots = [], []
        for role, n in (("prefill", n_p), ("decode", n_d)):
            role_f = role_fields(fields, role)
            for _ in range(n):
                spec = self.render(values, role_f, inner, port=free.pop(0), workdir=workdir)
                extra = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", backend]
                if role == "prefill":
                    boots.append(free.pop(0))
                    extra += ["--disaggregation-bootstrap-port", str(boots[-1])]
                specs.append(replace(spec, argv=spec.argv + tuple(extra)))
        specs, where = split_devices(specs, devices, str(pd.get("visible_devices_env", "CUDA_VISIBLE_DEVICES")),
                                     nodes)
        prefill, decode = tuple(specs[:n_p]), tuple(specs[n_p:])
        router = router_spec(pd, self.name, prefill, boots, decode, free.pop(0), values)
        return PdLaunch(prefill, decode, router, where)


ENGINES.register("sglang", SglangAdapter)
