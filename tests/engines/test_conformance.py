"""Conformance: what msopt renders agrees with what the engines accept.

The flag tables (msopt/engines/vllm/flags/vllm-<version>.txt for vLLM 0.33.0 and 0.23.0, which msopt
also reads at load time and in preflight, and tests/data/engines/sglang_flags.txt) were read from the
wheels by scripts/generators/engine_flags.py; MindIE's shipped config.json
(../shared/original/mindie_config.json, beside the repository) is MindIE-LLM's src/server/conf/config.json. Each
file's header says where it comes from and how to refresh it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.config import load_settings, thaw
from msopt.engines import get_engine
from msopt.engines.vllm.adapter import is_vllm_serve
from msopt.errors import ConfigError
from msopt.launch.render import Candidate, flag_name
from msopt.space import DecodeContext, SearchSpace
from msopt.space.fields import parse_field
from tests.support.shared_data import MINDIE_SHIPPED, shared

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data" / "engines"
CONFIGS = ROOT / "configs"


def table_path(engine: str, version: str = "0.33.0") -> Path:
    return ROOT / "msopt" / "engines" / "vllm" / "flags" / f"vllm-{version}.txt" if engine == "vllm" \
        else DATA / f"{engine}_flags.txt"


def flag_table(engine: str, version: str = "0.33.0") -> dict[str, bool]:
    """flag -> negatable, from the table's non-comment lines."""
    out = {}
    for line in table_path(engine, version).read_text().splitlines():
        if line and not line.startswith("#"):
            name, *rest = line.split()
            out[name] = rest == ["negatable"]
    return out


def test_flag_tables_say_where_they_come_from() -> None:
    for engine, version in (("vllm", "0.33.0"), ("vllm", "0.23.0"), ("sglang", "0.5.23")):
        head = table_path(engine, version).read_text().splitlines()[:3]
        assert head[0].startswith(f"# {engine} {version}:") and "scripts/generators/engine_flags.py" in head[1]
        table = flag_table(engine, version)
        assert "--host" in table and "--port" in table and "--served-model-name" in table


def accepted(engine: str, flag: str) -> bool:
    table = flag_table(engine)
    if flag in table:
        return True
    return flag.startswith("--no-") and table.get("--" + flag[5:], False)


def test_the_tables_catch_what_the_engines_refuse() -> None:
    assert not accepted("vllm", "--disable-log-requests")  # gone in vLLM 0.33
    assert accepted("vllm", "--no-enable-chunked-prefill") and not accepted("vllm", "--no-max-num-seqs")
    assert not accepted("sglang", "--no-enable-mixed-chunk")  # store_true only


def rendered(name: str, tmp_path: Path, n: int = 6):
    settings = load_settings(CONFIGS / f"{name}.toml")
    section = thaw(settings.section(settings.engine))
    section.pop("config_path", None)
    engine = get_engine(settings.engine)
    space = SearchSpace.from_settings(settings)
    low, high = space.bounds
    rng = __import__("numpy").random.default_rng(1)
    for i in range(n):
        decoded = space.decode(rng.uniform(low, high), DecodeContext(i, n, 0))
        yield settings, engine.render(Candidate(decoded.values, settings.fields, section), port=9000,
                                      devices=[str(d) for d in range(8)], workdir=tmp_path)


@pytest.mark.parametrize("name", ["vllm_real", "sglang_real", "quickstart"])
def test_every_rendered_flag_is_one_the_engine_accepts(name: str, tmp_path: Path) -> None:
    for settings, spec in rendered(name, tmp_path):
        exe_len = len(settings.section(settings.engine)["command"]["executable"])
        flags = [f for f in map(flag_name, spec.argv[exe_len:]) if f is not None]
        assert flags, spec.argv
        bad = [f for f in flags if not accepted(settings.engine, f)]
        assert not bad, f"{name}: {bad} are not {settings.engine} flags"
        assert len(flags) == len(set(flags)), f"{name}: a flag is rendered twice: {spec.argv}"


def test_shipped_configs_set_no_obsolete_environment() -> None:
    for path in CONFIGS.glob("*.toml"):
        assert "VLLM_USE_V1" not in path.read_text(), path


# -- item 3: the model of every vLLM entry point ----------------------------------------------
@pytest.mark.parametrize(("exe", "model_args"), [
    (["vllm", "serve"], ["/m/Q"]),
    (["/opt/venv/bin/vllm", "serve"], ["/m/Q"]),
    (["numactl", "--cpunodebind=0", "vllm", "serve"], ["/m/Q"]),
    (["python", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "/m/Q"]),
    (["python", "-m", "msopt.cli", "sim-serve"], ["--model", "/m/Q"]),
])
def test_vllm_model_argument_for_each_entry_point(exe: list[str], model_args: list[str]) -> None:
    spec = get_engine("vllm").render(Candidate({}, [], {"command": {"executable": exe, "model": "/m/Q"}}), port=1)
    assert list(spec.argv[len(exe):len(exe) + len(model_args)]) == model_args
    assert is_vllm_serve(exe) == (model_args == ["/m/Q"])


# -- item 9: a flag given twice ----------------------------------------------------------------
def field(name: str, position: str) -> object:
    return parse_field({"name": name, "config_position": position, "dtype": "int", "min": 1, "max": 8},
                       source="t.toml", section="vllm", index=0)


@pytest.mark.parametrize(("engine", "others", "fields", "match"), [
    ("vllm", "--max-num-seqs 8", [("mns", "--max-num-seqs")], "repeats --max-num-seqs.*field 'mns'"),
    ("vllm", "--max-num-seqs=8", [("mns", "--max-num-seqs")], "repeats --max-num-seqs"),
    ("vllm", "-tp 2", [("tp", "--tensor-parallel-size")], "repeats -tp.*field 'tp'"),
    ("vllm", "--no-enable-chunked-prefill", [("c", "--enable-chunked-prefill")], "repeats --no-enable"),
    ("vllm", "--port 9", [], r"repeats --port.*own"),
    ("vllm", "--model /x", [], r"repeats --model.*\[vllm.command\] model"),
    ("sglang", "--tensor-parallel-size 2", [("tp", "--tp-size")], "repeats --tensor-parallel-size"),
    ("sglang", "--model /x", [], "repeats --model"),
    ("vllm", "", [("a", "--max-num-seqs"), ("b", "--max-num-seqs")], "already rendered from field 'a'"),
])
def test_flags_given_twice_are_refused(engine: str, others: str, fields: list, match: str) -> None:
    decls = [field(n, p) for n, p in fields]
    with pytest.raises(ConfigError, match=match):
        get_engine(engine).check(decls, {"command": {"others": others}})


def test_benchmark_others_may_not_override_the_load() -> None:
    bench = get_benchmark("vllm_benchmark")
    with pytest.raises(ConfigError, match="repeats --max-concurrency.*capacity"):
        bench.check([], {"command": {"others": "--max-concurrency 320"}})
    with pytest.raises(ConfigError, match="repeats --random-input-len.*random_input_len"):
        bench.check([], {"command": {"random_input_len": 8, "others": "--random-input-len 9"}})
    bench.check([], {"command": {"others": "--random-input-len 9 --ignore-eos"}})
    with pytest.raises(ConfigError, match="repeats --work-dir"):
        get_benchmark("ais_bench").check([], {"command": {"others": "--work-dir /tmp/x"}})


def msopt_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize(("body", "match"), [
    ('engine = "vllm"\n[vllm_benchmark.command]\nothers = "--max-concurrency 3"\n',
     "c.toml: .*repeats --max-concurrency"),
    ('engine = "vllm"\n[[vllm.target_field]]\nname = "x"\n'
     'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 1\nmax = 8\ndtype = "int"\n',
     "c.toml.*'x'.*not usable with vllm"),
    ('engine = "mindie"\n[[mindie.target_field]]\nname = "x"\n'
     'config_position = "BackendConfig.Nope.maxBatchSize"\nmin = 1\nmax = 8\ndtype = "int"\n',
     "c.toml.*'x'.*has no key 'Nope'"),
    ('engine = "mindie"\n[[mindie.target_field]]\nname = "x"\n'
     'config_position = "BackendConfig.ScheduleConfig.maxBatchsize"\nmin = 1\nmax = 8\ndtype = "int"\n',
     "c.toml.*'x'.*maxBatchsize.*did you mean 'maxBatchSize'"),
])
def test_msopt_validate_runs_the_adapters_checks(body: str, match: str, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(body)
    out = msopt_cli("validate", "-c", "c.toml", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert __import__("re").search(match, out.stderr), out.stderr


# -- MindIE: the shipped config.json, edited ---------------------------------------------------


def mindie_section(tmp_path: Path) -> tuple[object, dict]:
    """configs/mindie_real.toml with config_path at a copy of MindIE's shipped config.json."""
    conf = tmp_path / "conf" / "config.json"
    conf.parent.mkdir(exist_ok=True)
    conf.write_bytes(shared(MINDIE_SHIPPED).read_bytes())
    text = (CONFIGS / "mindie_real.toml").read_text()
    text = __import__("re").sub(r'(?m)^config_path = .*$', f"config_path = {str(conf)!r}", text)
    (tmp_path / "mindie.toml").write_text(text)
    settings = load_settings(tmp_path / "mindie.toml")
    return settings, thaw(settings.section("mindie"))


def assert_mindie_accepts(doc: dict) -> None:
    """What MindIE checks at start-up (backend_config.cpp, param_checker.cpp, mapping.py)."""
    from msopt.engines.mindie.config_doc import KNOWN_KEYS, key_type

    backend = doc["BackendConfig"]
    model = backend["ModelDeployConfig"]["ModelConfig"][0]
    assert doc["ServerConfig"]["httpsEnabled"] is False
    assert len(backend["npuDeviceIds"]) == backend["modelInstanceNumber"]
    assert all(len(ids) == model["worldSize"] for ids in backend["npuDeviceIds"])
    for prefix in KNOWN_KEYS:
        node = doc
        for key in prefix:
            node = node[0] if key == "*" else node[key]
        for key, value in node.items():
            kind = key_type((*prefix, key))
            if kind in ("uint32_t", "int32_t"):
                assert isinstance(value, int) and not isinstance(value, bool), (prefix, key, value)
            if kind == "uint32_t":
                assert value >= 0
            if kind == "bool":
                assert isinstance(value, bool), (prefix, key, value)


def test_mindie_launches_and_exports_a_consistent_config(tmp_path: Path) -> None:
    from msopt.engines.rules import check_rules
    from msopt.errors import RefusedError
    from msopt.report.export import export_best

    settings, section = mindie_section(tmp_path)
    engine = get_engine("mindie")
    engine.check(settings.fields, section)
    space = SearchSpace.from_settings(settings)
    low, high = space.bounds
    rng = __import__("numpy").random.default_rng(3)
    launched = refused = 0
    for i in range(24):
        decoded = space.decode(rng.uniform(low, high), DecodeContext(i, 24, 0))
        spec = engine.render(Candidate(decoded.values, settings.fields, section), port=9000,
                             devices=[str(d) for d in range(8)], workdir=tmp_path)
        (doc,) = spec.files.values()
        assert_mindie_accepts(doc)
        try:
            check_rules(spec, decoded.values, section, rules=engine.startup_rules, environ={})
            launched += 1
        except RefusedError:
            refused += 1
        bare = engine.render(Candidate(decoded.values, settings.fields, section), port=1025)  # the export's render
        assert_mindie_accepts(next(iter(bare.files.values())))
    assert launched and not refused  # the shipped search keeps to MindIE's layouts
    best = space.decode([(lo + hi) / 2 for lo, hi in zip(low, high, strict=True)]).values
    export_best(settings.config, best, tmp_path)
    exported = __import__("json").loads((tmp_path / "best_config.json").read_text())
    assert_mindie_accepts(exported)


def test_mindie_layout_rules_on_the_shipped_file(tmp_path: Path) -> None:
    from msopt.engines.rules import check_rules
    from msopt.errors import RefusedError

    _, section = mindie_section(tmp_path)
    fields = [parse_field({"name": n, "config_position": f"BackendConfig.ModelDeployConfig.ModelConfig.0.{n}",
                           "dtype": "int", "min": 1, "max": 8}, source="t.toml", section="mindie", index=0)
              for n in ("tp", "dp", "pp")]
    engine = get_engine("mindie")
    spec = engine.render(Candidate({"tp": 1, "dp": 4, "pp": 2}, fields, section), port=1, devices=list("01234567"))
    with pytest.raises(RefusedError, match="data parallel and pipeline parallel"):
        check_rules(spec, {}, section, rules=engine.startup_rules, environ={"MASTER_IP": "1.2.3.4", "MASTER_PORT": "1"})
    spec = engine.render(Candidate({"tp": 4, "dp": 1, "pp": 2}, fields, section), port=1, devices=list("01234567"))
    with pytest.raises(RefusedError, match="Please export MASTER_IP"):
        check_rules(spec, {}, section, rules=engine.startup_rules, environ={})
    check_rules(spec, {}, section, rules=engine.startup_rules, environ={"MASTER_IP": "1.2.3.4", "MASTER_PORT": "1"})


def test_mindie_integers_where_mindie_wants_them(tmp_path: Path) -> None:
    _, section = mindie_section(tmp_path)

    def f(dtype: str, **kw: object) -> object:
        return parse_field({"name": "mbs", "config_position": "BackendConfig.ScheduleConfig.maxBatchSize",
                            "dtype": dtype, "min": 1, "max": 8, **kw}, source="t.toml", section="mindie", index=0)

    engine = get_engine("mindie")
    with pytest.raises(ConfigError, match="'mbs'.*integer \\(uint32_t\\).*dtype 'float'"):
        engine.check([f("float")], section)
    with pytest.raises(ConfigError, match="integer"):
        engine.check([f("enum", dtype_param=[1, 2.5])], section)
    engine.check([f("int")], section)
    spec = engine.render(Candidate({"mbs": 64.0}, [f("int")], section), port=1)
    value = next(iter(spec.files.values()))["BackendConfig"]["ScheduleConfig"]["maxBatchSize"]
    assert value == 64 and isinstance(value, int)
    with pytest.raises(ConfigError, match="integer"):
        engine.render(Candidate({"mbs": 64.5}, [f("int")], section), port=1)


def test_msopt_validate_says_what_happens_to_https(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(f'engine = "mindie"\n[mindie]\nconfig_path = "{shared(MINDIE_SHIPPED)}"\n')
    out = msopt_cli("validate", "-c", "c.toml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "ServerConfig.httpsEnabled: true in" in out.stdout and "sets it to false" in out.stdout
    spec = get_engine("mindie").render(Candidate({}, [], {"config_path": str(MINDIE_SHIPPED)}), port=5)
    assert next(iter(spec.files.values()))["ServerConfig"]["httpsEnabled"] is False
    assert __import__("json").loads(MINDIE_SHIPPED.read_text())["ServerConfig"]["httpsEnabled"] is True
