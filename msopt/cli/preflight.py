"""``msopt preflight``: check the machines that will run the trials before hours of tuning."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from msopt.run.preflight import Check, PreflightError, node_checks
from msopt.run.validate import load_installed

if TYPE_CHECKING:
    from msopt.config import Config


def register(sub: Any) -> None:
    """Add the preflight subcommand."""
    p = sub.add_parser("preflight", help="check what a launch needs on the machines that will run it "
                       "(executable, model, config.json, ports, accelerators); exit 1 when a check fails")
    p.add_argument("-c", "--config", metavar="FILE", help="configuration file (highest layer)")
    p.add_argument("-e", "--engine", metavar="ENGINE", help="engine section to check (vllm, mindie, sglang)")
    p.add_argument("--address", metavar="ADDR",
                   help="join this Ray cluster ('auto': the running one) and check every node with a Ray "
                        "task of its own; default: check this machine only")
    p.set_defaults(func=cmd_preflight)


def run_checks(config: Config, address: str | None, *, full: bool = True) -> list[Check]:
    """The checks on this machine, or with ``address`` on every node of that Ray cluster."""
    if not address:
        return node_checks(config, full=full)
    from actors.pool import init_ray
    from actors.preflight import cluster_checks

    started = init_ray(config, address, simulate=False, slots=1)
    try:
        return cluster_checks(config, full=full)
    finally:
        if started:
            import ray

            ray.shutdown()


def report(checks: Sequence[Check], *, failures_only: bool = False) -> int:
    """Print one line per check (stdout; failures also count); return the number of failures."""
    failed = 0
    for c in checks:
        failed += not c.ok
        if not failures_only or not c.ok:
            print(c.line(), file=sys.stdout if not failures_only else sys.stderr, flush=True)
    return failed


def cmd_preflight(args: argparse.Namespace) -> int:
    """Run every check and print one line each; 1 when one failed."""
    # the trial's devices as a run takes them from the installation
    config = load_installed(args.config, args.engine, devices_only=True).checked.config
    failed = report(run_checks(config, args.address))
    if failed:
        print(f"preflight: {failed} check(s) failed", file=sys.stderr)
        return 1
    return 0


def cheap_preflight(config: Config) -> None:
    """The quick checks on this machine before a real run's baseline (``msopt optimize``).

    Raises:
        PreflightError: a check failed (its line was printed to stderr first).
    """
    failed = report(node_checks(config, full=False), failures_only=True)
    if failed:
        raise PreflightError(f"{failed} preflight check(s) failed (above); fix them, or run 'msopt preflight' "
                             "for every check, or pass --no-preflight when this machine does not run trials")
