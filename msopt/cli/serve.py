"""The ``msopt sim-serve`` subcommand (registered by msopt.cli.main through ``register``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def cmd_sim_serve(args: argparse.Namespace) -> int:
    """Run the OpenAI-compatible stand-in server with vLLM's command line."""
    from msopt.sim.serve import build_parser, serve

    if any(a in ("-h", "--help") for a in args.serve_args) and "--mindie" not in args.serve_args:
        build_parser().print_help()
        return 0
    return serve(args.serve_args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sim-serve``; its arguments are vLLM's, passed through unparsed (unknown ones too)."""
    # prefix_chars="+": every "-x" item reaches sim-serve's own parser, which knows vLLM's flags.
    p = subparsers.add_parser(
        "sim-serve", prefix_chars="+", add_help=False,
        help="OpenAI-compatible stand-in server taking vLLM's serve command line "
             "(msopt sim-serve MODEL --port P ... ; --help for its flags; --mindie: MindIE's daemon)")
    p.add_argument("serve_args", nargs="*", metavar="ARG")
    p.set_defaults(func=cmd_sim_serve)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m msopt.cli.serve ARGS``: the same as ``msopt sim-serve ARGS``."""
    from msopt.sim.serve import serve

    return serve(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
