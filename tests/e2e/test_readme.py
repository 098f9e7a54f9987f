"""Every command line README.md shows has a test that runs it (tests/e2e/readme.py says what counts)."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import readme

TESTS = Path(__file__).resolve().parents[1]


def _run_by_tests() -> dict[str, list[str]]:
    """The README command lines that tests pass to :func:`readme.command`, with the files that do."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}  # a module's LINE = "..." passed by name
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            arg = node.args[0]
            line = arg.value if isinstance(arg, ast.Constant) else \
                constants.get(arg.id) if isinstance(arg, ast.Name) else None
            if name == "command" and isinstance(line, str):
                found.setdefault(line, []).append(str(path.relative_to(TESTS.parent)))
    return found


def test_every_readme_command_line_has_a_test_that_runs_it():
    run = _run_by_tests()
    missing = [c for c in readme.commands() if c not in run and c not in readme.ELSEWHERE]
    assert not missing, ("README.md shows command lines that no test runs (run one with tests/e2e/readme.py "
                         f"command(...), or say in ELSEWHERE what runs it): {missing}")


def test_no_test_runs_a_command_line_the_readme_no_longer_shows():
    shown = set(readme.commands())
    stale = {c: files for c, files in _run_by_tests().items() if c not in shown}
    stale.update({c: ["ELSEWHERE"] for c in readme.ELSEWHERE if c not in shown})
    assert not stale, f"these command lines are run by tests but the README no longer shows them: {stale}"


def test_what_a_test_file_runs_is_in_that_file():
    for line, where in readme.ELSEWHERE.items():
        if where.startswith("tests/"):
            path, script = where.split(":", 1)[0], Path(line.split()[1]).name
            assert script in (TESTS.parent / path).read_text(encoding="utf-8"), f"{path} does not run {script}"


def test_what_ci_runs_is_in_ci_verbatim():
    ci = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for line, where in readme.ELSEWHERE.items():
        if where.startswith(".ci/run"):
            for part in line.split(" && "):
                assert any(part in ln and not ln.lstrip().startswith("#") for ln in ci), \
                    f".ci/run does not run {part!r} (README: {line!r})"


def test_the_extraction_keeps_commands_and_leaves_out_synopses_and_names():
    text = ("Run `msopt optimize -c a.toml --seed 1`, see `msopt optimize`, `msopt report RUN_DIR`, "
            "`msopt decode -c FILE [--json]`, `ray job stop`, `pip install -e '.[x]'`, `ray.init`, "
            "`msopt optimize --resume msopt_runs/<run-id>`.\n"
            "```bash\nray start --head   # on the head\n\necho '#not a comment' # but this is\n```\n")
    assert readme.commands(text) == ["ray start --head", "echo '#not a comment'",
                                     "msopt optimize -c a.toml --seed 1", "pip install -e '.[x]'"]


def test_a_test_cannot_run_a_command_the_readme_does_not_show():
    not_shown = "msopt optimize -c nowhere.toml"
    with pytest.raises(AssertionError, match="no longer shows"):
        readme.command(not_shown)
    shown = readme.commands()[0]
    with pytest.raises(AssertionError, match="is not in the README command"):
        readme.command(shown, replace={"--no-such-flag": "x"})


@pytest.mark.slow
def test_the_quick_subset_command_selects_tests():
    """``python -m pytest -q -m "not slow"``, collecting only (running it would run the quick subset twice)."""
    line = readme.command('python -m pytest -q -m "not slow"', append=["--collect-only"])
    argv = shlex.split(line)
    out = subprocess.run([sys.executable, *argv[1:]], cwd=TESTS.parent, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert " deselected" in last and "tests collected" in last, last
