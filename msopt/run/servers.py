"""Which configurations the rest of a run may still measure, so that the pool stops every other kept
server (issue 26: a kept server is stopped when nothing pending needs it).

The plan of each stage, read from the leaderboard (:func:`planned`):

- baseline and search: the ``pso_top_k`` board (any of them may be picked for re-measurement) and,
  with ``pso_top_k``, the baseline (re-measured beside them); without ``pso_top_k`` but with the
  capacity stage on, the best so far (its capacity is searched). A configuration that is on none of
  these loses its server once its worker is idle: a later search candidate with its server key (one
  that differs from it only in the benchmark's load) starts it again;
- refine: the baseline, the picks not re-measured yet, and the re-measured ones while the capacity
  stage or a launch budget's extra re-measurements may come back to them;
- capacity: the configurations whose capacity search has probes left (the stage says which after
  each round, :meth:`msopt.run.driver.Driver.expect`; all of them before the first round).

The requests already submitted keep their servers too (the dispatcher adds their keys, the pools
their queues'). After the last stage nothing is planned; the pool's ``close`` stops the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from msopt.evaluate.results import EvaluationResult
from msopt.run.leaderboard import Leaderboard, values_key

#: The stages, in the order a run goes through them (:attr:`Driver.stage`).
STAGES = ("baseline", "search", "refine", "capacity", "done")


def planned(stage: str, board: Leaderboard, *, top_k: int, capacity: bool, budget: bool,
            expected: Sequence[EvaluationResult] | None = None) -> list[EvaluationResult]:
    """The configurations (one result each) whose servers the rest of the run may still use.

    Args:
        stage: the stage running (:data:`STAGES`).
        board: the run's leaderboard.
        top_k: ``[data_storage] pso_top_k``.
        capacity: whether the capacity stage is on.
        budget: whether a launch budget is set (its extra re-measurements return to the refined ones).
        expected: in the capacity stage, the configurations with probes left (None: all of them).
    """
    out: list[EvaluationResult] = []
    base = board.baseline
    if stage in ("baseline", "search"):
        out += board.picked()
        if top_k > 0 and base is not None:
            out.append(base)
        if top_k <= 0 and capacity and board.search_best is not None:
            out.append(board.search_best)
    elif stage == "refine":
        refined = {values_key(r.values) for r in board.refined}
        out += [r for r in board.picked() if values_key(r.values) not in refined]
        if capacity or budget:
            out += board.refined
        if base is not None:
            out.append(base)
    elif stage == "capacity":
        out += board.capacity_configs() if expected is None else list(expected)
    return list({values_key(r.values): r for r in out}.values())
