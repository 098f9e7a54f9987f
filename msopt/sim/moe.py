"""Mixture-of-experts layout and cost: expert weights, expert compute and all-to-all traffic.

The engines place an MoE model's layers differently from its attention. ``group`` attention
data-parallel ranks (each ``tp`` devices, each with its own scheduler and KV cache) share one set
of MoE layers spread over ``world = group x tp`` devices as ``ep`` expert-parallel ranks of
``moe_tp`` tensor slices each (``ep x moe_tp = world``). How each engine's flags map onto this:

- vLLM 0.33.0 (``vllm/config/parallel.py`` ``enable_expert_parallel``: "Use expert parallelism
  instead of tensor parallelism for MoE layers"): with an MoE model every ``--data-parallel-size``
  rank joins the MoE layers, ``group = dp``; ``--enable-expert-parallel`` gives ``ep = world``,
  else the experts are tensor-sliced over the world (``moe_tp = world``).
- SGLang 0.5.23 (``--enable-dp-attention``, ``--ep-size``; ``sglang/srt/server_args.py``):
  ``--tp-size`` is the world; with DP attention ``--dp-size`` ranks of ``tp/dp`` devices each
  (``group = dp``), else one group; ``moe_tp = tp / ep``.
- MindIE (``ModelDeployConfig.ModelConfig[0]`` ``dp``, ``tp``, ``moe_ep``, ``moe_tp``; MindIE-LLM
  docs/zh/user_guide/optimization_and_tuning.md, commit 8b4871a: "moe_ep * moe_tp 必须等于
  worldSize", moe_tp defaults to tp): ``group = dp``, ``world = dp x tp``.

Costs per device and MoE layer, for ``n`` new tokens per attention rank (all ranks of a group
are assumed equally loaded, as the engines' lock-step DP forward makes them): expert FLOPs
``2 x n x group x k x expert_params / world``; expert weights read are the local experts touched
by at least one token, ``1 - (1 - k/E)^(n x group)`` of them under uniform routing; with
``ep > 1`` a dispatch (8-bit where the weights are) and a bf16 combine all-to-all send each token's
hidden vector to its ``k`` experts, ``(ep - 1)/ep`` of them to other devices, over the scale-up
link while ``ep`` fits in one node; beyond one node a token crosses the network once per other
node holding one of its experts (at most ``k``, or the model's ``topk_group``; DeepEP forwards
inside the node), bounded below by
the node-local part over the scale-up link. With ``ep = 1`` and ``world > tp`` the tokens of the
group are all-gathered and reduce-scattered instead. Computation and communication are not
overlapped (SGLang's two-batch overlap and DeepEP's hooks hide part of the all-to-all).
"""

from __future__ import annotations

from dataclasses import dataclass

from msopt.sim.catalog_types import Hardware, ModelSpec, dtype_bytes
from msopt.sim.knobs import EngineKnobs
from msopt.sim.personality import get_personality


@dataclass(frozen=True)
class MoeLayout:
    """How one MoE group is laid out.

    Attributes:
        group: attention data-parallel ranks sharing the MoE layers.
        tp: attention tensor-parallel size of one rank.
        ep: expert-parallel size.
        moe_tp: tensor slices of each expert.
    """

    group: int = 1
    tp: int = 1
    ep: int = 1
    moe_tp: int = 1

    @property
    def world(self) -> int:
        """Devices of one MoE group (per pipeline stage)."""
        return self.group * self.tp


class MoeCost:
    """Expert-layer time of one step, per device and pipeline stage.

    Args:
        hw: the hardware.
        model: an MoE model (``model.is_moe``).
        layout: the group's layout.
        pp: pipeline stages (each holds ``moe_layers / pp`` MoE layers).
        weight_dtype: expert weight dtype (its bytes and its compute peak).
    """

    def __init__(self, hw: Hardware, model: ModelSpec, layout: MoeLayout, pp: int, weight_dtype: str) -> None:
        self.layout = layout
        self.layers = model.moe_layers / pp
        self.k = model.experts_per_token
        self.experts = model.experts
        wb = dtype_bytes(weight_dtype)
        bw = hw.hbm_tb_s * 1e12 * hw.memory_eff
        flops = hw.peak_flops(weight_dtype) * hw.compute_eff
        world = layout.world
        # all of this device's expert weights of one stage, read once when every local expert is hit
        self.w_all = self.layers * model.experts * model.expert_params / world * wb / bw
        self.flop_tok = 2.0 * self.layers * self.k * model.expert_params / world / flops  # per group token
        scale_out = layout.ep > hw.devices_per_node if layout.ep > 1 else world > hw.devices_per_node
        link = (hw.inter_node_gb_s if scale_out else hw.intra_node_gb_s) * 1e9 * hw.comm_eff
        intra = hw.intra_node_gb_s * 1e9 * hw.comm_eff
        lat = hw.allreduce_latency_us * 1e-6
        if layout.ep > 1:
            # dispatch in the weight precision where it is 8-bit (DeepEP/MindIE quantize it), combine in bf16
            act = model.hidden * (min(wb, 2.0) + 2.0)
            nodes = -(-layout.ep // hw.devices_per_node)
            if nodes > 1:
                # a token crosses the network once per other node holding one of its experts (DeepEP
                # forwards within the node over the scale-up link), at most k times
                copies = min(self.k, nodes, model.topk_group or self.k) * (nodes - 1) / nodes
                per_tok = max(copies * act / link, self.k * act / intra)
            else:
                per_tok = self.k * act * (layout.ep - 1) / layout.ep / link
            self.comm_tok = self.layers * per_tok / world  # seconds per group token
            self.comm_fixed = 2.0 * self.layers * lat
        elif world > layout.tp:
            per_tok = 2.0 * model.hidden * 2.0 * (world - 1) / world
            self.comm_tok = self.layers * per_tok / link
            self.comm_fixed = 2.0 * self.layers * lat
        else:
            self.comm_tok = 0.0  # experts sliced over the attention TP group: its all-reduces cover it
            self.comm_fixed = 0.0

    def time(self, n_tokens: float) -> float:
        """Seconds of the MoE layers of one stage for ``n_tokens`` new tokens per attention rank."""
        if n_tokens <= 0:
            return 0.0
        g = n_tokens * self.layout.group
        touched = 1.0 - (1.0 - self.k / self.experts) ** g
        return max(self.w_all * touched, self.flop_tok * g) + self.comm_fixed + self.comm_tok * g


def layout_problem(model: ModelSpec, layout: MoeLayout) -> str | None:
    """The start-up error an engine prints for an impossible expert layout, if any."""
    if layout.ep < 1 or layout.moe_tp < 1:
        return f"ValueError: moe_ep ({layout.ep}) and moe_tp ({layout.moe_tp}) must be >= 1"
    if layout.ep * layout.moe_tp != layout.world:
        return (f"ValueError: moe_ep ({layout.ep}) x moe_tp ({layout.moe_tp}) must equal the world size of the "
                f"MoE layers ({layout.world} = {layout.group} attention DP ranks x tp {layout.tp})")
    if layout.ep > model.experts:
        return f"ValueError: expert parallel size ({layout.ep}) exceeds the {model.experts} routed experts"
    if model.moe_ffn % layout.moe_tp:
        return (f"ValueError: moe_intermediate_size ({model.moe_ffn}) is not divisible by the MoE tensor "
                f"parallel size ({layout.moe_tp})")
    return None


def layout_of(knobs: EngineKnobs, model: ModelSpec) -> MoeLayout:
    """The MoE group layout an engine builds from its knobs (see the module docstring)."""
    if not model.is_moe:
        return MoeLayout(1, knobs.tp, 1, knobs.tp)
    if get_personality(knobs.engine).moe_shares_dp:
        group = knobs.dp
        world = group * knobs.tp
        ep = knobs.ep or (world if knobs.expert_parallel else 1)
        return MoeLayout(group, knobs.tp, ep, knobs.moe_tp or max(1, world // ep))
    group = knobs.dp if knobs.dp_attention else 1
    world = group * knobs.tp
    if get_personality(knobs.engine).moe_tp_first:
        moe_tp = knobs.moe_tp or (world // knobs.ep if knobs.ep else knobs.tp)
        ep = knobs.ep or max(1, world // moe_tp)
        return MoeLayout(group, knobs.tp, ep, moe_tp)
    ep = knobs.ep or 1
    return MoeLayout(group, knobs.tp, ep, knobs.moe_tp or max(1, world // ep))
