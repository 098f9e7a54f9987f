"""vLLM's start-up rules and advisories (the ``vllm`` adapter's ``startup_rules`` and ``advisories``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msopt.engines.rules import Advisory, RenderedCandidate, Rule
from msopt.engines.vllm.target import target
from msopt.launch.render import command_table, split_others
from msopt.space.fields import FieldDecl

# -- vLLM 0.33.0, and 0.23.0 (vllm-ascend 0.23.0.post1): the same checks and messages in both
# (0.23.0 vllm/config/scheduler.py:259-278, vllm/config/model.py:1190-1195) -------------------
VLLM_VERSION = "vllm 0.33.0 and 0.23.0"


def _vllm_max_model_len(c: RenderedCandidate) -> int | None:
    return c.int_flag("--max-model-len") or c.model.max_position


def _vllm_batched_vs_model_len(c: RenderedCandidate) -> str | None:
    mnbt = c.int_flag("--max-num-batched-tokens")
    mml = _vllm_max_model_len(c)
    if c.bool_flag("--enable-chunked-prefill") is False and mnbt is not None and mml is not None and mnbt < mml:
        return (f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({mml}). This effectively "
                "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                "sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
    return None


def _vllm_batched_vs_seqs(c: RenderedCandidate) -> str | None:
    mnbt = c.int_flag("--max-num-batched-tokens")
    mns = c.int_flag("--max-num-seqs")
    if mnbt is not None and mns is not None and mnbt < mns:
        return f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns})."
    return None


def _vllm_tp_heads(c: RenderedCandidate) -> str | None:
    tp = c.int_flag("--tensor-parallel-size", "-tp")
    heads = c.model.attention_heads
    if tp and heads and heads % tp:
        return (f"Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                f"({tp}).")
    return None


# -- --speculative-config: vllm 0.32.0 vllm/config/speculative.py (SpeculativeConfig) and
# vllm/engine/arg_utils.py (create_speculative_config: --spec-method/--spec-model/--spec-tokens join the JSON)
SPEC_VERSION = "vllm 0.32.0"
#: methods whose draft needs no ``model`` in the JSON (SpeculativeConfig.__post_init__: mtp and dspark draft
#: from the target, the others need no weights); any other method, or none (then "draft_model"), refuses
#: ``num_speculative_tokens`` without ``model``
_NO_DRAFT_MODEL = frozenset({"mtp", "dspark", "ngram", "[ngram]", "ngram_gpu", "suffix", "extract_hidden_states",
                             "custom_class"})


def speculative_config(c: RenderedCandidate) -> dict[str, Any] | None:
    """The launch's speculative config as vLLM assembles it (None: none, or not a JSON object)."""
    import json

    flags = c.flags
    raw = flags.get("--speculative-config", flags.get("-sc"))
    try:
        conf = json.loads(raw) if raw else {}
    except ValueError:
        return None
    if not isinstance(conf, dict):
        return None
    for flag, key in (("--spec-method", "method"), ("--spec-model", "model")):
        if flags.get(flag) is not None:
            conf[key] = flags[flag]
    tokens = c.int_flag("--spec-tokens")
    if tokens is not None:
        conf["num_speculative_tokens"] = tokens
    return {k.replace("-", "_"): v for k, v in conf.items()} or None


def _spec_tokens_positive(c: RenderedCandidate) -> str | None:
    conf = speculative_config(c)
    n = conf.get("num_speculative_tokens") if conf else None
    if isinstance(n, int) and not isinstance(n, bool) and n <= 0:
        # pydantic's message for Field(gt=0), as vLLM 0.32.0 prints it
        return ("1 validation error for SpeculativeConfig num_speculative_tokens Input should be greater than 0 "
                f"[type=greater_than, input_value={n}, input_type=int]")
    return None


def _spec_needs_draft_model(c: RenderedCandidate) -> str | None:
    conf = speculative_config(c)
    if not conf or conf.get("model") is not None or conf.get("num_speculative_tokens") is None:
        return None
    method = str(conf.get("method") or "draft_model")
    if method in _NO_DRAFT_MODEL or method.endswith("_mtp"):  # every *_mtp becomes "mtp"
        return None
    return ("1 validation error for SpeculativeConfig Value error, num_speculative_tokens was provided but without "
            "speculative model. [type=value_error]")


#: model types whose config vLLM rewrites into an MTP draft reading ``num_nextn_predict_layers`` as its
#: ``n_predict`` (SpeculativeConfig.hf_config_override: deepseek_v3/v32 and glm_moe_dsa become deepseek_mtp,
#: qwen3_next becomes qwen3_next_mtp)
_MTP_FROM_NEXTN = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa", "qwen3_next"})
#: model types hf_config_override leaves as they are, so the draft is no MTP model type (no branch names them)
_NO_MTP = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})


def _mtp(c: RenderedCandidate) -> tuple[dict[str, Any], str] | None:
    """The speculative config and the model type when the launch drafts with the target's own MTP layers."""
    conf = speculative_config(c)
    if not conf or conf.get("model") is not None or c.model.model_type is None:
        return None
    method = str(conf.get("method") or "")
    if method != "mtp" and not method.endswith("_mtp"):
        return None
    # a model path naming eagle/dflash/dspark switches the method before the MTP check (__post_init__)
    if any(k in c.spec.model.lower() for k in ("eagle-", "eagle3", "dflash", "dspark")):
        return None
    return conf, c.model.model_type


def _mtp_needs_mtp_layers(c: RenderedCandidate) -> str | None:
    found = _mtp(c)
    if found is None or found[1] not in _NO_MTP:
        return None
    # checked with the CPU build: SpeculativeConfig(method="mtp", ...) on its Llama raised this
    return "NotImplementedError: Unsupported speculative method: 'mtp'"


def _mtp_tokens_divisible(c: RenderedCandidate) -> str | None:
    found = _mtp(c)
    n, layers = (found[0].get("num_speculative_tokens"), c.model.mtp_layers) if found else (None, None)
    if found is None or found[1] not in _MTP_FROM_NEXTN or not isinstance(n, int) or not layers:
        return None
    if n > layers and n % layers:
        return f"num_speculative_tokens:{n} must be divisible by n_predict={layers}"
    return None


# -- vllm-ascend's own checks of speculative decoding, which it takes through vLLM's --speculative-config
# (vllm-project/vllm-ascend: tag v0.23.0 at 5cb98caa, v0.25.1rc1 at 9bf964cb, releases/v0.26.0rc at cf0baa38,
# main at 182b75ea; the releases msopt knows, msopt.engines.vllm.target.ASCEND_RELEASES)
ASCEND_SPEC_VERSION = "vllm-ascend 0.23.0, 0.25.1rc1, 0.26.0rc (cf0baa38) and main (182b75ea)"
#: the attention metadata builders' limit: 1 + num_speculative_tokens query tokens per decode
_ASCEND_DECODE_LIMIT = 16


def _ascend_spec(c: RenderedCandidate) -> dict[str, Any] | None:
    """The speculative config of a vllm-ascend launch (None: not ascend, or none)."""
    return speculative_config(c) if target(c.section)[0] == "ascend" else None


def _spec_tokens(conf: Mapping[str, Any] | None) -> int | None:
    n = conf.get("num_speculative_tokens") if conf else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _json_flag(c: RenderedCandidate, flag: str) -> dict[str, Any]:
    import json

    raw = c.flags.get(flag)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _ascend_decode_threshold(c: RenderedCandidate) -> str | None:
    n = _spec_tokens(_ascend_spec(c))
    if n is None or n + 1 <= _ASCEND_DECODE_LIMIT:
        return None
    # the assert's f-string continues its lines with a backslash, so their 16 indenting spaces are in it
    pad = " " * 16
    return (f"AssertionError: decode_threshold exceeded {pad}npu_fused_infer_attention_score TND layout's limit of "
            f"16, {pad}got {n + 1}")


def _ascend_xlite_one_token(c: RenderedCandidate) -> str | None:
    n = _spec_tokens(_ascend_spec(c))
    xlite = _json_flag(c, "--additional-config").get("xlite_graph_config")
    if n is None or n == 1 or not isinstance(xlite, dict) or not xlite.get("enabled", False):
        return None
    return "RuntimeError: Xlite graph mode only support speculative decoding with num_speculative_tokens=1."


def _ascend_pp_mtp(c: RenderedCandidate) -> str | None:
    conf = _ascend_spec(c)
    if not conf or target(c.section)[1] != "0.23.0" or "mtp" not in str(conf.get("method") or "").lower():
        return None
    if (c.int_flag("--pipeline-parallel-size", "-pp") or 1) <= 1:
        return None
    if _json_flag(c, "--kv-transfer-config").get("kv_role") == "kv_producer":
        return None
    return ("ValueError: PP+MTP is only supported on PD-disaggregated P nodes (kv_role='kv_producer'). D nodes must "
            "use pipeline_parallel_size=1 and may combine data parallelism with MTP.")


#: vLLM's start-up rules.
RULES: tuple[Rule, ...] = (
    Rule("vllm.batched_tokens_vs_max_model_len", "vllm", _vllm_batched_vs_model_len,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.batched_tokens_vs_max_num_seqs", "vllm", _vllm_batched_vs_seqs,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.tp_divides_attention_heads", "vllm", _vllm_tp_heads,
         "vllm/config/model.py (ModelConfig.verify_with_parallel_config)", VLLM_VERSION),
    Rule("vllm.num_speculative_tokens_positive", "vllm", _spec_tokens_positive,
         "vllm/config/speculative.py (SpeculativeConfig.num_speculative_tokens: Field(gt=0))", SPEC_VERSION),
    Rule("vllm.speculative_method_needs_model", "vllm", _spec_needs_draft_model,
         "vllm/config/speculative.py (SpeculativeConfig.__post_init__)", SPEC_VERSION),
    Rule("vllm.mtp_needs_mtp_layers", "vllm", _mtp_needs_mtp_layers,
         "vllm/config/speculative.py (SpeculativeConfig.__post_init__, hf_config_override)", SPEC_VERSION),
    Rule("vllm.mtp_tokens_divisible", "vllm", _mtp_tokens_divisible,
         "vllm/config/speculative.py (SpeculativeConfig.__post_init__: n_predict)", SPEC_VERSION),
    Rule("vllm.ascend_spec_tokens_max_15", "vllm", _ascend_decode_threshold,
         "vllm_ascend/attention/attention_v1.py:251, mla_v1.py:268, sfa_v1.py:301, dsa_v1.py:411 at v0.23.0 "
         "(assert self.decode_threshold <= 16 in each metadata builder; the same asserts at the later refs)",
         ASCEND_SPEC_VERSION),
    Rule("vllm.ascend_xlite_spec_one_token", "vllm", _ascend_xlite_one_token,
         "vllm_ascend/ascend_config.py (XliteGraphConfig.__init__; line 690 at v0.23.0, 581 at v0.25.1rc1, 606 at "
         "releases/v0.26.0rc, 803 at main)", ASCEND_SPEC_VERSION),
    Rule("vllm.ascend_pp_mtp_prefill_only", "vllm", _ascend_pp_mtp,
         "vllm_ascend/platform.py:430-447 (NPUPlatform._validate_pd_pp_mtp_config, gone from v0.25.1rc1 on)",
         "vllm-ascend 0.23.0"),
)


def field_values(decl: FieldDecl) -> list[Any] | None:
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
            vals = field_values(decl) if decl.dtype != "bool" or decl.constant is not None else None
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
    vals = field_values(decl)
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
