"""The original tool's own config.toml (../shared/original/, cited in its README.md) and its
spellings: what each becomes in msopt, and the one line for what msopt does not support."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.engines.mindie.original import MINDIE_PD_UNSUPPORTED
from msopt.errors import ConfigError
from msopt.evaluate.health import HealthCheck
from msopt.launch.render import Candidate
from msopt.run.validate import load
from tests.support.shared_data import ORIGINAL_CONFIG, shared


def original() -> Path:
    """The original's shipped config.toml in ../shared/original/ (the test skips where it is absent)."""
    return shared(ORIGINAL_CONFIG)


def msopt(*args: str) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME", "PATH")}
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_file_is_the_original_unchanged():
    text = original().read_text(encoding="utf-8")
    # its own spellings, as shipped: the tables msopt maps and the original's field names
    assert "[health_check.service_errors.fatal_patterns]" in text
    assert "[health_check.benchmark_errors.retryable_patterns]" in text
    assert 'name = "max_queue_deloy_mircroseconds"' in text
    assert "9582f434" in (ORIGINAL_CONFIG.parent / "README.md").read_text()


@pytest.mark.parametrize("engine", ["mindie", "vllm"])
def test_validate_accepts_it_for_both_engines(engine):
    out = msopt("validate", "-c", str(original()), "-e", engine, "--json")
    assert out.returncode == 0, out.stderr
    dims = [d["name"] for d in json.loads(out.stdout)["dimensions"]]
    if engine == "mindie":
        assert dims == ["max_batch_size", "max_prefill_batch_size", "prefill_time_ms_per_req",
                        "decode_time_ms_per_req", "support_select_batch", "max_queue_deloy_mircroseconds",
                        "max_preempt_count", "CONCURRENCY", "REQUESTRATE"]
    else:
        assert dims == ["MAX_NUM_BATCHED_TOKENS", "MAX_NUM_SEQS", "CONCURRENCY", "REQUESTRATE"]


def test_validate_says_what_it_read_in_the_original_spelling():
    out = msopt("validate", "-c", str(original()), "-e", "vllm")
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stdout.splitlines() if line.startswith("original tool: ")]
    assert len(notes) == 3  # its REQUESTRATE (1-1000) is searched: no "can only be 0" note
    assert "[health_check.*_errors.*_patterns] (the original tool's spelling) read as" in notes[0]
    assert notes[1].endswith("'MAX_NUM_BATCHED_TOKENS' (config_position = \"env\") rendered as "
                             "--max-num-batched-tokens, as the original tool's vLLM command did")
    assert "'MAX_NUM_SEQS'" in notes[2]
    plain = msopt("validate", "-c", str(Path(__file__).parents[2] / "configs" / "quickstart.toml"))
    assert plain.returncode == 0 and "original tool" not in plain.stdout


@pytest.mark.parametrize("engine,bench", [("mindie", "ais_bench"), ("vllm", "vllm_benchmark")])
def test_it_loads_with_the_benchmark_each_engine_used(engine, bench):
    checked = load(str(original()), engine, environ={}, overrides={"benchmark": bench})
    assert checked.config.engine.name == engine and checked.benchmark is not None


def test_health_check_tables_map_onto_msopts():
    s = load_settings(str(original()), "mindie", environ={})
    table = s.section("health_check")
    assert "service_errors" not in table and "benchmark_errors" not in table
    assert table["log_snippet_length"] == 200
    # the original's error types (empty lists there) join msopt's packaged ones, which stay on
    assert tuple(table["service"]["fatal"]["out_of_memory"]) == () and "oom" in table["service"]["fatal"]
    assert tuple(table["service"]["retryable"]["io_error"]) == () and "port" in table["service"]["retryable"]
    assert "device_error" in table["benchmark"]["fatal"] and "network_error" in table["benchmark"]["retryable"]
    HealthCheck.from_config(s.config.health_check, s.engine)


ORIGINAL_PATTERNS = """
[health_check]
log_snippet_length = 50
[health_check.service_errors.fatal_patterns]
device_error = ["NPU error", "device fault"]
[health_check.service_errors.retryable_patterns]
network_error = ["connection reset"]
[health_check.benchmark_errors.fatal_patterns]
out_of_memory = ["OOM killed"]
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 1
max = 8
dtype = "int"
"""


def test_patterns_in_the_original_spelling_classify_logs(write_toml):
    s = load_settings(str(write_toml(ORIGINAL_PATTERNS)), environ={})
    hc = HealthCheck.from_config(s.config.health_check, s.engine)
    assert hc.log_snippet_length == 50
    fatal = hc.check(["INFO start", "ERROR: NPU error on device 3"], "service")
    assert (fatal.kind, fatal.error_type) == ("fatal", "device_error")
    retry = hc.check(["ConnectionResetError: Connection reset by peer"], "service")
    assert retry.kind == "retryable"  # "connection reset" (the original's) and msopt's own both match
    assert hc.check(["worker OOM killed"], "benchmark").error_type == "out_of_memory"
    assert hc.check(["all good"], "benchmark").ok


@pytest.mark.parametrize("text,needle", [
    ("[health_check.service_errors]\nfatal = ['x']\n", "'health_check.service_errors.fatal' is not a table of the "
                                                       "original's health check; use fatal_patterns or "
                                                       "retryable_patterns"),
    ("[health_check]\nservice_errors = 3\n", "'health_check.service_errors' must be a table"),
    ("[health_check.service_errors]\nfatal_patterns = ['x']\n",
     "'health_check.service_errors.fatal_patterns' must be a table of error_type = [patterns]"),
    ("[health_check.service_errors.fatal_patterns]\noom = ['a']\n[health_check.service.fatal]\noom = ['b']\n",
     "error type 'oom' is in both [health_check.service_errors.fatal_patterns] and [health_check.service.fatal]"),
    ("[health_check.benchmark_errors.retryable_patterns]\nio_error = 'x'\n",
     "'health_check.benchmark.retryable.io_error' must be a list of non-empty strings"),
])
def test_bad_original_health_tables_are_one_line(write_toml, text, needle):
    path = write_toml(text)
    with pytest.raises(ConfigError) as exc:
        load(str(path), "vllm", environ={})
    msg = str(exc.value)
    assert needle in msg and str(path) in msg and "\n" not in msg


def test_vllm_env_fields_render_as_the_flags_the_original_passed():
    s = load_settings(str(original()), "vllm", environ={})
    positions = {f.name: f.config_position for f in s.fields}
    assert positions == {"MAX_NUM_BATCHED_TOKENS": "--max-num-batched-tokens", "MAX_NUM_SEQS": "--max-num-seqs",
                         "CONCURRENCY": "env", "REQUESTRATE": "env"}
    values = {"MAX_NUM_BATCHED_TOKENS": 16384, "MAX_NUM_SEQS": 128, "CONCURRENCY": 50, "REQUESTRATE": 0.0}
    spec = get_engine("vllm").render(Candidate(values, s.fields, s.section("vllm")), port=9000)
    argv = list(spec.argv)
    assert argv[argv.index("--max-num-seqs") + 1] == "128"
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "16384"
    assert "MAX_NUM_SEQS" not in spec.env and spec.env["CONCURRENCY"] == "50"
    # REQUESTRATE 0: no --request-rate, as the original dropped it (custom_process.py); concurrency from its field
    bench, _ = get_benchmark("vllm_benchmark").render(Candidate(values, s.fields, s.section("vllm_benchmark")), server=spec,
                                                      num_prompts=10, load={}, result_dir=Path("/tmp/r"))
    assert "--request-rate" not in bench and bench[bench.index("--max-concurrency") + 1] == "50"


def test_a_referenced_env_field_stays_where_the_user_put_it(write_toml):
    path = write_toml("""
[vllm.command]
others = "--max-num-seqs $MAX_NUM_SEQS"
[[vllm.target_field]]
name = "MAX_NUM_SEQS"
config_position = "env"
min = 32
max = 512
dtype = "int"
value = 64
""")
    s = load_settings(str(path), "vllm", environ={})
    assert [f.config_position for f in s.fields] == ["env"]
    argv = list(get_engine("vllm").render(Candidate({"MAX_NUM_SEQS": 96}, s.fields, s.section("vllm")), port=9000).argv)
    assert argv.count("--max-num-seqs") == 1 and argv[argv.index("--max-num-seqs") + 1] == "96"


def test_a_simulated_evaluation_of_the_vllm_section_runs():
    out = msopt("simulate", "-c", str(original()), "-e", "vllm", "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    result = json.loads(out.stdout)  # REQUESTRATE 0 (its constant there) ran unpaced, not refused
    assert result["error"] is None and result["generate_speed"] > 0


def test_top_level_wait_start_time_goes_to_the_engine(write_toml):
    base = original().read_text(encoding="utf-8")
    s = load_settings(str(write_toml("wait_start_time = 1800\n" + base)), "mindie", environ={})
    assert s.section("mindie")["wait_start_time"] == 1800 and "wait_start_time" not in s.data
    s2 = load_settings(str(write_toml("wait_start_time = 1800\n[vllm]\nwait_start_time = 60\n")), "vllm", environ={})
    assert s2.section("vllm")["wait_start_time"] == 60
    with pytest.raises(ConfigError, match="'wait_start_time' must be a positive number of seconds"):
        load_settings(str(write_toml("wait_start_time = -1\n")), "vllm", environ={})


@pytest.mark.parametrize("text,needle", [
    ("ftol = 0.001\n", "'ftol' is a key of the original tool with no msopt equivalent"),
    ("theory_guided_enable = true\n", "'theory_guided_enable' is a key of the original tool"),
    ("[latency_model]\nbase_path = 'x'\n", "'latency_model' is a key of the original tool"),
    ("[ais_bench]\nbest_concurrency_coefficient = 3\n", "[ais_bench] 'best_concurrency_coefficient' is a key of "
                                                        "the original tool with no msopt equivalent"),
    ("[ais_bench.performance_config.time_to_first_token]\nmetric = 'TTFT'\nalgorithm = 'p90'\n",
     "[ais_bench] 'performance_config' is a key of the original tool"),
])
def test_original_keys_without_an_equivalent_are_one_line(write_toml, text, needle):
    path = write_toml(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(str(path), environ={})
    assert needle in str(exc.value) and str(path) in str(exc.value) and "docs/migrating.md" in str(exc.value)


def test_performance_config_asking_for_the_mean_is_accepted(write_toml):
    path = write_toml("[vllm_benchmark.performance_config.time_to_first_token]\nmetric = 'TTFT'\n"
                      "algorithm = 'average'\n[vllm_benchmark.performance_config.time_per_output_token]\n"
                      "metric = 'TPOT'\nalgorithm = 'average'\n")
    assert load_settings(str(path), environ={}).section("vllm_benchmark")["performance_config"]


PD_FIELDS = """
[[mindie.target_field]]
name = "default_p_rate"
config_position = "default_p_rate"
min = 1
max = 3
dtype = "int"
value = 1
[[mindie.target_field]]
name = "default_d_rate"
config_position = "default_d_rate"
min = 1
max = 3
dtype = "share"
dtype_param = "default_p_rate"
"""


def test_mindie_pd_ratio_fields_get_one_line_exit_2(tmp_path):
    # the fields exactly as the original's docs/en/serviceparam_optimizer_instruct.md tells users to add them
    cfg = tmp_path / "config.toml"
    cfg.write_text(original().read_text(encoding="utf-8") + PD_FIELDS, encoding="utf-8")
    out = msopt("validate", "-c", str(cfg), "-e", "mindie")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line == (f"msopt: error: {cfg}: [mindie.target_field] 'default_p_rate': config_position 'default_p_rate' "
                    "is a MindIE PD ratio of the original tool (MindIE-MS ms_controller.json), which msopt writes from "
                    "[mindie.pd] prefill_instances and decode_instances: set config_position = \"none\" and name the "
                    f"field there; {MINDIE_PD_UNSUPPORTED}")
    assert "configs/mindie_pd_atlas_a2.toml" in line and "docs/engines.md" in line
    # the same file searched for vLLM never reads [mindie]
    assert msopt("validate", "-c", str(cfg), "-e", "vllm").returncode == 0


def test_kubectl_path_gets_the_pd_line(write_toml):
    base = original().read_text(encoding="utf-8").replace('kubectl_default_path = ""',
                                                        'kubectl_default_path = "/opt/k8s/deploy"')
    with pytest.raises(ConfigError) as exc:
        load(str(write_toml(base)), "mindie", environ={})
    assert "[kubectl] kubectl_default_path '/opt/k8s/deploy'" in str(exc.value)
    assert str(exc.value).endswith(MINDIE_PD_UNSUPPORTED)


@pytest.mark.parametrize("flags,needle", [
    (["-lb"], "-lb/--load_breakpoint: msopt continues a named run: msopt optimize --resume RUN_DIR"),
    (["--load_breakpoint"], "--resume RUN_DIR"),
    (["-d", "multiple"], "-d/--deploy_policy multiple: msopt needs no master/slave processes"),
    (["--pd", "disaggregation"], f"--pd disaggregation: {MINDIE_PD_UNSUPPORTED}"),
])
def test_the_original_flags_msopt_does_otherwise_are_one_line(flags, needle):
    out = msopt("optimizer", "-c", str(original()), "-e", "mindie", "--simulate", "--no-ray", *flags)
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert needle in line


def test_the_original_flags_that_are_msopts_behaviour_are_accepted():
    from msopt.cli.main import build_parser

    args = build_parser().parse_args(["optimizer", "-c", str(original()), "-d", "single", "--pd", "competition",
                                      "--benchmark_policy", "ais_bench"])
    assert args.benchmark == "ais_bench" and args.deploy_policy == "single" and args.pd == "competition"
    from msopt.cli.optimize import _load

    checked, store = _load(args)
    assert store is None and checked.config.run.benchmark == "ais_bench"


#: Every flag of the original's ``msserviceprofiler optimizer`` and ``train`` (optimizer/optimizer.py and
#: train/source_to_train.py ``arg_parse``, msserviceprofiler@9582f434).
ORIGINAL_FLAGS = ("-lb", "--load_breakpoint", "-d", "--deploy_policy", "--backup", "--pd", "-b", "--benchmark_policy",
                  "-e", "--engine", "-c", "--config", "-i", "-o", "-t")
#: The top-level fields of the original's ``Settings`` (config/config.py) and of its tables.
ORIGINAL_SETTINGS = ("output", "simulator_output", "pso_options", "pso_strategy", "particles_time_out",
                     "wait_start_time", "n_particles", "iters", "ftol", "ftol_iter", "ttft_penalty", "tpot_penalty",
                     "success_rate_penalty", "ttft_slo", "tpot_slo", "success_rate_slo", "slo_coefficient",
                     "generate_speed_target", "sample_size", "mem_coefficient", "max_fine_tune",
                     "scaling_coefficient", "step_size", "theory_guided_enable", "service", "communication",
                     "latency_model", "vllm", "mindie", "kubectl", "ais_bench", "vllm_benchmark", "data_storage",
                     "health_check", "store_dir", "config_path", "config_bak_path", "process_name", "work_path",
                     "best_concurrency_coefficient", "best_concurrency_threshold", "performance_config",
                     "host_ip", "host_port", "max_out_len", "output_path", "result_dir", "serving", "dataset_path",
                     "work_dir", "kubectl_single_path", "config_single_pd_path", "delete_path")


def _keys(table, prefix=""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _keys(value, f"{prefix}{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for entry in value:
                yield from _keys(entry, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_migrating_md_takes_every_key_and_flag_of_the_original():
    from msopt.config import read_toml

    doc = (Path(__file__).parents[2] / "docs" / "migrating.md").read_text(encoding="utf-8")

    def absent(words):
        return sorted(w for w in words if not re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", doc))

    keys = {k.split(".")[-1] for k in _keys(read_toml(original()))}
    assert len(keys) > 30 and absent(keys) == []
    assert absent(ORIGINAL_FLAGS) == [] and absent(ORIGINAL_SETTINGS) == []


def test_a_requestrate_of_zero_is_read_as_unpaced_with_a_note(write_toml):
    # the original's earlier shipped file had REQUESTRATE min = max = value = 0 in [vllm]
    path = write_toml('engine = "vllm"\n[[vllm.target_field]]\nname = "MAX_NUM_SEQS"\nconfig_position = "env"\n'
                      'min = 8\nmax = 64\ndtype = "int"\n[[vllm.target_field]]\nname = "REQUESTRATE"\n'
                      'config_position = "env"\nmin = 0\nmax = 0\ndtype = "int"\nvalue = 0\n')
    notes = load_settings(path).notes
    assert any("REQUESTRATE can only be 0: no request rate (unpaced)" in n for n in notes)


def test_one_file_means_one_engine_whatever_the_command(tmp_path, capsys):
    """Issue 51 item 11: without -e and an `engine` key, validate, preflight, optimize and optimizer read the
    original's file (it declares the search spaces of both engines) as the original did: MindIE with AISBench
    (optimizer.py arg_parse); a file that declares one engine's search space means that engine."""
    from msopt.cli.main import build_parser
    from msopt.cli.optimize import _engine_and_benchmark

    checked = load(str(original()), None, environ={})  # what validate and preflight load
    assert (checked.config.engine.name, checked.config.run.benchmark) == ("mindie", "ais_bench")
    for command in ("optimize", "optimizer"):
        args = build_parser().parse_args([command, "-c", str(original())])
        overrides: dict = {}
        engine, lines = _engine_and_benchmark(args, overrides)
        assert (engine, overrides["benchmark"]) == ("mindie", "ais_bench")
        assert lines[0].startswith(f"engine: mindie ({original()} declares the search spaces of ")
    # -e vllm still chooses vLLM, with msopt's benchmark default
    checked = load(str(original()), "vllm", environ={})
    assert (checked.config.engine.name, checked.config.run.benchmark) == ("vllm", "vllm_benchmark")
    sglang = tmp_path / "s.toml"
    sglang.write_text('[[sglang.target_field]]\nname = "max_running_requests"\nconfig_position = '
                      '"--max-running-requests"\nmin = 8\nmax = 64\ndtype = "int"\n')
    assert load(str(sglang), None, environ={}).config.engine.name == "sglang"
    assert msopt("validate", "-c", str(original())).stdout.splitlines()[1].startswith("engine: mindie;")
