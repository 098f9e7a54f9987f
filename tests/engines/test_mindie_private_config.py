"""Issue 36 item 3: every MindIE trial reads its own config.json by default; editing one file in place
is refused where two trials could share a node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import msopt.engines.mindie as mindie_mod
from msopt.config import load_settings, split
from msopt.engines import get_engine
from msopt.errors import ConfigError
from msopt.launch.render import Candidate
from msopt.run.validate import validate

TEMPLATE = Path(mindie_mod.__file__).with_name("config.json")  # msopt's built-in template


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf" / "config.json"
    conf.parent.mkdir()
    conf.write_bytes(TEMPLATE.read_bytes())
    return conf


def test_two_trials_on_one_node_read_their_own_copies(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    section = {"config_path": str(conf)}
    specs = []
    for devices in (("0", "1", "2", "3"), ("4", "5", "6", "7")):
        work = tmp_path / f"work{devices[0]}"
        specs.append(get_engine("mindie").render(Candidate({}, [], section), port=2000 + int(devices[0]), devices=devices,
                                                 workdir=work))
    targets = [next(iter(s.files)) for s in specs]
    assert targets == [str(tmp_path / "work0" / "config.json"), str(tmp_path / "work4" / "config.json")]
    assert [s.env["MIES_CONFIG_JSON_PATH"] for s in specs] == targets
    assert [s.files[t]["ServerConfig"]["port"] for s, t in zip(specs, targets)] == [2000, 2004]
    assert json.loads(conf.read_text()) == json.loads(TEMPLATE.read_text())  # nothing renders into the original


def test_config_env_false_edits_in_place(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    spec = get_engine("mindie").render(Candidate({}, [], {"config_path": str(conf), "config_env": False}), port=2000,
                                       devices=("0",), workdir=tmp_path / "w")
    assert list(spec.files) == [str(conf)] and "MIES_CONFIG_JSON_PATH" not in spec.env


def _toml(tmp_path: Path, cluster: str, mindie: str = "config_env = false\n") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'engine = "mindie"\nbenchmark = "builtin"\n[cluster]\naccelerator = "NPU"\n{cluster}'
                    f'[mindie]\n{mindie}[[mindie.target_field]]\nname = "mbs"\n'
                    'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\n'
                    'dtype = "int"\n')
    return path


@pytest.mark.parametrize("cluster", ["devices_per_trial = 4\ndevices_per_node = 8\n", "devices_per_trial = 4\n"])
def test_in_place_with_room_for_two_trials_per_node_is_refused(tmp_path: Path, cluster: str) -> None:
    path = _toml(tmp_path, cluster)
    with pytest.raises(ConfigError) as err:
        validate(*split(load_settings(path)))
    text = str(err.value)
    assert text.startswith(str(path)) and "config_env = false" in text and "max_concurrent_trials = 1" in text
    assert "\n" not in text


@pytest.mark.parametrize(("cluster", "mindie"), [
    ("devices_per_trial = 8\ndevices_per_node = 8\n", "config_env = false\n"),   # one trial per node
    ("devices_per_trial = 4\nmax_concurrent_trials = 1\n", "config_env = false\n"),
    ("devices_per_trial = 4\n", ""),                                             # private copies
])
def test_in_place_is_fine_where_trials_cannot_share_a_node(tmp_path: Path, cluster: str, mindie: str) -> None:
    validate(*split(load_settings(_toml(tmp_path, cluster, mindie))))


def test_config_env_must_name_a_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'config_env' must be an environment variable name"):
        validate(*split(load_settings(_toml(tmp_path, "devices_per_trial = 4\n", 'config_env = "A B"\n'))))


def test_without_config_path_the_installed_config_json_is_read(tmp_path, monkeypatch):
    """Issue 51 item 12: the original and optix found config.json from $MIES_INSTALL_PATH when config_path was not
    given (Ascend/msmodeling optix/config/config.py:921-941, _get_mindie_config_paths: its parent's
    mindie_llm/conf/config.json); the run package keeps it in $MIES_INSTALL_PATH/conf (msopt/engines/mindie/install.py)."""
    import json

    from msopt.engines.mindie.config_doc import load_config

    root = tmp_path / "latest" / "mindie-service"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "mindieservice_daemon").write_text("#!/bin/sh\n")
    (root / "conf").mkdir()
    (root / "conf" / "config.json").write_text(json.dumps({"BackendConfig": {"ScheduleConfig": {"maxBatchSize": 123}}}))
    monkeypatch.setenv("MIES_INSTALL_PATH", str(root))
    doc, path = load_config({})
    assert path == str(root / "conf" / "config.json") and doc["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 123
    # the pip layout's wheel directory beside the install path (no daemon under it)
    wheel = tmp_path / "pip"
    (wheel / "mindie_llm" / "conf").mkdir(parents=True)
    (wheel / "mindie_llm" / "conf" / "config.json").write_text(json.dumps({"x": 1}))
    monkeypatch.setenv("MIES_INSTALL_PATH", str(wheel / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    doc, path = load_config({})
    assert path == str(wheel / "mindie_llm" / "conf" / "config.json") and doc == {"x": 1}
    monkeypatch.setenv("MIES_INSTALL_PATH", str(tmp_path / "none"))
    assert load_config({})[1] is None  # nothing installed: the built-in template
