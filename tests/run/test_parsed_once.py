"""Each section an evaluator reads is parsed once per run (msopt/run/validate.py ``Validated.parsed``) and the
parsed object handed to the prior and to every evaluator, as Ray Tune hands each trial its built config."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from msopt.evaluate.health import HealthCheck
from msopt.evaluate.simulated import SimulatorSetup
from msopt.run.pool import InProcessPool
from msopt.run.session import RunSession, Threads
from msopt.run.validate import load
from tests.run.test_session import small_quickstart
from tests.support.fields_toml import TP_PP_DP


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often ``SimulatorSetup.from_config`` and ``HealthCheck.from_config`` ran (each still builds)."""
    calls: Counter[str] = Counter()
    for cls in (SimulatorSetup, HealthCheck):
        original = cls.__dict__["from_config"].__func__

        def counted(klass: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            calls[klass.__name__] += 1
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_config", classmethod(counted))
    return calls


def test_a_simulated_run_parses_simulator_and_health_check_once(tmp_path: Path, builds: Counter[str]) -> None:
    checked = load(str(small_quickstart(tmp_path)), None,
                   overrides={"n_particles": 2, "iters": 1, "output": str(tmp_path / "out")})
    assert builds == {"SimulatorSetup": 1, "HealthCheck": 1}  # by validate
    result = RunSession(checked, pools=Threads(2), say=lambda _line: None).run()  # the prior, two evaluators
    assert result.outcome is not None and result.outcome.evaluations > 2
    assert any(r["predicted"] for r in _rows(result.run_dir))  # the prior ran, on the same setup
    assert builds == {"SimulatorSetup": 1, "HealthCheck": 1}


def test_real_evaluators_take_the_health_check_validate_built(tmp_path: Path, write_toml: Any,
                                                              builds: Counter[str]) -> None:
    checked = load(str(write_toml("simulate = false\n" + TP_PP_DP)), None, environ={})
    assert checked.simulator is None and builds == {"HealthCheck": 1}
    pool = InProcessPool(checked.config, size=3, run_dir=str(tmp_path), parsed=checked.parsed)
    try:
        assert all(e.runner.health is checked.health for e in pool._evaluators)  # type: ignore[attr-defined]
    finally:
        pool.close()
    assert builds == {"HealthCheck": 1}
    assert pickle.loads(pickle.dumps(checked.parsed)) == checked.parsed  # what a Ray actor receives


def test_an_evaluator_without_the_parsed_sections_parses_its_own(tmp_path: Path, builds: Counter[str]) -> None:
    checked = load(str(small_quickstart(tmp_path)), None, overrides={"output": str(tmp_path / "out")})
    pool = InProcessPool(checked.config, size=2, run_dir=str(tmp_path))
    pool.close()
    assert builds == {"SimulatorSetup": 1 + 2, "HealthCheck": 1}  # validate's, then each evaluator's own


def test_capacity_and_swarm_options_are_parsed_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[capacity] and [pso_options] are read by validate once; the driver takes what it built (Validated)."""
    import msopt.run.driver as driver
    import msopt.run.validate as validate

    calls: Counter[str] = Counter()
    for module in (driver, validate):
        for name in ("capacity_options", "swarm_options"):
            original = getattr(module, name)

            def counted(config: Any, _original: Any = original, _name: str = name) -> Any:
                calls[_name] += 1
                return _original(config)

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
