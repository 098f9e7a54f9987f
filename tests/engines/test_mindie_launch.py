"""MindIE as it starts: every port of a trial its own, where it listens, how long it stops, where it is installed.

Checked against MindIE-LLM 8b4871a (http_server.cpp:400-443, server_config.cpp:298-305 and 618-636,
llm_daemon.cpp:41-45 and 149-210, mindie_llm/server/main.py) and against ``msopt sim-serve --mindie``,
a stand-in that binds every port of its config.json and refuses a busy one with MindIE's message.
"""

from __future__ import annotations

import json
import stat
import sys
import urllib.request
from pathlib import Path

import pytest

from msopt.engines import get_engine
from msopt.engines import mindie as mindie_mod
from msopt.engines.mindie import adapter as mindie_adapter
from msopt.engines.mindie.install import find_install
from msopt.errors import ConfigError, EvaluationError
from msopt.evaluate.health import HealthCheck
from msopt.launch.ports import free_port
from msopt.launch.process import launched
from msopt.launch.render import Candidate, TrialNode
from msopt.space.fields import parse_field
from tests.support.shared_data import MINDIE_SHIPPED, shared

TEMPLATE = Path(mindie_mod.__file__).with_name("config.json")
STAND_IN = [sys.executable, "-m", "msopt.cli.serve", "--mindie", "--time-scale", "0.001"]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def server_config(spec) -> dict:
    return next(d for d in spec.files.values() if isinstance(d, dict) and "ServerConfig" in d)["ServerConfig"]


def section_for(tmp_path: Path) -> dict:
    """A config.json with fixed management/metrics ports free on this machine, private copies per trial."""
    doc = json.loads(TEMPLATE.read_text())
    doc["ServerConfig"].update(managementPort=free_port(), metricsPort=free_port())
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(doc))
    return {"config_path": str(conf), "config_env": "MIES_CONFIG_JSON_PATH", "wait_start_time": 60,
            "command": {"executable": STAND_IN}}


def test_a_trial_serves_business_management_and_metrics_on_its_own_port() -> None:
    spec = get_engine("mindie").render(Candidate({}, [], {"config_path": str(shared(MINDIE_SHIPPED))}), port=40111)
    server = server_config(spec)
    # single-port mode (http_server.cpp:411-414): one HTTP server, nothing fixed left to collide
    assert server["port"] == server["managementPort"] == server["metricsPort"] == 40111
    assert server["managementIpAddress"] == server["ipAddress"] == spec.host == "127.0.0.1"
    assert json.loads(shared(MINDIE_SHIPPED).read_text())["ServerConfig"]["managementIpAddress"] == "127.0.0.2"  # moved


def test_port_equal_to_multi_nodes_infer_port_moves_that_one_aside() -> None:
    # config_manager_impl.cpp:312-315 refuses port == multiNodesInferPort (1120 in the shipped file)
    spec = get_engine("mindie").render(Candidate({}, [], {"config_path": str(shared(MINDIE_SHIPPED))}), port=1120)
    doc = next(iter(spec.files.values()))
    assert doc["ServerConfig"]["port"] == 1120 and doc["BackendConfig"]["multiNodesInferPort"] != 1120


@pytest.mark.slow
def test_two_trials_on_one_node_run_side_by_side_and_the_old_rendering_collides(tmp_path, monkeypatch) -> None:
    engine = get_engine("mindie")
    section = section_for(tmp_path)

    def render(name: str):
        (tmp_path / name).mkdir(exist_ok=True)
        return engine.render(Candidate({}, [], section), port=free_port(), workdir=tmp_path / name)

    a, b = render("a"), render("b")
    assert a.env["MIES_CONFIG_JSON_PATH"] != b.env["MIES_CONFIG_JSON_PATH"]  # private copies
    with launched(a, tmp_path / "a.log", cwd=tmp_path / "a") as pa, \
            launched(b, tmp_path / "b.log", cwd=tmp_path / "b") as pb:
        for spec in (a, b):
            with OPENER.open(f"{spec.base_url}/v1/models", timeout=10) as r:
                assert r.status == 200 and json.load(r)["data"][0]["id"] == "qwen3-8b"
        assert pa.running and pb.running
    assert "business+management+metrics on" in (tmp_path / "a.log").read_text()

    # The rendering before single-port mode: only ServerConfig.port per trial, the fixed
    # managementPort and metricsPort shared, so the second trial refuses to start.
    monkeypatch.setattr(mindie_adapter, "single_port", lambda doc, port: None)
    old_a, old_b = render("c"), render("d")
    assert server_config(old_a)["managementPort"] == server_config(old_b)["managementPort"]
    with launched(old_a, tmp_path / "c.log", cwd=tmp_path / "c"):
        with pytest.raises(EvaluationError, match="exited with status 1"):
            with launched(old_b, tmp_path / "d.log", cwd=tmp_path / "d"):
                pass
    log = (tmp_path / "d.log").read_text()
    assert "Management or Business or Metrics Http server listen port is occupied" in log
    verdict = HealthCheck.default().check_file(tmp_path / "d.log")
    assert (verdict.kind, verdict.error_type) == ("retryable", "port")  # a clash, not a bad configuration


def test_multi_node_trial_listens_and_is_polled_on_the_nodes_address(tmp_path) -> None:
    nodes = (TrialNode(0, "10.0.0.1", tuple("0123")), TrialNode(1, "10.0.0.2", tuple("0123")))
    specs = get_engine("mindie").render_nodes(Candidate({}, [], {"config_path": str(shared(MINDIE_SHIPPED))}), port=40200, nodes=nodes,
                                              rendezvous_port=40201, workdir=tmp_path, leader_ports=[40202])
    for node, spec in zip(nodes, specs, strict=True):
        server = server_config(spec)
        # MIES_CONTAINER_IP overrides ipAddress (server_config.cpp:618-625): poll where it listens
        assert spec.host == spec.env["MIES_CONTAINER_IP"] == node.address
        assert spec.env["MIES_CONTAINER_MANAGEMENT_IP"] == node.address == server["managementIpAddress"]
        assert server["ipAddress"] == node.address
        assert spec.base_url == f"http://{node.address}:40200"
        backend = next(iter(spec.files.values()))["BackendConfig"]
        assert backend["multiNodesInferPort"] == 40202 and spec.env["MASTER_PORT"] == "40201"
    assert get_engine("mindie").leader_ports == 1


def test_stop_grace_outlasts_the_daemons_own_shutdown() -> None:
    # llm_daemon.cpp: 5 s for the endpoint (EP_STOP_WAIT_TIME) + 15 s for the children (SUB_PROCESS_WAIT_TIME)
    engine = get_engine("mindie")
    assert engine.stop_grace > 5 + 15
    spec = engine.render(Candidate({}, [], {}), port=40300)
    assert spec.stop_grace == engine.stop_grace
    assert get_engine("vllm").stop_grace == 10.0


@pytest.mark.slow
@pytest.mark.parametrize("grace", [0.0, 30.0])
def test_the_launch_is_stopped_with_its_specs_grace(tmp_path, grace) -> None:
    # A server that needs a second after SIGTERM to finish (as MindIE's daemon needs 20 s): it finishes
    # only when the grace the LaunchSpec carries lets it.
    from dataclasses import replace

    marker = tmp_path / "finished"
    port = free_port()
    code = ("import http.server, signal, sys, time\n"
            "def term(*_):\n    time.sleep(1)\n    open(sys.argv[2], 'w').write('x')\n    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)"
            ".serve_forever()\n")
    spec = replace(get_engine("mindie").render(Candidate({}, [], {}), port=port), argv=(sys.executable, "-c", code, str(port),
                                                                            str(marker)),
                   files={}, health_path="/", stop_grace=grace)
    with launched(spec, tmp_path / "s.log", cwd=tmp_path):
        pass
    assert marker.exists() == (grace > 0)


def test_npu_usage_threshold_is_read_under_health_check_config() -> None:
    engine = get_engine("mindie")
    good = parse_field({"name": "t", "config_position": "ServerConfig.HealthCheckConfig.npuUsageThreshold",
                                   "dtype": "int", "min": 0, "max": 100}, source="t.toml", section="mindie", index=0)
    engine.check([good], {"config_path": str(shared(MINDIE_SHIPPED))})
    spec = engine.render(Candidate({"t": 80}, [good], {"config_path": str(shared(MINDIE_SHIPPED))}), port=40400)
    assert server_config(spec)["HealthCheckConfig"]["npuUsageThreshold"] == 80
    bad = parse_field({"name": "t", "config_position": "ServerConfig.npuUsageThreshold", "dtype": "int",
                                  "min": 0, "max": 100}, source="t.toml", section="mindie", index=0)
    with pytest.raises(ConfigError, match=r"ServerConfig\.HealthCheckConfig\.npuUsageThreshold"):
        engine.check([bad], {"config_path": str(shared(MINDIE_SHIPPED))})


def test_dmi_infer_mode_is_refused(tmp_path) -> None:
    doc = json.loads(shared(MINDIE_SHIPPED).read_text())
    doc["ServerConfig"]["inferMode"] = "dmi"
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="inferMode is \"dmi\""):
        get_engine("mindie").check([], {"config_path": str(conf)})


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_install_takes_the_run_package_then_the_pip_wrapper(tmp_path) -> None:
    run_pkg = tmp_path / "mindie-service"
    daemon = _executable(run_pkg / "bin" / "mindieservice_daemon")
    wrapper = _executable(tmp_path / "venv" / "bin" / "mindie_llm_server")
    pkg = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "mindie_llm"
    (pkg / "conf").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    path = str(wrapper.parent)
    both = find_install({"MIES_INSTALL_PATH": str(run_pkg), "PATH": path})
    assert both is not None and (both.layout, both.executable) == ("mindie-service", str(daemon))
    assert both.config == str(run_pkg / "conf" / "config.json")
    pip = find_install({"MIES_INSTALL_PATH": str(tmp_path / "none"), "PATH": path})
    assert pip is not None and (pip.layout, pip.executable) == ("pip", str(wrapper))
    assert pip.config == str(pkg / "conf" / "config.json")
    assert find_install({"MIES_INSTALL_PATH": str(tmp_path / "none"), "PATH": str(tmp_path / "empty")}) is None


def test_find_install_asks_the_wrappers_python_where_the_package_is(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "elsewhere" / "mindie_llm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    wrapper = _executable(tmp_path / "bin" / "mindie_llm_server", f"#!{sys.executable}\n")
    env = {"MIES_INSTALL_PATH": str(tmp_path / "none"), "PATH": str(wrapper.parent)}
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))  # the wrapper's Python finds the package there
    found = find_install(env)
    assert found is not None and found.layout == "pip" and found.config is None  # not beside the wrapper
    probed = find_install(env, probe=True)
    assert probed is not None and probed.config == str(pkg / "conf" / "config.json")
    home = find_install({**env, "MINDIE_LLM_HOME_PATH": str(pkg)})  # what the wrapper itself exports
    assert home is not None and home.config == str(pkg / "conf" / "config.json")


def test_the_launch_uses_the_installation_found(tmp_path, monkeypatch) -> None:
    run_pkg = tmp_path / "mindie-service"
    daemon = _executable(run_pkg / "bin" / "mindieservice_daemon")
    monkeypatch.setenv("MIES_INSTALL_PATH", str(run_pkg))
    assert get_engine("mindie").render(Candidate({}, [], {}), port=40500).argv == (str(daemon),)
    given = {"command": {"executable": ["/opt/x/mindieservice_daemon"]}}
    assert get_engine("mindie").render(Candidate({}, [], given), port=40500).argv == ("/opt/x/mindieservice_daemon",)
    monkeypatch.setenv("MIES_INSTALL_PATH", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert get_engine("mindie").render(Candidate({}, [], {}), port=40500).argv == ("mindieservice_daemon",)


def test_the_shipped_examples_trials_share_nothing_on_a_node(tmp_path) -> None:
    # configs/mindie_real.toml says trials may share a node: their config copies and ports must all differ
    from msopt.config import load_settings, thaw
    from msopt.space import SearchSpace

    settings = load_settings(Path(__file__).parents[2] / "configs" / "mindie_real.toml")
    section = thaw(settings.section("mindie"))
    section["config_path"] = str(shared(MINDIE_SHIPPED))  # the installed path is not on this machine
    space = SearchSpace.from_settings(settings)
    values = dict(space.decode(space.default_position()).values)
    specs = []
    for name, port in (("a", 40601), ("b", 40602)):
        (tmp_path / name).mkdir()
        specs.append(get_engine("mindie").render(Candidate(values, settings.fields, section), port=port,
                                                 devices=list("01234567"), workdir=tmp_path / name))
    a, b = specs
    assert set(a.files).isdisjoint(b.files) and str(shared(MINDIE_SHIPPED)) not in a.files
    ports = [{server_config(s)[k] for k in ("port", "managementPort", "metricsPort")} for s in specs]
    assert ports == [{40601}, {40602}]


def test_the_real_runner_gives_a_multi_node_mindie_leader_its_own_ports(tmp_path, monkeypatch) -> None:
    from msopt.config import load_settings
    from msopt.engines.mindie import MindieAdapter
    from msopt.evaluate.real import RealRunner
    from msopt.evaluate.results import EvalRequest
    from msopt.evaluate.runner import RunnerContext
    from msopt.space import SearchSpace

    conf = tmp_path / "m.toml"
    conf.write_text(f'engine = "mindie"\nbenchmark = "builtin"\n[cluster]\naccelerator = "none"\n'
                    f'[mindie]\nconfig_path = "{shared(MINDIE_SHIPPED)}"\n')
    seen: dict = {}
    original = MindieAdapter.render_nodes

    def spy(self, *args, **kwargs):
        seen.update(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MindieAdapter, "render_nodes", spy)
    nodes = (TrialNode(0, "127.0.0.1", tuple("0123")), TrialNode(1, "127.0.0.2", tuple("0123")))
    settings = load_settings(conf)
    space = SearchSpace.from_settings(settings)
    values = dict(space.decode(space.default_position()).values)
    runner = RealRunner(settings.config, get_engine("mindie"), RunnerContext(run_dir=tmp_path, nodes=nodes))
    with pytest.raises(EvaluationError, match="needs the Ray pool"):  # rendered, then stopped: no launcher here
        runner.measure(values, EvalRequest(0, "baseline", None, 0, ()), 1)
    ports = [seen["port"], seen["rendezvous_port"], *seen["leader_ports"]]
    assert len(seen["leader_ports"]) == 1 and all(1024 < p < 65536 for p in ports)


@pytest.mark.slow  # a whole run, with Ray, through the MindIE stand-in
def test_optimize_runs_mindie_trials_side_by_side_through_the_stand_in(tmp_path) -> None:
    from tests.support.procs import recorded, started, survivors
    from tests.support.sim_serve_run import run_optimize, sim_serve_config

    pids = tmp_path / "pids"
    (tmp_path / "Qwen3-8B").mkdir()
    section = section_for(tmp_path)
    original = Path(section["config_path"]).read_text()
    fields = """[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 50
max = 64
dtype = "int"
value = 56
"""  # at least the template's maxPrefillBatchSize 50, or MindIE refuses (schedule_config.cpp:284-286)
    text = sim_serve_config(recorded([*STAND_IN[:-1], "0.01", "--startup-delay", "0.5"], pids), tmp_path / "Qwen3-8B",
                            engine="mindie", served="qwen3-8b", fields=fields, n_particles=4,
                            cluster="max_concurrent_trials = 2\n",
                            section=f'config_path = "{section["config_path"]}"\nconfig_env = "MIES_CONFIG_JSON_PATH"\n')
    done = run_optimize(tmp_path, text)
    run, lines = done.run_dir, done.journal
    launched_ = [r for r in lines if not r["reused"]]
    assert len(launched_) >= 3 and all(r["error"] is None for r in launched_)
    logs = [p.read_text() for p in (run / "logs").glob("eval-*-server-*.log")]
    assert logs and all("business+management+metrics on http://127.0.0.1:" in text for text in logs)
    assert Path(section["config_path"]).read_text() == original  # trials read private copies
    assert started(pids) and survivors(pids) == []
