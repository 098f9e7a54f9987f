"""Regenerate the vLLM / SGLang flag tables in tests/data/engines/ from a downloaded wheel.

The tables list every command-line flag the engine's server parser declares, read statically
(``ast``) from the wheel's sources, so neither the engine nor torch needs to be installed::

    pip download --no-deps -d /tmp/vllm vllm==0.33.0
    python scripts/generators/engine_flags.py vllm /tmp/vllm/vllm-0.33.0-*.whl \
        > msopt/engines/vllm/flags/vllm-0.33.0.txt
    pip download --no-deps -d /tmp/vllm vllm==0.23.0    # the vLLM vllm-ascend 0.23.0.post1 builds on
    python scripts/generators/engine_flags.py vllm /tmp/vllm/vllm-0.23.0-*.whl \
        > msopt/engines/vllm/flags/vllm-0.23.0.txt
    # and 0.25.1, 0.26.0, 0.27.1: the vLLM of vllm-ascend v0.25.1rc1, releases/v0.26.0rc, main
    pip download --no-deps -d /tmp/sglang sglang==0.5.23
    python scripts/generators/engine_flags.py sglang /tmp/sglang/sglang-0.5.23-*.whl \
        > tests/data/engines/sglang_flags.txt

vLLM (``vllm/engine/arg_utils.py``, ``vllm/entrypoints/common/cli_args.py``, in 0.23
``vllm/entrypoints/openai/cli_args.py``): every string
literal starting with ``--`` given to an ``add_argument`` call, plus ``--<field>`` for each
annotated field of ``BaseFrontendArgs`` / ``FrontendArgs`` (they are registered in a loop). A flag
is marked ``negatable`` (``--no-<flag>`` exists, argparse.BooleanOptionalAction) when its call
passes that action, or when it spreads ``**x_kwargs["name"]`` and ``EngineArgs.name`` (or the
frontend field, or else the config class field of that name in ``vllm/config/*.py``) is annotated
with ``bool`` and not ``str`` (``get_kwargs`` in arg_utils.py).

SGLang (``sglang/srt/arg_groups/fields/*.py``, ``sglang/srt/server_args.py``): every field
annotated ``A[T, "help"]`` or ``A[T, Arg(...)]`` (not ``no_cli=True``) as ``--field-name`` or
its ``cli_name``, its ``aliases``, and the literals of ``add_argument`` calls in server_args.py
(``add_cli_args_from_dataclass`` in ``sglang/srt/arg_groups/arg_utils.py``).
"""

from __future__ import annotations

import ast
import sys
import zipfile
from collections.abc import Iterator


def _literal_flags(call: ast.Call) -> list[str]:
    return [a.value for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]


def _calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name:
            yield node


def _is_bool(annotation: ast.expr | None) -> bool:
    text = ast.unparse(annotation) if annotation is not None else ""
    return "bool" in text and "str" not in text


def _fields(tree: ast.AST, classes: tuple[str, ...]) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                        and not stmt.target.id.startswith("_"):
                    out[stmt.target.id] = stmt.annotation
    return out


def _spread_key(call: ast.Call) -> str | None:
    """``name`` of the ``**x_kwargs["name"]`` a call spreads (also inside ``{**x_kwargs["name"], ...}``)."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        value = kw.value
        if isinstance(value, ast.Dict):
            value = next((v for k, v in zip(value.keys, value.values, strict=True) if k is None), value)
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            return str(value.slice.value)
    return None


#: Where vLLM's frontend (server) arguments live: 0.33, 0.32, 0.23.
_VLLM_FRONTEND = ("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/launchers/cli_args.py",
                  "vllm/entrypoints/openai/cli_args.py")


def vllm_flags(wheel: zipfile.ZipFile) -> dict[str, bool]:
    """Flag -> negatable, from vLLM's sources in ``wheel``."""
    engine = ast.parse(wheel.read("vllm/engine/arg_utils.py"))
    names = set(wheel.namelist())
    front = ast.parse(wheel.read(next(p for p in _VLLM_FRONTEND if p in names)))
    engine_fields = _fields(engine, ("EngineArgs",))
    # a group's **x_kwargs["name"] may come from a config class (get_kwargs(MambaConfig)): its fields
    config_fields: dict[str, ast.expr] = {}
    for name in sorted(n for n in wheel.namelist() if n.startswith("vllm/config/") and n.endswith(".py")):
        tree = ast.parse(wheel.read(name))
        classes = tuple(c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef))
        for k, v in _fields(tree, classes).items():
            config_fields.setdefault(k, v)
    front_fields = _fields(front, ("BaseFrontendArgs", "FrontendArgs"))
    flags: dict[str, bool] = {}
    for tree in (engine, front):
        for call in _calls(tree, "add_argument"):
            names = _literal_flags(call)
            if not names:
                continue
            action = next((ast.unparse(k.value) for k in call.keywords if k.arg == "action"), "")
            key = _spread_key(call)
            negatable = "BooleanOptionalAction" in action or (
                key is not None and _is_bool(engine_fields.get(key, config_fields.get(key))))
            for n in names:
                flags[n] = flags.get(n, False) or negatable
    for name, ann in front_fields.items():
        flags.setdefault("--" + name.replace("_", "-"), _is_bool(ann))
    return flags


def sglang_flags(wheel: zipfile.ZipFile) -> dict[str, bool]:
    """Flag -> False (SGLang's booleans are store_true: no ``--no-`` form), from ``wheel``."""
    flags: dict[str, bool] = {}
    for info in wheel.infolist():
        if not (info.filename.startswith("sglang/srt/arg_groups/fields/") and info.filename.endswith(".py")):
            continue
        tree = ast.parse(wheel.read(info.filename))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
            if len(elts) < 2:
                continue
            meta = elts[1]
            cli = "--" + node.target.id.replace("_", "-")
            aliases: list[str] = []
            if isinstance(meta, ast.Call):
                kws = {k.arg: k.value for k in meta.keywords}
                if isinstance(kws.get("no_cli"), ast.Constant) and kws["no_cli"].value is True:
                    continue
                if isinstance(kws.get("cli_name"), ast.Constant):
                    cli = str(kws["cli_name"].value)
                if isinstance(kws.get("aliases"), ast.List):
                    aliases = [e.value for e in kws["aliases"].elts if isinstance(e, ast.Constant)]
            elif not (isinstance(meta, (ast.Constant, ast.JoinedStr, ast.BinOp))):
                continue
            for n in (cli, *aliases):
                flags[n] = False
    server = ast.parse(wheel.read("sglang/srt/server_args.py"))
    for call in _calls(server, "add_argument"):
        for n in _literal_flags(call):
            flags.setdefault(n, False)
    return flags


def main(argv: list[str]) -> int:
    """``engine_flags.py vllm|sglang WHEEL``: print the table (header, then one flag a line)."""
    if len(argv) != 2 or argv[0] not in ("vllm", "sglang"):
        print(__doc__, file=sys.stderr)
        return 2
    engine, path = argv
    with zipfile.ZipFile(path) as wheel:
        version = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")).split("-")[1]
        version = version.split(".dist")[0]
        flags = vllm_flags(wheel) if engine == "vllm" else sglang_flags(wheel)
        front = next((p for p in _VLLM_FRONTEND if p in wheel.namelist()), _VLLM_FRONTEND[0])
    sources = (f"vllm/engine/arg_utils.py, {front}" if engine == "vllm"
               else "sglang/srt/arg_groups/fields/*.py, sglang/srt/server_args.py")
    print(f"# {engine} {version}: server command-line flags, read from {sources}")
    print(f"# generated by scripts/generators/engine_flags.py from {path.rsplit('/', 1)[-1]}; "
          "see that script to refresh")
    print("# one flag a line; 'negatable' = argparse.BooleanOptionalAction (--no-<flag> also exists)")
    for name in sorted(flags):
        print(f"{name} negatable" if flags[name] else name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
