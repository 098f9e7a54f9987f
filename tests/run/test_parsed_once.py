"""Each section an evaluator reads is parsed once per run (msopt/run/validate.py ``Validated.parsed``) and the
parsed object handed to the prior and to every evaluator, as Ray Tune hands each trial its built config: the
simulator setup, the health check and the resolved workload (a trace's window, read once)."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from msopt.evaluate.health import HealthCheck
from msopt.evaluate.simulated import SimulatorSetup
from msopt.evaluate.workload import replay_lines
from msopt.report.outputs import write_outputs
from msopt.report.workload import WORKLOAD_PNG
from msopt.run.pool import InProcessPool
from msopt.run.session import RunSession, Threads
from msopt.run.validate import load
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.trace import Trace
from tests.run.test_session import small_quickstart
from tests.support.fields_toml import TP_PP_DP


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often ``SimulatorSetup.from_config``, ``HealthCheck.from_config`` and ``ResolvedWorkload.resolve``
    ran (each still builds)."""
    calls: Counter[str] = Counter()
    for cls, name in ((SimulatorSetup, "from_config"), (HealthCheck, "from_config"), (ResolvedWorkload, "resolve")):
        original = cls.__dict__[name].__func__

        def counted(klass: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            calls[klass.__name__] += 1
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, name, classmethod(counted))
    return calls


ONCE = {"SimulatorSetup": 1, "HealthCheck": 1, "ResolvedWorkload": 1}


def test_a_simulated_run_parses_simulator_and_health_check_once(tmp_path: Path, builds: Counter[str]) -> None:
    checked = load(str(small_quickstart(tmp_path)), None,
                   overrides={"n_particles": 2, "iters": 1, "output": str(tmp_path / "out")})
    assert builds == ONCE  # by split and validate
    result = RunSession(checked, pools=Threads(2), say=lambda _line: None).run()  # the prior, two evaluators
    assert result.outcome is not None and result.outcome.evaluations > 2
    assert any(r["predicted"] for r in _rows(result.run_dir))  # the prior ran, on the same setup
    assert builds == ONCE


def test_a_run_on_a_trace_resolves_its_workload_once_and_pickles_it(tmp_path: Path, builds: Counter[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    passes: Counter[str] = Counter()  # whole reads of each trace file (Trace.requests: one pass over its rows)
    original = Trace.requests

    def counted(self: Trace, *args: Any, **kwargs: Any) -> Any:
        passes[str(self.path)] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trace, "requests", counted)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.5},{100 + i},{20 + i}\n"
                                                                        for i in range(40)))
    cfg = small_quickstart(tmp_path)
    cfg.write_text(cfg.read_text() + f'\n[workload]\ntrace = "{trace}"\n')
    checked = load(str(cfg), None, overrides={"n_particles": 2, "iters": 1, "output": str(tmp_path / "out")})
    assert builds == ONCE
    resolved = checked.parsed.workload
    assert resolved is checked.resolved and resolved is not None and resolved.window is not None
    assert len(resolved.window.requests) == 40 and resolved.summary is checked.trace
    assert pickle.loads(pickle.dumps(checked.parsed)) == checked.parsed  # what a Ray actor receives
    # the prior, two evaluators, the replay's first lines and the report: the one window, never the file again
    assert replay_lines(checked.config, checked.resolved)
    result = RunSession(checked, pools=Threads(2), say=lambda _line: None, outputs=[write_outputs]).run()
    assert result.outcome is not None and result.outcome.evaluations > 2
    assert (result.run_dir / WORKLOAD_PNG).is_file()  # the report drew the trace's panel
    assert builds == ONCE
    assert passes == {str(trace): 1}


def test_real_evaluators_take_the_health_check_validate_built(tmp_path: Path, write_toml: Any,
                                                              builds: Counter[str]) -> None:
    checked = load(str(write_toml("simulate = false\n" + TP_PP_DP)), None, environ={})
    assert checked.simulator is None and builds == {"HealthCheck": 1, "ResolvedWorkload": 1}
    pool = InProcessPool(checked.config, size=3, run_dir=str(tmp_path), parsed=checked.parsed)
    try:
        assert all(e.runner.health is checked.health for e in pool._evaluators)  # type: ignore[attr-defined]
    finally:
        pool.close()
    assert builds == {"HealthCheck": 1, "ResolvedWorkload": 1}
    assert pickle.loads(pickle.dumps(checked.parsed)) == checked.parsed  # what a Ray actor receives


def test_an_evaluator_without_the_parsed_sections_parses_its_own(tmp_path: Path, builds: Counter[str]) -> None:
    checked = load(str(small_quickstart(tmp_path)), None, overrides={"output": str(tmp_path / "out")})
    pool = InProcessPool(checked.config, size=2, run_dir=str(tmp_path))
    pool.close()
    # validate's, then each evaluator's own
    assert builds == {"SimulatorSetup": 1 + 2, "HealthCheck": 1, "ResolvedWorkload": 1 + 2}


def test_capacity_and_swarm_options_are_parsed_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[capacity] and [pso_options] are read by validate once; the driver takes what it built (Validated)."""
    import msopt.run.driver as driver
    import msopt.run.validate as validate

    calls: Counter[str] = Counter()
    for module in (driver, validate):
        for name in ("capacity_options", "swarm_options"):
            original = getattr(module, name)

            def counted(config: Any, *args: Any, _original: Any = original, _name: str = name) -> Any:
                calls[_name] += 1
                return _original(config, *args)

            monkeypatch.setattr(module, name, counted)
    checked = load(str(small_quickstart(tmp_path)), None,
                   overrides={"n_particles": 2, "iters": 1, "output": str(tmp_path / "out")})
    assert calls == {"capacity_options": 1, "swarm_options": 1}
    result = RunSession(checked, pools=Threads(2), say=lambda _line: None).run()
    assert result.outcome is not None and result.outcome.evaluations > 2
    assert calls == {"capacity_options": 1, "swarm_options": 1}


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def test_a_simulated_run_reads_the_hardware_toml_with_its_setup_only(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The node size a simulated trial is placed by comes from the setup's hardware, loaded once with it: the
    evaluators, the screen and the prior read no hardware TOML of their own for it."""
    import msopt.evaluate.simulated as simulated

    loads: Counter[str] = Counter()
    original = simulated.load_hardware

    def counted(*args: Any, **kwargs: Any) -> Any:
        loads["hardware"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(simulated, "load_hardware", counted)
    checked = load(str(small_quickstart(tmp_path)), None,
                   overrides={"n_particles": 2, "iters": 1, "output": str(tmp_path / "out")})
    assert loads["hardware"] == 1  # validate's check of [simulator] hardware
    result = RunSession(checked, pools=Threads(2), say=lambda _line: None).run()  # the prior, two evaluators
    assert result.outcome is not None and result.outcome.evaluations > 2
    assert loads["hardware"] == 2  # and once more, kept with the setup every part of the run shares
