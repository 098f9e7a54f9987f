"""The ``msopt sim-serve`` subcommand (registered by msopt.cli.main through ``register``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from msopt.engines.mindie.serve import serve_mindie
from msopt.engines.sglang.router import serve_router
from msopt.sim.serve import ARGV_FILE_ENV, build_parser
from msopt.sim.serve import serve as serve_vllm


def serve(argv: Sequence[str]) -> int:
    """Run the stand-in the command line asks for until SIGTERM/SIGINT: MindIE's daemon with
    ``--mindie`` (reading its config.json), SGLang's PD router with ``--pd-disaggregation``, else
    the vLLM-style server."""
    argv = list(argv)
    if "--mindie" in argv:
        return serve_mindie(argv)
    if "--pd-disaggregation" in argv:
        return serve_router(argv, os.environ.get(ARGV_FILE_ENV))
    return serve_vllm(argv)


def cmd_sim_serve(args: argparse.Namespace) -> int:
    """Run the OpenAI-compatible stand-in server with vLLM's command line."""
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
    return serve(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
