"""The engine's start-up rules, checked before a candidate is dispatched: :class:`CandidateScreen`
renders a candidate as an evaluator would and checks the engine's rules
(:mod:`msopt.engines.rules`), so a refused candidate is never launched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msopt.config import Config
from msopt.engines import get_engine
from msopt.engines.base import EngineAdapter
from msopt.engines.pd import PdLaunch, without_pd
from msopt.engines.rules import ModelFacts, RenderedCandidate, broken_rule, model_facts
from msopt.errors import EvaluationError, MsoptError
from msopt.evaluate.results import values_key as _key
from msopt.evaluate.simulated import SimulatorSetup, explicit_devices, render_pd_trial, simulated_devices_per_node
from msopt.launch.placement import virtual_nodes
from msopt.launch.render import Candidate, LaunchSpec, TrialNode
from msopt.sim import load_model

__all__ = ["CandidateScreen", "LayoutError", "pd_launch"]


class _AnyEnvironment(dict):
    """The server's environment as the driver's pre-check sees it: every variable set. Rules on
    the environment (e.g. MindIE's MASTER_IP with pp > 1) depend on the machine that runs the trial;
    its evaluator checks them there, with its own environment."""

    def get(self, key: Any, default: Any = None) -> Any:  # noqa: D102
        return super().get(key, "set")


class CandidateScreen:
    """The engine's start-up rules, checked in the driver before a candidate is dispatched.

    Renders the launch as the evaluator would (device ids ``0..devices_per_trial-1`` stand in
    for the ones an actor gets) and checks the engine's rules with the simulated model's facts
    (simulated run, or ``simulator``: the prior's own ``[simulator]`` table) or the model
    directory's config.json (real run). Rules on the server's
    environment are left to the evaluator, which knows the environment the server gets. ``setup``: the
    run's ``[simulator]`` as it was parsed, whose hardware gives the simulated node size (None: read here).
    """

    def __init__(self, config: Config, *, simulate: bool | None = None,
                 simulator: Mapping[str, Any] | None = None, setup: SimulatorSetup | None = None) -> None:
        self.config = config
        self.engine = get_engine(config.engine.name)
        self.section: Mapping[str, Any] = config.engine.section.table
        self.devices = config.cluster.trial.device_ids()
        self.nodes = virtual_nodes(explicit_devices(config), simulated_devices_per_node(config, setup))
        sim = config.run.simulate if simulate is None else simulate
        self.model: ModelFacts | None = None
        if sim:
            self.section = self.engine.simulation_section(self.section)
            table = config.simulator.table if simulator is None else simulator
            m = load_model(table["model"], config.catalog_dirs)
            self.model = ModelFacts.of_spec(m)
        self._seen: dict[str, str | None] = {}

    def refusal(self, values: Mapping[str, Any]) -> str | None:
        """The engine's refusal of ``values`` (its message and rule), or None when it would start."""
        key = _key(values)
        if key in self._seen:
            return self._seen[key]
        try:
            out = None
            for spec, section in self._instances(values):
                cand = RenderedCandidate(spec, dict(values), section,
                                         self.model if self.model is not None else model_facts(spec.model),
                                         _AnyEnvironment(spec.env))
                hit = broken_rule(cand, self.engine.startup_rules)
                if hit is not None:
                    rule, message = hit
                    out = (f"{spec.engine} refuses this configuration at start-up: {message} "
                           f"[rule {rule.id}, {rule.source}, {rule.version}]")
                    break
        except LayoutError as exc:
            out = str(exc)
        except MsoptError:
            out = None  # anything else is the evaluator's to report
        self._seen[key] = out
        return out

    def _instances(self, values: Mapping[str, Any]) -> list[tuple[LaunchSpec, Mapping[str, Any]]]:
        """The launches of ``values`` with the section each is checked against: the one server, or every
        instance of a prefill/decode-disaggregated trial (checked as the evaluator checks them, without
        the ``pd`` table).

        Raises:
            LayoutError: the disaggregated layout does not fit the trial (more devices than it holds):
                known here, so no launch is spent on it.
        """
        if not self.engine.is_disaggregated(self.section):
            return [(self.engine.render(Candidate(values, self.config.engine.fields, self.section), port=0,
                                        devices=list(self.devices), workdir=None), self.section)]
        launch = pd_launch(self.engine, values, self.config, self.section, self.devices, self.nodes)
        inner = without_pd(self.section)
        return [(spec, inner) for spec in launch.instances]


class LayoutError(MsoptError):
    """A disaggregated layout that cannot be placed on the trial's devices."""


def pd_launch(engine: EngineAdapter, values: Mapping[str, Any], config: Config, section: Mapping[str, Any],
              devices: Sequence[str], nodes: Sequence[TrialNode]) -> PdLaunch:
    """:func:`~msopt.evaluate.simulated.render_pd_trial` with its layout check raised as :class:`LayoutError`:
    a layout the trial cannot hold is known before a launch (the screen and the simulator prior)."""
    try:
        return render_pd_trial(engine, values, config, section, devices, nodes)
    except EvaluationError as exc:
        raise LayoutError(f"the disaggregated layout does not fit the trial: {exc}") from None
