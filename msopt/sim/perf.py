"""Step-time roofline and device-memory plan of one data-parallel replica."""

from __future__ import annotations

import math

from msopt.sim.catalog_types import Hardware, ModelSpec, dtype_bytes
from msopt.sim.knobs import EngineKnobs
from msopt.sim.memory import MemoryPlan
from msopt.sim.moe import MoeCost, layout_of
from msopt.sim.personality import get_personality

GIB = float(1 << 30)


class StepCost:
    """Time of one engine step of a replica (tp devices per stage, pp stages).

    Each step is priced as pipeline stages; a stage is the sum of its linear layers (roofline of
    weight reads vs GEMM FLOPs), its attention (roofline of KV reads vs attention FLOPs) and two
    tensor-parallel all-reduces per layer. With pp > 1 the batch is split into up to pp
    microbatches; an iteration takes pp stage-times of one microbatch (a full pipeline), so
    pipeline stages add throughput, not latency, once there are pp or more sequences.

    An MoE model's linear layers are priced in two parts: the dense part (attention, dense and
    shared-expert MLPs) as above, and the routed experts by :class:`~msopt.sim.moe.MoeCost`
    (expert weights touched, expert FLOPs, all-to-all), which depends on the step's token count.
    """

    def __init__(self, hw: Hardware, model: ModelSpec, knobs: EngineKnobs,
                 weight_dtype: str, kv_dtype: str) -> None:
        tp, pp = knobs.tp, knobs.pp
        self.pp = pp
        wb = dtype_bytes(weight_dtype)
        kb = dtype_bytes(kv_dtype)
        flops = hw.peak_flops(weight_dtype) * hw.compute_eff
        attn_flops = hw.peak_flops("bf16") * hw.compute_eff
        bw = hw.hbm_tb_s * 1e12 * hw.memory_eff
        layers = model.layers / pp
        lm_head = model.vocab * model.hidden
        dense_layer = model.dense_params / model.layers  # every layer's params but routed experts
        # per device, per stage
        self.w_time = (dense_layer * layers + lm_head / pp) * wb / tp / bw
        self.lin_flop_time = 2.0 * dense_layer * layers / tp / flops  # per token
        self.head_flop_time = 2.0 * lm_head / pp / tp / flops  # per sampled sequence
        kv_layers = model.kv_layers / pp  # hybrid attention: only the full-attention layers keep K/V
        kv_tok_bytes = kv_layers * model.kv_elems_per_token_layer(tp) * kb
        self.kv_read_time = kv_tok_bytes / bw  # per token of context read
        # hybrid attention's linear layers (Gated DeltaNet): every step reads and writes each sequence's
        # fixed-size state (sglang 0.5.23 srt/layers/attention/fla: fused_recurrent_gated_delta_rule), and each
        # token costs about 6 x key dim x value dim FLOPs per value head (the state's decay and delta update
        # and the read-out)
        self.state_time = 2.0 * model.state_bytes_per_seq(tp) / pp / bw  # per sequence in a step
        if model.is_hybrid:
            self.lin_flop_time += (6.0 * model.linear_layers / pp * max(1.0, model.linear_value_heads / tp)
                                   * model.linear_key_dim * model.linear_value_dim / flops)
        if model.is_mla:
            # MLA computed as multi-head attention over the up-projected K (nope + rope) and V, as the
            # engines do for prefill; decode reads the latent (kv_read_time) and is bound by that
            pair_flops = 2.0 * model.heads * (model.head_dim + model.qk_rope_head_dim + model.v_head_dim)
        else:
            pair_flops = 4.0 * model.heads * model.head_dim
        self.attn_flop_time = pair_flops * kv_layers / tp / attn_flops  # per pair
        self.attn_coef = max(self.kv_read_time, self.attn_flop_time)
        self.moe = MoeCost(hw, model, layout_of(knobs, model), pp, weight_dtype) if model.is_moe else None
        if tp > 1:
            # tensor parallelism over nodes (SGLang --tp 16 on two nodes) all-reduces over the network
            link = (hw.intra_node_gb_s if tp <= hw.devices_per_node else hw.inter_node_gb_s) * 1e9 * hw.comm_eff
            ar_bytes = model.hidden * 2.0  # bf16 activations, per token, per all-reduce
            # two all-reduces per layer (attention output, MLP output); a ring sends 2(tp-1)/tp
            self.comm_fixed = 2.0 * layers * hw.allreduce_latency_us * 1e-6
            self.comm_tok = 2.0 * layers * 2.0 * (tp - 1) / tp * ar_bytes / link
        else:
            self.comm_fixed = 0.0
            self.comm_tok = 0.0
        if pp > 1:
            # stages beyond one node talk over the scale-out network
            tp_nodes_ok = tp * pp <= hw.devices_per_node
            p2p_bw = (hw.intra_node_gb_s if tp_nodes_ok else hw.inter_node_gb_s) * 1e9 * hw.comm_eff
            self.p2p_tok = (pp - 1) * model.hidden * 2.0 / tp / p2p_bw
            self.p2p_fixed = (pp - 1) * hw.allreduce_latency_us * 1e-6
        else:
            self.p2p_tok = 0.0
            self.p2p_fixed = 0.0
        self.overhead = hw.step_overhead_ms * 1e-3
        self.per_seq = hw.per_seq_overhead_us * 1e-6

    def step(self, n_seqs: int, n_tokens: float, n_logits: float, attn_pairs: float,
             kv_read_tokens: float) -> float:
        """Seconds for one step.

        Args:
            n_seqs: sequences in the step (decodes plus prefill chunks).
            n_tokens: new tokens computed (one per decode plus the prefill chunk tokens).
            n_logits: sequences that sample a token this step.
            attn_pairs: (query token, context token) pairs of attention.
            kv_read_tokens: context tokens whose K/V are read from HBM.
        """
        m = min(self.pp, max(n_seqs, 1))
        lin = max(self.w_time, (self.lin_flop_time * n_tokens + self.head_flop_time * n_logits) / m)
        if self.moe is not None:
            lin += self.moe.time(n_tokens / m)
        attn = max(self.kv_read_time * kv_read_tokens, self.attn_flop_time * attn_pairs) / m
        attn += self.state_time * n_seqs / m
        comm = self.comm_fixed + self.comm_tok * n_tokens / m
        stage = lin + attn + comm
        return (self.pp * stage + self.p2p_fixed + self.p2p_tok * n_tokens / m
                + self.overhead + self.per_seq * n_seqs)

    def decode_coeffs(self, n: int) -> tuple[float, float]:
        """(a, b) with a decode-only step of ``n`` sequences attending ``S`` tokens = a + b*S."""
        m = min(self.pp, max(n, 1))
        lin = max(self.w_time, (self.lin_flop_time + self.head_flop_time) * n / m)
        if self.moe is not None:
            lin += self.moe.time(n / m)
        comm = self.comm_fixed + self.comm_tok * n / m + self.state_time * n / m
        a = self.pp * (lin + comm) + self.p2p_fixed + self.p2p_tok * n / m + self.overhead + self.per_seq * n
        b = self.pp * self.attn_coef / m
        return a, b


def plan_memory(hw: Hardware, model: ModelSpec, knobs: EngineKnobs,
                weight_dtype: str, kv_dtype: str) -> MemoryPlan:
    """Split device memory into weights, activations, reserve and KV cache (per device)."""
    tp, pp = knobs.tp, knobs.pp
    wb = dtype_bytes(weight_dtype)
    layout = layout_of(knobs, model)
    # dense part split over the attention TP group; routed experts over the whole MoE group
    weights = ((model.dense_params + model.embed_params) / (tp * pp)
               + model.routed_params / (layout.world * pp)) * wb / GIB
    tokens = knobs.max_num_batched_tokens or 8192
    seqs = knobs.max_num_seqs or 256
    # widest live tensors of a full-budget forward pass (bf16) plus fp32 sampler logits
    width = 4 * model.hidden + (model.heads + 2 * model.kv_heads) * model.head_dim / tp + 2 * model.ffn / tp
    activation = (tokens * width * 2.0 + min(seqs, tokens) * model.vocab * 4.0) / GIB
    if get_personality(knobs.engine).activation_outside_fraction:
        activation = 0.0
    usable = hw.hbm_gib * knobs.memory_fraction  # type: ignore[operator]  # set by personality.resolved()
    reserve = hw.reserve_gib
    if knobs.kv_cache_gib is not None:
        kv = knobs.kv_cache_gib
    else:
        kv = usable - weights - activation - reserve
    state_gib, slots = 0.0, 0
    if model.is_hybrid:
        # the linear layers' per-request state is a pool of its own, taken before the KV cache
        # (hybrid_state_slots of the personality: SGLang's mamba pool)
        per_seq = model.state_bytes_per_seq(tp) / pp / GIB
        slots = get_personality(knobs.engine).hybrid_state_slots(knobs, max(kv, 0.0), per_seq)
        state_gib = slots * per_seq
        kv -= state_gib
    per_token = model.kv_layers / pp * model.kv_elems_per_token_layer(tp) * dtype_bytes(kv_dtype)
    block = int(knobs.block_size)  # type: ignore[arg-type]  # set by personality.resolved()
    blocks = max(0, math.floor(kv * GIB / (per_token * block))) if kv > 0 else 0
    return MemoryPlan(
        weights_gib=weights, activation_gib=activation, reserve_gib=reserve, usable_gib=usable,
        kv_gib=kv, kv_tokens=blocks * block, num_blocks=blocks, state_gib=state_gib, state_slots=slots,
    )
