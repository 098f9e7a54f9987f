"""msopt: Ray-parallel particle-swarm tuning of LLM serving parameters.

One line runs a whole run from Python: ``msopt.optimize("configs/quickstart.toml", simulate=True)``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from msopt._version import __version__
from msopt.errors import ConfigError, DecodeError, EvaluationError, MsoptError, SimulationError

if TYPE_CHECKING:
    from msopt.run.session import SessionResult

__all__ = [
    "ConfigError",
    "DecodeError",
    "EvaluationError",
    "MsoptError",
    "SimulationError",
    "__version__",
]

from msopt.config import Settings, load_settings  # noqa: E402
from msopt.space import DecodeContext, Decoded, SearchSpace  # noqa: E402

__all__ += ["Decoded", "DecodeContext", "SearchSpace", "Settings", "load_settings", "optimize"]


def optimize(config: str | os.PathLike[str], *, simulate: bool | None = None, engine: str | None = None,
             **overrides: Any) -> SessionResult:
    """Run a whole optimization, as ``msopt optimize -c CONFIG --no-ray`` does: the same run directory,
    journal, verdict, report and launch files, the evaluations in a thread of this process.

    Args:
        config: the configuration file (the ``-c`` layer above the packaged defaults).
        simulate: True: the embedded simulator stands in for engine and benchmark (``--simulate``);
            False: the real engine; None: as the file says.
        engine: the section whose fields are searched (``-e``); None: the file's ``engine`` key.
        **overrides: top-level keys over the file's, e.g. ``seed=1``, ``iters=2``, ``output="runs"``.

    Returns:
        The session's result: ``run_dir``, ``outcome.best`` and ``verdict``.

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    from msopt.report.outputs import write_outputs  # the run's stages load only when a run is asked for
    from msopt.run.session import RunSession
    from msopt.run.validate import load

    if simulate is not None:
        overrides["simulate"] = simulate
    return RunSession(load(config, engine, overrides=overrides), outputs=[write_outputs]).run()
