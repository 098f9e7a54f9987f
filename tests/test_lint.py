"""The code style, type and import checks of pyproject.toml ([tool.ruff], [tool.mypy], [tool.importlinter]) hold
for the whole tree, and no module imports itself back through others."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                        capture_output=True).returncode != 0:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "msopt", "actors", "scripts", "tests"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


#: Names vulture cannot see used, each with who uses it.
VULTURE_USED_ELSEWHERE = {
    "RetainingPool": "a Protocol: the shape of the pools that keep servers, named in msopt/run/dispatcher.py's docs",
    "infer_relative_search_space": "Optuna calls it on a sampler (msopt/search/tpe.py)",
    "pytest_*": "pytest's hooks (tests/conftest.py)",
    "do_GET": "http.server calls it (tests/launch/test_process.py)",
    "log_message": "http.server calls it (tests/launch/test_process.py)",
}


def test_no_dead_code() -> None:
    """vulture finds no function, method, class, property or import that nothing in the tree uses (a name used
    only by a test counts as used), and nothing certain (an unused argument, unreachable code). Decorated
    registrations (``@DTYPES.register``) are used through their registry."""
    if subprocess.run([sys.executable, "-m", "vulture", "--version"], capture_output=True).returncode != 0:
        pytest.fail("vulture is not installed: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "vulture", "msopt", "actors", "scripts", "tests", "--min-confidence", "60",
                          "--ignore-decorators", "@*.register", "--ignore-names", ",".join(VULTURE_USED_ELSEWHERE)],
                         cwd=ROOT, capture_output=True, text=True)
    dead = [line for line in out.stdout.splitlines()
            if re.search(r"unused (function|method|class|property|import)|\(100% confidence\)", line)]
    assert out.stderr == "" and dead == [], out.stderr + "\n".join(dead)


def test_mypy_clean() -> None:
    """pyproject.toml's [tool.mypy]: strict on the seams, default elsewhere, over msopt and actors."""
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "mypy", "msopt", "actors"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_contracts_kept() -> None:
    """pyproject.toml's [tool.importlinter] contracts (the stages of docs/architecture.md, the built-in
    engines' independence, no Ray below actors/) hold: `lint-imports` names any import that breaks one."""
    if subprocess.run([sys.executable, "-c", "import importlinter"], capture_output=True).returncode != 0:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    out = subprocess.run([exe, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout, out.stdout


# -- the module import graph, counted by hand: import-linter's layers see packages, not a circle of
# modules inside one; here every import counts, at module level, inside a function or under
# TYPE_CHECKING, so a circle cannot hide behind a lazy import ----------------------------------------
PACKAGES = ("msopt", "actors")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every module of msopt and actors."""
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of a module, with whether it sits inside a function."""
    found = []
    todo: list[tuple[ast.AST, bool]] = [(tree, False)]
    while todo:
        node, in_function = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            todo.append((child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))))
    return found


def import_edges() -> list[tuple[str, str, bool]]:
    """``(importer, imported, inside a function)`` for every import of one msopt/actors module by another."""
    mods = _modules()
    edges = []
    for name, (path, is_pkg) in mods.items():
        package = (name if is_pkg else name.rpartition(".")[0]).split(".")
        for stmt, in_function in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                base = package[: len(package) - stmt.level + 1] if stmt.level else []
                module = ".".join(base + ([stmt.module] if stmt.module else []))
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in stmt.names]
            for target in targets:
                while target not in mods and "." in target:
                    target = target.rpartition(".")[0]
                if target in mods and target != name:
                    edges.append((name, target, in_function))
    return edges


def import_circles(edges: list[tuple[str, str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_between_modules() -> None:
    """No module of msopt or actors reaches itself through its imports (issue 34 item 5)."""
    edges = import_edges()
    assert len(edges) > 500  # the walk found the tree's imports
    assert import_circles(edges) == []


def test_a_circle_is_found() -> None:
    """The check above can fail: a circle of three, and one through a function-level import."""
    assert import_circles([("a", "b", False), ("b", "c", False), ("c", "a", True), ("c", "d", False)]) == [["a", "b", "c"]]
    assert import_circles([("a", "b", False), ("b", "c", False)]) == []


def test_function_level_imports_are_for_optional_dependencies_only() -> None:
    """An msopt or actors module is imported inside a function only where that keeps Ray out of a run
    without it (the CLI's imports of actors/: `msopt validate` and --no-ray runs never import Ray) and in
    the console script's wrapper msopt.cli.main(), whose name is its submodule's, and in msopt.optimize(), so
    that ``import msopt`` (which every console command does first) does not load a run's stages and report."""
    lazy = {(a, b) for a, b, in_function in import_edges() if in_function}
    allowed = {(a, b) for a, b in lazy if a.startswith("msopt.cli") and b.startswith("actors")}
    face = {("msopt", "msopt.run.session"), ("msopt", "msopt.run.validate"), ("msopt", "msopt.report.outputs")}
    assert lazy - allowed - face - {("msopt.cli", "msopt.cli.main")} == set()


# -- the configuration boundary: the whole Settings stays in msopt/config; every other part takes the typed
# Config or its own Section of it (issue 34, "Done when") -------------------------------------------------
def settings_takers(source: str) -> list[str]:
    """The functions of ``source`` with a parameter annotated ``Settings`` (the whole configuration)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                if arg.annotation is not None and re.search(r"\bSettings\b", ast.unparse(arg.annotation)):
                    found.append(f"{node.name}({arg.arg})")
    return found


def test_no_function_outside_msopt_config_takes_the_whole_settings() -> None:
    """msopt.config.split makes the Config at the boundary; validate() and everything after take the Config."""
    config = ROOT / "msopt" / "config"
    takers = {f"{path.relative_to(ROOT)}: {name}"
              for top in (*PACKAGES, "scripts") for path in (ROOT / top).rglob("*.py")
              if config not in path.parents for name in settings_takers(path.read_text(encoding="utf-8"))}
    assert takers == set()
    assert settings_takers((config / "settings.py").read_text(encoding="utf-8"))  # the walk sees them there


def test_a_settings_taker_is_found() -> None:
    """The check above can fail: a plain, a quoted, a keyword-only and a qualified annotation."""
    src = ("def a(s: Settings) -> None: ...\ndef b(x, *, s: 'Settings | None' = None): ...\n"
           "def c(s: msopt.config.Settings): ...\ndef d(w: WorkloadSettings, o: ObjectiveSettings): ...\n")
    assert settings_takers(src) == ["a(s)", "b(s)", "c(s)"]


def test_launch_reads_counts_not_the_simulator() -> None:
    """Issue 50 item 3: process control, rendering, HCCL/HCCN and trial placement sit in msopt/launch, which imports
    nothing of the simulator, the configuration, the engines or the evaluators (pyproject's "launch" contract, here
    counted by hand so a lazy import cannot hide), and the contract names the package that holds placement."""
    banned = ("msopt.sim", "msopt.config", "msopt.engines", "msopt.benchmarks", "msopt.evaluate")
    launch = {m for m in _modules() if m.startswith("msopt.launch.")}
    assert {"msopt.launch.hccl", "msopt.launch.hccn", "msopt.launch.placement", "msopt.launch.process"} <= launch
    crossing = [(a, b) for a, b, _ in import_edges()
                if a.startswith("msopt.launch") and any(b == m or b.startswith(m + ".") for m in banned)]
    assert crossing == []
    contract = re.search(r'id = "launch"\n(?:.+\n)*?forbidden_modules = \[(.*)\]',
                         (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert contract is not None and set(re.findall(r'"([\w.]+)"', contract.group(1))) == set(banned)
