"""Regenerate the table of vllm-ascend's ``--additional-config`` keys from its sdist.

vllm-ascend reads ``--additional-config`` (a JSON object) with ``dict.get`` and ignores every other
key, so msopt refuses keys this table does not hold. Read statically (``ast``), without installing
vllm-ascend or torch::

    SOC_VERSION=ascend910b1 pip download --no-deps --no-build-isolation -d /tmp/va vllm-ascend==0.23.0.post1
    python scripts/generators/ascend_config_keys.py /tmp/va/vllm_ascend-0.23.0.post1.tar.gz \\
        > msopt/engines/vllm/flags/vllm-ascend-0.23.0.post1-additional-config.txt

(metadata needs ``setuptools_scm`` and ``SOC_VERSION``; no build runs.) The release candidates the package
index does not serve are read from a ``git archive`` of vllm-project/vllm-ascend at their ref::

    git -C vllm-ascend archive --format=tar.gz --prefix=vllm_ascend-main/ -o /tmp/va-main.tar.gz main
    python scripts/generators/ascend_config_keys.py /tmp/va-main.tar.gz \\
        > msopt/engines/vllm/flags/vllm-ascend-main-<commit>-additional-config.txt

Top-level keys: every string literal read from ``additional_config`` anywhere in ``vllm_ascend/``
(``additional_config.get("k", ...)``, ``additional_config["k"]``, ``"k" in additional_config``,
``AscendConfig._get_config_value(additional_config, "k", ...)``). Keys of a sub-table: what the
class ``AscendConfig.__init__`` hands it to reads (vllm_ascend/ascend_config.py): the literals of
``<param>.get("k")`` / ``kwargs.get("k")`` in that class, its ``__init__`` parameters when it is
called with ``**table``, and the keys of its ``_defaults`` dict.
"""

from __future__ import annotations

import ast
import sys
import tarfile

#: sub-table path -> the class of vllm_ascend/ascend_config.py that reads it. A path is listed only for
#: a release whose module has the class and reads the path's last key (in 0.25 and later the scheduler's
#: tables moved under ``scheduler_config``, still read at the top level too: ``SchedulerConfig._get_config_value``).
SUB_TABLES = {
    "xlite_graph_config": "XliteGraphConfig", "ascend_compilation_config": "AscendCompilationConfig",
    "ascend_fusion_config": "AscendFusionConfig", "finegrained_tp_config": "FinegrainedTPConfig",
    "eplb_config": "EplbConfig", "weight_prefetch_config": "WeightPrefetchConfig",
    "profiling_chunk_config": "ProfilingChunkConfig", "rejection_sampler_config": "RejectionSamplerConfig",
    "dynamic_spec_config": "DynamicSpecConfig", "rl_config": "RlConfig",
    "sparse_kv_offload_config": "SparseKVOffloadConfig",
    "short_request_first_config": "ShortRequestFirstConfig", "batch_job_sched_config": "BatchJobSchedConfig",
    "scheduler_config": "SchedulerConfig",
    "scheduler_config.short_request_first_config": "ShortRequestFirstConfig",
    "scheduler_config.profiling_chunk_config": "ProfilingChunkConfig",
    "scheduler_config.batch_job_sched_config": "BatchJobSchedConfig",
    "scheduler_config.dyntra_lb_config": "DyntraLBConfig",
}
_SKIP_PARAMS = {"self", "vllm_config", "kwargs"}


def _is_additional(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "additional_config") or (
        isinstance(node, ast.Attribute) and node.attr == "additional_config")


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def top_keys(tree: ast.AST) -> set[str]:
    """Literal keys read from ``additional_config`` in one module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and _is_additional(node.func.value) and node.args:
                out.add(_str(node.args[0]) or "")
            if node.func.attr == "_get_config_value" and any(_is_additional(a) for a in node.args):
                # (additional_config, "k", ...) and, from 0.25, (scheduler_config, additional_config, "k", ...)
                out.add(next((k for k in map(_str, node.args) if k), ""))
        elif isinstance(node, ast.Subscript) and _is_additional(node.value):
            out.add(_str(node.slice) or "")
        elif isinstance(node, ast.Compare) and any(_is_additional(c) for c in node.comparators):
            out.add(_str(node.left) or "")
    return out - {""}


def has_class(tree: ast.AST, name: str) -> bool:
    """Whether the module defines the class ``name``."""
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.walk(tree))


def class_keys(tree: ast.AST, name: str) -> set[str]:
    """Keys the class ``name`` reads from the table it is given."""
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    out: set[str] = set()
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    params = [a.arg for a in init.args.args] if init else []
    dict_params = {p for p in params if p not in _SKIP_PARAMS}
    kwargs_style = init is not None and init.args.kwarg is not None
    if kwargs_style:
        out |= dict_params  # called as Cls(**table): its parameters are the table's keys
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.args \
                and (node.func.value.id in dict_params | {"kwargs", "config"}):
            out.add(_str(node.args[0]) or "")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "_get_config_value":  # SchedulerConfig (0.25 and later)
            out.add(next((k for k in map(_str, node.args) if k), ""))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_defaults" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            out |= {_str(k) or "" for k in node.value.keys}
    return out - {""}


def main(argv: list[str]) -> int:
    """``ascend_config_keys.py SDIST``: print the table (header, then one dotted key a line)."""
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    keys: set[str] = set()
    with tarfile.open(argv[0]) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/vllm_ascend/" in m.name and m.name.endswith(".py")]
        root = members[0].name.split("/")[0]
        for m in members:
            f = tar.extractfile(m)
            if f is None:
                continue
            tree = ast.parse(f.read())
            keys |= top_keys(tree)
            if m.name.endswith("/vllm_ascend/ascend_config.py"):
                config_tree = tree
    nested: dict[str, set[str]] = {}
    for sub, cls in SUB_TABLES.items():
        parent, _, last = sub.rpartition(".")
        read = (last in keys) if not parent else (last in nested.get(parent, set()))
        if not has_class(config_tree, cls) or not read:
            continue
        nested[sub] = class_keys(config_tree, cls)
        keys.add(sub)
        keys |= {f"{sub}.{k}" for k in nested[sub]}
    print(f"# {root}: the keys of --additional-config it reads, from vllm_ascend/**/*.py (ascend_config.py)")
    print(f"# generated by scripts/generators/ascend_config_keys.py from {argv[0].rsplit('/', 1)[-1]}; "
          "see that script to refresh")
    print("# one key a line; 'table.key' = a key of that sub-table; any other key is ignored by vllm-ascend")
    for k in sorted(keys):
        print(k)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
