"""The run report (msopt report) and the best configuration's launch files."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from msopt.cli.main import main
from msopt.config import load_settings
from msopt.evaluate.results import EvaluationResult
from msopt.report import (
    BEST_COMMAND_JSON,
    BEST_COMMAND_SH,
    BEST_CONFIG_JSON,
    FITNESS_PNG,
    PARALLEL_PNG,
    PARETO_PNG,
    REPORT_HTML,
    export_best,
    pareto_front,
    write_report,
)
from msopt.run.store import RunStore
from msopt.space import DecodeContext, SearchSpace

ROOT = Path(__file__).resolve().parents[2]
PNGS = (FITNESS_PNG, PARALLEL_PNG, PARETO_PNG)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NASTY = ["$(id)", "; touch pwned", "it's \"quoted\" `id` $HOME\\n"]

# A string enum on the command line and one in the environment: the simulator ignores both.
STRING_FIELDS = """
[[vllm.target_field]]
name = "tokenizer_mode"
config_position = "--tokenizer-mode"
min = 0
max = 1
dtype = "enum"
dtype_param = {nasty}
value = "$(id)"

[[vllm.target_field]]
name = "MSOPT_TEST_MODE"
config_position = "env"
min = 0
max = 1
dtype = "enum"
dtype_param = {nasty}
value = "; touch pwned"
""".replace("{nasty}", json.dumps(NASTY))

MINDIE = """
simulate = true
engine = "mindie"
n_particles = 3
iters = 1
seed = 0
sample_size = 32
[data_storage]
pso_top_k = 1
[cluster]
accelerator = "NPU"
devices_per_trial = 8
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
[simulator.workload]
input_len = 256
output_len = 64
num_prompts = 48
concurrency = 16
"""


def small_quickstart(extra: str = "") -> str:
    """configs/quickstart.toml with a small workload (and ``extra`` fields appended)."""
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    for key, new in (("sample_size", "32"), ("num_prompts", "48"), ("concurrency", "16"),
                     ("input_len", "256"), ("output_len", "64")):
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {new}", text, count=1, flags=re.M)
        assert n == 1, key
    head, sep, tail = text.partition("[vllm_benchmark.command]")
    return head + extra + "\n" + sep + tail


def run_optimize(cfg: Path, out: Path, *extra: str) -> tuple[int, str, str, Path | None]:
    """``msopt optimize`` in this process; (exit code, stdout, stderr, run directory)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    old = signal.getsignal(signal.SIGTERM)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(out), *extra])
    finally:
        signal.signal(signal.SIGTERM, old)
    runs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    return code, stdout.getvalue(), stderr.getvalue(), runs[0] if len(runs) == 1 else None


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, (path, len(data))


def fake_engine(tmp_path: Path, name: str) -> dict[str, str]:
    """A PATH where ``name`` prints each argument on a line, then $MSOPT_TEST_MODE."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done\n'
                   'printf \'ENV=%s\\n\' "$MSOPT_TEST_MODE"\n')
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def exec_line(script: str) -> list[str]:
    """The argv of the script's ``exec`` line, parsed as the shell would."""
    (line,) = [ln for ln in script.splitlines() if ln.startswith("exec ")]
    return shlex.split(line)[1:]


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("vllm_run")
    cfg = tmp / "cfg.toml"
    cfg.write_text(small_quickstart(STRING_FIELDS))
    code, out, err, run = run_optimize(cfg, tmp / "out", "--particles", "3", "--iters", "2")
    assert code == 0, err
    assert run is not None
    return {"run": run, "stdout": out, "stderr": err, "best": json.loads((run / "best.json").read_text())}


# -- the report ---------------------------------------------------------------------------------
def test_optimize_writes_a_self_contained_report(vllm_run: dict) -> None:
    run = vllm_run["run"]
    lines = vllm_run["stdout"].strip().splitlines()
    assert f"report: {run / REPORT_HTML}" in lines
    assert lines[-1] == str(run)  # the run directory stays the last line
    assert "warning" not in vllm_run["stderr"]
    page = (run / REPORT_HTML).read_text(encoding="utf-8")
    images = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert len(images) == 4  # fitness, parallel coordinates, Pareto front, and the simulator prior's errors
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for name in PNGS:
        assert_png(run / name)


def test_top_table_lists_the_best_configuration(vllm_run: dict) -> None:
    best = vllm_run["best"]
    page = (vllm_run["run"] / REPORT_HTML).read_text(encoding="utf-8")
    table = page[page.index("<h2>Top configurations</h2>"):]
    (row,) = re.findall(r'<tr class="best">(.*?)</tr>', table)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[1] == str(best["eval_id"])
    assert str(best["values"]["max_num_seqs"]) in cells
    assert str(best["values"]["tp"]) in cells
    assert "&#9733;" in cells[0]


def test_top_table_mean_is_the_leaderboards(vllm_run: dict) -> None:
    # the search served sample_size 32 prompts, the re-measurement the full 48: the table's mean is
    # best.json's (the leaderboard's weighted mean), not the plain average of the two
    from msopt.report.figures import fmt

    best = vllm_run["best"]
    page = (vllm_run["run"] / REPORT_HTML).read_text(encoding="utf-8")
    table = page[page.index("<h2>Top configurations</h2>"):]
    (row,) = re.findall(r'<tr class="best">(.*?)</tr>', table)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[4] == f"{fmt(best['mean_fitness'])} ({best['measurements']})"


def test_recommendation_states_its_mean_everywhere(vllm_run: dict) -> None:
    best = vllm_run["best"]
    assert best["phase"] == "refine" and best["measurements"] == 2
    mean = best["mean_fitness"]
    (line,) = [ln for ln in vllm_run["stdout"].splitlines() if ln.startswith("recommended:")]
    assert f"eval {best['eval_id']}," in line and f"mean of 2 measurements {mean:.4f}" in line
    page = (vllm_run["run"] / REPORT_HTML).read_text(encoding="utf-8")
    assert "over its 2 measurements, the best mean of the re-measured configurations" in page


def test_report_command_rewrites_and_prints_the_path(vllm_run: dict, capsys: pytest.CaptureFixture) -> None:
    run = vllm_run["run"]
    (run / REPORT_HTML).unlink()
    (run / FITNESS_PNG).unlink()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [str(run / REPORT_HTML)]
    assert (run / REPORT_HTML).is_file()
    assert_png(run / FITNESS_PNG)


@pytest.mark.parametrize("kind", ["missing", "not_a_run", "file"])
def test_report_on_a_bad_directory_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "nope"
    if kind == "not_a_run":
        target.mkdir()
    elif kind == "file":
        target.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "msopt.cli", "report", str(target)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("msopt: error:") and str(target) in proc.stderr


def _result(eval_id: int, position, values, metrics, fitness, error=None, phase="search") -> EvaluationResult:
    return EvaluationResult(eval_id=eval_id, phase=phase, particle=eval_id % 4, iteration=eval_id // 4,
                            position_in=list(position), position=list(position), values=values,
                            metrics=metrics, fitness=fitness, error=error)


def test_zero_successful_evaluations_still_report(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "out", settings.config, run_id="allfail")
    rng = np.random.default_rng(0)
    low, high = space.bounds
    for i in range(6):
        d = space.decode(rng.uniform(low, high), DecodeContext(i % 3, 3, i // 3))
        store.append(_result(i, d.position, d.values, {}, math.inf,
                             error="out of memory: KV cache does not fit <b>x</b>\nmore detail"))
    store.close()
    path = write_report(store.run_dir)
    page = path.read_text(encoding="utf-8")
    assert "No evaluation succeeded" in page
    assert "out of memory: KV cache does not fit &lt;b&gt;x&lt;/b&gt;" in page  # escaped, first line
    assert page.count("more detail") == 1 and "<b>x</b>" not in page  # one full example, escaped
    assert "<tr><td>6</td>" in page  # six failures of one kind
    for name in PNGS:
        assert_png(store.run_dir / name)
    assert not (store.run_dir / BEST_COMMAND_SH).exists()  # no best, nothing to launch


def test_a_reused_result_is_not_a_measurement_in_the_table(tmp_path: Path) -> None:
    # one launch, then the same configuration asked again and reused: one measurement, "(1)"
    from dataclasses import replace

    from msopt.report.data import load_run
    from msopt.report.html import _top

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "out", settings.config, run_id="reuse")
    d = space.decode(space.default_position(), None)
    metrics = {"generate_speed": 900.0, "time_to_first_token": 0.5, "time_per_output_token": 0.01,
               "success_rate": 1.0, "throughput": 3.0}
    first = _result(1, d.position, d.values, metrics, 0.7102)
    store.append(first)
    store.append(replace(first, eval_id=2, iteration=1, reused=True, attempts=0))
    store.close()
    (row,) = _top(load_run(store.run_dir), 5)
    assert row[0].eval_id == 1 and row[1:] == (pytest.approx(0.7102), 1)


def test_the_top_table_shows_a_measured_acceptance_length(tmp_path: Path) -> None:
    from msopt.report.data import load_run
    from msopt.report.html import _table, _top

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    d = space.decode(space.default_position(), None)
    metrics = {"generate_speed": 900.0, "time_to_first_token": 0.5, "time_per_output_token": 0.01,
               "success_rate": 1.0, "throughput": 3.0}
    pages = []
    for run_id, accept in (("plain", None), ("spec", 2.4567)):
        store = RunStore.create(tmp_path / "out", settings.config, run_id=run_id)
        extra = {} if accept is None else {"spec_accept_len": accept}
        store.append(_result(1, d.position, d.values, {**metrics, **extra}, 0.7))
        store.close()
        data = load_run(store.run_dir)
        pages.append(_table(data, _top(data, 5)))
    assert "accept len" not in pages[0]  # no speculative decoding measured: the table as it was
    assert "<th>accept len (tokens/step)</th>" in pages[1] and "<td>2.46</td>" in pages[1]


def test_empty_journal_reports(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    store = RunStore.create(tmp_path / "out", load_settings(str(cfg), environ={}).config, run_id="empty")
    store.close()
    assert main(["report", str(store.run_dir)]) == 0
    assert "No evaluation succeeded" in (store.run_dir / REPORT_HTML).read_text()


@pytest.mark.slow  # 500 evaluations plotted
def test_500_evaluations_report_quickly(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "out", settings.config, run_id="big")
    rng = np.random.default_rng(1)
    low, high = space.bounds
    best = None
    for i in range(500):
        d = space.decode(rng.uniform(low, high), DecodeContext(i % 10, 10, i // 10))
        if i % 17 == 3:
            store.append(_result(i, d.position, d.values, {}, math.inf, error="server exited"))
            continue
        tpot = float(rng.uniform(0.01, 0.08))
        metrics = {"generate_speed": float(rng.uniform(500, 5000)), "time_to_first_token": float(rng.uniform(0.1, 2)),
                   "time_per_output_token": tpot, "success_rate": 1.0, "throughput": 3.0}
        r = _result(i, d.position, d.values, metrics, float(rng.uniform(0.5, 3)))
        store.append(r)
        if best is None or r.fitness < best.fitness:
            best = r
    from msopt.run.records import best_record

    store.write_best(best_record(best, settings.engine))
    store.close()
    t0 = time.perf_counter()
    write_report(store.run_dir)
    elapsed = time.perf_counter() - t0
    assert elapsed < 15, f"report of 500 evaluations took {elapsed:.1f} s"  # ~2 s idle; loaded CI slack
    for name in PNGS:
        assert_png(store.run_dir / name)
    assert (store.run_dir / BEST_COMMAND_SH).is_file()


def test_a_failing_report_does_not_lose_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import msopt.report.html

    def boom(*a, **k):
        raise RuntimeError("no fonts here\nsecond line")

    monkeypatch.setattr(msopt.report.html, "write_report", boom)
    monkeypatch.setattr(msopt.report.export, "export_best", boom)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    code, out, err, run = run_optimize(cfg, tmp_path / "out", "--particles", "2", "--iters", "1")
    assert code == 0
    assert out.strip().splitlines()[-1] == str(run)
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warnings) == 2 and all("no fonts here" in w and "second line" not in w for w in warnings)
    assert f"msopt report {run}" in warnings[1]
    assert (run / "best.json").is_file() and (run / "journal.jsonl").stat().st_size > 0


def test_pareto_front() -> None:
    pts = [(0.02, 100.0), (0.01, 50.0), (0.03, 90.0), (0.02, 120.0), (0.05, 200.0), (0.01, 50.0)]
    assert pareto_front(pts) == [1, 3, 4]
    assert pareto_front([]) == []


# -- the best configuration, ready to use --------------------------------------------------------
def test_best_command_sh_parses_and_carries_the_best_values(vllm_run: dict, tmp_path: Path) -> None:
    run, best = vllm_run["run"], vllm_run["best"]
    sh = run / BEST_COMMAND_SH
    script = sh.read_text()
    assert script.startswith("#!/bin/sh\n")
    assert os.access(sh, os.X_OK)
    assert subprocess.run(["sh", "-n", str(sh)], capture_output=True).returncode == 0
    record = json.loads((run / BEST_COMMAND_JSON).read_text())
    argv = exec_line(script)
    assert argv == record["argv"]
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    assert argv[argv.index("--port") + 1] == "8000"  # the configured port, not the simulated 0
    v = best["values"]
    for flag, name in (("--tensor-parallel-size", "tp"), ("--max-num-seqs", "max_num_seqs"),
                       ("--max-num-batched-tokens", "max_num_batched_tokens"),
                       ("--tokenizer-mode", "tokenizer_mode")):
        assert argv[argv.index(flag) + 1] == str(v[name])
    assert record["env"]["MSOPT_TEST_MODE"] == v["MSOPT_TEST_MODE"]
    # what the script really executes: the same argv, item for item
    proc = subprocess.run(["sh", str(sh)], capture_output=True, text=True, cwd=tmp_path,
                          env=fake_engine(tmp_path, "vllm"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-2] == argv[1:]


@pytest.mark.parametrize("nasty", NASTY)
def test_string_values_stay_literal(tmp_path: Path, nasty: str) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart(STRING_FIELDS))
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    values = space.decode(space.encode({"tokenizer_mode": nasty, "MSOPT_TEST_MODE": nasty})).values
    assert values["tokenizer_mode"] == nasty
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    written = export_best(settings.config, values, run_dir, eval_id=3, fitness=1.5)
    assert [p.name for p in written] == [BEST_COMMAND_SH, BEST_COMMAND_JSON]
    sh = run_dir / BEST_COMMAND_SH
    assert subprocess.run(["sh", "-n", str(sh)], capture_output=True).returncode == 0
    argv = exec_line(sh.read_text())
    assert argv[argv.index("--tokenizer-mode") + 1] == nasty
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(["sh", str(sh)], capture_output=True, text=True, cwd=work,
                          env=fake_engine(tmp_path, "vllm"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.split("\n")
    assert nasty in printed  # one argv item, unexpanded
    assert f"ENV={nasty}" in proc.stdout
    assert not (work / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert "uid=" not in proc.stdout


def test_sglang_command_uses_its_port_and_model_flag(tmp_path: Path) -> None:
    settings = load_settings(None, "sglang", environ={})
    space = SearchSpace.from_settings(settings)
    values = space.decode(space.default_position()).values
    export_best(settings.config, values, tmp_path)
    record = json.loads((tmp_path / BEST_COMMAND_JSON).read_text())
    argv = record["argv"]
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--port") + 1] == "30000" and "--model-path" in argv
    assert exec_line((tmp_path / BEST_COMMAND_SH).read_text()) == argv


@pytest.mark.slow
def test_mindie_run_writes_best_config_json(tmp_path: Path) -> None:
    from msopt.engines.mindie.config_doc import get_path, parse_path

    cfg = tmp_path / "mindie.toml"
    cfg.write_text(MINDIE)
    code, out, err, run = run_optimize(cfg, tmp_path / "out")
    assert code == 0, err
    best = json.loads((run / "best.json").read_text())
    doc = json.loads((run / BEST_CONFIG_JSON).read_text())
    settings = load_settings(str(run / "config.toml"), environ={})
    placed = 0
    for decl in settings.fields:
        if "." in decl.config_position:
            got = get_path(doc, parse_path(decl.config_position))
            assert got == best["values"][decl.name], decl.name
            placed += 1
    assert placed >= 5
    assert doc["ServerConfig"]["port"] == 1025  # the template's own port, not the simulated 0
    record = json.loads((run / BEST_COMMAND_JSON).read_text())
    assert record["argv"] == ["mindieservice_daemon"]
    assert record["files"] == {"config.json": BEST_CONFIG_JSON}
    script = (run / BEST_COMMAND_SH).read_text()
    assert BEST_CONFIG_JSON in script and subprocess.run(["sh", "-n", str(run / BEST_COMMAND_SH)]).returncode == 0
    page = (run / REPORT_HTML).read_text()
    assert BEST_CONFIG_JSON in page
    for name in PNGS:
        assert_png(run / name)


def test_without_matplotlib_the_report_is_one_line_exit_2(vllm_run: dict, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main(["report", str(vllm_run["run"])]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install matplotlib" in err


LOAD_FIELD = """
[[vllm.target_field]]
name = "CONCURRENCY"
config_position = "env"
min = 8
max = 64
dtype = "int"
value = 32

[[vllm.target_field]]
name = "MSOPT_TEST_SERVER_VAR"
config_position = "env"
min = 1
max = 4
dtype = "int"
value = 2
"""


def test_best_command_does_not_export_the_benchmark_load_into_the_server(tmp_path: Path) -> None:
    """Issue 25, bug 11: best_command.sh exported CONCURRENCY=32, a benchmark variable."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart(LOAD_FIELD))
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    values = space.decode(space.default_position()).values
    assert values["CONCURRENCY"] == 32
    export_best(settings.config, values, tmp_path)
    text = (tmp_path / BEST_COMMAND_SH).read_text()
    assert "export CONCURRENCY" not in text and "export MSOPT_TEST_SERVER_VAR=2" in text
    assert "benchmark load, not the server's: CONCURRENCY=32" in text
    record = json.loads((tmp_path / BEST_COMMAND_JSON).read_text())
    assert "CONCURRENCY" not in record["env"] and record["benchmark_load"] == {"CONCURRENCY": "32"}
