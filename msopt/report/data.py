"""Reading a run directory for the report: the journal, the effective configuration, best.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msopt.config import Config, load_settings
from msopt.evaluate.results import EvaluationResult
from msopt.run.store import BEST, RunStore, StoreError
from msopt.run.validate import registered_sections
from msopt.space import SearchSpace

REPORT_HTML = "report.html"
FITNESS_PNG = "report_fitness.png"
PARALLEL_PNG = "report_parallel.png"
PARETO_PNG = "report_pareto.png"
BEST_COMMAND_SH = "best_command.sh"
BEST_COMMAND_JSON = "best_command.json"
BEST_CONFIG_JSON = "best_config.json"


@dataclass
class RunData:
    """What the report needs from a run directory."""

    run_dir: Path
    run_id: str
    config: Config
    space: SearchSpace
    results: list[EvaluationResult]
    best: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[EvaluationResult]:
        """The successful evaluations, in eval order."""
        return [r for r in self.results if not r.failed]


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory.

    Raises:
        StoreError: not a run directory, or its journal is corrupt.
        ConfigError: its config.toml does not load.
    """
    store = RunStore.open(run_dir)
    results = sorted(store.load_journal(), key=lambda r: r.eval_id)
    settings = load_settings(str(store.config_path), environ={}, sections=registered_sections())
    space = SearchSpace.from_settings(settings)
    best = store.read_json(BEST)
    if best is not None and not isinstance(best, dict):
        raise StoreError(f"{store.run_dir / BEST}: not a JSON object; remove it and run 'msopt report' again")
    return RunData(store.run_dir, store.run_id, settings.config, space, results, best, list(store.warnings))
