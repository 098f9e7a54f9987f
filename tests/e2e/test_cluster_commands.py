"""The README's cluster commands, run exactly as printed against a Ray head on this machine.

The head takes Ray's default ports and ``ray stop`` ends every Ray process it can see, so the
commands run in a private network and PID namespace (``unshare``, root): they can neither clash
with nor stop any other Ray instance of this machine, and everything they started dies with the
namespace. The second line (joining from another machine) is the only one not run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import readme

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def readme_cluster_block() -> list[str]:
    """The command lines of the README's "On a Ray cluster" block, as printed."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### On a Ray cluster"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "no bash block under 'On a Ray cluster'"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def _namespaces_work() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"cannot create network/PID namespaces here (needs root): {probe.stderr.strip()[:200]}"
    return None


def run_in_namespace(script: str, home: Path, timeout: int = 420, *, cwd: Path = REPO, bin_dir: Path | None = None,
                     net: bool = True, pythonpath: bool = True) -> subprocess.CompletedProcess:
    """``script`` in bash in a private PID namespace (and network namespace, with ``net``) from ``cwd``, with the
    code of ``cwd`` first on the path (unless not ``pythonpath``: then ``bin_dir``'s environment decides), ``bin_dir``
    (default: this interpreter's) first on PATH and HOME at ``home``. Without ``net`` the package index can be
    reached (``pip install``)."""
    bin_dir = bin_dir or Path(sys.executable).parent
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(cwd), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}",
               RAY_USAGE_STATS_ENABLED="0")
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_JOB_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                "VIRTUAL_ENV", *(() if pythonpath else ("PYTHONPATH",))):
        env.pop(key, None)
    wrapped = (("ip link set lo up\n" if net else "") +
               f"set -e\ncd {cwd}\n{script}\nray stop --force >/dev/null 2>&1 || true\n")
    return subprocess.run(["unshare", *(["--net"] if net else []), "--pid", "--fork", "--mount-proc", "--kill-child",
                           "bash", "-c", wrapped], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_readme_block_is_what_this_test_runs():
    lines = readme_cluster_block()
    assert len(lines) == 4
    assert lines[0].startswith("ray start --head ") and lines[1].startswith("ray start --address HEAD_IP:6379 ")
    assert lines[3].startswith("ray job submit ") and " -- msopt optimize " in lines[3]


@pytest.mark.slow
@pytest.mark.parametrize("token", [False, True], ids=["no-token", "token-auth"])
def test_readme_cluster_commands_as_printed(tmp_path, token):
    """The block's lines but the second, verbatim, from a fresh copy of the repository (the job's working
    directory is the relative ``.``; the job's driver and actors run in Ray's unpacked copy of it)."""
    lines = [readme.command("ray start --head --resources '{\"NPU\": 8}'"),
             readme.command("[ -f ~/.ray/auth_token ] && export RAY_AUTH_MODE=token"),
             readme.command("ray job submit --working-dir . -- msopt optimize -c configs/quickstart.toml "
                            "--address auto -o ~/msopt_runs")]
    why = _namespaces_work()
    if why:
        pytest.skip(why)
    home = tmp_path / "home"
    home.mkdir()
    setup = ""
    if token:  # a user who ran a local msopt before: the head turns token authentication on
        setup = "ray get-auth-token --generate >/dev/null\n"
    copy = readme.repository_copy(tmp_path / "repo")
    out = run_in_namespace(setup + "\n".join(lines), home, cwd=copy)
    log = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0, log
    assert "succeeded" in log and "AuthenticationError" not in log
    assert (home / ".ray" / "auth_token").exists() == token
    (run,) = list((home / "msopt_runs").iterdir())
    assert (run / "best.json").is_file() and (run / "report.html").is_file()
    assert "verdict: " in log or "NO CONFIGURATION MET THE SLOs" in log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_submit_job_without_a_dashboard_is_one_line():
    env = dict(os.environ, RAY_JOB_ADDRESS=f"http://127.0.0.1:{free_port()}")
    out = subprocess.run(["bash", str(REPO / "scripts" / "submit_job.sh")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("submit_job.sh: no Ray dashboard answers at http://127.0.0.1:")
    assert "Traceback" not in out.stderr and "ray start --head" in lines[0]


@pytest.mark.slow
def test_readme_quick_start_as_printed_gives_the_result_docs_quote(tmp_path):
    """The quick start's first line, verbatim, in a fresh copy of the repository and a fresh environment (a
    virtual environment that sees this machine's packages, so ``pip install -e .`` installs nothing but msopt),
    with the default relative ``-o``; then the seed-0 result that docs/simulator.md quotes for it."""
    line = readme.command("pip install -e . && msopt optimize -c configs/quickstart.toml")
    why = _namespaces_work()
    if why:
        pytest.skip(why)
    home = tmp_path / "home"
    home.mkdir()
    copy = readme.repository_copy(tmp_path / "repo")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    out = run_in_namespace(line, home, cwd=copy, bin_dir=venv / "bin", net=False, pythonpath=False, timeout=900)
    log = out.stdout[-6000:] + out.stderr[-3000:]
    assert out.returncode == 0, log
    (run,) = list((copy / "msopt_runs").iterdir())
    assert (run / "best.json").is_file() and str(run) in out.stdout
    lines = out.stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("recommended: "))
    values = " ".join(ln.strip() for ln in lines[i + 1:] if "=" in ln and not ln.startswith("launch it:"))
    doc = (REPO / "docs" / "simulator.md").read_text(encoding="utf-8")
    assert f"    {values}\n" in doc, (values, log)
    start = lines.index("starting Ray ...")  # pip's lines come first
    assert lines[start - 2].startswith("engine: vllm (the 'engine' key of ")
    assert lines[start - 1].startswith("benchmark: vllm_benchmark")
    assert "verdict: the recommended configuration meets every SLO" in lines[start:]
