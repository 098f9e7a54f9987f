"""What ``msopt init`` (msopt/cli/init.py) hands each engine's template, and the pieces the templates share.

Each engine writes its own sections of the commented config.toml (``[<engine>]``, ``[<engine>.command]``, its
``[[<engine>.target_field]]``) in its folder (``msopt/engines/<name>/template.py``), through its adapter's
:meth:`~msopt.engines.base.EngineAdapter.write_init`; ``msopt init`` writes everything else (the top-level keys,
``[slo]``, ``[cluster]``, ``[simulator]``, the benchmark and the defaults) and validates the whole before writing it.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
        trace: the request trace the benchmark and the simulator replay (``[workload] trace``, an
            absolute path; the means above are then only what the knobs' ranges are sized by), or None.
        span_s: the trace's span, first arrival to last (s).
        longest: a trace's longest request (input plus output tokens), 0 without a trace: the
            server's context must hold it.
        totals: a trace's requests' input plus output tokens, sorted (() without a trace).
    """

    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int | None
    request_rate: float | None
    source: str
    shared_prefixes: bool = False
    trace: str | None = None
    span_s: float = 0.0
    longest: int = 0
    totals: tuple[int, ...] = field(default=(), repr=False)

    def over_context(self, context: int) -> int:
        """How many of a trace's requests (input plus output tokens) are longer than ``context``."""
        return sum(t > context for t in self.totals)


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
        notes: what the console says besides the file (the trace's requests longer than the model's context).
    """

    tp: list[int] = field(default_factory=list)
    tp_value: int = 1
    pp: list[int] = field(default_factory=list)
    expert_parallel: list[int] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    text: str = ""
    origins: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def toml_value(x: Any) -> str:
    """``x`` written as a TOML value."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x, ensure_ascii=False)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(toml_value(i) for i in x) + "]"
    if isinstance(x, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in x.items()) + " }"
    raise TypeError(f"no TOML for {x!r}")


class InitDoc:
    """Lines of a commented TOML document: comments, keys, tables and target fields."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def comment(self, *text: str) -> None:
        self.lines += [f"# {t}" if t else "#" for t in text]

    def blank(self) -> None:
        self.lines.append("")

    def key(self, k: str, v: Any, why: str = "") -> None:
        line = f"{k} = {toml_value(v)}"
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


@dataclass
class InitContext:
    """What one engine's template writes from.

    Attributes:
        doc: the document being written.
        choice: the layout chosen so far (tp and pp candidates); the template notes what it adds or leaves out.
        engine: the name ``msopt init --engine`` got ("vllm-ascend" is vLLM's section on NPUs).
        spec: the model (:class:`msopt.sim.catalog_types.ModelSpec`).
        machine: the devices of one trial.
        served: what the engine serves (the model directory, or a hub id).
        name: the served model's name.
        workload: the benchmark's workload.
        context: the longest sequence to serve (twice a request of the workload, within the model's context).
        has_weights: weight files lie beside config.json (else the engine loads random weights).
    """

    doc: InitDoc
    choice: InitChoice
    engine: str
    spec: Any
    machine: Machine
    served: str
    name: str
    workload: TraceWorkload
    context: int
    has_weights: bool


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def pow2_at_least(n: int) -> int:
    """The least power of two not below ``n``."""
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def executable_for(served: str, tool: str) -> tuple[list[str], str]:
    """The engine's executable: on PATH, else the one in a venv beside the model (the vLLM CPU home's
    layout, scripts/install_vllm_cpu.py), else the bare name."""
    found = shutil.which(tool)
    if found:
        return [found], "found on PATH"
    beside = Path(served).expanduser().parent / "venv" / "bin" / tool
    if beside.is_file():
        return [str(beside)], "the venv beside the model"
    return [tool], f"not found here: put {tool} on PATH or write its path"


def parallel_fields(doc: InitDoc, choice: InitChoice, section: str, machine: Machine,
                    positions: tuple[str, str, str], spec: Any) -> None:
    """The tp, pp and dp fields of ``section`` at the flag or key ``positions`` (tp x pp x dp = the trial's devices),
    or a note that one device leaves them out."""
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


def batch_ranges(spec: Any, machine: Machine, context: int, wl: TraceWorkload) -> tuple[list[int], int, int]:
    """The running-request candidates and the batched-token bounds from the context and the workload."""
    if machine.accelerator == "CPU":
        return [2, 4, 8, 16, 32, 64, 128, 256], 256, max(4096, context)  # configs/vllm_cpu.toml's space
    seqs = [16, 32, 64, 128, 256, 512]
    if wl.concurrency:
        seqs = [s for s in seqs if s <= 2 * pow2_at_least(wl.concurrency)] or seqs[:2]
    return seqs, 512, max(16384, context)


def prefix_field(doc: InitDoc, choice: InitChoice, section: str, name: str, position: str, wl: TraceWorkload) -> None:
    """The prefix-caching field ``name`` when the workload's prompts share prefixes; else a note saying why not."""
    if wl.shared_prefixes:
        on = not name.startswith("disable")
        doc.field(section, name, position, "bool", "the trace's prompts share prefixes: caching them may pay"
                  + ("" if on else " (false keeps SGLang's radix cache on)"), max=1, value=on)
    else:
        doc.left_out(choice, name, "the benchmark's prompts are random and share no prefix, so prefix caching "
                     "cannot pay here; give --workload a trace whose prompts repeat blocks (Mooncake's hash_ids)")
