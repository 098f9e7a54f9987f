"""The simulator prior: the embedded simulator as a model of the run, around any searcher.

- :mod:`msopt.prior.simulator`: :class:`SimulatorPrior` (predictions, the search of the space on
  the simulator, the picks, the correction of its hardware entry to the launches measured on the real
  engine and the refit to the run's measurements), its ``[search]`` options and :func:`make_prior`;
- :mod:`msopt.prior.correction`: the run's line and record of each correction; :mod:`msopt.prior.accept`: the
  speculative acceptance lengths the run measured, for the predictions;
- :mod:`msopt.prior.source`: what a real run's prior models (the model's config.json, the nodes'
  hardware);
- :mod:`msopt.prior.guide`: :class:`PriorGuide`, the prior as the driver's
  :class:`msopt.run.guide.Guide` (starting picks, screen, predictions, refit), and
  :class:`PriorSearch`, its search in a thread while a slow pool starts.
"""

from __future__ import annotations

from msopt.prior.guide import PriorGuide, PriorSearch
from msopt.prior.simulator import (
    PRIOR_MODES,
    REFIT_TOLERANCE,
    Prediction,
    PriorOptions,
    SimulatorPrior,
    make_prior,
    prior_applies,
)
from msopt.prior.source import PRIOR_HARDWARE_FILE, PriorSource, prior_source, real_prior_table, user_set

__all__ = ["PRIOR_HARDWARE_FILE", "PRIOR_MODES", "REFIT_TOLERANCE", "Prediction", "PriorGuide", "PriorOptions",
           "PriorSearch", "PriorSource", "SimulatorPrior", "make_prior", "prior_applies",
           "prior_source", "real_prior_table", "user_set"]
