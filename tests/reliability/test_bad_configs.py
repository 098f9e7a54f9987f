"""Bad input: every malformed configuration in tests/data/bad_configs/ is refused by the real CLI.

Each case runs ``msopt optimize -c FILE --plain -o OUTDIR`` through the CLI's ``main`` (a few of them also as
``python -m msopt.cli`` in a process of their own) and checks the contract of a user error: exit code 2, exactly one line on stderr that names the file
and the key (MANIFEST.toml says which key each file gets wrong), no traceback, and no run
directory (OUTDIR stays absent or empty): every check happens before ``RunStore.create``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from msopt.cli.main import main

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "data" / "bad_configs"
MANIFEST: dict[str, dict[str, str]] = tomllib.loads((BAD / "MANIFEST.toml").read_text(encoding="utf-8"))
CASES = sorted(p.name for p in BAD.iterdir() if p.name != "MANIFEST.toml")
#: A few cases that ``msopt validate`` refuses as well (load-time checks).
VALIDATE_CASES = ["syntax_unclosed_table.toml", "not_utf8.toml", "field_min_gt_max.toml",
                  "ternary_cycle.toml", "cluster_bad_accelerator.toml", "pso_strategy_unknown_schedule.toml",
                  "data_storage_negative_top_k.toml", "unknown_objective.toml"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL_EVAL_STATE_CONFIG_PATH", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _assert_refused(code: int, stdout: str, stderr: str, path: Path, key: str, out: Path | None) -> None:
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert code == 2, (code, stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith("msopt: error: "), lines[0]
    assert str(path) in lines[0], f"the message does not name the file: {lines[0]}"
    assert key in lines[0], f"the message does not name {key!r}: {lines[0]}"
    assert "run directory" not in stdout, stdout
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), f"a run directory was created: {list(out.iterdir())}"


def test_manifest_states_every_case():
    assert len(CASES) >= 40
    assert set(CASES) == set(MANIFEST), set(CASES) ^ set(MANIFEST)
    for name, entry in MANIFEST.items():
        assert entry.get("key") and entry.get("why"), name


#: The cases also run through ``python -m msopt.cli`` in a process of its own (one per kind of check): the exit
#: status, the stderr and the absent run directory as a shell sees them.
PROCESS_CASES = ["syntax_unclosed_table.toml", "not_utf8.toml", "field_min_gt_max.toml", "unknown_objective.toml",
                 "cluster_bad_accelerator.toml"]


@pytest.mark.parametrize("name", CASES)
def test_optimize_refuses_bad_config(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``msopt optimize`` in this process (the CLI's ``main``, as the console script calls it)."""
    for var in ("MODEL_EVAL_STATE_CONFIG_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs"
    code = main(["optimize", "-c", str(BAD / name), "--plain", "-o", str(out)])
    captured = capsys.readouterr()
    _assert_refused(code, captured.out, captured.err, BAD / name, MANIFEST[name]["key"], out)


@pytest.mark.slow  # a process per case
@pytest.mark.parametrize("name", PROCESS_CASES)
def test_the_cli_process_refuses_bad_config(name: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = _cli("optimize", "-c", str(BAD / name), "--plain", "-o", str(out), cwd=tmp_path)
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, BAD / name, MANIFEST[name]["key"], out)


@pytest.mark.parametrize("name", VALIDATE_CASES)
def test_validate_refuses_bad_config(name: str, tmp_path: Path) -> None:
    path = BAD / name
    proc = _cli("validate", "-c", str(path), cwd=tmp_path)
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, path, MANIFEST[name]["key"], None)


def test_directory_given_as_config(tmp_path: Path) -> None:
    path, out = tmp_path / "config.toml", tmp_path / "runs"
    path.mkdir()
    proc = _cli("optimize", "-c", str(path), "--plain", "-o", str(out), cwd=tmp_path)
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, path, "is a directory", out)


def test_missing_config(tmp_path: Path) -> None:
    path, out = tmp_path / "absent.toml", tmp_path / "runs"
    proc = _cli("optimize", "-c", str(path), "--plain", "-o", str(out), cwd=tmp_path)
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, path, "not found", out)


def test_unreadable_config(capsys: pytest.CaptureFixture[str]) -> None:
    """Mode 000, read as an ordinary user (root reads anything: drop to uid 65534 in-process)."""
    work = Path(tempfile.mkdtemp(prefix="msopt-unreadable-"))  # /tmp, traversable by nobody
    try:
        work.chmod(0o777)
        path, out = work / "config.toml", work / "runs"
        shutil.copyfile(REPO / "configs" / "quickstart.toml", path)
        path.chmod(0)
        argv = ["optimize", "-c", str(path), "--plain", "-o", str(out)]
        import msopt.run.store  # noqa: F401  imported as root: uid 65534 cannot read root's site-packages
        import msopt.run.validate  # noqa: F401
        if os.geteuid() == 0:
            os.seteuid(65534)
            try:
                code = main(argv)
            finally:
                os.seteuid(0)
        else:
            code = main(argv)
        captured = capsys.readouterr()
        _assert_refused(code, captured.out, captured.err, path, "Permission denied", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
