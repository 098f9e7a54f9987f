"""vLLM's start-up rules and advisories (the ``vllm`` adapter's ``startup_rules`` and ``advisories``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msopt.engines.launch import command_table, split_others
from msopt.engines.rules import Advisory, Candidate, Rule
from msopt.engines.vllm.target import target
from msopt.space.fields import FieldDecl

# -- vLLM 0.33.0, and 0.23.0 (vllm-ascend 0.23.0.post1): the same checks and messages in both
# (0.23.0 vllm/config/scheduler.py:259-278, vllm/config/model.py:1190-1195) -------------------
VLLM_VERSION = "vllm 0.33.0 and 0.23.0"


def _vllm_max_model_len(c: Candidate) -> int | None:
    return c.int_flag("--max-model-len") or c.model.max_position


def _vllm_batched_vs_model_len(c: Candidate) -> str | None:
    mnbt = c.int_flag("--max-num-batched-tokens")
    mml = _vllm_max_model_len(c)
    if c.bool_flag("--enable-chunked-prefill") is False and mnbt is not None and mml is not None and mnbt < mml:
        return (f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({mml}). This effectively "
                "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                "sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
    return None


def _vllm_batched_vs_seqs(c: Candidate) -> str | None:
    mnbt = c.int_flag("--max-num-batched-tokens")
    mns = c.int_flag("--max-num-seqs")
    if mnbt is not None and mns is not None and mnbt < mns:
        return f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns})."
    return None


def _vllm_tp_heads(c: Candidate) -> str | None:
    tp = c.int_flag("--tensor-parallel-size", "-tp")
    heads = c.model.attention_heads
    if tp and heads and heads % tp:
        return (f"Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                f"({tp}).")
    return None


#: vLLM's start-up rules.
RULES: tuple[Rule, ...] = (
    Rule("vllm.batched_tokens_vs_max_model_len", "vllm", _vllm_batched_vs_model_len,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.batched_tokens_vs_max_num_seqs", "vllm", _vllm_batched_vs_seqs,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.tp_divides_attention_heads", "vllm", _vllm_tp_heads,
         "vllm/config/model.py (ModelConfig.verify_with_parallel_config)", VLLM_VERSION),
)


def _field_values(decl: FieldDecl) -> list[Any] | None:
    """The values a field can take as far as its declaration says (None: a range of numbers)."""
    if decl.constant is not None:
        return [decl.constant]
    if decl.dtype == "enum" and isinstance(decl.dtype_param, (list, tuple)):
        return list(decl.dtype_param)
    if decl.min == decl.max:
        return [decl.value if decl.value is not None else decl.min]
    return None


def _switch(flag: str, fields: Sequence[FieldDecl], others: Sequence[str], default: bool) -> bool | None:
    """A vLLM boolean flag: True/False when fixed, None when a field searches it."""
    for decl in fields:
        if decl.config_position == flag:
            vals = _field_values(decl) if decl.dtype != "bool" or decl.constant is not None else None
            if vals is None and decl.dtype == "bool" and decl.min == decl.max:
                vals = [bool(decl.min)]
            return bool(vals[0]) if vals and len({bool(v) for v in vals}) == 1 else None
    state = default
    for item in others:
        if item == flag:
            state = True
        elif item == "--no-" + flag[2:]:
            state = False
    return state


_ASCEND_SOURCE = "vllm_ascend/utils.py:1402-1406 (refresh_block_size)"


def _ascend_block_size(fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> str | None:
    if target(section)[0] != "ascend":
        return None
    decl = next((d for d in fields if d.config_position == "--block-size"), None)
    if decl is None:
        return None
    vals = _field_values(decl)
    if vals is not None and all(v == 128 for v in vals):
        return None
    others = split_others(command_table(section, "vllm").get("others", ""), {}, "[vllm.command]")
    # both on by default for generate models: vLLM 0.23.0 vllm/engine/arg_utils.py
    # (_set_default_chunked_prefill_and_prefix_caching_args)
    states = {name: _switch(flag, fields, others, True) for name, flag in (
        ("prefix caching", "--enable-prefix-caching"), ("chunked prefill", "--enable-chunked-prefill"))}
    if all(v is False for v in states.values()):
        return None
    on = [n for n, v in states.items() if v]
    why = (f"{' and '.join(on)} {'is' if len(on) == 1 else 'are'} on" if on else
           "it only matters in candidates where the searched prefix caching and chunked prefill are both off")
    return (f"field '{decl.name}' ({decl.where}) at --block-size tunes nothing: vllm-ascend 0.23.0.post1 sets the "
            f"block size to 128 whenever prefix caching or chunked prefill is on, and {why} "
            "(both default on, vLLM 0.23.0 vllm/engine/arg_utils.py); make it a constant 128, or pass "
            "--no-enable-prefix-caching --no-enable-chunked-prefill")


#: vLLM's advisories (printed by ``msopt validate`` as ``warning:`` lines).
ADVISORIES: tuple[Advisory, ...] = (
    Advisory("vllm.ascend_block_size_forced_128", "vllm", _ascend_block_size, _ASCEND_SOURCE,
             "vllm-ascend 0.23.0.post1"),
)
