"""Start-up refusals cost nothing and are never proposed twice (issue 17): not by a screened
move, not by an unranked exploratory one, not by the swarm without a prior."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.run.driver import Driver
from msopt.run.leaderboard import values_key
from msopt.run.pool import InProcessPool
from msopt.search import Constraint
from msopt.search.swarm import Swarm, SwarmOptions
from msopt.space import SearchSpace
from tests.prior.test_simulator import CFG
from tests.support.driver_helpers import FormulaEvaluator


@pytest.mark.parametrize("search", ['prior = "none"', "explore = 1.0", "explore = 0.25"])
def test_a_refused_configuration_is_proposed_once_at_most(write_toml, search):
    """max_num_batched_tokens 16 < max_num_seqs: vLLM refuses it at start-up, and a third of the
    space is such. The swarm's moves never propose a configuration the rules refuse, whether
    ranked by the prior, taken unranked, or without a prior; a refused starting position is
    answered once."""
    text = CFG.format(simulate="true", extra="").replace("iters = 2", "iters = 8")
    settings = load_settings(str(write_toml(text + f"\n[search]\n{search}\n")), environ={})
    space = SearchSpace.from_settings(settings)
    from msopt.prior import PriorGuide, make_prior

    # the fastest configurations have few batched tokens: the swarm is pulled toward refusals
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(
        space, lambda v: v["max_num_batched_tokens"] / 1000 + v["max_num_seqs"] / 100))
    prior = make_prior(settings.config, space)
    driver = Driver(settings.config, pool, guide=PriorGuide(prior) if prior is not None else None)
    try:
        out = driver.run()
    finally:
        pool.close()
    refused = Counter(values_key(r.values) for r in out.results if r.refused)
    assert out.refused == len(refused)
    assert all(n == 1 for n in refused.values()), refused.most_common(3)
    # the rules are known before a move is drawn: only a starting position can be refused
    moved = [r for r in out.results if r.refused and r.phase == "search" and r.iteration > 0]
    assert moved == []
    search_results = [r for r in out.results if r.phase == "search"]
    assert len(search_results) == 5 * 8


def test_swarm_draws_again_when_every_move_is_refused():
    """A swarm whose every move but those with x[0] > 0.9 is refused draws again (bounded) and
    proposes an allowed one when it finds one; it never fails when there is none."""
    opts = SwarmOptions(n_particles=4, iters=5, seed=3)
    seen: list[np.ndarray] = []

    def rules(v) -> str | None:
        seen.append(v["x"].copy())
        return "x[0] <= 0.9" if v["x"][0] <= 0.9 else None

    swarm = Swarm([0.0, 0.0], [1.0, 1.0], opts, constraint=Constraint(decode=lambda x: {"x": x}, rules=rules))
    for _ in range(5):
        swarm.tell(np.arange(4, dtype=float))
    assert seen  # consulted
    allowed = [p for p in swarm.positions if p[0] > 0.9]
    assert allowed  # some particle found an allowed move among the redraws
    nothing = Swarm([0.0, 0.0], [1.0, 1.0], opts, constraint=Constraint(decode=lambda x: {}, rules=lambda v: "no"))
    nothing.tell(np.arange(4, dtype=float))  # every draw refused: the first move stands
    assert np.all((nothing.positions >= 0) & (nothing.positions <= 1))


def test_a_configuration_refused_at_launch_is_not_proposed_again(write_toml):
    """A refusal the driver's pre-check cannot know (the evaluator's: a rule on the machine's
    environment, say) is known from then on: the swarm does not propose that configuration again."""
    from dataclasses import replace

    text = CFG.format(simulate="true", extra="").replace("iters = 2", "iters = 8")
    settings = load_settings(str(write_toml(text + '\n[search]\nprior = "none"\n')), environ={})
    space = SearchSpace.from_settings(settings)

    class RefusesTp1(FormulaEvaluator):
        def evaluate(self, req):
            r = super().evaluate(req)
            if r.values.get("tp") == 1 and r.phase == "search":
                return replace(r, fitness=float("inf"), refused=True, error="refused at start-up here")
            return r

    # tp 1 scores best: the swarm is pulled toward configurations that are refused at launch
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: RefusesTp1(
        space, lambda v: v["tp"] + v["max_num_seqs"] / 100))
    try:
        out = Driver(settings.config, pool).run()
    finally:
        pool.close()
    iterations: dict[str, set[int]] = {}
    for r in out.results:
        if r.refused:
            iterations.setdefault(values_key(r.values), set()).add(r.iteration)
    # two particles of one generation may propose it before its refusal is known; never later
    assert iterations and all(len(its) == 1 for its in iterations.values()), iterations
