"""What a real run's simulator prior models, from what is on disk and on the nodes.

A real run gets its prior's model from the model directory's config.json (the engine adapter
names the directory: :meth:`msopt.engines.base.EngineAdapter.model_path`; any Hugging Face model,
the catalog's entry where the architecture is one of the catalog's) and its hardware from the
nodes (:func:`msopt.run.preflight.hardware_probe`: the session's pool launcher runs it, one Ray
task per node, or on this machine without Ray), mapped to a catalog entry or to a roofline entry
(:func:`msopt.sim.detect.hardware_for`).
``[simulator]`` keys set in a configuration file win over both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msopt.config import Config, Section, thaw
from msopt.engines import get_engine
from msopt.errors import MsoptError
from msopt.sim.catalog_load import hardware_toml, load_hardware, read_config_model
from msopt.sim.detect import detect_devices, hardware_for
from msopt.sim.hf_config import config_path

__all__ = ["PRIOR_HARDWARE_FILE", "PriorSource", "prior_source", "real_prior_table", "user_set"]

#: Writes a file of the run directory whole (the run store's ``atomic_write``).
Write = Callable[[Path, bytes], None]

#: The roofline hardware entry of a run on hardware outside the catalog, in its run directory.
PRIOR_HARDWARE_FILE = "prior_hardware.toml"
#: Weight dtypes to fall back to, in order, where the hardware lacks the model's (fp8 on an NPU).
_FALLBACK = {"fp8": ("int8", "bf16"), "int8": ("fp8", "bf16"), "fp16": ("bf16",), "bf16": ("fp16", "fp32"),
             "fp32": ("bf16",)}


def user_set(simulator: Section, key: str) -> bool:
    """Whether ``[simulator] key`` was set by a configuration file (not the packaged defaults)."""
    return key in simulator.user


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole: a temp file beside it, renamed over it (never half written)."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class PriorSource:
    """The ``[simulator]`` table a real run's prior uses, and what it says about it.

    Attributes:
        table: the run's ``[simulator]`` table with hardware, model and weight_dtype filled in
            (None: the prior cannot describe this run; ``lines`` say why).
        lines: ``prior: ...`` lines for the start of the run.
    """

    table: dict[str, Any] | None
    lines: list[str] = field(default_factory=list)


def _hardware(config: Config, probes: Sequence[tuple[str, Mapping[str, str]]] | None,
              run_dir: Path | None, dirs: Sequence[str], write: Write) -> tuple[str | None, str, Any]:
    """(the [simulator] hardware value, where it came from, the Hardware) or (None, why, None)."""
    sim = config.simulator
    if user_set(sim, "hardware"):
        name = str(sim.table["hardware"])
        return name, f"hardware {name} from [simulator] hardware ({sim.where('hardware')})", load_hardware(name, dirs)
    if not probes:
        return None, "no node was probed for its hardware; set [simulator] hardware", None
    key = config.cluster.accelerator_key
    found = [(node, detect_devices(p, key or "none")) for node, p in probes]
    seen = [(node, d) for node, d in found if d is not None]
    if not seen:
        return None, (f"no {key or 'CPU'} found by nvidia-smi, npu-smi or lscpu on {len(found)} node(s); set "
                      "[simulator] hardware"), None
    node, first = seen[0]
    choice = hardware_for(first, dirs)
    others = sorted({d.line() for _, d in seen if d != first})
    where = f"{len(seen)} nodes" if len(seen) > 1 else (f"node {node}" if node else "this node")
    if choice.catalog:
        text = f"hardware {choice.catalog} (catalog entry) for {first.what()} from {first.source} on {where}"
    else:
        text = (f"hardware {choice.hardware.name} (a roofline entry: {choice.figures}; refitted to the run's "
                f"launches) for {first.what()} from {first.source} on {where}")
    if others:
        text += f" (other nodes differ: {'; '.join(others)}; the prior models the first)"
    if choice.catalog:
        return choice.catalog, text, choice.hardware
    if run_dir is None:
        return None, text + "; no run directory to write its entry into", None
    path = Path(run_dir) / PRIOR_HARDWARE_FILE
    write(path, hardware_toml(choice.hardware, header=f"msopt: {choice.how}").encode())
    return str(path), text + f"; written to {path}", choice.hardware


def _model(config: Config, dirs: Sequence[str]) -> tuple[str | None, str, str | None]:
    """(the [simulator] model value, where it came from, the config's weight dtype) or (None, why, None)."""
    sim, engine = config.simulator, config.engine
    if user_set(sim, "model"):
        name = str(sim.table["model"])
        return name, f"model {name} from [simulator] model ({sim.where('model')})", None
    model = get_engine(engine.name).model_path(engine.section.table)
    path = config_path(model) if model else None
    if path is None:
        return None, (f"the model {model!r} ([{engine.name}.command] model) has no local config.json to read; "
                      "set [simulator] model (a catalog name, a model TOML or a model directory)"), None
    found = read_config_model(path, dirs)
    notes = f"; {'; '.join(found.notes)}" if found.notes else ""
    return str(path.parent), f"model from {path} ({found.summary()}){notes}", found.weight_dtype


def prior_source(config: Config, probes: Sequence[tuple[str, Mapping[str, str]]] | None = None,
                 run_dir: Path | None = None, *, write: Write | None = None) -> PriorSource:
    """The ``[simulator]`` table of a real run's prior: model and hardware from ``[simulator]`` where
    a configuration file sets them, else from the model's config.json and the nodes' ``probes``
    (``(node, hardware_probe())`` pairs); a roofline hardware entry is written into ``run_dir``
    (by ``write``: the run store's ``atomic_write``; default: a temp file beside it, then renamed).

    Never raises for what it cannot find: ``table`` is then None and ``lines`` say why.
    """
    table = thaw(config.simulator.table)
    dirs = config.catalog_dirs
    try:
        model, model_line, dtype = _model(config, dirs)
        hardware, hw_line, hw = _hardware(config, probes, run_dir, dirs, write or _replace)
    except MsoptError as exc:
        return PriorSource(None, [f"prior: none ({exc})"])
    if model is None or hardware is None:
        why = model_line if model is None else hw_line
        return PriorSource(None, [f"prior: none: {why}"])
    table.update(model=model, hardware=hardware)
    line2 = hw_line
    if not user_set(config.simulator, "weight_dtype") and dtype is not None:
        chosen = dtype
        if hw is not None and float(hw.tflops.get("bf16" if dtype == "fp16" else dtype, 0.0)) <= 0:
            chosen = next((d for d in _FALLBACK.get(dtype, ()) if float(hw.tflops.get(d, 0.0)) > 0), dtype)
        table["weight_dtype"] = chosen
        if chosen != dtype:
            line2 += f"; {dtype} weights simulated as {chosen} ({hw.name} has no {dtype} compute)"
    return PriorSource(table, [f"prior: {model_line}", f"prior: {line2}"])


def real_prior_table(config: Config, probes: Callable[[], Sequence[tuple[str, Mapping[str, str]]] | None],
                     run_dir: Path, say: Callable[[str], None], *, write: Write | None = None) -> dict[str, Any] | None:
    """A real run's prior: its model from the model's config.json and its hardware from the nodes
    (``probes``, called only when ``[simulator] hardware`` is not set), unless ``[simulator]`` sets
    them; says what it uses (``prior: ...`` lines). None: no prior (``[search] prior = "none"``, or
    ``lines`` said why)."""
    if config.prior.mode == "none":
        return None
    source = prior_source(config, None if user_set(config.simulator, "hardware") else probes(), run_dir, write=write)
    for line in source.lines:
        say(line)
    return source.table
