"""vLLM: ``vllm serve MODEL --host H --port P --served-model-name N --flag value ... others``.

Flags: one table per supported vLLM version, read from its wheel by scripts/generators/engine_flags.py
(msopt/engines/vllm/flags/vllm-<version>.txt): 0.33.0 (``vllm/engine/arg_utils.py``,
``vllm/entrypoints/common/cli_args.py``) and 0.23.0, the vLLM vllm-ascend 0.23.0.post1 builds on
(its Dockerfile's ``ARG VLLM_TAG=v0.23.0``; ``vllm/entrypoints/openai/cli_args.py``). ``[vllm]
version`` names the table the rendered flags are checked against at load time; ``msopt
preflight`` checks them against the installed version's.

``[vllm] platform = "ascend"`` is vllm-ascend (version 0.23.0 unless set): a field whose
``config_position`` is ``additional_config.<key>[.<key>...]`` sets that key of the one
``--additional-config`` JSON argument (with the ``[vllm] additional_config`` table as its base);
the keys are those vllm-ascend 0.23.0.post1 reads (msopt/engines/vllm/flags/vllm-ascend-0.23.0.post1-
additional-config.txt, scripts/generators/ascend_config_keys.py): it ignores any other key, so msopt refuses
it. Each trial gets its own HCCL host and NPU port blocks (:mod:`msopt.launch.hccl`).

On any platform a field whose ``config_position`` is ``speculative_config.<key>`` sets that key of the
one ``--speculative-config`` JSON argument (with the ``[vllm] speculative_config`` table as its base),
e.g. ``speculative_config.num_speculative_tokens``: vLLM 0.32.0 parses the flag with ``json.loads``
(vllm/engine/arg_utils.py, ``--speculative-config``) into ``SpeculativeConfig`` (vllm/config/speculative.py),
a pydantic dataclass that forbids extra fields, so its keys, and the values of its ``Literal`` keys
(``method``), are checked at load time against that version's table
(msopt/engines/vllm/flags/vllm-<version>-speculative-config.txt, scripts/generators/speculative_config_keys.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Any

from msopt.engines.cmdline import CommandLineAdapter
from msopt.engines.init_doc import InitContext
from msopt.engines.vllm.crash import VLLM_CRASH
from msopt.engines.vllm.health import VLLM_BENIGN_LINES, VLLM_SOURCES
from msopt.engines.vllm.rules import ADVISORIES as VLLM_ADVISORIES
from msopt.engines.vllm.rules import RULES as VLLM_RULES
from msopt.engines.vllm.rules import field_values
from msopt.engines.vllm.target import ASCEND_RELEASES, VLLM_VERSIONS, target
from msopt.engines.vllm.template import write_init as write_vllm_init
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.hccl import check_section as check_hccl
from msopt.launch.hccl import hccl_env, inherited_note
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    TrialNode,
    check_repeated_flags,
    command_table,
    flag_name,
    int_flag,
    split_others,
    value_of,
)
from msopt.registry import close_matches
from msopt.space.fields import FieldDecl

FLAGS_DIR = Path(__file__).with_name("flags")
#: keys older vllm-ascend releases read, gone by 0.23.0.post1 (vllm-ascend PRs #4814 "Drop torchair",
#: #4623 "Drop ascend scheduler"); still in many guides
REMOVED_KEYS = MappingProxyType({"torchair_graph_config": "vllm-ascend PR #4814 dropped torchair",
                                 "ascend_scheduler_config": "vllm-ascend PR #4623 dropped the ascend scheduler"})
#: config_position prefix of a key of ``--additional-config``
ADDITIONAL = "additional_config."
#: config_position prefix of a key of ``--speculative-config``
SPECULATIVE = "speculative_config."
#: the spellings of ``--speculative-config`` and the shortcuts that write one of its keys (vllm 0.32.0
#: vllm/engine/arg_utils.py: ``--speculative-config``/``-sc``; ``--spec-method``, ``--spec-model`` and
#: ``--spec-tokens`` are refused beside the same key: "{flag} and --speculative-config['{key}'] are
#: mutually exclusive", ``create_speculative_config``)
SPECULATIVE_FLAGS = MappingProxyType({"--speculative-config": "", "-sc": "", "--spec-method": "method",
                                      "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"})
#: the vLLM whose ``SpeculativeConfig`` keys are checked when ``[vllm] version`` is unset: the version the
#: speculative start-up rules are written for (:data:`msopt.engines.vllm.rules.SPEC_VERSION`, the CPU build)
SPECULATIVE_DEFAULT_VERSION = "0.32.0"


def flag_table(version: str) -> Mapping[str, bool]:
    """flag -> negatable (``--no-<flag>`` exists) for vLLM ``version`` (one of :data:`VLLM_VERSIONS`)."""
    path = FLAGS_DIR / f"vllm-{version}.txt"
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, *rest = line.split()
            out[name] = rest == ["negatable"]
    return MappingProxyType(out)


def additional_config_keys(release: str) -> frozenset[str]:
    """The dotted ``--additional-config`` keys vllm-ascend ``release`` reads."""
    path = FLAGS_DIR / f"vllm-ascend-{release}-additional-config.txt"
    return frozenset(line.strip() for line in path.read_text(encoding="utf-8").splitlines()
                     if line.strip() and not line.startswith("#"))


def speculative_config_keys(version: str) -> tuple[Mapping[str, tuple[str, ...]], bool]:
    """``SpeculativeConfig``'s fields in vLLM ``version`` -> the values its ``Literal`` allows (empty: any
    value), and whether that version reads ``-`` in a key as ``_``
    (msopt/engines/vllm/flags/vllm-<version>-speculative-config.txt)."""
    path = FLAGS_DIR / f"vllm-{version}-speculative-config.txt"
    keys: dict[str, tuple[str, ...]] = {}
    dashes = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line == "!dashes":
            dashes = True
        elif line and not line.startswith("#"):
            name, _line, *values = line.split()
            keys[name] = tuple(values)
    return MappingProxyType(keys), dashes


def unknown_flags(flags: Sequence[str], version: str) -> list[str]:
    """The ``--flags`` vLLM ``version``'s parser does not declare (``--no-x`` only where x is negatable)."""
    table = flag_table(version)
    out = []
    for f in flags:
        if f in table or not f.startswith("--"):  # short aliases (-tp, -O3) are not in the tables
            continue
        if f.startswith("--no-") and table.get("--" + f[5:], False):
            continue
        out.append(f)
    return out


def installed_version(text: str) -> str | None:
    """``0.23.0`` from what ``vllm --version`` printed (``0.23.0``, ``vllm 0.23.0+empty``, ...)."""
    m = re.search(r"(\d+\.\d+\.\d+)", text)
    return m.group(1) if m else None


def check_installed_flags(argv: Sequence[str], version_text: str, exe_len: int) -> tuple[bool, str]:
    """``msopt preflight``: the launch's flags against the table of the installed vLLM version."""
    version = installed_version(version_text)
    flags = [f for f in map(flag_name, argv[exe_len:]) if f is not None]
    if version is None or version not in VLLM_VERSIONS:
        return True, (f"installed vLLM {version or 'unknown'} has no flag table in msopt (tables: "
                      f"{', '.join(VLLM_VERSIONS)}); the flags are not checked")
    bad = unknown_flags(flags, version)
    if bad:
        return False, (f"vLLM {version} (installed) has no {', '.join(bad)}: the server would stop with "
                       "'unrecognized arguments'; fix the fields or 'others' (and [vllm] version) for this version")
    return True, f"all {len(flags)} flags exist in vLLM {version} (msopt/engines/vllm/flags/vllm-{version}.txt)"


def check_installed_additional_config(argv: Sequence[str], version_text: str) -> tuple[bool, str] | None:
    """``msopt preflight``: the launch's ``--additional-config`` keys against the key table of the
    vllm-ascend built on the installed vLLM (:data:`ASCEND_RELEASES`); None without that flag."""
    items = list(argv)
    raw = next((items[i + 1] for i, a in enumerate(items[:-1]) if a == "--additional-config"),
               next((a.split("=", 1)[1] for a in items if a.startswith("--additional-config=")), None))
    if raw is None:
        return None
    version = installed_version(version_text)
    release = ASCEND_RELEASES.get(str(version))
    if release is None:
        return True, (f"installed vLLM {version or 'unknown'} has no vllm-ascend key table in msopt (tables: vLLM "
                      f"{', '.join(ASCEND_RELEASES)}); the --additional-config keys are not checked")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        return False, f"--additional-config is not JSON ({exc}); vllm-ascend would not start"
    known = additional_config_keys(release)
    try:
        for path in _paths(doc if isinstance(doc, Mapping) else {}):
            _check_key(path, known, release, "--additional-config")
    except ConfigError as exc:
        return False, f"{exc} (the installed vLLM {version} is vllm-ascend {release}'s)"
    return True, f"every --additional-config key is read by vllm-ascend {release} (installed vLLM {version})"


def is_vllm_serve(exe: Sequence[str]) -> bool:
    """True when the command line runs ``vllm serve`` (possibly behind a wrapper such as numactl)."""
    items = list(exe)
    return any(PurePath(a).name == "vllm" and b == "serve" for a, b in zip(items, items[1:], strict=False))


class VllmAdapter(CommandLineAdapter):
    """vLLM's OpenAI-compatible server; a false ``--enable-x`` becomes ``--no-enable-x``."""

    name = "vllm"
    health_path = "/health"
    default_executable = ("vllm", "serve")
    startup_rules = VLLM_RULES
    advisories = VLLM_ADVISORIES
    sim_personality = "vllm"
    health_sources = VLLM_SOURCES
    benign_lines = VLLM_BENIGN_LINES
    crash_reader = VLLM_CRASH
    #: vLLM 0.33.0 --ssl-keyfile / --ssl-certfile (msopt/engines/vllm/flags/vllm-0.33.0.txt)
    tls_flags = frozenset({"--ssl-keyfile", "--ssl-certfile"})
    version_programs = ("vllm",)
    model_flag = None
    negate_enable = True
    # vllm/engine/arg_utils.py 0.33.0: "--tensor-parallel-size", "-tp", ...
    aliases = MappingProxyType({"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
                                "-dp": "--data-parallel-size"})
    # vllm 0.32.0 entrypoints/generate/base/serving.py:220-233 (X-data-parallel-rank), v1/engine/core_client.py:1648
    rank_header_flags = ("--data-parallel-size", "-dp")

    def write_init(self, ctx: InitContext) -> None:
        write_vllm_init(ctx)

    def version_checks(self, argv: Sequence[str], version: str, exe_len: int) -> list[tuple[str, bool, str]]:
        """The launch's flags against the flag table of the installed vLLM
        (msopt/engines/vllm/flags/vllm-<version>.txt), and its ``--additional-config`` and
        ``--speculative-config`` keys against that version's key tables."""
        if not version.startswith("vllm "):
            return []
        out = [("flags", *check_installed_flags(argv, version[5:], exe_len))]
        ascend = check_installed_additional_config(argv, version[5:])
        spec = check_installed_speculative_config(argv, version[5:])
        return (out + ([("additional_config", *ascend)] if ascend is not None else [])
                + ([("speculative_config", *spec)] if spec is not None else []))

    def model_args(self, exe: Sequence[str], model: str) -> list[str]:
        """``vllm serve MODEL``; ``--model MODEL`` for every other entry point.

        Only ``vllm serve`` copies its positional ``model_tag`` into ``args.model``
        (vllm/entrypoints/cli/serve.py, 0.33.0); ``python -m vllm.entrypoints.openai.api_server``
        (vllm/entrypoints/launchers/api_server/entry.py) never does and silently serves its default.
        """
        return [model] if is_vllm_serve(exe) else ["--model", model]


    # vllm/engine/arg_utils.py 0.33.0 (EngineArgs, create_engine_config) and vllm/config/parallel.py:
    # --data-parallel-size-local/-start-rank/-address/-rpc-port with --headless on the other nodes
    # (data-parallel ranks over nodes, each node its own share of ranks); --nnodes/--node-rank/
    # --master-addr/--master-port (mp backend: one tp x pp engine over nodes), --headless beyond rank 0
    node_flags = ("--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                  "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp", "--headless",
                  "--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port")

    def node_args(self, argv: Sequence[str], node: TrialNode, nodes: Sequence[TrialNode],
                  rendezvous_port: int) -> list[str]:
        """Data-parallel ranks split evenly over the nodes when they can be, else ``--nnodes``."""
        n = len(nodes)
        dp = int_flag(argv, 1, "--data-parallel-size", "-dp")
        tp = int_flag(argv, 1, "--tensor-parallel-size", "-tp")
        pp = int_flag(argv, 1, "--pipeline-parallel-size", "-pp")
        leader = nodes[0].address
        per_node = len(node.devices)
        if dp > 1 and dp % n == 0:
            local = dp // n
            if per_node and local * tp * pp != per_node:
                raise EvaluationError(f"vLLM data parallel {dp} x tp {tp} x pp {pp} does not fill {n} nodes of "
                                      f"{per_node} devices ({local} ranks per node)")
            out = ["--data-parallel-size-local", str(local), "--data-parallel-address", leader,
                   "--data-parallel-rpc-port", str(rendezvous_port)]
            if node.rank:
                out += ["--headless", "--data-parallel-start-rank", str(node.rank * local)]
            return out
        if per_node and dp * tp * pp != per_node * n:
            raise EvaluationError(f"vLLM world dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp} does not equal the "
                                  f"trial's {n} nodes x {per_node} devices")
        out = ["--nnodes", str(n), "--node-rank", str(node.rank), "--master-addr", leader,
               "--master-port", str(rendezvous_port)]
        return out + (["--headless"] if node.rank else [])


    # -- vllm-ascend: the structured --additional-config, its keys, HCCL ports --------------------
    def _split(self, fields: Sequence[FieldDecl]) -> tuple[list[FieldDecl], list[FieldDecl]]:
        extra = [d for d in fields if d.config_position.startswith(ADDITIONAL)]
        return [d for d in fields if d not in extra and not d.config_position.startswith(SPECULATIVE)], extra

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """As every command-line engine, plus: ``[vllm] platform``/``version`` valid; every rendered
        flag in that version's table (when the version is set); ``additional_config.*`` fields and
        the ``[vllm] additional_config`` table only on ascend, with keys vllm-ascend reads."""
        platform, version = target(section)
        plain, extra = self._split(fields)
        super().check(plain, section)
        _check_speculative(fields, section, version)
        if platform == "ascend":
            check_hccl(section, self.name)
        table = section.get("additional_config", {})
        if not isinstance(table, Mapping):
            raise ConfigError("[vllm] 'additional_config' must be a table of vllm-ascend keys; write "
                              "[vllm.additional_config]")
        cmd = command_table(section, self.name)
        if extra or table:
            if platform != "ascend":
                raise ConfigError("[vllm] additional_config keys are checked only for vllm-ascend: set [vllm] "
                                  "platform = \"ascend\" (or pass --additional-config in 'others')")
            check_repeated_flags({"--additional-config": "the additional_config.* fields and [vllm] "
                                  "additional_config"}, cmd.get("others", ""), "[vllm.command] 'others'")
            for d in plain:
                if d.config_position == "--additional-config":
                    raise d.error("config_position '--additional-config' beside additional_config.* fields or "
                                  "[vllm.additional_config] would render the flag twice",
                                  "give each key its own additional_config.<key> field")
            release = ASCEND_RELEASES[str(version)]
            known = additional_config_keys(release)
            for path, where in [*((p, "[vllm.additional_config]") for p in _paths(table)),
                                *((d.config_position[len(ADDITIONAL):], d.where) for d in extra)]:
                _check_key(path, known, release, where)
        if version is not None:
            flags = [d.config_position for d in plain if d.config_position.startswith("-")]
            flags += [f for f in map(flag_name, split_others(cmd.get("others", ""), {}, "[vllm.command]"))
                      if f is not None]
            bad = unknown_flags(flags, version)
            if bad:
                raise ConfigError(f"[vllm] version {version}: vLLM {version} has no {', '.join(bad)} "
                                  f"(msopt/engines/vllm/flags/vllm-{version}.txt, read from its wheel); remove or "
                                  "rename it in the fields or [vllm.command] others")

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        """The command line; on ascend with the one ``--additional-config`` JSON item and
        ``HCCL_IF_BASE_PORT`` for this trial's devices."""
        section = candidate.section
        platform, _ = target(section)
        plain, extra = self._split(candidate.fields)
        spec = super().render(replace(candidate, fields=plain), port=port, devices=devices, workdir=workdir)
        spec = replace(spec, argv=spec.argv + _speculative_argv(candidate))
        if platform != "ascend":
            return spec
        doc = copy.deepcopy(dict(section.get("additional_config", {})))
        for decl in extra:
            value = value_of(candidate.values, decl)
            if value is not None:
                _set(doc, decl.config_position[len(ADDITIONAL):].split("."), value, decl)
        argv = spec.argv + (("--additional-config", json.dumps(doc, separators=(",", ":"), sort_keys=True))
                            if doc else ())
        return replace(spec, argv=argv, env=self._hccl_env(spec.env, section, devices, candidate.fields))

    def render_nodes(self, candidate: Candidate, *, port: int, nodes: Sequence[TrialNode], rendezvous_port: int,
                     workdir: Path | None = None, leader_ports: Sequence[int] = ()) -> list[LaunchSpec]:
        """As every command-line engine; on ascend each node's HCCL ports follow its own devices."""
        specs = super().render_nodes(candidate, port=port, nodes=nodes, rendezvous_port=rendezvous_port,
                                     workdir=workdir, leader_ports=leader_ports)
        if target(candidate.section)[0] != "ascend" or len(nodes) == 1:
            return specs
        return [replace(s, env=self._hccl_env(s.env, candidate.section, n.devices, candidate.fields))
                for s, n in zip(specs, nodes)]

    def _hccl_env(self, env: Mapping[str, str], section: Mapping[str, Any], devices: Sequence[str],
                  fields: Sequence[FieldDecl]) -> dict[str, str]:
        """``env`` with this trial's HCCL port blocks (:func:`msopt.launch.hccl.hccl_env`)."""
        return hccl_env(env, section, devices, fields, self.name)

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """What msopt adds on ascend (``msopt validate``)."""
        platform, version = target(section)
        if platform != "ascend":
            return [f"flags checked against vLLM {version}" if version else
                    f"flags not checked at load time (set [vllm] version: {', '.join(VLLM_VERSIONS)})"]
        return [f"vllm-ascend {ASCEND_RELEASES[str(version)]} on vLLM {version}: flags checked against "
                f"msopt/engines/vllm/flags/vllm-{version}.txt",
                "HCCL ports: per trial, HCCL_IF_BASE_PORT and HCCL_HOST_SOCKET_PORT_RANGE from [vllm] hccl_base_port "
                "(60000) and HCCL_NPU_SOCKET_PORT_RANGE from hccl_npu_base_port (16666), + 32 x the trial's first "
                "device id (32 ports each), unless [vllm.env] sets them", inherited_note(self.name)]


def _paths(table: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of ``table``'s keys, descending into sub-tables (a sub-table is also a path)."""
    out = []
    for k, v in table.items():
        path = f"{prefix}{k}"
        out.append(path)
        if isinstance(v, Mapping):
            out += _paths(v, path + ".")
    return out


def _check_key(path: str, known: frozenset[str], release: str, where: str) -> None:
    """Refuse a key vllm-ascend does not read; below a known sub-table's keys nothing is checked."""
    parts = path.split(".")
    for depth in range(1, min(len(parts), 2) + 1):
        key = ".".join(parts[:depth])
        subs = {k for k in known if "." in k}
        if depth == 2 and not any(k.startswith(parts[0] + ".") for k in subs):
            return  # a sub-table whose keys msopt does not list (e.g. layer_sharding, hamming_sparse)
        if key not in known:
            pool = sorted(k for k in known if k.count(".") == depth - 1)
            hint = close_matches(key, pool)
            fix = (f"it is gone ({REMOVED_KEYS[key]}): remove it" if key in REMOVED_KEYS else
                   f"did you mean {hint[0]!r}?" if hint else "remove it")
            raise ConfigError(f"{where}: additional_config key {key!r} is not read by vllm-ascend {release}, which "
                              "ignores unknown keys silently (msopt/engines/vllm/flags/vllm-ascend-"
                              f"{release}-additional-config.txt, from vllm_ascend/ascend_config.py); {fix}")


def _set(doc: dict[str, Any], parts: Sequence[str], value: Any, decl: FieldDecl,
         table: str = "additional_config") -> None:
    node = doc
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise decl.error(f"{table}.{'.'.join(parts)} goes below {part!r}, which [vllm.{table}] "
                             "sets to a value", "make it a table or move the field")
        node = nxt
    node[parts[-1]] = value


# -- --speculative-config: a JSON flag whose keys are fields ---------------------------------------
def _check_speculative(fields: Sequence[FieldDecl], section: Mapping[str, Any], version: str | None) -> None:
    """``speculative_config.<key>`` fields and ``[vllm.speculative_config]``: a table, keys named, and no
    other spelling of the flag or of a key they set (vLLM would stop or msopt's value would be overridden);
    every key they, a ``--speculative-config`` JSON in ``others`` or ``--spec-method`` set is a field of
    vLLM ``version``'s ``SpeculativeConfig`` (:func:`_check_speculative_keys`)."""
    table = section.get("speculative_config", {})
    if not isinstance(table, Mapping):
        raise ConfigError("[vllm] 'speculative_config' must be a table of --speculative-config keys; write "
                          "[vllm.speculative_config]")
    spec = [d for d in fields if d.config_position.startswith(SPECULATIVE)]
    others = split_others(command_table(section, "vllm").get("others", ""), {}, "[vllm.command]")
    _check_speculative_keys(fields, table, others, version or SPECULATIVE_DEFAULT_VERSION)
    if not spec and not table:
        return
    keys = {d.config_position[len(SPECULATIVE):].split(".")[0] for d in spec} | set(table)
    for flag, key in SPECULATIVE_FLAGS.items():
        clash = [d.where for d in fields if d.config_position == flag]
        clash += ["[vllm.command] 'others'"] if any(flag_name(o) == flag for o in others) else []
        if clash and (not key or key in keys):
            raise ConfigError(f"{clash[0]}: {flag} beside the speculative_config.* fields or [vllm.speculative_config] "
                              f"would {'render --speculative-config twice' if not key else 'set ' + key + ' twice'}, "
                              "which vLLM 0.32.0 refuses or overrides (vllm/engine/arg_utils.py, "
                              "create_speculative_config); set the key as a speculative_config.<key> field or in "
                              "[vllm.speculative_config]")


def _flag_value(items: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--flag value`` / ``--flag=value`` among ``items``."""
    out = None
    for i, item in enumerate(items):
        for name in names:
            if item == name and i + 1 < len(items):
                out = items[i + 1]
            elif item.startswith(name + "="):
                out = item[len(name) + 1:]
    return out


def _check_speculative_keys(fields: Sequence[FieldDecl], table: Mapping[str, Any], others: Sequence[str],
                            version: str) -> None:
    """Refuse a ``--speculative-config`` key of the fields, ``[vllm.speculative_config]``, a JSON in ``others``
    or ``--spec-method`` that vLLM ``version``'s ``SpeculativeConfig`` refuses (:func:`_refused_key`)."""
    # (key, where, the values it may take; None: a range of numbers)
    entries: list[tuple[str, str, list[Any] | None]] = []
    for d in fields:
        if d.config_position.startswith(SPECULATIVE):
            parts = d.config_position[len(SPECULATIVE):].split(".")
            if not all(p.isidentifier() for p in parts):
                raise d.error(f"config_position {d.config_position!r} names no --speculative-config key",
                              "write speculative_config.<key>, e.g. speculative_config.num_speculative_tokens")
            # below a key (a nested table such as draft_load_config) nothing is checked
            entries.append((parts[0], d.where, field_values(d) if len(parts) == 1 else []))
        elif d.config_position == "--spec-method":
            entries.append(("method", d.where, field_values(d)))
    entries += [(str(k), "[vllm.speculative_config]", [v]) for k, v in table.items()]
    entries += _argv_entries(others, "[vllm.command] 'others' ")
    if entries:
        known = speculative_config_keys(version)
        for entry in entries:
            refused = _refused_key(*entry, version, known)
            if refused:
                raise ConfigError(refused)


def _argv_entries(argv: Sequence[str], where: str) -> list[tuple[str, str, list[Any] | None]]:
    """The keys a command line's ``--speculative-config`` JSON and ``--spec-method`` set."""
    raw = _flag_value(argv, "--speculative-config", "-sc")
    try:
        doc = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        doc = {}  # not JSON: vLLM's own parser says so at start-up
    out: list[tuple[str, str, list[Any] | None]] = []
    if isinstance(doc, Mapping):
        out += [(str(k), f"{where}--speculative-config", [v]) for k, v in doc.items()]
    method = _flag_value(argv, "--spec-method")
    if method is not None:
        out.append(("method", f"{where}--spec-method", [method]))
    return out


def _refused_key(key: str, where: str, values: list[Any] | None, version: str,
                 known: tuple[Mapping[str, tuple[str, ...]], bool]) -> str | None:
    """Why vLLM ``version`` refuses ``key`` (not a field of its ``SpeculativeConfig``, a pydantic dataclass:
    "Unexpected keyword argument") or one of ``values`` (outside the key's ``Literal``, e.g. ``method``:
    ``SpeculativeMethod``: "Input should be ..."), in one line; None where it takes them. Both messages as
    the vLLM 0.32.0 CPU build raised them for ``SpeculativeConfig(**doc)``."""
    keys, dashes = known
    source = (f"vLLM {version}'s SpeculativeConfig (msopt/engines/vllm/flags/vllm-{version}-speculative-config.txt, "
              "from vllm/config/speculative.py)")
    name = key.replace("-", "_") if dashes else key
    if name not in keys:
        near = close_matches(name, list(keys)) or close_matches(name.replace("-", "_"), list(keys))
        fix = f"did you mean {' or '.join(repr(n) for n in near)}?" if near else "remove it"
        return (f"{where}: --speculative-config key {key!r} is not a field of {source}, which refuses it at start-up "
                f"('1 validation error for SpeculativeConfig {key} Unexpected keyword argument'); {fix}")
    allowed = keys[name]
    bad = [v for v in (values if values is not None else [0]) if v not in allowed] if allowed else []
    if not bad:
        return None
    near = close_matches(str(bad[0]), list(allowed))
    fix = f"did you mean {' or '.join(repr(n) for n in near)}?" if near else f"valid: {', '.join(allowed)}"
    what = repr(bad[0]) if values is not None else "a range of numbers"
    return (f"{where}: --speculative-config {name} {what} is not one of the values {source} allows (its Literal: "
            f"'1 validation error for SpeculativeConfig {name} Input should be ...' at start-up); {fix}")


def check_installed_speculative_config(argv: Sequence[str], version_text: str) -> tuple[bool, str] | None:
    """``msopt preflight``: the launch's ``--speculative-config`` keys (and ``--spec-method``) against the
    ``SpeculativeConfig`` of the installed vLLM; None without either flag."""
    entries = _argv_entries(list(argv), "the launch's ")
    if not entries:
        return None
    version = installed_version(version_text)
    path = FLAGS_DIR / f"vllm-{version}-speculative-config.txt"
    if version is None or not path.exists():
        tables = sorted(p.name.split("-")[1] for p in FLAGS_DIR.glob("vllm-*-speculative-config.txt"))
        return True, (f"installed vLLM {version or 'unknown'} has no SpeculativeConfig key table in msopt (tables: "
                      f"{', '.join(tables)}); the --speculative-config keys are not checked")
    known = speculative_config_keys(version)
    for entry in entries:
        refused = _refused_key(*entry, version, known)
        if refused:
            return False, f"{refused} (the installed vLLM {version})"
    return True, f"every --speculative-config key is a field of the installed vLLM {version}'s SpeculativeConfig"


def _speculative_argv(candidate: Candidate) -> tuple[str, ...]:
    """``("--speculative-config", JSON)`` from ``[vllm.speculative_config]`` and the fields; () without either."""
    spec = [d for d in candidate.fields if d.config_position.startswith(SPECULATIVE)]
    doc = copy.deepcopy(dict(candidate.section.get("speculative_config", {})))
    for decl in spec:
        value = value_of(candidate.values, decl)
        if value is not None:
            _set(doc, decl.config_position[len(SPECULATIVE):].split("."), value, decl, "speculative_config")
    return ("--speculative-config", json.dumps(doc, separators=(",", ":"), sort_keys=True)) if doc else ()
