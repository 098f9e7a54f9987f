"""Start-up rules: configurations an engine refuses before it serves, checked before any launch.

One table, :data:`RULES`, holds every engine's rules with the engine's own message and the
source file and version each comes from. The real path (:class:`~msopt.evaluate.real.RealRunner`)
and the simulated path (:class:`~msopt.evaluate.simulated.SimRunner`) both call
:func:`check_rules` on the rendered launch, so a candidate that breaks a rule costs no launch,
and simulated and real refusals cannot drift apart.

A rule only fires when every value it compares is known (set by a field, ``others`` or the
config.json, or a fact of the model): an engine default msopt does not know never refuses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msopt.engines.base import LaunchSpec
from msopt.errors import RefusedError
from msopt.space.fields import FieldDecl


@dataclass(frozen=True)
class ModelFacts:
    """What the rules need to know about the served model (None: unknown).

    Attributes:
        attention_heads: ``num_attention_heads`` of the model's config.json.
        max_position: ``max_position_embeddings`` (vLLM's default ``max_model_len``).
    """

    attention_heads: int | None = None
    max_position: int | None = None


def model_facts(model: str) -> ModelFacts:
    """Facts from ``<model>/config.json`` when ``model`` is a local directory, else unknown."""
    path = Path(model).expanduser() / "config.json" if model else None
    if path is None or not path.is_file():
        return ModelFacts()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ModelFacts()
    if not isinstance(doc, dict):
        return ModelFacts()
    doc = doc.get("text_config", doc) if isinstance(doc.get("text_config"), dict) else doc

    def pos_int(key: str) -> int | None:
        v = doc.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    return ModelFacts(pos_int("num_attention_heads"), pos_int("max_position_embeddings"))


def parse_flags(argv: Sequence[str]) -> dict[str, str | None]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` -> {flag: last value (None: bare)}."""
    out: dict[str, str | None] = {}
    items = list(argv)
    for i, item in enumerate(items):
        if not item.startswith("-") or len(item) < 2 or item[1].isdigit():
            continue
        if "=" in item and item.startswith("--"):
            name, value = item.split("=", 1)
            out[name] = value
            continue
        nxt = items[i + 1] if i + 1 < len(items) else None
        takes = nxt is not None and (not nxt.startswith("-") or nxt[1:2].isdigit() or nxt == "-")
        out[item] = nxt if takes else None
    return out


@dataclass(frozen=True)
class Candidate:
    """One rendered candidate, as the rules see it.

    Attributes:
        spec: the rendered launch.
        values: the decoded field values.
        section: the engine's configuration section.
        model: facts of the served model.
        environ: the environment the server would start with (the process's plus ``spec.env``).
    """

    spec: LaunchSpec
    values: Mapping[str, Any]
    section: Mapping[str, Any]
    model: ModelFacts = field(default_factory=ModelFacts)
    environ: Mapping[str, str] = field(default_factory=dict)

    @property
    def flags(self) -> dict[str, str | None]:
        """The command line's flags, last occurrence winning (argparse's rule)."""
        return parse_flags(self.spec.argv)

    def int_flag(self, *names: str) -> int | None:
        """The integer value of the last of ``names`` on the command line, None when absent."""
        flags = self.flags
        found = [(i, n) for i, n in enumerate(self.spec.argv) for name in names
                 if n == name or n.startswith(name + "=")]
        if not found:
            return None
        name = found[-1][1].split("=", 1)[0]
        try:
            return int(float(flags.get(name) or ""))
        except ValueError:
            return None

    def bool_flag(self, name: str) -> bool | None:
        """True for ``--x``, False for ``--no-x`` (the later wins), None when neither is there."""
        state = None
        neg = "--no-" + name[2:]
        for item in self.spec.argv:
            if item == name:
                state = True
            elif item == neg:
                state = False
        return state

    @property
    def mindie_model(self) -> Mapping[str, Any]:
        """``BackendConfig.ModelDeployConfig.ModelConfig[0]`` of the rendered config.json."""
        doc = self.mindie_config
        try:
            model = doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
        except (KeyError, IndexError, TypeError):
            return {}
        return model if isinstance(model, Mapping) else {}

    @property
    def mindie_config(self) -> Mapping[str, Any]:
        """The rendered config.json (MindIE), empty for other engines."""
        for doc in self.spec.files.values():
            if isinstance(doc, Mapping) and "BackendConfig" in doc:
                return doc
        return {}


@dataclass(frozen=True)
class Rule:
    """One start-up rule of one engine.

    Attributes:
        id: unique, ``<engine>.<what>``.
        engine: the engine's registered name.
        refuses: the engine's own message when the candidate breaks the rule, else None.
        source: the engine's source file that holds the check.
        version: the engine version that source was read at.
    """

    id: str
    engine: str
    refuses: Callable[[Candidate], str | None]
    source: str
    version: str


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


# -- SGLang 0.5.23 ----------------------------------------------------------------------------
SGLANG_VERSION = "sglang 0.5.23"


def _sglang_tp_heads(c: Candidate) -> str | None:
    tp = c.int_flag("--tp-size", "--tensor-parallel-size")
    heads = c.model.attention_heads
    if tp and heads and heads % tp:
        return f"AssertionError: assert self.total_num_heads % tp_size == 0 (heads {heads}, tp_size {tp})"
    return None


def _sglang_chunk_page(c: Candidate) -> str | None:
    chunk = c.int_flag("--chunked-prefill-size")
    page = c.int_flag("--page-size")
    if chunk is not None and page and chunk > 0 and chunk % page:
        return "AssertionError: chunked_prefill_size must be divisible by page_size"
    return None


# -- MindIE (MindIE-LLM master 8b4871a, 2026-04-23) -------------------------------------------
MINDIE_VERSION = "MindIE-LLM 8b4871a (master, 2026-04-23)"
_MAPPING = "examples/atb_models/atb_llm/utils/mapping.py"


def _mindie_int(model: Mapping[str, Any], key: str, default: int | None) -> int | None:
    v = model.get(key, default)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _mindie_nodes(c: Candidate) -> int:
    """Nodes of a multi-node launch (``server_count`` of the rank table msopt rendered), else 1."""
    for doc in c.spec.files.values():
        if isinstance(doc, Mapping) and "server_list" in doc:
            try:
                return max(1, int(doc.get("server_count", 1)))
            except (TypeError, ValueError):
                return 1
    return 1


def _mindie_parallel(c: Candidate) -> tuple[int | None, int, int, int]:
    m = c.mindie_model
    world = _mindie_int(m, "worldSize", None)
    if world is not None:
        world *= _mindie_nodes(c)  # worldSize counts one node's devices; the rank table all of them
    tp = _mindie_int(m, "tp", world) or 1  # mapping.py: tp defaults to world_size
    return world, tp, _mindie_int(m, "dp", 1) or 1, _mindie_int(m, "pp", 1) or 1


def _mindie_dp_pp(c: Candidate) -> str | None:
    _, _, dp, pp = _mindie_parallel(c)
    if pp != 1 and dp != 1:
        return ("The attention module cannot support data parallel and pipeline parallel simultaneously. "
                "Please check `dp` and `pp`.")
    return None


def _mindie_world(c: Candidate) -> str | None:
    world, tp, dp, pp = _mindie_parallel(c)
    if world is None:
        return None
    if pp > 1 and tp * pp != world:
        return (f"World size must equal to attention's tp_size * pp_size. pp_size is {pp}. pp's tp_size is "
                f"{tp}. World size is {world}. Please check `tp`, `pp` and `world_size`.")
    if pp == 1 and tp * dp != world:
        return ("World size must equal to attention's dp_size * attention's cp_size * attention's tp_size. "
                f"Attention's tp_size is {tp}. Attention's dp_size is {dp}. Attention's cp_size is 1. "
                f"World size is {world}. Please check `dp`, `cp`, `tp` and `world_size`.")
    return None


def _mindie_master(c: Candidate) -> str | None:
    _, _, _, pp = _mindie_parallel(c)
    if pp > 1 and not c.environ.get("MASTER_IP"):
        return "Master ip cannot be None when pipeline parallel is used. Please export MASTER_IP."
    if pp > 1 and not c.environ.get("MASTER_PORT"):
        return ("MASTER_PORT or Network adapter cannot be None when pipeline parallel is used. "
                "Please export environment.")
    return None


def _mindie_device_ids(c: Candidate) -> str | None:
    backend = c.mindie_config.get("BackendConfig", {})
    ids = backend.get("npuDeviceIds") if isinstance(backend, Mapping) else None
    if not isinstance(ids, list):
        return None
    if backend.get("modelInstanceNumber") is not None and len(ids) != backend.get("modelInstanceNumber"):
        return "The size of npuDeviceIds does not equal to modelInstanceNumber"
    world = c.mindie_model.get("worldSize")
    if any(isinstance(s, list) and len(s) != world for s in ids):
        return "The size of npuDeviceIds (subset) does not equal to worldSize"
    return None


_CONFIG_MANAGER = "src/config_manager/config_manager_impl.cpp"


def _mindie_schedule(c: Candidate, key: str) -> int | None:
    """``BackendConfig.ScheduleConfig.<key>`` as an integer, None when absent or not a number."""
    backend = c.mindie_config.get("BackendConfig", {})
    schedule = backend.get("ScheduleConfig", {}) if isinstance(backend, Mapping) else {}
    return _mindie_int(schedule, key, None) if isinstance(schedule, Mapping) else None


def _mindie_models(c: Candidate) -> list[Mapping[str, Any]]:
    """Every element of ``ModelConfig`` (MindIE checks each, config_manager_impl.cpp:320)."""
    try:
        models = c.mindie_config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"]
    except (KeyError, TypeError):
        return []
    return [m for m in models if isinstance(m, Mapping)] if isinstance(models, list) else []


def _mindie_prefill_tokens(c: Candidate) -> str | None:
    # config_manager_impl.cpp:318-332 (8b4871a): maxPrefillTokens < ModelDeployConfig.maxInputTokenLen is
    # refused unless ScheduleConfig.templateType is "Mix".
    backend = c.mindie_config.get("BackendConfig", {})
    deploy = backend.get("ModelDeployConfig", {}) if isinstance(backend, Mapping) else {}
    schedule = backend.get("ScheduleConfig", {}) if isinstance(backend, Mapping) else {}
    tokens = _mindie_schedule(c, "maxPrefillTokens")
    longest = _mindie_int(deploy, "maxInputTokenLen", None) if isinstance(deploy, Mapping) else None
    template = schedule.get("templateType") if isinstance(schedule, Mapping) else None
    if tokens is None or longest is None or template in (None, "Mix") or not _mindie_models(c):
        return None
    if tokens < longest:
        return "The value of maxPrefillTokens should not be less than maxInputTokenLen."
    return None


def _mindie_iter_times(c: Candidate) -> str | None:
    # config_manager_impl.cpp:321-324 (8b4871a)
    if _mindie_schedule(c, "maxIterTimes") == 0 and _mindie_models(c):
        return "The value of ScheduleParam.maxIterTimes can not be 0."
    return None


def _mindie_preempt_cpu_mem(c: Candidate) -> str | None:
    # config_manager_impl.cpp:325-328 (8b4871a): swapping preempted sequences out needs host memory
    preempt = _mindie_schedule(c, "maxPreemptCount")
    if preempt is None or preempt == 0:
        return None
    if any(_mindie_int(m, "cpuMemSize", None) == 0 for m in _mindie_models(c)):
        return "The value of modelParam.cpuMemSize can not be 0 when maxPreemptCount is not 0."
    return None


def _mindie_preempt_batch(c: Candidate) -> str | None:
    # src/config_manager/schedule_config.cpp:276-281 (8b4871a)
    preempt, batch = _mindie_schedule(c, "maxPreemptCount"), _mindie_schedule(c, "maxBatchSize")
    if preempt is not None and batch is not None and preempt > batch:
        return ("The maxPreemptCount cannot be set greater than maxBatchsize, please set 'maxPreemptCount' to be "
                "not greater than 'maxBatchsize' in config.json.")
    return None


#: Every engine's start-up rules; see the module docstring.
RULES: tuple[Rule, ...] = (
    Rule("vllm.batched_tokens_vs_max_model_len", "vllm", _vllm_batched_vs_model_len,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.batched_tokens_vs_max_num_seqs", "vllm", _vllm_batched_vs_seqs,
         "vllm/config/scheduler.py (SchedulerConfig.verify_max_model_len)", VLLM_VERSION),
    Rule("vllm.tp_divides_attention_heads", "vllm", _vllm_tp_heads,
         "vllm/config/model.py (ModelConfig.verify_with_parallel_config)", VLLM_VERSION),
    Rule("sglang.tp_divides_attention_heads", "sglang", _sglang_tp_heads,
         "sglang/srt/models/llama.py, qwen2.py, qwen3.py (attention __init__)", SGLANG_VERSION),
    Rule("sglang.chunked_prefill_vs_page_size", "sglang", _sglang_chunk_page,
         "sglang/srt/arg_groups/validation_hook.py", SGLANG_VERSION),
    Rule("mindie.dp_and_pp", "mindie", _mindie_dp_pp, f"{_MAPPING} (Mapping.validate)", MINDIE_VERSION),
    Rule("mindie.world_size", "mindie", _mindie_world, f"{_MAPPING} (Mapping.validate_pp)", MINDIE_VERSION),
    Rule("mindie.pp_master_address", "mindie", _mindie_master, f"{_MAPPING} (Mapping.update_pp)",
         MINDIE_VERSION),
    Rule("mindie.npu_device_ids", "mindie", _mindie_device_ids,
         "src/config_manager/backend_config.cpp (BackendConfigManager::InitFromJson)", MINDIE_VERSION),
    Rule("mindie.max_prefill_tokens_vs_max_input_token_len", "mindie", _mindie_prefill_tokens,
         f"{_CONFIG_MANAGER}:329-332 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.max_iter_times_nonzero", "mindie", _mindie_iter_times,
         f"{_CONFIG_MANAGER}:321-324 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.preempt_needs_cpu_mem", "mindie", _mindie_preempt_cpu_mem,
         f"{_CONFIG_MANAGER}:325-328 (ConfigManager::Impl::CheckAllParam)", MINDIE_VERSION),
    Rule("mindie.max_preempt_count_vs_max_batch_size", "mindie", _mindie_preempt_batch,
         "src/config_manager/schedule_config.cpp:276-281 (ScheduleConfigManager::CheckParam)", MINDIE_VERSION),
)


def rules_for(engine: str) -> tuple[Rule, ...]:
    """The start-up rules of ``engine`` (none for an engine without a table, e.g. a plugin)."""
    return tuple(r for r in RULES if r.engine == engine)


def broken_rule(candidate: Candidate) -> tuple[Rule, str] | None:
    """The first rule of the candidate's engine it breaks, with the engine's message, or None."""
    for rule in rules_for(candidate.spec.engine):
        message = rule.refuses(candidate)
        if message is not None:
            return rule, message
    return None


def check_rules(spec: LaunchSpec, values: Mapping[str, Any], section: Mapping[str, Any], *,
                model: ModelFacts | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`RefusedError` (the engine's message, the rule id) for a refused candidate.

    Args:
        spec: the rendered launch.
        values: the decoded values.
        section: the engine's section.
        model: facts of the model; default: read from ``<spec.model>/config.json`` when local.
        environ: the server's environment; default: this process's plus ``spec.env``.
    """
    env = {**(os.environ if environ is None else environ), **spec.env}
    cand = Candidate(spec, values, section, model if model is not None else model_facts(spec.model), env)
    hit = broken_rule(cand)
    if hit is not None:
        rule, message = hit
        raise RefusedError(f"{spec.engine} refuses this configuration at start-up: {message} "
                           f"[rule {rule.id}, {rule.source}, {rule.version}]", rule.id)


# -- advisories: fields that tune nothing, reported by `msopt validate` -------------------------
@dataclass(frozen=True)
class Advisory:
    """A configuration an engine accepts but that cannot do what it says (a dead dimension).

    Attributes:
        id: unique, ``<engine>.<what>``.
        engine: the engine's registered name.
        warns: the warning for these fields and section, else None.
        source: the engine's source file that makes it so.
        version: the engine version that source was read at.
    """

    id: str
    engine: str
    warns: Callable[[Sequence[FieldDecl], Mapping[str, Any]], str | None]
    source: str
    version: str


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
    from msopt.engines.base import command_table, split_others
    from msopt.engines.vllm import target

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


#: Every engine's advisories (printed by ``msopt validate`` as ``warning:`` lines).
ADVISORIES: tuple[Advisory, ...] = (
    Advisory("vllm.ascend_block_size_forced_128", "vllm", _ascend_block_size, _ASCEND_SOURCE,
             "vllm-ascend 0.23.0.post1"),
)


def advisories(engine: str, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> list[str]:
    """The warnings of ``engine``'s advisories for this configuration, each naming its source."""
    out = []
    for adv in ADVISORIES:
        if adv.engine == engine:
            text = adv.warns(fields, section)
            if text is not None:
                out.append(f"{text} [advisory {adv.id}, {adv.source}, {adv.version}]")
    return out
