"""Configuration layering, -c resolution and one-line errors (the seed's -c rows)."""

from __future__ import annotations

import os

import pytest

from msopt.config import ENV_CONFIG, dump_toml, load_settings, read_toml
from msopt.errors import ConfigError

USER = """
n_particles = 20
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4]
"""


def test_absolute_path(write_toml):  # UT-config-绝对路径
    path = write_toml(USER)
    s = load_settings(str(path), environ={})
    assert s.config_path == str(path) and s.sources[-1] == str(path)


def test_bare_file_name_in_cwd(write_toml, tmp_path):  # UT-config-仅文件名
    write_toml(USER, "cfg.toml")
    s = load_settings("cfg.toml", environ={}, cwd=tmp_path)
    assert s.config_path == str(tmp_path / "cfg.toml")


def test_relative_path_with_directory(write_toml, tmp_path):
    (tmp_path / "sub").mkdir()
    write_toml(USER, "sub/c.toml")
    assert load_settings("sub/c.toml", environ={}, cwd=tmp_path).config.run.n_particles == 20


def test_missing_file():  # UT-config-文件不存在
    with pytest.raises(ConfigError, match="/nonexistent/path.toml: config file not found"):
        load_settings("/nonexistent/path.toml", environ={})


def test_invalid_toml_has_line_and_column(write_toml):  # UT-config-非法TOML
    path = write_toml("n_particles = 20\niters = = 3\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(str(path), environ={})
    assert "line 2" in str(exc.value) and "column" in str(exc.value) and str(path) in str(exc.value)


def test_override_n_particles(write_toml):  # UT-config-优先级覆盖
    assert load_settings(str(write_toml(USER)), environ={}).config.run.n_particles == 20


def test_inherit_iters(write_toml):  # UT-config-未覆盖字段继承
    s = load_settings(str(write_toml(USER)), environ={})
    assert s.config.run.iters == load_settings(environ={}).config.run.iters == 5
    assert s.section("pso_options")["c1"] == 1.5  # tables merge key by key


def test_permission_denied(write_toml, tmp_path):  # ABN-config-权限不足
    path = write_toml(USER)
    path.chmod(0)
    tmp_path.chmod(0o755)
    try:
        if os.geteuid() == 0:
            os.seteuid(65534)  # root reads anything: check as an ordinary user
            try:
                with pytest.raises(ConfigError, match="Permission denied"):
                    read_toml(path)
            finally:
                os.seteuid(0)
        else:
            with pytest.raises(ConfigError, match="Permission denied"):
                load_settings(str(path), environ={})
    finally:
        path.chmod(0o644)


def test_directory_given(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_settings(str(tmp_path), environ={})


def test_not_utf8(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_bytes(b"n_particles = 3\n# \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings(str(p), environ={})


def test_unknown_top_level_key_lists_close_matches(write_toml):
    with pytest.raises(ConfigError, match="unknown top-level key 'n_particle'; did you mean 'n_particles'"):
        load_settings(str(write_toml("n_particle = 3\n")), environ={})


def test_env_layer_below_c(write_toml):
    env_file = write_toml("n_particles = 7\niters = 9\n", "env.toml")
    user = write_toml("n_particles = 11\n", "user.toml")
    s = load_settings(str(user), environ={ENV_CONFIG: str(env_file)})
    assert (s.config.run.n_particles, s.config.run.iters) == (11, 9)
    assert s.sources[1:] == (str(env_file), str(user))
    assert s.where("iters") == str(env_file) and s.where("n_particles") == str(user)


def test_target_field_array_replaced_whole(write_toml):
    s = load_settings(str(write_toml(USER)), environ={})
    assert [f.name for f in s.fields] == ["tp"]
    assert s.fields[0].where.startswith(str(write_toml(USER)))


def test_engine_selection(write_toml):
    assert load_settings(environ={}).engine == "vllm"
    assert load_settings(environ={}, engine="mindie").engine == "mindie"
    path = write_toml('engine = "mindie"\n')
    assert load_settings(str(path), environ={}).engine == "mindie"
    with pytest.raises(ConfigError, match="engine 'nope' has no \\[nope\\] section"):
        load_settings(environ={}, engine="nope")


@pytest.mark.parametrize("text, needle", [
    ("n_particles = 0\n", "'n_particles' must be an integer"),
    ("n_particles = 'ten'\n", "'n_particles' must be"),
    ("ttft_slo = -1\n", "'ttft_slo' must be a positive"),
    ("ttft_slo = nan\n", "'ttft_slo'"),
    ("mode = 'fast'\n", "'mode' must be"),
    ("pso_options = 3\n", "'pso_options' must be a table"),
    ("[vllm]\ntarget_field = 3\n", "must be an array of tables"),
    ("[[vllm.target_field]]\nname = 'x'\nmin = 3\nmax = 1\ndtype = 'int'\n", "min (3) > max (1)"),
])
def test_bad_values_name_file_and_key(write_toml, text, needle):
    path = write_toml(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(str(path), environ={})
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_original_tool_file_loads_unchanged(write_toml):
    original = """
n_particles = 10
iters = 5
ttft_penalty = 1
tpot_penalty = 0
success_rate_penalty = 5.0
ttft_slo = 1
tpot_slo = 0.05
service = "master"
sample_size = 1000
[data_storage]
pso_top_k = 0
[mindie]
[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 10
max = 1000
dtype = "int"
[[mindie.target_field]]
name = "max_prefill_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxPrefillBatchSize"
min = 0.1
max = 0.7
dtype = "ratio"
dtype_param = "max_batch_size"
[[mindie.target_field]]
name = "REQUESTRATE"
config_position = "env"
min = 1
max = 1001
dtype = "float"
value = 100
[ais_bench.command]
models = "models"
datasets = "datasets"
mode = "perf"
num_prompts = 3000
[vllm_benchmark.command]
host = "127.0.0.1"
port = "port"
num_prompts = 3000
others = ""
[vllm]
[vllm.command]
host = "127.0.0.1"
others = ""
[[vllm.target_field]]
name = "MAX_NUM_SEQS"
config_position = "env"
min = 32
max = 512
dtype = "int"
value = 64
[kubectl]
kubectl_default_path = ""
"""
    s = load_settings(str(write_toml(original)), environ={}, engine="mindie")
    assert [f.name for f in s.fields] == ["max_batch_size", "max_prefill_batch_size", "REQUESTRATE"]


def test_settings_immutable_and_effective_toml_round_trips(write_toml, tmp_path):
    s = load_settings(str(write_toml(USER)), environ={})
    with pytest.raises(TypeError):
        s.data["n_particles"] = 3  # type: ignore[index]
    with pytest.raises(Exception):
        s.engine = "x"  # type: ignore[misc]
    again = tmp_path / "effective.toml"
    again.write_text(s.to_toml())
    s2 = load_settings(str(again), environ={})
    assert s2.data == s.data and s2.fields == tuple(
        type(f)(**{**f.__dict__, "where": f.where.replace(s.config_path, str(again))}) for f in s.fields)


def test_dump_toml_escapes():
    import tomllib

    data = {"a": 'x"y\n\\z', "t": {"u": [1, 2.5, True], "v": {"w": "$(id)"}}, "arr": [{"k": 1}, {"k": 2}]}
    assert tomllib.loads(dump_toml(data)) == data


def test_no_global_settings_state(write_toml):
    a = load_settings(str(write_toml(USER)), environ={})
    b = load_settings(environ={})
    assert a.config.run.n_particles == 20 and b.config.run.n_particles == 10


def test_replace_refuses_an_unknown_top_level_key():
    """Settings.replace (the command line's flags, msopt.optimize's keywords) names a mistyped key and its close
    match, as a file's unknown key is named, instead of taking it as a new table."""
    s = load_settings(None, "vllm", environ={})
    assert s.replace(iters=2).get("iters") == 2
    with pytest.raises(ConfigError, match=r"<command line>: unknown top-level key 'itters'; did you mean 'iters'\?"):
        s.replace(itters=2)
