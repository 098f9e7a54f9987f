"""The ``msopt`` command line: the composition root, the only package that wires every other one.

``main`` parses the arguments and dispatches to one module per subcommand (validate and decode in
:mod:`msopt.cli.main`, the others beside it); an :class:`msopt.errors.MsoptError` becomes one line
on stderr and exit code 2.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv=None) -> int:  # noqa: ANN001  (the console script's entry point)
    """Run the ``msopt`` command line; see :func:`msopt.cli.main.main`."""
    from msopt.cli.main import main as _main

    return _main(argv)
