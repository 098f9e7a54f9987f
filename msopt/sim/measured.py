"""Public serving measurements in one schema (``../shared/measured/*.csv``) as :class:`Measurement` rows.

The schema (its README): ``source, source_ref, engine, engine_version, model, dtype, hardware,
n_devices, tp, pp, dp, ep, max_num_seqs, max_num_batched_tokens, chunked_prefill, kv_cache_dtype,
prefix_caching, dataset, input_len, output_len, num_prompts, concurrency, request_rate,
ttft_mean_ms, ttft_p99_ms, tpot_mean_ms, itl_mean_ms, output_tok_s, req_s, notes`` and optional
``measurement_kind`` and percentile columns. Cells are free text written as the source wrote them
("SGLang (Ascend NPU backend)", "Atlas 800I A3 (910C; ...)", "w8a8 (modelslim)", "on (32768)").

:func:`load_measured_csv` maps each row onto the simulator: the engine onto a personality, the model
onto the catalog entry of its architecture (``hf_id`` / ``aliases``), the hardware name onto a
catalog entry (:func:`msopt.sim.catalog_parts.catalog_part`), the layout and scheduler cells onto the
engine's own flags. A row the simulator cannot reproduce is returned as :class:`Skipped` with the
reason, never guessed at.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from msopt.errors import ConfigError, MsoptError
from msopt.sim.calibrate import Measurement
from msopt.sim.catalog_load import load_hardware, load_model
from msopt.sim.catalog_types import Hardware, ModelSpec
from msopt.sim.personality import PERSONALITIES, MeasuredLayout, get_personality

#: the schema's required columns (its README, "Schema"), in order
SCHEMA_COLUMNS = ("source", "source_ref", "engine", "engine_version", "model", "dtype", "hardware", "n_devices",
                  "tp", "pp", "dp", "ep", "max_num_seqs", "max_num_batched_tokens", "chunked_prefill",
                  "kv_cache_dtype", "prefix_caching", "dataset", "input_len", "output_len", "num_prompts",
                  "concurrency", "request_rate", "ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "itl_mean_ms",
                  "output_tok_s", "req_s", "notes")



@dataclass(frozen=True)
class Skipped:
    """A row the simulator does not reproduce.

    Attributes:
        source: ``file:line``.
        what: engine, model and hardware as the row names them.
        reason: why (an engine not modelled, an offline run, medians only, ...).
    """

    source: str
    what: str
    reason: str


def is_measured_schema(fieldnames: Sequence[str] | None) -> bool:
    """True when a CSV header is the measured schema's (its required columns, in order)."""
    return tuple(fieldnames or ())[: len(SCHEMA_COLUMNS)] == SCHEMA_COLUMNS


class _Skip(Exception):
    """A row is not simulated; the message is the reason."""


def _engine(text: str) -> str:
    """The personality an ``engine`` cell names (:attr:`Personality.measured_names`)."""
    low = text.lower()
    if "tensorrt" in low or "trt-llm" in low:
        raise _Skip(f"TensorRT-LLM is not modelled (the simulator models {', '.join(PERSONALITIES.names())})")
    for name in PERSONALITIES.names():
        p = get_personality(name)
        if any(low.startswith(prefix) for prefix in p.measured_names):
            if p.measured_skip:
                raise _Skip(p.measured_skip)
            return name
    raise _Skip(f"engine {text!r} is not modelled ({', '.join(PERSONALITIES.names())})")


def weight_dtype_of(text: str) -> tuple[str, str]:
    """The simulator dtype of a dtype cell, and what was assumed ("" if nothing).

    Raises:
        _Skip: a format the simulator has no dtype for (nvfp4, ...).
    """
    low = text.lower()
    if "w4a8" in low:
        return "int4", ""
    if "quantization_config" in low:
        # vllm-ascend's Kimi-K2-Thinking doc: the checkpoint's own int4 experts (compressed-tensors);
        # its bf16 weights would not fit the 16 x 64 GiB it ran on
        return "int4", "weights int4: the dtype cell edits the checkpoint's quantization_config (int4 experts)"
    if "w8a8" in low or "int8" in low:
        return "int8", ""
    if "fp4" in low:
        raise _Skip(f"weights {text!r}: 4-bit float weights are not modelled")
    if "fp8" in low:
        return "fp8", ""
    if re.search(r"bf16|bfloat16", low):
        return "bf16", ""
    if re.search(r"fp16|float16", low):
        return "fp16", ""
    if not low.strip():
        return "bf16", "weights assumed bf16 (dtype not published)"
    raise _Skip(f"weights {text!r}: not a dtype the simulator models")


def _int(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    try:
        return int(round(float(text)))
    except ValueError:
        raise _Skip(f"{text!r} is not a number") from None


def _float(text: str) -> float:
    text = text.strip()
    return float(text) if text else math.nan


def _chunk(text: str) -> int | None:
    """``on (32768)`` -> 32768, ``off (-1)`` / ``off`` -> -1, ``on`` / empty -> None (the default)."""
    m = re.search(r"\((-?\d+)\)", text)
    if m:
        return int(m.group(1))
    return -1 if text.strip().lower().startswith("off") else None


#: spec-decoding descriptions in the notes: "EAGLE3 4/5, accept length 2.15",
#: "NEXTN(MTP) 3 steps/4 draft, accept length 2.82"
_SPEC = re.compile(r"speculative decoding:\s*(?P<kind>[A-Za-z0-9()]+)\s+(?P<steps>\d+)(?: steps)?/(?P<draft>\d+)"
                   r"(?: draft)?(?:,\s*accept length (?P<accept>[\d.]+))?")


def spec_of(notes: str) -> tuple[str, int, int, float | None] | None:
    """(method, steps, draft tokens, accept length or None) a row's notes give, None without spec decoding."""
    m = _SPEC.search(notes)
    if m is None:
        return None
    kind = m.group("kind").upper()
    method = "mtp" if "MTP" in kind or "NEXTN" in kind else "eagle" if "EAGLE" in kind else kind.lower()
    accept = m.group("accept")
    return method, int(m.group("steps")), int(m.group("draft")), float(accept) if accept else None


def _argv(engine: str, row: dict[str, str], spec: ModelSpec, devices_per_node: int) -> tuple[list[str], list[str]]:
    """The server flags a row's cells describe (its engine's :meth:`Personality.measured_argv`), and what was
    assumed."""
    tp, pp, dp, ep = (_int(row[k]) or 1 for k in ("tp", "pp", "dp", "ep"))
    layout = MeasuredLayout(tp=tp, pp=pp, dp=dp, ep=ep, max_seqs=_int(row["max_num_seqs"]),
                            batched_tokens=_int(row["max_num_batched_tokens"]),
                            chunked_off=row["chunked_prefill"].strip().lower().startswith("off"),
                            chunk=_chunk(row["chunked_prefill"]), notes=row.get("notes", ""), is_moe=spec.is_moe,
                            devices_per_node=devices_per_node)
    return get_personality(engine).measured_argv(layout)


#: per-request lengths beside a CSV: ``<stem>.request_lengths.csv`` with columns run, request_rate,
#: request_index, input_len, output_len; a row whose ``source_ref`` holds ``/<run>/`` at its rate replays them
SIDECAR_SUFFIX = ".request_lengths.csv"

Lengths = dict[tuple[str, float], list[tuple[int, int]]]


def _sidecar(path: Path) -> Lengths:
    """The per-request (input, output) lengths of a CSV's sidecar by (run, rate), in request order."""
    side = path.with_name(path.name.removesuffix(".csv") + SIDECAR_SUFFIX)
    out: dict[tuple[str, float], list[tuple[int, int, int]]] = {}
    if not side.is_file():
        return {}
    with side.open(newline="") as f:
        for r in csv.DictReader(f):
            try:
                key = (r["run"], float(r["request_rate"]))
                out.setdefault(key, []).append((int(r["request_index"]), int(r["input_len"]), int(r["output_len"])))
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{side}: not a per-request lengths file (run, request_rate, request_index, "
                                  "input_len, output_len)") from None
    return {k: [(i, o) for _, i, o in sorted(v)] for k, v in out.items()}


def _replay(row: dict[str, str], lengths: Lengths) -> list[tuple[int, int]] | None:
    rate = _float(row["request_rate"]) if row["request_rate"].strip() else math.inf
    for (run, r), pairs in lengths.items():
        if f"/{run}/" in row["source_ref"] and (r == rate or (math.isinf(r) and math.isinf(rate))):
            return pairs
    return None


def _row(path: Path, line: int, row: dict[str, str], engine_only: str | None,
         models: dict[str, ModelSpec], lengths: Lengths | None = None) -> Measurement | None:
    kind = (row.get("measurement_kind") or "").lower()
    if "offline" in kind:
        raise _Skip("offline run (a batch at t=0 or max throughput), not a serving measurement")
    engine = _engine(row["engine"])
    if engine_only is not None and engine != engine_only:
        return None
    if any("P:" in row[k] for k in ("tp", "dp", "ep", "max_num_seqs", "max_num_batched_tokens")):
        raise _Skip("prefill/decode disaggregated (P:/D: layout): instance counts and the KV transfer "
                    "path are not in the schema")
    ttft, tpot, tok = _float(row["ttft_mean_ms"]) / 1e3, _float(row["tpot_mean_ms"]) / 1e3, _float(row["output_tok_s"])
    if all(math.isnan(v) for v in (ttft, tpot, tok)):
        raise _Skip("medians only (no mean TTFT, TPOT or throughput)" if row.get("ttft_p50_ms") or
                    row.get("tpot_p50_ms") else "no TTFT, TPOT or throughput published")
    in_len, out_len = _int(row["input_len"]), _int(row["output_len"])
    if not in_len or not out_len:
        raise _Skip("input or output length not published")
    hw, spec = _entries(row, models)
    dtype, dtype_note = weight_dtype_of(row["dtype"])
    if hw.compute_tflops(dtype) <= 0:
        raise _Skip(f"{dtype} weights: {hw.name} has no {dtype} compute")
    notes = row.get("notes", "")
    knobs, assumed = _knobs(engine, row, spec, hw, notes)
    conc = _int(row["concurrency"])
    rate = _float(row["request_rate"]) if row["request_rate"].strip() else math.inf
    n = _int(row["num_prompts"]) or (10 * conc if conc else None)
    if n is None:
        raise _Skip("neither num_prompts nor concurrency published")
    if dtype_note:
        assumed.append(dtype_note)
    table = _workload(row, in_len, out_len, n, conc, rate, lengths, notes, assumed)
    if hw.efficiency_from:
        assumed.append(f"{hw.name}: efficiencies of {hw.efficiency_from}")
    return Measurement(
        knobs=knobs, model=spec.name, input_len=in_len, output_len=out_len, concurrency=conc or 0,
        ttft_s=ttft, tpot_s=tpot, tokens_per_s=tok, weight_dtype=dtype, num_prompts=n,
        source=f"{path}:{line}", workload=table, hardware=hw.name,
        group=f"{row['engine'].split(' (')[0]} {spec.name} {hw.name}", assumed=tuple(assumed))


def _entries(row: dict[str, str], models: dict[str, ModelSpec]) -> tuple[Hardware, ModelSpec]:
    """The catalog's hardware and model of a row (a model loaded once per id into ``models``)."""
    hw_name = row["hardware"]
    try:
        hw = load_hardware(hw_name)
    except ConfigError:
        raise _Skip(f"hardware {hw_name!r}: no catalog entry") from None
    model_id = row["model"].split(" (")[0].strip()
    if model_id not in models:
        try:
            models[model_id] = load_model(model_id)
        except ConfigError:
            raise _Skip(f"model {model_id!r}: no catalog entry of its architecture") from None
    return hw, models[model_id]


def _knobs(engine: str, row: dict[str, str], spec: ModelSpec, hw: Hardware, notes: str) -> tuple[Any, list[str]]:
    """The knobs of a row's server (its layout, the speculative decoding its notes name, the memory fix its
    engine needs on ``hw``) and what they assume."""
    sd = spec_of(notes)
    argv, assumed = _argv(engine, row, spec, hw.devices_per_node)
    if sd is not None:
        method, steps, draft, accept = sd
        spec_argv = get_personality(engine).speculative_argv(method, steps, draft)
        if spec_argv is None:
            raise _Skip(f"speculative decoding {method!r} is not modelled")
        argv += spec_argv
        if accept is None:
            assumed.append(f"acceptance length of {method} assumed (the row gives none)")
    try:
        knobs = get_knobs(engine, argv)
        fix = get_personality(engine).measured_memory_fix(knobs, hw.hbm_gib, hw.memory_kind)
        if fix is not None:
            argv += fix[0]
            assumed.append(fix[1])
            knobs = get_knobs(engine, argv)
    except MsoptError as exc:
        raise _Skip(f"server flags {' '.join(argv)}: {exc}") from None
    if sd is not None and sd[3] is not None:
        knobs = replace(knobs, spec_accept_len=sd[3])
    return knobs, assumed


def _workload(row: dict[str, str], in_len: int, out_len: int, n: int, conc: int | None, rate: float,
              lengths: Lengths | None, notes: str, assumed: list[str]) -> dict[str, Any]:
    """The ``[simulator.workload]`` table of a row: its lengths (the run's own request lengths where they are
    known), prompts and load; what it assumes goes to ``assumed``."""
    table: dict[str, Any] = {"input_len": in_len, "output_len": out_len, "num_prompts": n}
    if conc:
        table["concurrency"] = conc
    if not math.isinf(rate):
        table["request_rate"] = rate
    elif not conc:
        table["request_rate"] = math.inf
    replay = _replay(row, lengths or {})
    if replay is not None:
        table["input_len"] = {"dist": "list", "values": [i for i, _ in replay]}
        table["output_len"] = {"dist": "list", "values": [o for _, o in replay]}
        table["num_prompts"] = len(replay)
    elif re.search(r"\bmeans?\b.*over|dataset averages", notes):
        assumed.append("input/output lengths are the run's means, simulated as fixed lengths")
    return table


def get_knobs(engine: str, argv: Sequence[str]) -> Any:
    """The engine knobs of a server command line (layout included)."""
    knobs = get_personality(engine).knobs_from_argv(list(argv))
    if knobs is None:
        raise ConfigError(f"engine {engine!r} takes no command line")
    return knobs


def load_measured_csv(path: str | Path, engine: str | None = None) -> tuple[list[Measurement], list[Skipped]]:
    """The rows of a measured-schema CSV the simulator reproduces, and those it does not, with why.

    Args:
        path: a CSV whose header is :data:`SCHEMA_COLUMNS` (plus optional columns).
        engine: keep only rows of this engine (None: all).

    Raises:
        ConfigError: the file is missing or not of the schema.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"measurements file {str(path)!r} does not exist; give a CSV of the measured schema")
    rows: list[Measurement] = []
    skipped: list[Skipped] = []
    models: dict[str, ModelSpec] = {}
    lengths = _sidecar(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if not is_measured_schema(reader.fieldnames):
            raise ConfigError(f"{path}: not the measured schema; its header must start with "
                              f"{', '.join(SCHEMA_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            try:
                m = _row(path, line, row, engine, models, lengths)
            except _Skip as why:
                skipped.append(Skipped(f"{path}:{line}", f"{row['engine']} | {row['model']} | {row['hardware']}",
                                       str(why)))
                continue
            if m is not None:
                rows.append(m)
    return rows, skipped


__all__ = ["SCHEMA_COLUMNS", "SIDECAR_SUFFIX", "Skipped", "get_knobs",
           "is_measured_schema", "load_measured_csv", "spec_of", "weight_dtype_of"]
