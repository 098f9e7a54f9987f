"""The independent reality: NVIDIA AIConfigurator's estimate of every configuration, a model of
serving that shares no code with msopt (kernel timings measured on real GPUs, its own scheduler
and memory model).

Needs ``aiconfigurator`` and ``aiconfigurator-core`` 0.12.0 (the ``bench`` extra). The calls, as
read in their installed source:

- ``aiconfigurator.cli.api.cli_estimate(model_path, system_name, mode="agg", backend_name=...,
  backend_version=..., isl=, osl=, batch_size=, ctx_tokens=, tp_size=, pp_size=,
  free_gpu_memory_fraction=)``: one aggregated (in-flight batching) worker; returns an
  ``EstimateResult`` with ``ttft`` and ``tpot`` (ms), ``raw["tokens/s"]`` and ``raw["seq/s"]``
  (the worker's output tokens and requests per second) and ``summary`` (an ``InferenceSummary``).
  It raises ``RuntimeError("OOM: ...")`` when weights, activations and KV cache exceed the
  device (``InferenceSummary.check_oom``). ``backend_version`` is always passed: without it
  every call resolves the newest database version by parsing its YAML files again (seconds).
- ``InferenceSummary.check_kv_cache_oom()``: the batch's KV cache exceeds the budget of the
  memory fraction; for vLLM and SGLang the fraction caps the device's total memory
  (``aiconfigurator_core/sdk/backends/vllm_backend.py``, ``VLLMBackend._oom_check_kwargs``:
  ``fraction_of_free = False``). AIConfigurator's own sweep drops such a point as infeasible
  (``aiconfigurator/sdk/sweep.py``, ``_sweep_one_parallel_agg``: ``if model_oom or kv_cache_oom:
  break``); so does this reality: the launch fails.
- The problems' models, GPUs and engine versions are rows of its support matrix
  (``aiconfigurator_core/systems/support_matrix/<system>.csv``, Status PASS, mode agg).

From msopt's configuration to AIConfigurator's worker (one replica of ``tp · pp`` devices; ``dp``
replicas share the workload's closed-loop concurrency ``C``):

- n = min(max_num_seqs (SGLang: max_running_requests), ceil(C / dp)): the requests one replica
  runs at once.
- batch = n // pp (at least 1): AIConfigurator's ``batch_size`` is one pipeline micro-batch, and it
  credits the worker with ``pp`` of them in flight (aiconfigurator-core 0.12.0,
  ``aiconfigurator_core/sdk/backends/base_backend.py``: ``run_agg``, lines 1372-1374,
  ``scale_factor = model.config.pp_size * model.config.attention_dp_size``,
  ``output_throughput = output_throughput * scale_factor``, ``concurrency = b * scale_factor``;
  ``run_static``, lines 727-729, ``seq_s = global_bs / request_latency * 1000 * pp_size``; its KV
  cache holds ``batch_size`` sequences of every layer, line 1767-1768, "should not be divided by
  pp_size as you need to hold all kvcache for stages"). So a replica runs ``batch · pp`` requests;
  passing n itself credited a pp-4 replica with 4 × the closed loop's users and 4 × their
  throughput. Where pp does not divide n the remainder (fewer than pp requests) waits; where
  n < pp only n of the pp micro-batches are in flight, so throughput is scaled by n / pp.
- ctx_tokens (the per-step prompt-token budget) = max_num_batched_tokens (SGLang:
  chunked_prefill_size); without chunked prefill rounded down to whole prompts, as
  AIConfigurator's sweep enumerates it (``_agg_ctx_tokens_list``); at most (batch − 1) prompts
  per step, the sweep's balance guard.
- free_gpu_memory_fraction = gpu_memory_utilization (SGLang: mem_fraction_static).
- A mixture-of-experts model (``aiconfigurator.sdk.models.check_is_moe``): its experts are
  tensor-sliced, ``moe_tp_size = tp`` (neither ``--enable-expert-parallel`` nor SGLang's
  ``--ep-size`` is in the space). vLLM runs the dp ranks of an MoE model as one lock-step worker
  whose expert layers span every rank (vLLM 0.33.0 ``vllm/config/parallel.py``, as
  msopt/sim/moe.py reads it): AIConfigurator's ``attention_dp_size = dp`` with
  ``moe_tp_size = tp · dp``, its batch per rank, its throughput the whole world's. SGLang's
  ``--dp-size`` without DP attention runs independent replicas, as for a dense model.
- vLLM refuses ``max_num_batched_tokens < max_model_len`` without chunked prefill (vLLM 0.23.0
  vllm/config/scheduler.py:259-278, the rule msopt/engines/vllm/rules.py cites): that launch fails.
- generate_speed = dp × tokens/s; TTFT = the worker's TTFT plus the wait of the requests beyond
  those in flight, ``(C / dp − min(n, batch · pp)) / seq/s`` by Little's law (a closed loop of
  C / dp clients served that many at a time); TPOT as estimated.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from functools import cache, cached_property
from importlib import metadata
from typing import Any

#: The AIConfigurator release the problems were built against (the bench extra pins it).
AIC_VERSION = "0.12.0"


def available() -> str | None:
    """None when AIConfigurator can run here, else why not (one line)."""
    try:
        version = metadata.version("aiconfigurator")
        metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return "aiconfigurator is not installed (pip install -e '.[bench]')"
    if version != AIC_VERSION:
        return f"aiconfigurator {version} is installed; the independent problems were built on {AIC_VERSION}"
    return None


@cache
def fingerprint() -> str:
    """What an AIConfigurator table depends on besides its problem: this mapping and the release."""
    from pathlib import Path

    return hashlib.sha256(Path(__file__).read_bytes() + AIC_VERSION.encode()).hexdigest()[:16]


class Estimator:
    """AIConfigurator's estimate of msopt's decoded values, memoised per distinct worker."""

    def __init__(self, problem: Any) -> None:
        self.problem = problem
        self._memo: dict[tuple, tuple[dict[str, Any] | None, str | None]] = {}
        logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)

    def worker(self, values: Mapping[str, Any]) -> tuple[int, int, int, int, int, float, bool]:
        """(tp, pp, dp, batch, ctx_tokens, memory fraction, chunked) of decoded values; batch is
        AIConfigurator's ``batch_size``, one pipeline micro-batch (:meth:`in_flight` the replica's)."""
        p = self.problem
        tp, pp = int(values["tp"]), int(values.get("pp", 1))
        dp = int(values.get("dp", p.world // (tp * pp)))
        if p.engine == "sglang":
            budget = int(values["chunked_prefill_size"])
            fraction, chunked = float(values["mem_fraction_static"]), True
        else:
            budget = int(values["max_num_batched_tokens"])
            fraction, chunked = float(values["gpu_memory_utilization"]), bool(values["enable_chunked_prefill"])
        batch = max(1, self.in_flight(values) // pp)
        isl = p.input_len
        ctx = budget if chunked else max(isl, budget // isl * isl)
        ctx = min(ctx, max(1, batch - 1) * isl)
        return tp, pp, dp, batch, ctx, fraction, chunked

    def in_flight(self, values: Mapping[str, Any]) -> int:
        """n: the requests one replica runs at once, its slots or its share of the closed loop."""
        p = self.problem
        tp, pp = int(values["tp"]), int(values.get("pp", 1))
        dp = int(values.get("dp", p.world // (tp * pp)))
        seqs = int(values["max_running_requests"] if p.engine == "sglang" else values["max_num_seqs"])
        return max(1, min(seqs, math.ceil(p.concurrency / dp)))

    def metrics(self, values: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(metrics, None) or (None, why the launch fails)."""
        p = self.problem
        if (p.engine == "vllm" and not values["enable_chunked_prefill"]
                and int(values["max_num_batched_tokens"]) < int(values.get("max_model_len", 4096))):
            return None, "vLLM refuses max_num_batched_tokens < max_model_len without chunked prefill"
        tp, pp, dp, batch, ctx, fraction, _ = self.worker(values)
        # vLLM runs an MoE model's dp ranks as one worker: attention dp, the experts sliced over them
        ranks = dp if self.lockstep else 1
        key = (tp, pp, ranks, batch, ctx, fraction)
        if key not in self._memo:
            self._memo[key] = self._estimate(*key)
        worker, error = self._memo[key]
        if worker is None:
            return None, error
        n = self.in_flight(values)
        # fewer requests than stages: only n of the pp micro-batches are in flight
        occupancy = min(1.0, n / (batch * pp))
        seq_s, tok_s = worker["seq/s"] * occupancy, worker["tokens/s"] * occupancy
        wait = max(0.0, p.concurrency / dp - min(n, batch * pp)) / (seq_s / ranks)
        workers = dp // ranks
        return {"generate_speed": workers * tok_s, "time_to_first_token": worker["ttft"] / 1e3 + wait,
                "time_per_output_token": worker["tpot"] / 1e3, "success_rate": 1.0,
                "throughput": workers * seq_s}, None

    @cached_property
    def moe(self) -> bool:
        """Whether the problem's model is a mixture of experts (AIConfigurator's own test)."""
        from aiconfigurator.sdk.models import check_is_moe

        return bool(check_is_moe(self.problem.aic_model))

    @property
    def lockstep(self) -> bool:
        """Whether dp ranks form one worker (vLLM with an MoE model) rather than independent replicas."""
        return self.moe and self.problem.engine == "vllm"

    def _estimate(self, tp: int, pp: int, ranks: int, batch: int, ctx: int,
                  fraction: float) -> tuple[dict[str, Any] | None, str | None]:
        from aiconfigurator.cli.api import cli_estimate

        p = self.problem
        # the experts: tensor-sliced over the worker's tp x ranks devices (neither engine's expert
        # parallelism is in the space); AIConfigurator needs moe_tp_size for an MoE model
        moe = {"attention_dp_size": ranks, "moe_tp_size": tp * ranks, "moe_ep_size": 1} if self.moe else {}
        try:
            r = cli_estimate(p.aic_model, p.aic_system, mode="agg", backend_name=p.engine,
                             backend_version=p.aic_version, isl=p.input_len, osl=p.output_len, batch_size=batch,
                             ctx_tokens=ctx, tp_size=tp, pp_size=pp, free_gpu_memory_fraction=fraction, **moe)
        except RuntimeError as exc:
            if str(exc).startswith("OOM"):
                return None, "out of memory (AIConfigurator: weights, activations and KV cache exceed the device)"
            raise
        if r.summary is not None and r.summary.check_kv_cache_oom():
            return None, f"out of memory (AIConfigurator: the KV cache of {batch} requests exceeds the budget)"
        seq_s, tok_s = float(r.raw["seq/s"]), float(r.raw["tokens/s"])
        if not (seq_s > 0 and tok_s > 0 and r.ttft > 0 and r.tpot > 0):
            return None, f"AIConfigurator estimated no throughput ({seq_s} seq/s)"
        return {"ttft": float(r.ttft), "tpot": float(r.tpot), "seq/s": seq_s, "tokens/s": tok_s}, None
