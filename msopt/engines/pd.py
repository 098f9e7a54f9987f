"""Prefill/decode disaggregation as a deployment kind: prefill instances, decode instances and the
engine's router, each instance on devices of its own.

The ``[<engine>.pd]`` table turns it on::

    [sglang.pd]
    prefill_instances = "n_prefill"   # a field's name (searched or derived) or an integer
    decode_instances = 1
    transfer_backend = "mooncake"     # SGLang --disaggregation-transfer-backend
    visible_devices_env = "CUDA_VISIBLE_DEVICES"   # how each instance gets its share of the devices
    [sglang.pd.router]
    executable = ["python", "-m", "sglang_router.launch_router"]
    others = ""

A field placed at ``prefill:--flag`` or ``decode:--flag`` goes to that kind of instance only; an
unprefixed field goes to both. The benchmark talks to the router.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from msopt.checks import is_int
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import LaunchSpec, TrialNode, command_str, executable, int_flag, plain, split_others
from msopt.space.fields import FieldDecl

ROLES = ("prefill", "decode")
PD_KEYS = frozenset({"prefill_instances", "decode_instances", "transfer_backend", "visible_devices_env",
                     "bootstrap_port", "router"})


@dataclass(frozen=True)
class PdLaunch:
    """Every process of one disaggregated trial.

    Attributes:
        prefill, decode: the instances' launches.
        router: the router's launch (what the benchmark talks to).
        nodes: the node rank of each instance, prefill ones first (all 0 on one node).
        controller: the process that assigns the instances their roles, where the engine has one
            (MindIE-MS's controller, :mod:`msopt.engines.mindie.pd`), else None.
        note: how the engine's own deployment runs these processes, where one host cannot ("": it can);
            the exported best_command.sh says it.
    """

    prefill: tuple[LaunchSpec, ...]
    decode: tuple[LaunchSpec, ...]
    router: LaunchSpec
    nodes: tuple[int, ...] = ()
    controller: LaunchSpec | None = None
    note: str = ""

    @property
    def counts(self) -> tuple[int, int]:
        """(prefill instances, decode instances)."""
        return len(self.prefill), len(self.decode)

    @property
    def instances(self) -> tuple[LaunchSpec, ...]:
        """Every server instance, prefill ones first (the router and the controller left out)."""
        return (*self.prefill, *self.decode)

    def named(self) -> list[tuple[str, LaunchSpec]]:
        """Every server instance with its name (``prefill0``, ..., ``decode0``, ...), prefill ones first."""
        return [*((f"prefill{i}", s) for i, s in enumerate(self.prefill)),
                *((f"decode{i}", s) for i, s in enumerate(self.decode))]

    def with_instances(self, specs: Sequence[LaunchSpec]) -> PdLaunch:
        """A copy whose instances are ``specs`` (as many, in :attr:`instances`' order: prefill ones first)."""
        if len(specs) != len(self.instances):
            raise ValueError(f"{len(specs)} instance launch(es) for {len(self.instances)} instance(s)")
        n = len(self.prefill)
        return replace(self, prefill=tuple(specs[:n]), decode=tuple(specs[n:]))


def pd_table(section: Mapping[str, Any], engine: str, keys: frozenset[str] = PD_KEYS) -> Mapping[str, Any] | None:
    """The ``[<engine>.pd]`` table (``keys``: the engine's valid ones), None when the deployment is not
    disaggregated.

    Raises:
        ConfigError: an unknown key or a malformed value.
    """
    pd = section.get("pd")
    if pd is None:
        return None
    if not isinstance(pd, Mapping):
        raise ConfigError(f"[{engine}] 'pd' must be a table; write [{engine}.pd]")
    unknown = set(pd) - keys
    if unknown:
        raise ConfigError(f"[{engine}.pd]: unknown key(s) {sorted(unknown)}; valid keys: {sorted(keys)}")
    for key in ("prefill_instances", "decode_instances"):
        v = pd.get(key, 1)
        if not (isinstance(v, str) and v) and not (is_int(v) and v >= 1):
            raise ConfigError(f"[{engine}.pd] {key} must be a field name or an integer >= 1, got {v!r}")
    router = pd.get("router", {})
    if not isinstance(router, Mapping):
        raise ConfigError(f"[{engine}.pd] 'router' must be a table; write [{engine}.pd.router]")
    return pd


def without_pd(section: Mapping[str, Any]) -> dict[str, Any]:
    """The engine section as one instance sees it."""
    return {k: v for k, v in section.items() if k != "pd"}


def role_fields(fields: Sequence[FieldDecl], role: str) -> list[FieldDecl]:
    """The fields one kind of instance renders: its own (prefix removed) and the unprefixed ones."""
    out = []
    for decl in fields:
        head, sep, rest = decl.config_position.partition(":")
        if sep and head in ROLES:
            if head == role:
                out.append(replace(decl, config_position=rest))
        else:
            out.append(decl)
    return out


def check_fields(fields: Sequence[FieldDecl], pd: Mapping[str, Any], engine: str) -> None:
    """Instance counts name existing fields; role prefixes are only used with ``[<engine>.pd]``."""
    names = {d.name for d in fields}
    for key in ("prefill_instances", "decode_instances"):
        v = pd.get(key, 1)
        if isinstance(v, str) and v not in names:
            raise ConfigError(f"[{engine}.pd] {key} = {v!r} names no field; declare [[{engine}.target_field]] "
                              f"name = {v!r} (config_position = \"none\") or give an integer")


def count(pd: Mapping[str, Any], key: str, values: Mapping[str, Any]) -> int:
    """The number of instances of one kind for these values."""
    v = pd.get(key, 1)
    if isinstance(v, str):
        v = plain(values.get(v))
    if not is_int(v) or int(v) < 1:
        raise EvaluationError(f"[pd] {key} = {v!r}: the number of instances must be an integer >= 1")
    return int(v)


def instance_devices(argv: Sequence[str]) -> int:
    """Devices one SGLang/vLLM instance occupies: tp x pp x dp replicas (SGLang's ``--attn-dp-size`` and
    the deprecated ``--dp-size N --enable-dp-attention`` split tp, adding none)."""
    tp = int_flag(argv, 1, "--tp-size", "--tp", "--tensor-parallel-size", "-tp")
    pp = int_flag(argv, 1, "--pp-size", "--pipeline-parallel-size", "-pp")
    dp = int_flag(argv, 1, "--dp-size", "--dp", "--data-parallel-size", "-dp")
    return tp * pp * (1 if "--enable-dp-attention" in argv else dp)


def split_devices(specs: Sequence[LaunchSpec], devices: Sequence[str], env_name: str,
                  nodes: Sequence[TrialNode] = ()) -> tuple[list[LaunchSpec], tuple[int, ...]]:
    """Give each instance its own consecutive share of the trial's devices (``env_name``), on one
    node: with ``nodes`` (a trial that spans nodes) instances are placed first-fit, never across
    nodes, and each listens on its node's address. Returns the specs and each one's node rank.

    Raises:
        EvaluationError: the instances need more devices than the trial holds (or than fit whole
            on its nodes).
    """
    need = [instance_devices(s.argv) for s in specs]
    pools = [list(n.devices) for n in nodes] if len(nodes) > 1 else [list(devices)]
    if not any(pools):
        return list(specs), tuple(0 for _ in specs)
    total = sum(len(p) for p in pools)
    if sum(need) > total:
        raise EvaluationError(f"the disaggregated deployment needs {sum(need)} devices ({' + '.join(map(str, need))}), "
                              f"the trial holds {total}; raise [cluster] devices_per_trial or search fewer "
                              "instances")
    out, where = [], []
    for spec, k in zip(specs, need, strict=True):
        r = next((i for i, p in enumerate(pools) if len(p) >= k), None)
        if r is None:
            raise EvaluationError(f"an instance of {k} devices fits on none of the trial's nodes "
                                  f"({', '.join(str(len(p)) for p in pools)} devices left)")
        ids, pools[r] = pools[r][:k], pools[r][k:]
        spec = replace(spec, env={**spec.env, env_name: ",".join(str(d) for d in ids)})
        if len(nodes) > 1:
            spec = _listen_on(spec, nodes[r].address)
        out.append(spec)
        where.append(r)
    return out, tuple(where)


def _listen_on(spec: LaunchSpec, address: str) -> LaunchSpec:
    """The spec with its server listening on ``address`` (so the router on another node reaches it)."""
    argv = list(spec.argv)
    if "--host" in argv:
        argv[argv.index("--host") + 1] = address
    return replace(spec, argv=tuple(argv), host=address)


def router_spec(pd: Mapping[str, Any], engine: str, prefill: Sequence[LaunchSpec], boot_ports: Sequence[int],
                decode: Sequence[LaunchSpec], port: int, values: Mapping[str, Any]) -> LaunchSpec:
    """SGLang's router in PD mode (sglang-router 0.3.2 ``sglang_router/router_args.py``:
    ``--pd-disaggregation``, ``--prefill URL BOOTSTRAP_PORT`` per prefill, ``--decode URL`` per decode)."""
    router = pd.get("router", {})
    argv = executable(router, ("python", "-m", "sglang_router.launch_router"), f"{engine}.pd.router", values)
    argv.append("--pd-disaggregation")
    for spec, boot in zip(prefill, boot_ports, strict=True):
        argv += ["--prefill", spec.base_url, str(boot)]
    for spec in decode:
        argv += ["--decode", spec.base_url]
    host = command_str(router, "host", prefill[0].host, f"{engine}.pd.router")
    argv += ["--host", host, "--port", str(int(port))]
    argv += split_others(router.get("others", ""), values, f"[{engine}.pd.router]")
    first = prefill[0]
    return LaunchSpec(engine=engine, argv=tuple(argv), port=int(port), health_path="/health", host=host,
                      served_model_name=first.served_model_name, model=first.model,
                      ready_timeout=first.ready_timeout)
