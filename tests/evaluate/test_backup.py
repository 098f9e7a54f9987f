"""``msopt optimize --backup`` (``backup = true``): every attempt's launch and the originals of files
edited in place are kept in the run directory (msopt/evaluate/backup.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.errors import EvaluationError
from msopt.evaluate.backup import write_backup
from msopt.evaluate.real import RealRunner
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.runner import RunnerContext
from msopt.launch.files import BACKUP_SUFFIX
from msopt.launch.render import LaunchSpec

TEMPLATE = Path(__file__).parents[2] / "msopt" / "engines" / "mindie" / "config.json"

MINDIE = """
engine = "mindie"
benchmark = "builtin"
{backup}
[cluster]
accelerator = "none"
[mindie]
config_path = "{conf}"
config_env = false  # edited in place: the original is what the backup keeps
wait_start_time = 30
[mindie.command]
executable = {exe}
[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 10
max = 400
dtype = "int"
value = 200
"""


def _mindie(tmp_path: Path, backup: bool) -> tuple[RealRunner, Path, Path]:
    conf = tmp_path / "conf" / "config.json"
    conf.parent.mkdir()
    shutil.copy(TEMPLATE, conf)
    cfg = tmp_path / "c.toml"
    exe = json.dumps([sys.executable, "-c", "import sys; sys.exit(3)"])  # a server that never gets ready
    cfg.write_text(MINDIE.format(backup="backup = true" if backup else "", conf=conf, exe=exe), encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    settings = load_settings(str(cfg), environ={})
    return RealRunner(settings.config, get_engine("mindie"), RunnerContext(run_dir=run)), run, conf


def test_a_real_attempt_records_its_launch_and_the_original(tmp_path):
    runner, run, conf = _mindie(tmp_path, backup=True)
    pristine = conf.read_bytes()
    with pytest.raises(EvaluationError, match="exited with status 3"):
        runner.measure({"max_batch_size": 123}, EvalRequest(7, "search", 0, 0, (123.0,)), 1)
    assert conf.read_bytes() == pristine  # msopt restored its edit, as always
    attempt = run / "backup" / "eval-00007-a1"
    record = json.loads((attempt / "launch.json").read_text())
    (launch,) = record["launches"]
    assert record["eval_id"] == 7 and record["attempt"] == 1
    assert launch["role"] == "server" and launch["engine"] == "mindie" and launch["argv"][0] == sys.executable
    assert launch["files"] == {str(conf): "server-config.json"}
    edited = json.loads((attempt / "server-config.json").read_text())
    assert edited["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 123
    assert edited["ServerConfig"]["port"] == launch["port"]
    original = run / "backup" / "originals" / socket.gethostname() / str(conf.resolve()).lstrip(os.sep)
    assert original.read_bytes() == pristine


def test_without_backup_nothing_is_recorded(tmp_path):
    runner, run, _ = _mindie(tmp_path, backup=False)
    with pytest.raises(EvaluationError):
        runner.measure({"max_batch_size": 50}, EvalRequest(0, "baseline", None, 0, (50.0,)), 1)
    assert not (run / "backup").exists() and (run / "logs").is_dir()


def test_the_original_kept_is_the_pristine_file_while_another_trial_has_it_edited(tmp_path):
    conf = tmp_path / "config.json"
    conf.write_text('{"edited": true}\n')
    (tmp_path / ("config.json" + BACKUP_SUFFIX)).write_text('{"pristine": true}\n')
    run = tmp_path / "run"
    spec = LaunchSpec(engine="mindie", argv=("mindieservice_daemon",), env={"A": "1"},
                      files={str(conf): {"mine": 1}}, port=1025)
    write_backup(run, EvalRequest(3, "search", 1, 0, ()), 2, [("server", spec)])
    kept = run / "backup" / "originals" / socket.gethostname() / str(conf.resolve()).lstrip(os.sep)
    assert kept.read_text() == '{"pristine": true}\n'
    assert json.loads((run / "backup" / "eval-00003-a2" / "server-config.json").read_text()) == {"mine": 1}
    # once per run: a later attempt never replaces the original kept
    (tmp_path / ("config.json" + BACKUP_SUFFIX)).unlink()
    write_backup(run, EvalRequest(4, "search", 1, 1, ()), 1, [("server", spec)])
    assert kept.read_text() == '{"pristine": true}\n'


def test_files_inside_the_run_directory_are_not_taken_for_originals(tmp_path):
    run = tmp_path / "run"
    private = run / "work" / "eval-00001-a1-x" / "config.json"  # [mindie] config_env: a private copy
    private.parent.mkdir(parents=True)
    private.write_text("{}")
    spec = LaunchSpec(engine="mindie", argv=("x",), files={str(private): {"k": 2}})
    write_backup(run, EvalRequest(1, "search", 0, 0, ()), 1, [("server", spec)])
    assert not (run / "backup" / "originals").exists()
    assert json.loads((run / "backup" / "eval-00001-a1" / "server-config.json").read_text()) == {"k": 2}


SIM = """
n_particles = 2
iters = 1
[data_storage]
pso_top_k = 0
[search]
prior = "none"
[capacity]
enabled = false
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 16
max = 256
dtype = "int"
value = 64
"""


@pytest.mark.slow  # a whole (simulated, in-process) run through the CLI
def test_optimize_backup_flag_records_every_launched_evaluation(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SIM, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME", "PATH")}
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--simulate", "--backup",
                          "--no-ray", "--plain", "-o", str(tmp_path / "runs")], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    launched = [r for r in lines if not r["reused"]]
    assert launched
    for rec in launched:
        (launch,) = json.loads((run / "backup" / f"eval-{rec['eval_id']:05d}-a1" / "launch.json").read_text())[
            "launches"]
        argv = launch["argv"]
        assert argv[argv.index("--max-num-seqs") + 1] == str(rec["values"]["max_num_seqs"])
    assert "backup = true" in (run / "config.toml").read_text()  # --resume keeps it


def test_a_backup_that_cannot_be_written_fails_the_evaluation_in_one_line(tmp_path):
    runner, run, conf = _mindie(tmp_path, backup=True)
    (run / "backup").write_text("a file where the directory belongs")
    pristine = conf.read_bytes()
    with pytest.raises(EvaluationError) as exc:
        runner.measure({"max_batch_size": 60}, EvalRequest(2, "search", 0, 0, (60.0,)), 1)
    assert str(exc.value).startswith(f"backup = true: cannot write the launch record into {run / 'backup'}: ")
    assert "\n" not in str(exc.value) and conf.read_bytes() == pristine
    assert not list((run / "logs").glob("*"))  # nothing was launched


def test_resume_takes_backup_from_the_run_not_the_flag():
    from msopt.cli.main import build_parser
    from msopt.cli.optimize import _load
    from msopt.errors import ConfigError

    args = build_parser().parse_args(["optimize", "--resume", "/nonexistent/run", "--backup"])
    with pytest.raises(ConfigError, match="drop --backup"):
        _load(args)
