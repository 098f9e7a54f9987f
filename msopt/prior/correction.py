"""What the run keeps and says of the prior's correction of its hardware entry to the launches measured on
the real engine (:meth:`msopt.prior.simulator.SimulatorPrior.correct`, fitted by
:func:`msopt.sim.correct.correct_hardware`): the run's line and ``prior.json``'s record of each correction.
"""

from __future__ import annotations

from typing import Any

from msopt.sim.correct import Correction

#: :meth:`msopt.prior.simulator.SimulatorPrior.correct` fits the best this many distinct measured configurations
CORRECT_ROWS = 8
#: each correction scale (:data:`msopt.sim.correct.CORRECTION_GROUPS`) in the run's line
_SCALE_WORDS = {"frontend": "serial frontend", "engine": "engine step"}


def correction_text(found: Correction, entry: str) -> str:
    """The run's line about a correction of the simulator's ``entry`` to its measured launches."""
    scales = ", ".join(f"{_SCALE_WORDS.get(name, name)} time x{v:.2f}" for name, v in found.scales.items())
    if found.better:
        return (f"simulator corrected from {found.rows} measured launches: {found.errors()}; {entry} with "
                f"{scales}, for the prior from now on")
    return (f"simulator not corrected: fitted to {found.rows} measured launches ({scales}), it would not predict "
            f"them better ({found.errors()}); the prior uses {entry} as catalogued")


def correction_record(found: Correction, entry: str) -> dict[str, Any]:
    """One correction of ``entry`` as ``prior.json``'s ``corrections`` lists it: the fit's record, the entry
    and the run's line (:func:`correction_text`)."""
    return {**found.record(), "hardware": entry, "said": correction_text(found, entry)}


__all__ = ["CORRECT_ROWS", "correction_record", "correction_text"]
