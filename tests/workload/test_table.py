"""The [workload] table: its synthetic keys reach every benchmark's and the simulator's spelling, two
spellings of one key are refused together, a trace is read and summarised by validate, bad keys are one line."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from msopt.config import load_settings, split
from msopt.errors import ConfigError
from msopt.run.validate import load, validate

ROOT = Path(__file__).resolve().parents[2]


def cfg(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def trace(tmp_path: Path, name: str = "t.jsonl") -> Path:
    rows = [{"timestamp": 500 * i, "input_length": 1000 + 100 * i, "output_length": 50, "hash_ids": [0, i + 1]}
            for i in range(9)]
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def sim_view(s):
    """``[simulator.workload]`` as the simulator runs it: the resolved workload over the section."""
    config, resolved = split(s)
    return resolved.simulator_workload(config.simulator.sub("workload"), config.run.benchmark)


def bench_view(s, name):
    """``[name]`` as its adapter reads it (msopt.evaluate.real.RealRunner.bench_table)."""
    _, resolved = split(s)
    return resolved.benchmark_section(name, s.section(name))


#: each section's spelling of input_len, output_len, num_prompts and concurrency
_SPELT = {"builtin": ("input_len", "output_len", "num_prompts", "concurrency"),
          "vllm_benchmark": ("random_input_len", "random_output_len", "num_prompts", "max_concurrency"),
          "ais_bench": ("input_len", "output_len", "num_prompts", "max_concurrency")}


def test_synthetic_keys_reach_every_spelling(tmp_path):
    s = load_settings(cfg(tmp_path, "[workload]\ninput_len = 300\noutput_len = 30\nnum_prompts = 40\n"
                                    "concurrency = 5\nwarmup = 2\n"))
    # no key copied into any section: the packaged defaults [workload] replaces are dropped, and the simulator
    # and each benchmark take the load from the resolved workload
    assert dict(s.section("simulator")["workload"]) == {}
    assert sim_view(s) == {"input_len": 300, "output_len": 30, "num_prompts": 40, "concurrency": 5, "warmup": 2}
    for name, keys in _SPELT.items():
        table = s.section(name)
        written = table if name == "builtin" else table.get("command", {})
        assert not set(keys) & set(written), name
        view = bench_view(s, name)
        seen = view if name == "builtin" else view["command"]
        assert tuple(seen[k] for k in keys) == (300, 30, 40, 5), name
    assert "request_rate" not in bench_view(s, "builtin")   # the packaged "inf" would not pace a concurrency anyway
    checked = validate(*split(s))
    assert checked.workload is not None and checked.workload.full_prompts == 1000 // 25   # vllm_benchmark's


def test_a_rate_alone_is_not_capped_by_a_packaged_concurrency(tmp_path):
    s = load_settings(cfg(tmp_path, "simulate = true\n[workload]\nrequest_rate = 4.0\n"))
    assert dict(s.section("simulator")["workload"]) == {"input_len": 1024, "output_len": 256, "num_prompts": 200}
    assert sim_view(s) == {"input_len": 1024, "output_len": 256, "num_prompts": 200, "request_rate": 4.0}
    b = bench_view(s, "builtin")
    assert "concurrency" not in b and b["request_rate"] == 4.0 and "request_rate" not in s.section("builtin")
    mine = load_settings(cfg(tmp_path, "[workload]\nrequest_rate = 4.0\n[builtin]\nconcurrency = 3\n"))
    assert bench_view(mine, "builtin")["concurrency"] == 3    # a user's cap stays


def test_the_simulators_own_keys_keep_their_precedence(tmp_path):
    # docs/configuration.md [workload]: a value from your own file stays (a rate capped by a concurrency);
    # equal spellings load; the simulator reads [workload] over its section, never a copy in it
    s = load_settings(cfg(tmp_path, "simulate = true\n[workload]\nrequest_rate = 4.0\nnum_prompts = 50\n"
                                    "[simulator.workload]\nconcurrency = 3\nnum_prompts = 50\n"))
    assert dict(s.section("simulator")["workload"]) == {"input_len": 1024, "output_len": 256, "concurrency": 3,
                                                       "num_prompts": 50}
    view = sim_view(s)
    assert (view["request_rate"], view["concurrency"], view["num_prompts"]) == (4.0, 3, 50)
    again = load_settings(cfg(tmp_path, s.to_toml(), "saved.toml"))    # a run's config.toml loads again
    assert sim_view(again) == view
    checked = validate(*split(s))
    assert checked.workload is not None and checked.workload.full_prompts == 50
    assert dict(checked.workload.load) == {"request_rate": 4.0, "concurrency": 3}


def test_a_saved_configuration_of_a_synthetic_run_loads_again(tmp_path):
    s = load_settings(cfg(tmp_path, "simulate = true\n[workload]\ninput_len = 300\n"))
    again = load_settings(cfg(tmp_path, s.to_toml(), "saved.toml"))    # the packaged 1024 is not saved beside it
    assert sim_view(again)["input_len"] == 300 and "input_len" not in again.section("simulator")["workload"]


def test_the_old_spellings_keep_working(tmp_path):
    s = load_settings(cfg(tmp_path, "[vllm_benchmark.command]\nrandom_input_len = 77\n"))
    assert s.section("vllm_benchmark")["command"]["random_input_len"] == 77


@pytest.mark.parametrize("text,needle", [
    ("[workload]\ninput_len = 100\n[builtin]\ninput_len = 200\n",
     "[builtin] input_len = 200 and {f}: [workload] input_len = 100 both set input_len; keep one"),
    ("[workload]\nconcurrency = 4\n[vllm_benchmark.command]\nmax_concurrency = 8\n",
     "[vllm_benchmark.command] max_concurrency = 8 and {f}: [workload] concurrency = 4 both set concurrency"),
    ("[workload]\nnum_prompts = 4\n[simulator.workload]\nnum_prompts = 8\n",
     "[simulator.workload] num_prompts = 8 and {f}: [workload] num_prompts = 4"),
])
def test_two_spellings_of_one_key_are_refused_together(tmp_path, text, needle):
    path = cfg(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(path)) and needle.format(f=path) in msg


def test_equal_spellings_reload_a_saved_configuration(tmp_path):
    s = load_settings(cfg(tmp_path, "[workload]\ninput_len = 100\n[builtin]\ninput_len = 100\n"))
    again = load_settings(cfg(tmp_path, s.to_toml(), "saved.toml"))
    assert again.section("builtin")["input_len"] == 100


@pytest.mark.parametrize("text,needle", [
    ("[workload]\ninput_length = 5\n", "unknown key 'input_length' in [workload]; valid keys: input_len"),
    ("[workload]\ninput_len = 0\n", "[workload] 'input_len' must be a whole number of tokens >= 1, got 0"),
    ("[workload]\nrequest_rate = -1\n", "[workload] 'request_rate' must be a number of requests/s above 0"),
    ("[workload]\nwindow = [0, 10]\n", "[workload] 'window' applies to a trace, and [workload] has no trace"),
    ('[workload]\ntrace = "t.csv"\nwindow = [10, 0]\n', "'window' must be [start_s, end_s] with 0 <= start_s"),
    ('[workload]\ntrace = "t.csv"\nformat = "sharegpt"\n', "'format' must be one of mooncake, bailian, azure"),
    ('[workload]\ntrace = "t.csv"\nlength_policy = "cut"\n', "'length_policy' must be one of clip, scale, drop"),
    ('[workload]\ntrace = "t.csv"\ninput_len = 100\n', "[workload] 'input_len' and trace both set the requests"),
    ("workload = 3\n", "'workload' must be a table"),
])
def test_bad_keys_are_one_line(tmp_path, text, needle):
    path = cfg(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(path)
    msg = str(exc.value)
    assert "\n" not in msg and needle in msg and str(path) in msg


def test_a_trace_sets_the_load_and_is_summarised(tmp_path):
    trace(tmp_path)
    path = cfg(tmp_path, 'simulate = true\n[workload]\ntrace = "t.jsonl"\ntime_scale = 2\nconcurrency = 6\n')
    checked = load(path)
    assert checked.config.workload.table["trace"] == str(tmp_path / "t.jsonl")    # relative to the file
    tr = checked.trace
    assert tr is not None and (tr.format, tr.requests, tr.span_s, tr.rate) == ("mooncake", 9, 2.0, 4.0)
    assert tr.prefix_ceiling == pytest.approx(8 / 18)
    assert "request_rate" not in checked.config.simulator.table["workload"]     # no key copied
    assert checked.simulator is not None
    sim = dict(checked.simulator.table["workload"])     # the simulator's setup reads the resolved workload
    assert sim == {"num_prompts": 9, "request_rate": 4.0, "concurrency": 6}    # the simulator replays the window
    assert checked.resolved is not None and len(checked.resolved.window.requests) == 9  # handed on, not a key
    saved = tomllib.loads(checked.config.text)    # every benchmark's table, as the run saves them: no key copied
    assert "request_rate" not in saved["vllm_benchmark"]["command"] and "request_rate" not in saved["builtin"]
    resolved = checked.resolved
    v = resolved.benchmark_section("vllm_benchmark", checked.config.benchmark.table)["command"]
    assert (v["random_input_len"], v["num_prompts"], v["request_rate"], v["max_concurrency"]) == (1400, 9, 4.0, 6)
    assert checked.workload is not None and checked.workload.full_prompts == 9
    b = resolved.benchmark_section("builtin", saved["builtin"])      # the real benchmarks: the means at the mean rate
    assert (b["input_len"], b["output_len"], b["num_prompts"], b["request_rate"]) == (1400, 50, 9, 4.0)


def test_a_bad_trace_row_fails_validation(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,5,5\n1,5,-5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load(cfg(tmp_path, '[workload]\ntrace = "t.csv"\n'))
    assert f"[workload] trace {tmp_path / 't.csv'}: row 3, column 'output_tokens'" in str(exc.value)


def _msopt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_msopt_validate_prints_the_workload(tmp_path):
    trace(tmp_path)
    path = cfg(tmp_path, '[workload]\ntrace = "t.jsonl"\n')
    out = _msopt("validate", "-c", str(path))
    assert out.returncode == 0, out.stderr
    assert f"workload: trace {tmp_path / 't.jsonl'} (mooncake)" in out.stdout
    assert "requests 9 over 4.0 s, 2 req/s, burstiness (CV of gaps) 0.00" in out.stdout
    assert "input tokens mean 1400, p50 1400, p90 1720, p99 1792" in out.stdout
    assert "prefix reuse ceiling 44.4% of 512-token blocks" in out.stdout
    data = json.loads(_msopt("validate", "-c", str(path), "--json").stdout)
    assert data["workload"]["requests"] == 9 and data["workload"]["prefix_ceiling"] == pytest.approx(8 / 18)
    bad = _msopt("validate", "-c", str(cfg(tmp_path, '[workload]\ntrace = "absent.csv"\n', "bad.toml")))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no such file" in bad.stderr


def test_a_benchmarks_own_keys_keep_their_precedence(tmp_path):
    # docs/configuration.md [workload]: [workload] sets what your section does not; a key of your own section
    # [workload] does not set stays (a rate capped by a concurrency); a load (a capacity probe) overrides both
    from msopt.benchmarks import get_benchmark
    from msopt.evaluate.workload import benchmark_table
    from msopt.launch.render import Candidate, LaunchSpec

    text = ("[workload]\nrequest_rate = 4.0\nnum_prompts = 50\n"
            "[vllm_benchmark.command]\nmax_concurrency = 3\nrandom_input_len = 77\nnum_prompts = 50\n")
    s = load_settings(cfg(tmp_path, text))
    assert "request_rate" not in s.section("vllm_benchmark")["command"]    # not copied
    server = LaunchSpec(engine="vllm", argv=("x",), port=9000, served_model_name="m")
    bench = get_benchmark("vllm_benchmark")

    def argv(settings, load):
        config, resolved = split(settings)
        got, _ = bench.render(Candidate({}, (), benchmark_table(config, resolved)), server=server, num_prompts=None,
                              load=load, result_dir=tmp_path / "r")
        return got

    a = argv(s, {})
    assert a[a.index("--num-prompts") + 1] == "50" and a[a.index("--max-concurrency") + 1] == "3"
    assert a[a.index("--request-rate") + 1] == "4.0" and a[a.index("--random-input-len") + 1] == "77"
    probe = argv(s, {"request_rate": 9.0})
    assert probe[probe.index("--request-rate") + 1] == "9.0"
    again = load_settings(cfg(tmp_path, s.to_toml(), "saved.toml"))    # a run's config.toml: the same command
    assert argv(again, {}) == a
