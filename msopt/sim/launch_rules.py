"""Launch rules: the server flags a measured row was launched with, from its load, for rows that do not record
their flags (the reference rows of aiconfigurator's ``silicon_sample.csv``), and a row's knobs from them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from msopt.registry import Registry
from msopt.sim.knobs import EngineKnobs
from msopt.sim.personality import get_personality

#: A launch rule: the server flags a measured row was launched with, from its load
#: ``(engine, input_len, output_len, concurrency)``, for rows that do not record their flags.
LaunchRule = Callable[[str, int, int, int], list[str]]
LAUNCH_RULES: Registry[LaunchRule] = Registry("launch rule")
#: the rule ``load_measurements_csv`` and ``msopt calibrate`` apply by default
DEFAULT_LAUNCH_RULE = "aiconfigurator"


@LAUNCH_RULES.register("engine-defaults")
def _engine_defaults(engine: str, input_len: int, output_len: int, concurrency: int) -> list[str]:
    """No flags beyond the layout: the engine's own defaults (``vllm serve MODEL -tp N``)."""
    return []


@LAUNCH_RULES.register("aiconfigurator")
def _aiconfigurator(engine: str, input_len: int, output_len: int, concurrency: int) -> list[str]:
    """The flags NVIDIA aiconfigurator's generator sets for an aggregated run of batch size ``c``.

    The reference CSVs are rows of aiconfigurator's ``silicon_sample.csv``; its generator renders each engine's
    flags from the batch size, ISL and OSL (aiconfigurator 0.5.0 to 0.12.0, ``generator/rule_plugin/*.rule``,
    ``backend_config_mapping.yaml``): each personality's :meth:`~msopt.sim.personality.Personality.aiconfigurator_argv`
    says how (vLLM's and SGLang's in their engine folders).
    """
    return get_personality(engine).aiconfigurator_argv(int(concurrency), int(input_len), int(output_len))


def row_knobs(engine: str, tp: int, pp: int, argv: Sequence[str]) -> EngineKnobs:
    """The knobs of one measured row: its layout plus the server flags it was launched with.

    Raises:
        MsoptError: a flag value the engine would refuse to parse.
    """
    knobs = get_personality(engine).knobs_from_argv(list(argv))
    if knobs is None:  # an engine whose knobs do not come from a command line (MindIE): the layout alone
        return EngineKnobs(engine=engine, tp=tp, pp=pp)
    return replace(knobs, tp=tp, pp=pp)
