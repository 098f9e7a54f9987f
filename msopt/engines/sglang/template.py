"""SGLang's template for ``msopt init`` (msopt/cli/init.py; the shared pieces: :mod:`msopt.engines.init_doc`)."""

from __future__ import annotations

from msopt.engines.init_doc import InitContext, batch_ranges, parallel_fields, prefix_field


def write_init(ctx: InitContext) -> None:
    """SGLang's sections of ``msopt init``'s config.toml: the server, its command and the fields it tunes."""
    doc, choice, spec, machine = ctx.doc, ctx.choice, ctx.spec, ctx.machine
    served, name, wl, context = ctx.served, ctx.name, ctx.workload, ctx.context
    doc.table("sglang", "docs/engines.md")
    if machine.accelerator == "NPU":
        doc.key("platform", "ascend", "SGLang's NPU backend: each trial gets its own HCCL port blocks")
    doc.key("wait_start_time", 900)
    doc.table("sglang.command")
    doc.key("executable", ["python3", "-m", "sglang.launch_server"], "use your venv's python")
    doc.key("model", served)
    doc.key("served_model_name", name)
    doc.key("host", "127.0.0.1")
    doc.key("others", f"--context-length {context}")
    parallel_fields(doc, choice, "sglang", machine, ("--tp-size", "--pp-size", "--dp-size"), spec)
    if spec.is_moe:
        # sglang 0.5.23 sglang/srt/arg_groups/moe_hook.py:89-92 ("The expert parallel size must be 1 or the same
        # as the tensor parallel size") and parallel_hook.py:175-183 (ep_size * moe_dp_size = tp_size)
        doc.left_out(choice, "ep", "SGLang's --ep-size must be 1 or the --tp-size (sglang 0.5.23 "
                     "sglang/srt/arg_groups/moe_hook.py), which a field of its own cannot follow; add --ep-size "
                     "to others at the tp you choose")
    seqs, _, _ = batch_ranges(spec, machine, context, wl)
    doc.field("sglang", "max_running_requests", "--max-running-requests", "enum", "requests one step may hold",
              max=1, dtype_param=seqs, value=seqs[len(seqs) // 2])
    doc.field("sglang", "chunked_prefill_size", "--chunked-prefill-size", "enum", "tokens of one prefill chunk",
              max=1, dtype_param=[2048, 4096, 8192, 16384], value=8192)
    doc.field("sglang", "mem_fraction_static", "--mem-fraction-static", "float",
              "the device memory fraction for weights and KV cache", min=0.7, max=0.92, step=0.01, value=0.85)
    prefix_field(doc, choice, "sglang", "disable_radix_cache", "--disable-radix-cache", wl)
