"""The report of a run directory: the best configuration's launch files, figures, the HTML page.

- :mod:`msopt.report.data`: reading a run directory (:class:`RunData`) and the file names;
- :mod:`msopt.report.export`: ``best_command.sh``/``.json`` and the engine's files;
- :mod:`msopt.report.figures`: the PNG figures;
- :mod:`msopt.report.html`: ``report.html`` and :func:`write_report`.
"""

from __future__ import annotations

from msopt.report.data import (
    BEST_COMMAND_JSON,
    BEST_COMMAND_SH,
    BEST_CONFIG_JSON,
    FITNESS_PNG,
    PARALLEL_PNG,
    PARETO_PNG,
    REPORT_HTML,
    RunData,
    load_run,
)
from msopt.report.export import export_best, export_run_best, shell_script
from msopt.report.figures import pareto_front
from msopt.report.html import write_report

__all__ = ["BEST_COMMAND_JSON", "BEST_COMMAND_SH", "BEST_CONFIG_JSON", "FITNESS_PNG", "PARALLEL_PNG",
           "PARETO_PNG", "REPORT_HTML", "RunData", "export_best", "export_run_best", "load_run",
           "pareto_front", "shell_script", "write_report"]
