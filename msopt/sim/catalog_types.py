"""What a catalog entry is: :class:`Hardware` (one accelerator type) and :class:`ModelSpec` (one
model's architecture), with the dtypes the simulator knows. The catalog that loads them is
:mod:`msopt.sim.catalog_load`; a Hugging Face config.json becomes a :class:`ModelSpec` in
:mod:`msopt.sim.hf_config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from msopt.errors import ConfigError, SimulationError

#: bytes per element of each supported weight / KV-cache dtype
DTYPE_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5})

#: dtypes whose matrix multiplies run at another dtype's peak: fp16 at bf16's; int4 weights
#: (Ascend's W4A8, modelslim) are multiplied with 8-bit activations at int8's
_COMPUTE_AS = MappingProxyType({"fp16": "bf16", "int4": "int8"})

#: ``[efficiency]`` keys a hardware file may set per engine in ``[engines.<engine>]``
ENGINE_KEYS = ("reserve_gib", "step_overhead_ms", "per_seq_overhead_us", "api_overhead_ms", "frontend_ms_per_req",
               "frontend_us_per_token", "api_jitter_ms", "client_think_ms", "frontend_us_per_output_token")


@dataclass(frozen=True)
class Hardware:
    """One accelerator type, per device, with calibrated achieved-efficiency factors.

    Attributes:
        name: catalog name ("h100-sxm").
        description: human readable.
        memory_kind: "CUDA" or "NPU", for out-of-memory log lines.
        tflops: dense peak per precision ("bf16", "fp8", "int8"); 0 = unsupported.
        hbm_gib: device memory as the runtime reports it, GiB.
        hbm_tb_s: HBM bandwidth, TB/s.
        reserve_gib: memory the framework never gets (context, comm buffers, graphs).
        intra_node_gb_s: scale-up link bandwidth per direction, GB/s.
        inter_node_gb_s: scale-out bandwidth per device, GB/s.
        devices_per_node: accelerators per node.
        compute_eff: achieved fraction of peak FLOPS in large GEMMs.
        memory_eff: achieved fraction of HBM bandwidth in streaming reads.
        comm_eff: achieved fraction of link bandwidth in all-reduce.
        allreduce_latency_us: fixed cost of one all-reduce.
        step_overhead_ms: fixed cost of one engine step (scheduling, launch, sampling).
        per_seq_overhead_us: cost per sequence in a step (sampling, detokenizing, output).
        api_overhead_ms: client -> engine latency of a request (network, HTTP), host side.
        frontend_ms_per_req: API-server time per request, requests handled one at a time.
        frontend_us_per_token: API-server time per prompt token (tokenization).
        api_jitter_ms: mean of a random (exponential) per-request client/network delay.
        client_think_ms: mean of a random (exponential) delay before a client sends its next request.
        frontend_us_per_output_token: API-server time per streamed output token (detokenize, one
            SSE event, the client's parsing) on one serial resource every stream shares: it caps
            the delivered token rate and makes TPOT grow with the concurrent streams.
        engine_overrides: per-engine values of the overhead factors (``[engines.<engine>]``:
            any of :data:`ENGINE_KEYS`), e.g. SGLang's step overhead differs from vLLM's.
        efficiency_from: the entry whose efficiency factors this one took without a fit of its
            own (another hardware kind's); "" when they were fitted to this hardware.
        verify_kv_per_token: a speculative verify step reads each sequence's KV cache once per
            verified token (attention kernels that run the verify tokens as separate decode
            queries) instead of once per sequence (a multi-query kernel).
    """

    name: str
    description: str
    memory_kind: str
    tflops: Mapping[str, float]
    hbm_gib: float
    hbm_tb_s: float
    reserve_gib: float
    intra_node_gb_s: float
    inter_node_gb_s: float
    devices_per_node: int
    compute_eff: float
    memory_eff: float
    comm_eff: float
    allreduce_latency_us: float
    step_overhead_ms: float
    per_seq_overhead_us: float
    api_overhead_ms: float = 0.0
    frontend_ms_per_req: float = 0.0
    frontend_us_per_token: float = 0.0
    api_jitter_ms: float = 0.0
    client_think_ms: float = 0.0
    frontend_us_per_output_token: float = 0.0
    engine_overrides: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    efficiency_from: str = ""
    verify_kv_per_token: bool = False

    def for_engine(self, engine: str) -> Hardware:
        """This hardware with ``[engines.<engine>]`` applied (itself when there is none)."""
        over: dict[str, Any] = dict(self.engine_overrides.get(engine) or {})
        return replace(self, **over) if over else self

    def compute_tflops(self, dtype: str) -> float:
        """Dense peak in TFLOP/s for ``dtype`` (fp16 counts as bf16, int4 as int8); 0 or less: none."""
        return float(self.tflops.get(_COMPUTE_AS.get(dtype, dtype), 0.0))

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for ``dtype`` (fp16 counts as bf16, int4 as int8); raises if unsupported."""
        value = self.compute_tflops(dtype)
        if value <= 0:
            key = _COMPUTE_AS.get(dtype, dtype)
            raise SimulationError(
                f"hardware {self.name!r} has no {dtype} compute (tflops.{key} = {value}); "
                f"use weight_dtype one of {sorted(k for k, v in self.tflops.items() if v > 0)}"
            )
        return value * 1e12


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's architecture facts.

    Attributes:
        name: catalog name ("qwen3-32b").
        hf_id: the Hugging Face repository it describes.
        layers, hidden, heads, kv_heads, head_dim, ffn, vocab: architecture.
        params_b: published parameter count, billions (for checks and docs).
        max_position: the longest context the model supports (vLLM's default max_model_len).
        tie_embeddings: whether lm_head shares the embedding matrix.
        attention: "gqa" (grouped-query, also MHA/MQA) or "mla" (multi-head latent attention;
            ``head_dim`` is then qk_nope_head_dim).
        q_lora_rank, kv_lora_rank, qk_rope_head_dim, v_head_dim: MLA's low-rank projections.
        experts, experts_per_token, shared_experts, moe_ffn: routed experts per MoE layer, top-k,
            always-on shared experts, one expert's intermediate size (0 experts: a dense model).
        dense_layers: leading layers with a dense MLP of width ``ffn`` (DeepSeek's
            first_k_dense_replace); the other layers are MoE.
        topk_group: group-limited routing (DeepSeek's n_group/topk_group): a token's experts lie in at
            most this many expert groups, hence on at most this many nodes when a node holds a group;
            0: unlimited.
        active_params_b: published activated parameters per token, billions (for checks and docs).
        model_type: config.json's ``model_type`` ("" unknown): engines choose their MTP drafts by it.
        mtp_layers: config.json's ``num_nextn_predict_layers``, the model's own MTP layers (0: none or unknown).
        aliases: other names of the same weights' architecture (``aliases = [...]``: the base model's
            Hugging Face id beside the instruct one's hf_id, say), matched as the hf_id is.
        full_attention_interval: hybrid attention (Qwen3-Next): every this-many-th layer is full attention,
            the others linear attention (Gated DeltaNet) with a state of fixed size per request; 0: every
            layer is full attention (config.json ``full_attention_interval``; sglang 0.5.23
            srt/configs/qwen3_next.py ``layers_block_type``: layer l is full when (l + 1) % interval == 0).
        linear_key_heads, linear_value_heads, linear_key_dim, linear_value_dim, linear_conv_kernel: the
            linear-attention layers' heads and sizes (``linear_num_key_heads``, ``linear_num_value_heads``,
            ``linear_key_head_dim``, ``linear_value_head_dim``, ``linear_conv_kernel_dim``).
        attn_output_gate: the full-attention layers' q projection also yields an output gate (Qwen3-Next's
            gated attention: q_proj of 2 x heads x head_dim).
    """

    name: str
    hf_id: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params_b: float
    max_position: int
    tie_embeddings: bool = False
    attention: str = "gqa"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0
    topk_group: int = 0
    active_params_b: float = 0.0
    aliases: tuple[str, ...] = ()
    model_type: str = ""
    mtp_layers: int = 0
    full_attention_interval: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0
    attn_output_gate: bool = False

    @property
    def is_hybrid(self) -> bool:
        """True for hybrid attention: linear-attention layers beside the full-attention ones."""
        return self.full_attention_interval > 1 and self.linear_value_heads > 0

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache (the full-attention ones)."""
        return self.layers // self.full_attention_interval if self.is_hybrid else self.layers

    @property
    def linear_layers(self) -> int:
        """Linear-attention layers (a fixed-size state per request instead of a KV cache)."""
        return self.layers - self.kv_layers

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the linear layers' causal convolution: q, k and v (sglang 0.5.23
        srt/configs/qwen3_next.py ``mamba2_cache_params``: conv_state is cat([query, key, value]))."""
        return 2 * self.linear_key_heads * self.linear_key_dim + self.linear_value_heads * self.linear_value_dim

    @property
    def linear_attn_params(self) -> int:
        """Parameters of one linear-attention layer: in_proj_qkvz (hidden x (2 Kh Kd + 2 Vh Vd)), in_proj_ba
        (hidden x 2 Vh), the depthwise conv (conv_dim x kernel) and out_proj (Vh Vd x hidden) (the module tree
        of Qwen3-Next-80B-A3B: in_proj_qkvz 2048 -> 12288, in_proj_ba 2048 -> 64, conv1d 8192 x 4, out_proj
        4096 -> 2048)."""
        if not self.is_hybrid:
            return 0
        qkvz = self.hidden * (2 * self.linear_key_heads * self.linear_key_dim
                              + 2 * self.linear_value_heads * self.linear_value_dim)
        ba = self.hidden * 2 * self.linear_value_heads
        out = self.linear_value_heads * self.linear_value_dim * self.hidden
        return qkvz + ba + self.linear_conv_dim * self.linear_conv_kernel + out

    def state_bytes_per_seq(self, tp: int = 1) -> float:
        """Bytes of linear-attention state one request holds on one device under attention TP ``tp``, all
        linear layers: per layer the conv state (conv_dim / tp x (kernel - 1), bf16) and the recurrent state
        (value heads / tp x key dim x value dim, float32): sglang 0.5.23 srt/configs/mamba_utils.py
        (``Mamba2StateShape.create``, ``mamba2_state_dtype``: conv bfloat16, ssm float32 by default)."""
        if not self.is_hybrid:
            return 0.0
        conv = self.linear_conv_dim / tp * (self.linear_conv_kernel - 1) * 2.0
        ssm = max(1.0, self.linear_value_heads / tp) * self.linear_key_dim * self.linear_value_dim * 4.0
        return self.linear_layers * (conv + ssm)

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (routed experts in its MLP layers)."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3): one compressed KV latent per token."""
        return self.attention == "mla"

    @property
    def attn_params(self) -> int:
        """Parameters of one layer's attention projections."""
        if self.is_mla:
            # DeepSeek-V3 modeling: q_a (hidden x q_lora), q_b (q_lora x heads*(nope+rope)),
            # kv_a (hidden x (kv_lora+rope)), kv_b (kv_lora x heads*(nope+v)), o (heads*v x hidden);
            # head_dim is qk_nope_head_dim here
            qk = self.head_dim + self.qk_rope_head_dim
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk if self.q_lora_rank
                 else self.hidden * self.heads * qk)
            kv = (self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
                  + self.kv_lora_rank * self.heads * (self.head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * self.hidden
        q = self.hidden * self.heads * self.head_dim * (2 if self.attn_output_gate else 1)
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """Parameters of one expert (a gated MLP of width ``moe_ffn``)."""
        return 3 * self.hidden * self.moe_ffn

    @property
    def routed_params(self) -> int:
        """Parameters of all routed experts of the whole model (what expert parallelism splits)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def dense_params(self) -> int:
        """Parameters every token uses in every layer, summed over layers: attention, dense MLPs,
        shared experts and routers (everything but the routed experts and the embeddings)."""
        dense_mlp = (self.layers - self.moe_layers) * 3 * self.hidden * self.ffn
        shared = self.moe_layers * (self.shared_experts * self.expert_params + self.hidden * self.experts)
        return self.kv_layers * self.attn_params + self.linear_layers * self.linear_attn_params + dense_mlp + shared

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer on average (attention projections and MLP or experts)."""
        return (self.dense_params + self.routed_params) // self.layers

    @property
    def active_layer_params(self) -> int:
        """Parameters one token uses in one decoder layer on average (top-k experts only)."""
        routed = self.moe_layers * self.experts_per_token * self.expert_params
        return (self.dense_params + routed) // self.layers

    @property
    def embed_params(self) -> int:
        """Embedding plus lm_head parameters."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def total_params(self) -> int:
        """Parameters computed from the architecture (norms ignored)."""
        return self.layers * self.layer_params + self.embed_params

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """KV-cache bytes per token over all layers, whole model (not per device).

        MLA caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer instead of K and V.
        """
        if self.is_mla:
            return self.kv_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes(kv_dtype)
        return 2.0 * self.kv_layers * self.kv_heads * self.head_dim * dtype_bytes(kv_dtype)

    def kv_elems_per_token_layer(self, tp: int) -> float:
        """KV-cache elements one device holds per token and layer under attention TP ``tp``.

        GQA splits KV heads over tp (at least one head per device); MLA's latent is not split
        by heads, so every TP rank holds the whole latent (vLLM/SGLang MLA backends).
        """
        if self.is_mla:
            return float(self.kv_lora_rank + self.qk_rope_head_dim)
        return 2.0 * max(1.0, self.kv_heads / tp) * self.head_dim


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype``; ConfigError for an unknown one."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ConfigError(
            f"unknown dtype {dtype!r}; valid dtypes: {sorted(DTYPE_BYTES)}"
        ) from None
