"""SGLang's start-up rules (the ``sglang`` adapter's ``startup_rules``)."""

from __future__ import annotations

from msopt.engines.rules import RenderedCandidate, Rule

# -- SGLang 0.5.23 ----------------------------------------------------------------------------
SGLANG_VERSION = "sglang 0.5.23"


def _sglang_tp_heads(c: RenderedCandidate) -> str | None:
    tp = c.int_flag("--tp-size", "--tensor-parallel-size")
    heads = c.model.attention_heads
    if tp and heads and heads % tp:
        return f"AssertionError: assert self.total_num_heads % tp_size == 0 (heads {heads}, tp_size {tp})"
    return None


def _sglang_chunk_page(c: RenderedCandidate) -> str | None:
    chunk = c.int_flag("--chunked-prefill-size")
    page = c.int_flag("--page-size")
    if chunk is not None and page and chunk > 0 and chunk % page:
        return "AssertionError: chunked_prefill_size must be divisible by page_size"
    return None


def _sglang_dp_with_attn_dp(c: RenderedCandidate) -> str | None:
    # sglang/srt/arg_groups/parallel_hook.py:287-292 (handle_data_parallelism); the deprecated
    # `--dp-size N --enable-dp-attention` with no --attn-dp-size becomes attn_dp_size N, dp_size 1 first
    # (_handle_deprecated_dp_attention, parallel_hook.py:40-60)
    dp = c.int_flag("--dp-size", "--data-parallel-size", "--dp") or 1
    attn = c.int_flag("--attn-dp-size", "--attention-data-parallel-size") or 1
    if attn == 1 and "--enable-dp-attention" in c.flags:
        attn, dp = dp, 1
    if attn > 1 and dp > 1:
        return (f"ValueError: --dp-size {dp} with --attn-dp-size {attn}: data-parallel replicas combined with "
                "attention data parallelism are not supported.")
    return None


def _sglang_mem_fraction_positive(c: RenderedCandidate) -> str | None:
    # sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3007 and 3043-3058 (_profile_available_bytes): the
    # KV budget is the free memory less pre_model_load_memory x (1 - mem_fraction_static); at 0 or below that is
    # at most free - pre, never above 0, whatever the model, and SGLang stops with this ValueError
    raw = c.flags.get("--mem-fraction-static")
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    if value is not None and value <= 0:
        return f"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={raw}."
    return None


#: SGLang's start-up rules.
RULES: tuple[Rule, ...] = (
    Rule("sglang.tp_divides_attention_heads", "sglang", _sglang_tp_heads,
         "sglang/srt/models/llama.py, qwen2.py, qwen3.py (attention __init__)", SGLANG_VERSION),
    Rule("sglang.chunked_prefill_vs_page_size", "sglang", _sglang_chunk_page,
         "sglang/srt/arg_groups/validation_hook.py", SGLANG_VERSION),
    Rule("sglang.dp_size_with_attn_dp_size", "sglang", _sglang_dp_with_attn_dp,
         "sglang/srt/arg_groups/parallel_hook.py:287-292 (handle_data_parallelism)", SGLANG_VERSION),
    Rule("sglang.mem_fraction_static_positive", "sglang", _sglang_mem_fraction_positive,
         "sglang/srt/mem_cache/kv_cache_configurator.py:3043-3058 (_profile_available_bytes)", SGLANG_VERSION),
)
