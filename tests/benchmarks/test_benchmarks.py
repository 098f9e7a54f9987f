"""Benchmark adapters: contract, command lines, result parsing, the default run()."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import BENCHMARKS, BenchmarkAdapter, get_benchmark
from msopt.benchmarks.ais_bench import parse_quantity
from msopt.benchmarks.vllm_benchmark import RESULT_FILE, parse_result
from msopt.engines import LaunchSpec
from msopt.errors import ConfigError, EvaluationError, RegistryError
from msopt.evaluate.results import METRICS
from msopt.launch.render import Candidate
from msopt.metrics import PERCENTILES
from msopt.space.fields import FieldDecl, parse_field

from .conftest import write

NASTY = "; touch pwned $(id)\n`x`"


def decl(name: str, position: str = "env", dtype: str = "int", **kw: Any) -> FieldDecl:
    raw = {"name": name, "config_position": position, "dtype": dtype, "min": 0, "max": 100, **kw}
    return parse_field(raw, source="t.toml", section="vllm", index=0)


@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_contract(name: str, server_spec: LaunchSpec, tmp_path: Path) -> None:
    bench = get_benchmark(name)
    assert isinstance(bench, BenchmarkAdapter) and bench.name == name
    assert bench.produces and set(METRICS) <= bench.produces <= set(METRICS) | set(PERCENTILES)
    fields = [decl("S", dtype="enum", dtype_param=[NASTY]), decl("CONCURRENCY")]
    section = {"command": {"others": "--tag $S"}, "others": "--tag $S"}
    argv, env = bench.render(Candidate({"S": NASTY, "CONCURRENCY": 3}, fields, section), server=server_spec,
                             num_prompts=7, load={}, result_dir=tmp_path)
    assert isinstance(argv, tuple) and all(isinstance(a, str) for a in argv)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    assert env["S"] == NASTY
    if name != "builtin":
        assert argv[-2:] == ("--tag", NASTY)
        if name == "ais_bench":  # the prompts are the generated dataset's RequestCount (test_ais_bench.py)
            assert "RequestCount=7" in (tmp_path / "ais_bench_configs/datasets/msopt_synthetic.py").read_text()
        else:
            assert argv[argv.index("--num-prompts") + 1] == "7"
    out = subprocess.run([sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))",
                          *argv[1:]], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == list(argv[1:])
    assert not Path("pwned").exists() and not (tmp_path / "pwned").exists()


def test_unknown_benchmark_lists_valid_ones() -> None:
    with pytest.raises(RegistryError, match="ais_bench, builtin, vllm_benchmark"):
        get_benchmark("vllm_bench")


# -- vllm_benchmark ---------------------------------------------------------------------------
def test_vllm_benchmark_argv(server_spec: LaunchSpec, tmp_path: Path) -> None:
    fields = [decl("CONCURRENCY"), decl("REQUESTRATE", dtype="float"), decl("mns", "--max-num-seqs")]
    section = {"command": {"executable": ["vllm", "bench", "serve"], "num_prompts": 100,
                           "random_input_len": 512, "others": "--ignore-eos --seed ${mns}"}}
    argv, env = get_benchmark("vllm_benchmark").render(
        Candidate({"CONCURRENCY": 16, "REQUESTRATE": 2.5, "mns": 64}, fields, section), server=server_spec,
        num_prompts=None, load={}, result_dir=tmp_path)
    assert argv == ("vllm", "bench", "serve", "--backend", "vllm", "--host", "127.0.0.1", "--port",
                    "8123", "--model", "/models/Qwen3-8B", "--served-model-name", "qwen3-8b",
                    "--dataset-name", "random", "--num-prompts", "100", "--max-concurrency", "16",
                    "--request-rate", "2.5", "--random-input-len", "512", "--save-result",
                    "--result-dir", str(tmp_path), "--result-filename", RESULT_FILE,
                    "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,90,95,99",
                    "--ignore-eos", "--seed", "64")
    assert env == {"CONCURRENCY": "16", "REQUESTRATE": "2.5"}


def test_vllm_benchmark_load_overrides_fields(server_spec: LaunchSpec, tmp_path: Path) -> None:
    argv, _ = get_benchmark("vllm_benchmark").render(
        Candidate({"CONCURRENCY": 16}, [decl("CONCURRENCY")], {}), server=server_spec, num_prompts=5,
        load={"concurrency": 64, "request_rate": math.inf}, result_dir=tmp_path)
    assert argv[argv.index("--max-concurrency") + 1] == "64" and "--request-rate" not in argv
    argv, _ = get_benchmark("vllm_benchmark").render(
        Candidate({}, [], {}), server=server_spec, num_prompts=5, load={"request_rate": 4}, result_dir=tmp_path)
    assert argv[argv.index("--request-rate") + 1] == "4.0" and "--max-concurrency" not in argv
    with pytest.raises(EvaluationError, match="unknown load key"):
        get_benchmark("vllm_benchmark").render(Candidate({}, [], {}), server=server_spec, num_prompts=5,
                                               load={"qps": 1}, result_dir=tmp_path)
    with pytest.raises(ConfigError, match="concurrency"):
        get_benchmark("vllm_benchmark").render(Candidate({}, [], {}), server=server_spec, num_prompts=5,
                                               load={"concurrency": 0}, result_dir=tmp_path)


VLLM_RESULT = {"num_prompts": 10, "completed": 9, "request_throughput": 1.5, "output_throughput": 300.0,
               "mean_ttft_ms": 120.0, "mean_tpot_ms": 25.0, "failed": 1}


def test_vllm_benchmark_parse(tmp_path: Path) -> None:
    write(tmp_path / RESULT_FILE, json.dumps(VLLM_RESULT))
    m = get_benchmark("vllm_benchmark").parse(tmp_path, tmp_path / "log")
    assert m == pytest.approx({"generate_speed": 300.0, "time_to_first_token": 0.12,
                               "time_per_output_token": 0.025, "success_rate": 0.9, "throughput": 1.5,
                               "sent_requests": 10.0})
    assert parse_result({"completed": 3, "errors": ["", "", "", "x"]})["success_rate"] == 0.75
    assert parse_result({"completed": 0, "num_prompts": 4, "mean_ttft_ms": 0.0})["time_to_first_token"] is None
    with pytest.raises(EvaluationError, match=f"wrote no {RESULT_FILE} into"):
        get_benchmark("vllm_benchmark").parse(tmp_path / "empty", tmp_path / "log")


def test_vllm_benchmark_says_what_it_sent() -> None:
    # vllm 0.32 serve.py:1280-1285 saves duration, completed, failed and the completed requests' token totals
    m = parse_result({**VLLM_RESULT, "duration": 6.0, "total_input_tokens": 4500, "total_output_tokens": 1800})
    assert (m["sent_requests"], m["sent_input_mean"], m["sent_output_mean"], m["duration"]) == (10, 500, 200, 6.0)
    assert "sent_span_s" not in m and "send_late_p99_s" not in m       # no send times without --save-detailed
    none = parse_result({"completed": 0, "failed": 2, "total_input_tokens": 0, "total_output_tokens": 0})
    assert none["sent_requests"] == 2 and "sent_input_mean" not in none


FAKE_VLLM_BENCH = """
import json, os, sys, time
args = sys.argv[1:]
d = args[args.index('--result-dir') + 1]
f = args[args.index('--result-filename') + 1]
mode = os.environ.get('FAKE_MODE', 'ok')
print('fake bench', ' '.join(args), flush=True)
if mode == 'hang':
    time.sleep(60)
if mode == 'fail':
    print('Connection refused', flush=True)
    sys.exit(4)
json.dump(RESULT, open(os.path.join(d, f), 'w'))
""".replace("RESULT", repr(VLLM_RESULT))


@pytest.mark.parametrize("mode", ["ok", "fail", "hang"])
def test_default_run_starts_waits_and_parses(mode: str, server_spec: LaunchSpec, tmp_path: Path) -> None:
    script = write(tmp_path / "fake.py", FAKE_VLLM_BENCH)
    section = {"command": {"executable": [sys.executable, str(script)]}, "env": {"FAKE_MODE": mode}}
    bench = get_benchmark("vllm_benchmark")
    kw = {"num_prompts": 10, "load": {}, "result_dir": tmp_path / "res", "log_path": tmp_path / "b.log",
          "timeout": 1.0 if mode == "hang" else 30}
    if mode == "ok":
        m = bench.run(server_spec, Candidate({}, [], section), **kw)
        assert m["generate_speed"] == 300.0 and "fake bench" in (tmp_path / "b.log").read_text()
        return
    t0 = time.monotonic()
    with pytest.raises(EvaluationError, match="within 1 s" if mode == "hang" else "(?s)status 4.*Connection refused"):
        bench.run(server_spec, Candidate({}, [], section), **kw)
    assert time.monotonic() - t0 < 15


def test_relative_result_dir_and_log_are_where_the_benchmark_writes(server_spec: LaunchSpec, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative result directory (a relative ``-o``) meant the driver's working directory, but the
    benchmark runs inside the result directory: vLLM then wrote one copy of the path too deep (issue 39)."""
    script = write(tmp_path / "fake.py", FAKE_VLLM_BENCH)
    section = {"command": {"executable": [sys.executable, str(script)]}, "env": {"FAKE_MODE": "ok"}}
    monkeypatch.chdir(tmp_path)
    m = get_benchmark("vllm_benchmark").run(server_spec, Candidate({}, [], section), num_prompts=10, load={},
                                            result_dir=Path("runs/r1/work/e0/result"), log_path=Path("runs/b.log"),
                                            timeout=30)
    assert m["generate_speed"] == 300.0
    assert (tmp_path / "runs/r1/work/e0/result" / RESULT_FILE).is_file()
    assert not (tmp_path / "runs/r1/work/e0/result/runs").exists()
    assert "fake bench" in (tmp_path / "runs/b.log").read_text()


MISPLACED_BENCH = """
import json, os, sys
args = sys.argv[1:]
d = os.path.join('deeper', args[args.index('--result-dir') + 1].lstrip('/'))
os.makedirs(d, exist_ok=True)
print('============ Serving Benchmark Result ============', flush=True)
print('Output token throughput (tok/s):         300.0', flush=True)
json.dump({}, open(os.path.join(d, args[args.index('--result-filename') + 1]), 'w'))
print('nanobind: leaked 2 instances!', flush=True)
print(' - leaked type "triton._C.X"', flush=True)
print('nanobind: this is likely caused by a reference counting issue in the binding code.', flush=True)
print('See https://nanobind.readthedocs.io/en/latest/refleaks.html', flush=True)
"""


def test_no_result_names_what_was_written_and_the_last_meaningful_lines(server_spec: LaunchSpec,
                                                                         tmp_path: Path) -> None:
    """A benchmark that exits 0 but writes its result elsewhere: the error names the files it did write and
    the log's last lines before the exit-time warnings, not the nanobind leak report (issue 39)."""
    script = write(tmp_path / "fake.py", MISPLACED_BENCH)
    section = {"command": {"executable": [sys.executable, str(script)]}}
    with pytest.raises(EvaluationError) as err:
        get_benchmark("vllm_benchmark").run(server_spec, Candidate({}, [], section), num_prompts=10, load={},
                                            result_dir=tmp_path / "res", log_path=tmp_path / "b.log", timeout=30)
    first, *rest = str(err.value).splitlines()
    assert first.startswith(f"vllm bench serve wrote no {RESULT_FILE} into {tmp_path / 'res'}; it wrote deeper/")
    assert first.endswith(f"{RESULT_FILE} there (log {tmp_path / 'b.log'})")
    assert "nanobind" not in str(err.value)
    assert rest[-1] == "Output token throughput (tok/s):         300.0"
    with pytest.raises(EvaluationError, match=r"wrote no builtin_result\.json into .*; it wrote no file there"):
        get_benchmark("builtin").parse(tmp_path / "empty", tmp_path / "log")


# -- ais_bench --------------------------------------------------------------------------------
def test_ais_bench_argv_and_env(server_spec: LaunchSpec, tmp_path: Path) -> None:
    # the user's own configs (reading $MSOPT_SERVER_PORT); a stock template's name would be msopt's
    # generated config of that template instead (test_ais_bench_original.py)
    section = {"command": {"models": "my_vllm_api", "datasets": ["gsm8k_gen"],
                           "num_prompts": 3000, "others": "--debug --num-warmups 0"}}
    argv, env = get_benchmark("ais_bench").render(
        Candidate({"CONCURRENCY": 32}, [decl("CONCURRENCY")], section), server=server_spec, num_prompts=None,
        load={"request_rate": 2.0}, result_dir=tmp_path)
    assert argv == ("ais_bench", "--models", "my_vllm_api", "--datasets", "gsm8k_gen",
                    "--mode", "perf", "--work-dir", str(tmp_path), "--num-prompts", "3000", "--debug",
                    "--num-warmups", "0")
    assert env["MSOPT_SERVER_PORT"] == "8123" and env["MSOPT_SERVER_HOST"] == "127.0.0.1"
    assert env["MSOPT_CONCURRENCY"] == "32" and env["MSOPT_REQUEST_RATE"] == "2.0"
    assert env["MSOPT_SERVED_MODEL_NAME"] == "qwen3-8b" and env["CONCURRENCY"] == "32"


AIS_CSV = """Performance Parameters,Stage,Average,Min,Max,Median,P75,P90,P99,N
E2EL,total,12300.2 ms,12295.9 ms,12305.2 ms,12300.0 ms,12302.1 ms,12304.3 ms,12305.1 ms,8
TTFT,total,2006.0 ms,2005.1 ms,2007.4 ms,2006.1 ms,2006.2 ms,2006.6 ms,2007.3 ms,8
TPOT,total,20.1 ms,20.1 ms,20.2 ms,20.1 ms,20.1 ms,20.2 ms,20.2 ms,8
OutputTokenThroughput,total,41.6254 token/s,41.6085 token/s,41.6398 token/s,41.6261 token/s,41.6338 token/s,41.6375 token/s,41.6395 token/s,8
"""
AIS_JSON = {"Benchmark Duration": {"total": "98409.4916 ms"}, "Total Requests": {"total": 8},
            "Failed Requests": {"total": 2}, "Success Requests": {"total": 6},
            "Request Throughput": {"total": "0.0813 req/s"}, "Output Token Throughput": "333.0 token/s"}


def test_ais_bench_parse(tmp_path: Path) -> None:
    perf = tmp_path / "20251106_103326" / "performances" / "vllm-api-stream-chat"
    write(perf / "synthetic.csv", AIS_CSV)
    write(perf / "synthetic.json", json.dumps(AIS_JSON))
    m = get_benchmark("ais_bench").parse(tmp_path, tmp_path / "log")
    assert m == pytest.approx({"generate_speed": 333.0, "time_to_first_token": 2.006,
                               "time_per_output_token": 0.0201, "success_rate": 0.75,
                               "throughput": 0.0813})
    assert parse_quantity("1.5 s") == (1.5, "s") and parse_quantity(True) is None
    with pytest.raises(EvaluationError, match="performances"):
        get_benchmark("ais_bench").parse(tmp_path / "none", tmp_path / "log")


def _sent_prompts(name: str, argv: tuple[str, ...], result_dir: Path) -> int | None:
    if name == "builtin":
        return int(json.loads(argv[-1])["num_prompts"])
    if "--num-prompts" in argv:
        return int(argv[argv.index("--num-prompts") + 1])
    generated = list(result_dir.glob("ais_bench_configs/datasets/*.py"))  # AISBench: the dataset msopt wrote
    if generated:
        found = re.search(r"RequestCount=(\d+)", generated[0].read_text())
        return int(found.group(1)) if found else None
    return None


@pytest.mark.parametrize("given", [None, 37])
@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_workload_is_what_the_benchmark_sends(name: str, given: int | None, server_spec: LaunchSpec,
                                              tmp_path: Path) -> None:
    """``num_prompts(section)`` (the full workload the leaderboard weighs by) is what a run
    without a cap sends: its own section's count, or its own default."""
    bench = get_benchmark(name)
    section: dict[str, Any] = {} if given is None else (
        {"num_prompts": given} if name == "builtin" else {"command": {"num_prompts": given}})
    argv, _ = bench.render(Candidate({}, [], section), server=server_spec, num_prompts=None, load={}, result_dir=tmp_path)
    assert bench.num_prompts(section) == _sent_prompts(name, argv, tmp_path)
    if given is not None:
        assert bench.num_prompts(section) == given
