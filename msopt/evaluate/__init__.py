"""One evaluation: decode, launch (real engine or simulator), benchmark, score.

:class:`Evaluator` owns a runner — :class:`RealRunner` (engine process, benchmark, health check)
or :class:`SimRunner` (the embedded simulator) — behind the :class:`Runner` protocol.
"""

from __future__ import annotations

from msopt.evaluate.evaluator import MAX_ATTEMPTS, Evaluator, Parsed
from msopt.evaluate.objective import Objective, make_objective
from msopt.evaluate.results import METRICS, PHASES, EvalRequest, EvaluationResult
from msopt.evaluate.workload import WorkloadConfig, configured_num_prompts, search_num_prompts, workload_config

__all__ = ["MAX_ATTEMPTS", "METRICS", "PHASES", "EvalRequest", "EvaluationResult", "Evaluator", "Objective",
           "Parsed", "WorkloadConfig", "configured_num_prompts", "make_objective", "search_num_prompts",
           "workload_config"]
