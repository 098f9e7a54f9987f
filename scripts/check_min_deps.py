"""Run the quick test subset on the oldest versions msopt declares it supports (issue 24 item 7).

The minimums are read from pyproject.toml itself, so they cannot drift from what is declared: every
``name[extras]>=X`` of ``[project] dependencies`` is installed as ``name[extras]==X`` (environment
markers honoured), into a venv made with the oldest Python that ``requires-python`` admits (found as
``python3.N`` on PATH or under ``~/.pyenv/versions``). The ``test`` extra comes at its newest
versions that admit those, less ruff, mypy and import-linter (they check the source, not the dependencies) and the
search bench's aiconfigurator and pyswarms (their tests skip without them). Then
``pytest -q -n 0 -m "not slow"`` runs there against this checkout, in one process (tests/test_lint.py and
tests/test_structure.py, which run ruff over the source, left out).

Usage::

    python scripts/check_min_deps.py            # build (or reuse) the venv and run the quick subset
    python scripts/check_min_deps.py --list     # print the pinned minimums and the interpreter, nothing else

Exit status: 0 the quick subset passed; 1 it failed; 3 the environment could not be set up (no such
interpreter, or the package index refused the pins), so CI can report it without calling it a test
failure. The venv lives in ``${MSOPT_MIN_DEPS_HOME:-~/.cache/msopt/min-deps}/py3.N`` and is rebuilt
when the pins change.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the ``test`` extra's packages not installed here: the tools that check the source, not the dependencies
#: (ruff, mypy, import-linter: tests/test_lint.py and tests/test_structure.py, left out here), and the search
#: bench's independent reality and the original tool's PSO (aiconfigurator 0.12.0
#: needs a newer matplotlib than msopt's minimum; the bench tests skip, saying why, without them)
LEFT_OUT = ("ruff", "mypy", "import-linter", "aiconfigurator", "aiconfigurator-core", "pyswarms")
SETUP_FAILED = 3

_REQ = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*(?:;\s*(.*))?$")


def minimum_pins(pyproject: Path, python: tuple[int, int]) -> list[str]:
    """``name[extras]==X`` for every ``>=X`` dependency whose marker admits ``python``.

    Raises:
        SystemExit: a dependency has no ``>=`` lower bound (then there is no minimum to test).
    """
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        m = _REQ.match(dep)
        if not m:
            raise SystemExit(f"{pyproject}: dependency {dep!r} has no '>=' lower bound to test; give it one")
        name, extras, version, marker = m.groups()
        if marker and not _marker_admits(marker, python):
            continue
        pins.append(f"{name}{extras or ''}=={version}")
    return pins


def test_tools(pyproject: Path) -> list[str]:
    """The ``test`` extra without :data:`LEFT_OUT`, at their newest versions that admit the pins."""
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["test"]
    return [dep for dep in extra if re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0] not in LEFT_OUT]


def _marker_admits(marker: str, python: tuple[int, int]) -> bool:
    """Evaluate the one marker form pyproject.toml uses: ``python_version <op> 'X.Y'``."""
    m = re.fullmatch(r"\s*python_version\s*(<|<=|>|>=|==|!=)\s*['\"](\d+)\.(\d+)['\"]\s*", marker)
    if not m:
        raise SystemExit(f"pyproject.toml: marker {marker!r} is not 'python_version <op> \"X.Y\"'")
    op, want = m.group(1), (int(m.group(2)), int(m.group(3)))
    return {"<": python < want, "<=": python <= want, ">": python > want, ">=": python >= want,
            "==": python == want, "!=": python != want}[op]


def oldest_python(pyproject: Path) -> tuple[tuple[int, int], str | None]:
    """The oldest Python ``requires-python`` admits and an interpreter for it, if one is here."""
    spec = tomllib.loads(pyproject.read_text())["project"]["requires-python"]
    m = re.fullmatch(r"\s*>=\s*3\.(\d+)\s*", spec)
    if not m:
        raise SystemExit(f"{pyproject}: requires-python {spec!r} is not '>=3.N'")
    version = (3, int(m.group(1)))
    name = f"python{version[0]}.{version[1]}"
    found = shutil.which(name)
    if found is None or "/shims/" in found:  # a pyenv shim answers only where that version is selected
        pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version[0]}.{version[1]}.*/bin/python")))
        found = pyenv[-1] if pyenv else None
    return version, found


def build_venv(home: Path, interpreter: str, pins: list[str], tools: list[str]) -> Path | None:
    """The venv with exactly ``pins`` (one resolve, so transitive deps fit them); None on failure."""
    stamp = home / "PINS"
    python = home / "bin" / "python"
    wanted = "\n".join(pins + tools) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if home.exists():
        shutil.rmtree(home)
    home.parent.mkdir(parents=True, exist_ok=True)
    if subprocess.call([interpreter, "-m", "venv", str(home)]) != 0:
        return None
    cmd = [str(python), "-m", "pip", "install", "-q", *pins, *tools]
    print("min-deps: " + " ".join(cmd[4:]), flush=True)
    if subprocess.call(cmd) != 0:
        return None
    stamp.write_text(wanted)
    return python


def install_checkout(python: Path) -> bool:
    """This checkout into the venv without its dependencies (entry points and the ``msopt`` command)."""
    return subprocess.call([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)]) == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the pins and the interpreter, then exit")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)
    pyproject = ROOT / "pyproject.toml"
    version, interpreter = oldest_python(pyproject)
    pins = minimum_pins(pyproject, version)
    tag = f"py{version[0]}.{version[1]}"
    print(f"min-deps: Python {version[0]}.{version[1]} ({interpreter or 'not found'}); " + " ".join(pins))
    if args.list:
        return 0
    if interpreter is None:
        print(f"min-deps: no python{version[0]}.{version[1]} on PATH or in ~/.pyenv; cannot test the minimums",
              file=sys.stderr)
        return SETUP_FAILED
    home = Path(os.environ.get("MSOPT_MIN_DEPS_HOME", "~/.cache/msopt/min-deps")).expanduser() / tag
    python = build_venv(home, interpreter, pins, test_tools(pyproject))
    if python is None or not install_checkout(python):
        print(f"min-deps: could not build {home} with {' '.join(pins)}", file=sys.stderr)
        return SETUP_FAILED
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # one process (-n 0 overrides pyproject.toml's -n auto): CI runs this beside the suite's own workers
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not slow",
           "--ignore=tests/test_lint.py", "--ignore=tests/test_structure.py", *args.pytest_args]
    print("min-deps: " + " ".join(cmd), flush=True)
    return 0 if subprocess.call(cmd, cwd=ROOT, env=env) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
