"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P ... others``.

Flags: SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``, ``sglang/srt/server_args.py``; the
table msopt's tests check against is tests/data/engines/sglang_flags.txt).

On Ascend (``[sglang] platform = "ascend"``, or ``--device npu`` in the launch: sglang 0.5.23
srt/arg_groups/fields/device.py, ``device``) each trial gets its own HCCL host and NPU port blocks, as
MindIE's and vllm-ascend's do (:mod:`msopt.launch.hccl`): SGLang's NPU backend communicates over HCCL
(sglang/srt/hardware_backend/npu), so two trials on one node would otherwise both bind 60000 and 16666.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.engines.cmdline import CommandLineAdapter
from msopt.engines.init_doc import InitContext
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
from msopt.engines.sglang.health import SGLANG_SOURCES
from msopt.engines.sglang.rules import RULES as SGLANG_RULES
from msopt.engines.sglang.template import write_init as write_sglang_init
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.hccl import check_section as check_hccl
from msopt.launch.hccl import hccl_env, inherited_note
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    TrialNode,
    command_table,
    drop_flags,
    flag_name,
    int_flag,
    split_others,
)
from msopt.space.fields import FieldDecl

#: ``[sglang] platform``: "cuda" (default) or "ascend" (SGLang's NPU backend)
PLATFORMS = ("cuda", "ascend")

#: Data-parallel replicas, and attention data parallelism inside the tensor-parallel group
#: (sglang/srt/arg_groups/fields/parallel.py 0.5.23: ``dp_size``, ``attn_dp_size`` and their aliases).
DP_FLAGS = ("--dp-size", "--data-parallel-size", "--dp")
ATTN_DP_FLAGS = ("--attn-dp-size", "--attention-data-parallel-size")
#: sglang/srt/server_args.py:416-424 (0.5.23): a deprecated store-true alias, "Use --attn-dp-size <dp-size>
#: instead of --dp-size <dp-size> --enable-dp-attention"
DEPRECATED_DP_ATTENTION = "--enable-dp-attention"


def on_ascend(section: Mapping[str, Any], argv: Sequence[str] = ()) -> bool:
    """SGLang runs on Ascend NPUs: ``[sglang] platform = "ascend"``, or ``--device npu`` in ``argv``.

    Raises:
        ConfigError: ``platform`` is neither "cuda" nor "ascend".
    """
    platform = section.get("platform", "cuda")
    if platform not in PLATFORMS:
        raise ConfigError(f"[sglang] 'platform' must be one of {', '.join(PLATFORMS)}, got {platform!r}; "
                          "\"ascend\" is SGLang's NPU backend")
    items = list(argv)
    device = next((items[i + 1] for i, a in enumerate(items[:-1]) if a == "--device"), None)
    device = device or next((a.split("=", 1)[1] for a in items if a.startswith("--device=")), None)
    return platform == "ascend" or device == "npu"


def current_dp_spelling(argv: Sequence[str]) -> list[str]:
    """``--dp-size N --enable-dp-attention`` rewritten as SGLang 0.5.23 resolves it: ``--attn-dp-size N``.

    sglang/srt/arg_groups/parallel_hook.py (``_handle_deprecated_dp_attention``, 0.5.23): when
    ``attn_dp_size`` is 1 the flag moves ``dp_size`` to ``attn_dp_size`` and sets ``dp_size = 1``; next to
    ``--attn-dp-size`` it adds nothing. Attention DP groups live inside the tp group, so a launch
    occupies ``tp x pp x dp_size`` devices either way.
    """
    items = list(argv)
    if DEPRECATED_DP_ATTENTION not in items:
        return items
    items = [a for a in items if a != DEPRECATED_DP_ATTENTION]
    if int_flag(items, 1, *ATTN_DP_FLAGS) != 1:
        return items
    dp = int_flag(items, 1, *DP_FLAGS)
    items, at = drop_flags(items, (*DP_FLAGS, *ATTN_DP_FLAGS))
    if dp > 1:
        at = len(items) if at is None else at
        items[at:at] = ["--attn-dp-size", str(dp)]
    return items


class SglangAdapter(CommandLineAdapter):
    """SGLang's server; its boolean flags are store_true, so a false one is simply omitted."""

    name = "sglang"
    health_path = "/health"
    default_port = 30000
    default_executable = ("python", "-m", "sglang.launch_server")
    startup_rules = SGLANG_RULES
    sim_personality = "sglang"
    health_sources = SGLANG_SOURCES
    #: SGLang 0.5.23 --ssl-keyfile / --ssl-certfile (tests/data/engines/sglang_flags.txt)
    tls_flags = frozenset({"--ssl-keyfile", "--ssl-certfile"})
    version_programs = ("sglang",)
    supports_pd = True
    model_flag = "--model-path"
    negate_enable = False
    # sglang 0.5.23 srt/entrypoints/openai/serving_base.py:271-293 (X-Data-Parallel-Rank); --dp-size and its alias
    # --data-parallel-size (srt/arg_groups/fields/parallel.py:77)
    rank_header_flags = ("--dp-size", "--data-parallel-size")
    # sglang/srt/arg_groups/fields/parallel.py and model.py 0.5.23: aliases of the fields' flags
    aliases = MappingProxyType({"--tensor-parallel-size": "--tp-size", "--pipeline-parallel-size": "--pp-size",
                                "--data-parallel-size": "--dp-size", "--model": "--model-path"})

    def write_init(self, ctx: InitContext) -> None:
        write_sglang_init(ctx)

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        """As every command-line engine, with the deprecated ``--enable-dp-attention`` (a field or
        ``others``) rendered in its current spelling (:func:`current_dp_spelling`)."""
        spec = super().render(candidate, port=port, devices=devices, workdir=workdir)
        spec = replace(spec, argv=tuple(current_dp_spelling(spec.argv)))
        if devices and on_ascend(candidate.section, spec.argv):
            spec = replace(spec, env=hccl_env(spec.env, candidate.section, devices, candidate.fields, self.name))
        return spec

    def render_nodes(self, candidate: Candidate, *, port: int, nodes: Sequence[TrialNode], rendezvous_port: int,
                     workdir: Path | None = None, leader_ports: Sequence[int] = ()) -> list[LaunchSpec]:
        """As every command-line engine; on Ascend each node's HCCL ports follow its own devices."""
        specs = super().render_nodes(candidate, port=port, nodes=nodes, rendezvous_port=rendezvous_port,
                                     workdir=workdir, leader_ports=leader_ports)
        section = candidate.section
        if len(nodes) == 1 or not on_ascend(section, specs[0].argv):
            return specs
        return [replace(s, env=hccl_env(s.env, section, n.devices, candidate.fields, self.name))
                for s, n in zip(specs, nodes)]

    # sglang/srt/server_args.py 0.5.23: --nnodes, --node-rank, --dist-init-addr HOST:PORT on every node;
    # ranks >= 1 run the scheduler only (no HTTP server)
    node_flags = ("--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr")

    def node_args(self, argv: Sequence[str], node: TrialNode, nodes: Sequence[TrialNode],
                  rendezvous_port: int) -> list[str]:
        """``--nnodes N --node-rank r --dist-init-addr LEADER:PORT``; tp x pp must fill the nodes."""
        n = len(nodes)
        argv = current_dp_spelling(argv)
        tp = int_flag(argv, 1, "--tp-size", "--tp", "--tensor-parallel-size")
        pp = int_flag(argv, 1, "--pp-size", "--pipeline-parallel-size")
        dp = int_flag(argv, 1, *DP_FLAGS)  # replicas; --attn-dp-size groups live inside tp
        world = tp * pp * dp
        per_node = len(node.devices)
        if per_node and world != per_node * n:
            raise EvaluationError(f"SGLang world {world} (tp {tp} x pp {pp} x dp {dp}) does not equal the "
                                  f"trial's {n} nodes x {per_node} devices")
        host = nodes[0].address
        addr = f"[{host}]:{rendezvous_port}" if ":" in host else f"{host}:{rendezvous_port}"
        return ["--nnodes", str(n), "--node-rank", str(node.rank), "--dist-init-addr", addr]


    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """As every command-line engine; with ``[sglang.pd]`` each kind of instance is checked on
        its own fields (``prefill:`` / ``decode:`` prefixes, see :mod:`msopt.engines.pd`)."""
        if on_ascend(section):
            check_hccl(section, self.name)
        pd = pd_table(section, self.name)
        if pd is None:
            super().check(fields, section)
            return
        check_fields(fields, pd, self.name)
        for role in ROLES:
            super().check(role_fields(fields, role), without_pd(section))

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """``msopt validate``: a drafting launch without ``--enable-metrics`` has no ``/metrics``
        (sglang 0.5.23 srt/arg_groups/fields/observability.py: ``enable_metrics`` defaults to false), so
        its acceptance length is not measured (:mod:`msopt.benchmarks.engine_metrics`)."""
        others = split_others(command_table(section, self.name).get("others", ""), {}, f"[{self.name}.command]")
        flags = {flag_name(a) for a in others}
        out = []
        if on_ascend(section, others):
            out.append("HCCL ports: per trial, HCCL_IF_BASE_PORT and HCCL_HOST_SOCKET_PORT_RANGE from [sglang] "
                       "hccl_base_port (60000) and HCCL_NPU_SOCKET_PORT_RANGE from hccl_npu_base_port (16666), + 32 x "
                       "the trial's first device id (32 ports each), unless [sglang.env] sets them")
            out.append(inherited_note(self.name))
        if "--speculative-algorithm" in flags and "--enable-metrics" not in flags:
            out.append("speculative decoding without --enable-metrics: SGLang serves no /metrics, so spec_accept_len "
                       "is not measured and the prior keeps the assumed (or [simulator] spec_accept_len) acceptance "
                       "length; add --enable-metrics to [sglang.command] others")
        return out

    def render_pd(self, candidate: Candidate, *, ports: Sequence[int], devices: Sequence[str] = (),
                  workdir: Path | None = None, nodes: Sequence[TrialNode] = ()) -> PdLaunch:
        """Prefill and decode servers (``--disaggregation-mode``, sglang/srt/server_args.py 0.5.23) and the
        router; ``ports`` holds at least ``2 x instances + 1`` free ports (servers, bootstrap, router)."""
        values, fields = candidate.values, candidate.fields
        pd = pd_table(candidate.section, self.name)
        if pd is None:
            raise EvaluationError("render_pd needs an [sglang.pd] table")
        n_p, n_d = count(pd, "prefill_instances", values), count(pd, "decode_instances", values)
        inner = without_pd(candidate.section)
        backend = str(pd.get("transfer_backend", "mooncake"))
        free = list(ports)
        if len(free) < 2 * n_p + n_d + 1:
            raise EvaluationError(f"render_pd needs {2 * n_p + n_d + 1} ports, got {len(free)}")
        specs, boots = [], []
        for role, n in (("prefill", n_p), ("decode", n_d)):
            role_f = role_fields(fields, role)
            for _ in range(n):
                spec = self.render(Candidate(values, role_f, inner), port=free.pop(0), workdir=workdir)
                extra = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", backend]
                if role == "prefill":
                    boots.append(free.pop(0))
                    extra += ["--disaggregation-bootstrap-port", str(boots[-1])]
                specs.append(replace(spec, argv=spec.argv + tuple(extra)))
        visible = str(pd.get("visible_devices_env", "CUDA_VISIBLE_DEVICES"))
        specs, where = split_devices(specs, devices, visible, nodes)
        if on_ascend(inner, specs[0].argv if specs else ()):  # each instance's blocks follow its own NPUs
            specs = [replace(s, env=hccl_env(s.env, inner, s.env[visible].split(","), fields, self.name))
                     if s.env.get(visible) else s for s in specs]
        prefill, decode = tuple(specs[:n_p]), tuple(specs[n_p:])
        router = router_spec(pd, self.name, prefill, boots, decode, free.pop(0), values)
        return PdLaunch(prefill, decode, router, where)
