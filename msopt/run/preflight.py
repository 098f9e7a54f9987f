"""``msopt preflight``: check, on a machine that will run trials, what a launch needs.

:func:`node_checks` runs every check on this machine and returns one :class:`Check` per item:
the executable (and, in the full set, its version), the model path, the engine adapter's own
checks (:meth:`~msopt.engines.base.EngineAdapter.preflight`: an installation's layout, its
configuration file and whether it is writable, HTTPS, the addresses it listens on), the fixed
ports a launch binds, the accelerator count against ``[cluster] devices_per_trial``, and (full set) the hardware
the simulator prior would use (:func:`hardware_probe`: nvidia-smi, npu-smi, lscpu). With a Ray cluster the
same function runs as one task per node (``actors/preflight.py``). ``msopt optimize`` runs the
cheap part (:data:`CHEAP`) before the baseline.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msopt.config import Config, thaw
from msopt.engines import ENGINES, get_engine
from msopt.engines.vllm.cpu import CpuFacts, check_cpu_trial, workers
from msopt.errors import MsoptError, RefusedError
from msopt.launch.hccl import VARIABLES, in_force, node_facts, plan_specs, range_plan
from msopt.launch.hccn import read_device_ips
from msopt.launch.placement import split_trial
from msopt.launch.ports import port_free
from msopt.launch.render import Candidate, LaunchSpec, flag_name
from msopt.sim.detect import detect_devices, hardware_for
from msopt.space import SearchSpace

#: The checks ``msopt optimize`` runs before its baseline (quick, no subprocess).
CHEAP = frozenset({"executable", "model", "config.json", "https", "port", "ports", "install", "address"})
#: Ports one trial takes from ``[cluster] ports`` (the server's and a rendezvous port; a multi-node
#: leader takes its engine's ``leader_ports`` more, :attr:`~msopt.engines.base.EngineAdapter.leader_ports`).
PORTS_PER_TRIAL = 2
#: Seconds a version query may take (importing an engine can take a while).
VERSION_TIMEOUT = 120.0


class PreflightError(MsoptError):
    """A preflight check failed; the failing lines were printed before this is raised."""


@dataclass(frozen=True)
class Check:
    """One check's outcome.

    Attributes:
        name: what was checked ("executable", "model", "port", "devices", ...).
        ok: whether a launch can proceed as far as this check knows.
        detail: what was found, and the fix when it failed.
        node: the machine it ran on ("" for this one).
    """

    name: str
    ok: bool
    detail: str
    node: str = ""

    def line(self) -> str:
        """``ok   [node] name: detail`` or ``FAIL [node] name: detail``, one line."""
        where = f"[{self.node}] " if self.node else ""
        text = " ".join(self.detail.split())
        return f"{'ok  ' if self.ok else 'FAIL'} {where}{self.name}: {text}"


def sample_launch(config: Config, section: Mapping[str, Any],
                  devices: Sequence[str] = ()) -> tuple[LaunchSpec, dict[str, Any]]:
    """The baseline candidate (every field at its default) rendered as a trial on ``devices`` would be."""
    space = SearchSpace(config.engine.fields)
    values = dict(space.decode(space.default_position()).values)
    spec = get_engine(config.engine.name).render(Candidate(values, config.engine.fields, section), port=0,
                                                 devices=devices)
    return spec, values


def _executable(argv: Sequence[str]) -> tuple[Check, str | None]:
    exe = argv[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None:
        return Check("executable", False, f"{exe!r} is not found on PATH or not executable; install the engine "
                     "on this node or fix [<engine>.command] executable"), None
    module = argv[2] if len(argv) > 2 and argv[1] == "-m" else None
    if module is not None:
        code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        if Path(found).resolve() == Path(sys.executable).resolve():
            missing = importlib.util.find_spec(module) is None
        else:
            missing = subprocess.run([found, "-c", code], capture_output=True, timeout=VERSION_TIMEOUT,
                                     check=False).returncode != 0
        if missing:
            return Check("executable", False, f"{found} cannot import module {module!r}; install it into that "
                         "Python environment"), None
        return Check("executable", True, f"{found} -m {module}"), module
    return Check("executable", True, found), None


def _version(argv: Sequence[str], module: str | None) -> Check:
    if module is not None:
        top = module.split(".")[0]
        cmd = [argv[0], "-c", f"import importlib.metadata as m; print(m.version({top!r}))"]
        what = top
        probe = f"the version query of {top} (importlib.metadata) with {argv[0]}"
    elif Path(argv[0]).name in ("python", "python3") or any(
            Path(argv[0]).name in ENGINES.get(name).version_programs for name in ENGINES.names()):
        cmd, what = [argv[0], "--version"], Path(argv[0]).name
        probe = f"{argv[0]} --version"
    else:
        return Check("version", True, f"not asked ({Path(argv[0]).name} has no version flag msopt knows)")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=VERSION_TIMEOUT, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("version", True, f"{what}: unknown ({exc})")
    if out.returncode != 0 or "Traceback (most recent call last)" in out.stdout + out.stderr:
        # a probe that crashes is the engine failing to start as installed, never a version
        # (an engine build installed without its distribution's metadata: PackageNotFoundError, issue 25)
        how = f"exited with status {out.returncode}" if out.returncode != 0 else "printed a traceback"
        return Check("version", False, f"{probe} {how}: {_error_line(out.stderr, out.stdout)}; "
                     "every launch would fail the same way: repair the engine's installation on this node")
    text = (out.stdout.strip() or out.stderr.strip()).splitlines()
    return Check("version", True, f"{what} {text[-1] if text else 'unknown'}")


def _error_line(*texts: str) -> str:
    """The line that names a crash: the last one of the last traceback, else the last line."""
    for text in texts:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if "Traceback (most recent call last):" in lines:
            after = lines[len(lines) - 1 - lines[::-1].index("Traceback (most recent call last):"):]
            errors = [ln for ln in after if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", ln)]
            return errors[-1] if errors else after[-1]
        if lines:
            return lines[-1]
    return "no output"


def _port_range(config: Config, host: str) -> Check | None:
    """Enough ports of ``[cluster] ports`` free here for the trials that may run at once."""
    rng = config.cluster.ports
    if rng is None:
        return None
    lo, hi = rng
    cap = config.cluster.max_concurrent_trials
    n = config.run.n_particles
    trials = min(n, cap) if cap else n
    need = PORTS_PER_TRIAL * trials
    free = sum(1 for p in range(lo, hi + 1) if port_free(p, host))
    if free < need:
        return Check("ports", False, f"{free} of [cluster] ports = \"{lo}-{hi}\" are free on this node, {trials} "
                     f"concurrent trial(s) take {need}; widen the range or lower max_concurrent_trials")
    return Check("ports", True, f"{free} of {lo}-{hi} free, {trials} concurrent trial(s) take {need}")


def _model(spec: LaunchSpec) -> Check:
    """The launch's model path exists here, or is a hub id; the fix names every other place the
    registered engines take it from (:attr:`~msopt.engines.base.EngineAdapter.model_path_hint`)."""
    model = spec.model
    if not model:
        return Check("model", True, "no model path in the launch (the engine's own default)")
    path = Path(model).expanduser()
    if path.exists():
        return Check("model", True, f"{model} exists")
    looks_local = model.startswith(("/", "~", ".")) or model.count("/") != 1
    if not looks_local:
        return Check("model", True, f"{model!r} is not a local path: the engine fetches it from its hub")
    hints = dict.fromkeys(h for h in (ENGINES.get(n).model_path_hint for n in ENGINES.names()) if h)
    also = f" ({'; '.join(hints)})" if hints else ""
    return Check("model", False, f"model path {model} does not exist on this node; copy the weights there or "
                 f"fix [<engine>.command] model{also}")


def fixed_ports(spec: LaunchSpec, exe_len: int) -> list[tuple[int, str]]:
    """Ports the launch binds that msopt does not choose: ``--*-port N`` items after the executable."""
    out: list[tuple[int, str]] = []
    items = list(spec.argv[exe_len:])
    for i, item in enumerate(items):
        name = flag_name(item)
        if name is None or not re.fullmatch(r"--[a-z0-9-]*-port", name) or name == "--port":
            continue
        value = item.split("=", 1)[1] if "=" in item else (items[i + 1] if i + 1 < len(items) else "")
        if value.isdigit() and 0 < int(value) < 65536:
            out.append((int(value), name))
    return out


def count_devices(accelerator: str) -> int:
    """Accelerators visible on this machine: /dev/davinciN (NPU), /dev/nvidiaN (GPU), or the cores
    this process may run on (CPU)."""
    if accelerator.upper() == "CPU":
        return CpuFacts.here().cores
    pattern = {"NPU": r"davinci\d+", "GPU": r"nvidia\d+"}.get(accelerator.upper())
    if pattern is None or not Path("/dev").is_dir():
        return 0
    return sum(1 for p in Path("/dev").iterdir() if re.fullmatch(pattern, p.name))


def _numa(config: Config, spec: LaunchSpec) -> Check:
    """The CPU build's NUMA binding (msopt/engines/vllm/cpu.py) for the baseline launch on this node."""
    facts = CpuFacts.here()
    total, local = workers(spec)
    try:
        check_cpu_trial(spec, config.cluster.trial.devices or facts.cores, facts, {**os.environ, **spec.env})
    except RefusedError as exc:
        return Check("numa", False, f"the baseline would be refused: {exc}")
    return Check("numa", True, f"{len(facts.numa_nodes)} NUMA node(s) {list(facts.numa_nodes)}, {facts.cores} "
                 f"core(s); the baseline binds {local} local CPU worker(s) of {total}")


def _devices(config: Config, devices: int | None) -> Check:
    key, k = config.cluster.accelerator_key, config.cluster.trial.devices
    if key is None or k == 0:
        return Check("devices", True, "no accelerators requested ([cluster] accelerator / devices_per_trial)")
    have = count_devices(key) if devices is None else devices
    per_node = config.cluster.devices_per_node
    if per_node and k > per_node:  # a trial that spans nodes needs its share on each
        n, share = split_trial(k, per_node)
        if have < share:
            return Check("devices", False, f"{have} {key}(s) on this node, a trial needs {share} on each of {n} "
                         f"nodes ([cluster] devices_per_trial = {k}, devices_per_node = {per_node})")
        return Check("devices", True, f"{have} {key}(s), a trial takes {share} here and on {n - 1} other node(s)")
    if have < k:
        return Check("devices", False, f"{have} {key}(s) on this node, a trial needs [cluster] devices_per_trial "
                     f"= {k}; use a node with more or lower devices_per_trial")
    return Check("devices", True, f"{have} {key}(s), {have // k} trial(s) of {k} fit")


def _device_ips(config: Config, devices: int | None) -> Check | None:
    """Every NPU's RoCE address on this node, read as a trial's node reads it
    (:func:`msopt.launch.hccn.read_device_ips`), where the engine's trials that span nodes need them."""
    key, k = config.cluster.accelerator_key, config.cluster.trial.devices
    per_node = config.cluster.devices_per_node
    if key != "NPU" or not get_engine(config.engine.name).needs_device_ips or not per_node or k <= per_node:
        return None
    section = config.engine.section.table
    n = count_devices(key) if devices is None else devices
    ips, error = read_device_ips([str(i) for i in range(n)])
    given = section.get("device_ips")
    if error:
        if isinstance(given, Mapping) and given:
            return Check("device_ip", True, f"{error}; the rank table takes [{config.engine.name}.device_ips] for "
                         "the nodes it names (a trial on a node it does not name fails before its launch)")
        return Check("device_ip", False, f"{error}; a trial that spans nodes needs every NPU's address in its "
                     f"rank table: make hccn_tool work on this node or set [{config.engine.name}.device_ips]")
    listed = ", ".join(f"NPU {d} {ip}" for d, ip in ips.items())
    return Check("device_ip", True, f"hccn_tool -i N -ip -g: {listed or 'no NPU'} (each trial's rank table "
                 "takes its own NPUs' addresses, read again when its actors start)")


def _hccl(config: Config, section: Mapping[str, Any]) -> Check | None:
    """Which HCCL port variables the first trial's launch on this node has, and where each comes from
    (:mod:`msopt.launch.hccl`); None where the launch sets none and this environment has none."""
    key, k = config.cluster.accelerator_key, config.cluster.trial.devices
    if key != "NPU":
        return None
    per_node = config.cluster.devices_per_node
    devices = [str(i) for i in range(min(k, per_node) if per_node else k)]
    try:
        spec, _ = sample_launch(config, section, devices)
    except MsoptError:
        return None
    if not any(v in spec.env or v in os.environ for v in VARIABLES):
        return None
    facts = node_facts(spec.model)
    planned = plan_specs([spec], section, config.engine.fields, facts)[0]  # as the trial launches it
    return Check("hccl", True, f"the trial on NPUs {','.join(devices)}: "
                 f"{in_force(planned.env, unset=planned.unset_env)} (each "
                 "trial's blocks "
                 f"start 32 ports further per first device id; {range_plan(facts)[1]})")


#: The tools :func:`hardware_probe` runs, and the seconds each may take.
HARDWARE_TOOLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nvidia-smi", ("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader")),
    ("npu-smi", ("npu-smi", "info")),
    ("lscpu", ("lscpu",)),
)
PROBE_TIMEOUT = 20.0


def hardware_probe() -> dict[str, str]:
    """What this machine's tools say about its hardware: the stdout of each of
    :data:`HARDWARE_TOOLS` found on PATH (absent keys: no such tool, or it failed), and
    ``meminfo`` (/proc/meminfo). :func:`msopt.sim.detect.detect_devices` reads it."""
    out: dict[str, str] = {}
    for key, argv in HARDWARE_TOOLS:
        exe = shutil.which(argv[0])
        if exe is None:
            continue
        try:
            done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                                  check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            out[key] = done.stdout
    try:
        out["meminfo"] = Path("/proc/meminfo").read_text(encoding="utf-8")
    except OSError:
        pass
    return out


def _hardware(config: Config) -> Check:
    key = config.cluster.accelerator_key
    found = detect_devices(hardware_probe(), key or "none")
    if found is None:
        return Check("hardware", True, f"no {key or 'CPU'} found by nvidia-smi, npu-smi or lscpu; the simulator "
                     "prior needs [simulator] hardware")
    try:
        return Check("hardware", True, f"{hardware_for(found).how}; the simulator prior uses it unless "
                     "[simulator] hardware says otherwise")
    except MsoptError as exc:
        return Check("hardware", True, f"{found.line()}: {exc}")


def node_checks(config: Config, *, devices: int | None = None, full: bool = True,
                node: str = "") -> list[Check]:
    """Every check on this machine (``full=False``: only :data:`CHEAP` ones).

    Args:
        config: the effective config.
        devices: the accelerators this node offers (Ray's resource count); None: count /dev.
        full: also ask the version and count the devices.
        node: a name for the lines (the node's address).
    """
    engine = get_engine(config.engine.name)
    section = thaw(config.engine.section.table)
    checks = [Check(name, ok, detail) for name, ok, detail in engine.preflight(section)]
    try:
        spec, _ = sample_launch(config, section)
    except MsoptError:
        # the adapter's own checks said why (a missing config.json): check the rest on its template
        spec, _ = sample_launch(config, {k: v for k, v in section.items() if k != "config_path"})
    exe = section.get("command", {}).get("executable", engine.default_executable)
    exe_len = 1 if isinstance(exe, str) else max(1, len(exe))
    exe_check, module = _executable(spec.argv)
    checks.insert(0, exe_check)
    if full and exe_check.ok:
        version = _version(spec.argv, module)
        checks.insert(1, version)
        checks[2:2] = [Check(name, ok, detail) for name, ok, detail in
                       engine.version_checks(spec.argv, version.detail, exe_len)]
    checks.append(_model(spec))
    tls = [f for f in map(flag_name, spec.argv[exe_len:]) if f in engine.tls_flags]
    if tls:
        checks.append(Check("https", False, f"{', '.join(tls)} in 'others' make the server speak HTTPS, but "
                            "msopt's readiness check and benchmarks speak plain HTTP; drop them while tuning"))
    host = spec.host if spec.host not in ("", "::") else "0.0.0.0"
    for port, where in fixed_ports(spec, exe_len):
        free = port_free(port, host)
        checks.append(Check("port", free, f"{port} ({where} in 'others') is " + (
            "free" if free else "in use on this node; stop what holds it or choose another port")))
    ports = _port_range(config, host)
    if ports is not None:
        checks.append(ports)
    if full:
        checks.append(_devices(config, devices))
        ips = _device_ips(config, devices)
        if ips is not None:
            checks.append(ips)
        hccl = _hccl(config, section)
        if hccl is not None:
            checks.append(hccl)
        if config.cluster.accelerator_key == "CPU":
            checks.append(_numa(config, spec))
        checks.append(_hardware(config))
    if not full:
        checks = [c for c in checks if c.name in CHEAP]
    own = f"[{config.engine.name}.command]"
    return [Check(c.name, c.ok, c.detail.replace("[<engine>.command]", own), node) for c in checks]
