"""``msopt report RUN_DIR``: the HTML report and the best configuration's launch files."""

from __future__ import annotations

import argparse
from typing import Any

from msopt.report.html import write_report


def register(sub: Any) -> None:
    """Add the report subcommand."""
    p = sub.add_parser("report", help="write report.html (plots, top configurations) and the best "
                                      "configuration's launch files into a run directory")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory that 'msopt optimize' printed")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report of RUN_DIR and print its path."""
    print(write_report(args.run_dir))
    return 0
