"""MindIE's template for ``msopt init`` (msopt/cli/init.py; the shared pieces: :mod:`msopt.engines.init_doc`)."""

from __future__ import annotations

from msopt.engines.init_doc import InitContext, divisors, pow2_at_least


def write_init(ctx: InitContext) -> None:
    """MindIE's sections of ``msopt init``'s config.toml: the daemon, its config.json keys and the fields it tunes."""
    doc, choice, spec, machine = ctx.doc, ctx.choice, ctx.spec, ctx.machine
    served, name, wl = ctx.served, ctx.name, ctx.workload
    n = machine.devices
    doc.table("mindie", "docs/engines.md, MindIE")
    doc.comment('config_path = "/usr/local/Ascend/mindie/latest/mindie-service/conf/config.json"',
                "  unset: msopt's copy of MindIE's config.json (msopt/engines/mindie/config.json) is edited")
    doc.key("config_env", "MIES_CONFIG_JSON_PATH", "each trial's edited copy; the install's is never changed")
    doc.key("wait_start_time", 1200)
    doc.key("health_path", "/v1/models")
    doc.table("mindie.command")
    doc.key("model", served, "-> ModelConfig.0.modelWeightPath")
    doc.key("served_model_name", name, "-> ModelConfig.0.modelName")
    doc.key("host", "127.0.0.1")
    base = "BackendConfig.ModelDeployConfig.ModelConfig.0."
    doc.field("mindie", "world_size", base + "worldSize", "int", "the devices of one trial", constant=n)
    if n > 1:
        why_tp = (f"tensor parallel: divisors of {n} that divide the {spec.heads} attention heads and the "
                  f"{spec.kv_heads} KV heads (or they it)")
        if len(choice.tp) > 1:
            doc.field("mindie", "tp", base + "tp", "enum", why_tp, max=1, dtype_param=choice.tp, value=choice.tp_value)
        else:
            doc.field("mindie", "tp", base + "tp", "int", why_tp, min=choice.tp[0], max=choice.tp[0])
        doc.field("mindie", "pp", base + "pp", "int", "pp stays 1: atb_models refuses dp > 1 with pp > 1 "
                  "(examples/atb_models/atb_llm/utils/mapping.py, MindIE-LLM 8b4871a)", constant=1)
        doc.field("mindie", "dp", base + "dp", "ternary_factories", f"data parallel: tp x pp x dp = {n}",
                  dtype_param={"target_names": ["tp", "pp"], "product": n, "dtype": "int", "min_value": 1,
                               "priority_policy": "balanced"})
        if spec.is_moe:
            ep = [d for d in divisors(n) if spec.experts % d == 0]
            choice.expert_parallel = ep
            doc.field("mindie", "moe_ep", base + "moe_ep", "enum",
                      f"expert parallel: divisors of {n} that divide the {spec.experts} experts", max=1,
                      dtype_param=ep, value=ep[-1])
            doc.field("mindie", "moe_tp", base + "moe_tp", "factories",
                      f"MindIE: moe_ep x moe_tp = worldSize ({n})",
                      dtype_param={"target_name": "moe_ep", "product": n, "dtype": "int"})
    else:
        doc.left_out(choice, "tp, pp, dp", "one device per trial: every parallel size is 1")
    doc.field("mindie", "max_batch_size", "BackendConfig.ScheduleConfig.maxBatchSize", "int",
              "requests one decode batch may hold", min=16, max=512, value=200)
    doc.field("mindie", "max_prefill_batch_size", "BackendConfig.ScheduleConfig.maxPrefillBatchSize", "ratio",
              "requests one prefill batch may hold, a share of maxBatchSize", min=0.1, max=0.7,
              dtype_param="max_batch_size", value=0.3)
    lo = max(4096, pow2_at_least(wl.input_len))
    doc.field("mindie", "max_prefill_tokens", "BackendConfig.ScheduleConfig.maxPrefillTokens", "range",
              "tokens one prefill batch may hold: at least one prompt of the workload", min=lo, max=max(lo, 32768),
              dtype_param=4096, value=max(lo, 8192))
