"""Start-up rules: configurations an engine refuses before it serves, checked before any launch.

The generic machinery lives here (:class:`RenderedCandidate`, :class:`Rule`, :func:`check_rules`,
:class:`Advisory`); each engine declares its own rules on its adapter
(:attr:`~msopt.engines.base.EngineAdapter.startup_rules`, built-in ones in each engine's folder:
:mod:`msopt.engines.vllm.rules`, :mod:`msopt.engines.sglang.rules`, :mod:`msopt.engines.mindie.rules`, each
with the engine's own message and the source file and version it comes from), so a plugin engine
brings rules of its own. The real path (:class:`~msopt.evaluate.real.RealRunner`) and the simulated path
(:class:`~msopt.evaluate.simulated.SimRunner`) both call :func:`check_rules` on the rendered
launch, so a candidate that breaks a rule costs no launch, and simulated and real refusals
cannot drift apart.

A rule only fires when every value it compares is known (set by a field, ``others`` or the
config.json, or a fact of the model): an engine default msopt does not know never refuses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msopt.errors import RefusedError
from msopt.launch.render import LaunchSpec
from msopt.space.fields import FieldDecl


@dataclass(frozen=True)
class ModelFacts:
    """What the rules need to know about the served model (None: unknown).

    Attributes:
        attention_heads: ``num_attention_heads`` of the model's config.json.
        max_position: ``max_position_embeddings`` (vLLM's default ``max_model_len``).
        model_type: ``model_type`` (engines choose a model's MTP draft by it).
        mtp_layers: ``num_nextn_predict_layers``, the model's own MTP layers.
    """

    attention_heads: int | None = None
    max_position: int | None = None
    model_type: str | None = None
    mtp_layers: int | None = None

    @classmethod
    def of_spec(cls, spec: Any) -> ModelFacts:
        """The facts of a simulator catalog entry (:class:`msopt.sim.catalog_load.ModelSpec`)."""
        return cls(spec.heads, spec.max_position, getattr(spec, "model_type", "") or None,
                   getattr(spec, "mtp_layers", 0) or None)


def model_facts(model: str) -> ModelFacts:
    """Facts from ``<model>/config.json`` when ``model`` is a local directory, else unknown."""
    path = Path(model).expanduser() / "config.json" if model else None
    if path is None or not path.is_file():
        return ModelFacts()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ModelFacts()
    if not isinstance(doc, dict):
        return ModelFacts()
    top = doc
    doc = doc.get("text_config", doc) if isinstance(doc.get("text_config"), dict) else doc

    def pos_int(key: str) -> int | None:
        v = doc.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    layers = doc.get("num_nextn_predict_layers")
    kind = top.get("model_type")
    return ModelFacts(pos_int("num_attention_heads"), pos_int("max_position_embeddings"),
                      kind if isinstance(kind, str) and kind else None,
                      layers if isinstance(layers, int) and not isinstance(layers, bool) and layers >= 0 else None)


def parse_flags(argv: Sequence[str]) -> dict[str, str | None]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` -> {flag: last value (None: bare)}."""
    out: dict[str, str | None] = {}
    items = list(argv)
    for i, item in enumerate(items):
        if not item.startswith("-") or len(item) < 2 or item[1].isdigit():
            continue
        if "=" in item and item.startswith("--"):
            name, value = item.split("=", 1)
            out[name] = value
            continue
        nxt = items[i + 1] if i + 1 < len(items) else None
        takes = nxt is not None and (not nxt.startswith("-") or nxt[1:2].isdigit() or nxt == "-")
        out[item] = nxt if takes else None
    return out


@dataclass(frozen=True)
class RenderedCandidate:
    """One rendered candidate, as the rules see it.

    Attributes:
        spec: the rendered launch.
        values: the decoded field values.
        section: the engine's configuration section.
        model: facts of the served model.
        environ: the environment the server would start with (the process's plus ``spec.env``).
    """

    spec: LaunchSpec
    values: Mapping[str, Any]
    section: Mapping[str, Any]
    model: ModelFacts = field(default_factory=ModelFacts)
    environ: Mapping[str, str] = field(default_factory=dict)

    @property
    def flags(self) -> dict[str, str | None]:
        """The command line's flags, last occurrence winning (argparse's rule)."""
        return parse_flags(self.spec.argv)

    def int_flag(self, *names: str) -> int | None:
        """The integer value of the last of ``names`` on the command line, None when absent."""
        flags = self.flags
        found = [(i, n) for i, n in enumerate(self.spec.argv) for name in names
                 if n == name or n.startswith(name + "=")]
        if not found:
            return None
        name = found[-1][1].split("=", 1)[0]
        try:
            return int(float(flags.get(name) or ""))
        except ValueError:
            return None

    def bool_flag(self, name: str) -> bool | None:
        """True for ``--x``, False for ``--no-x`` (the later wins), None when neither is there."""
        state = None
        neg = "--no-" + name[2:]
        for item in self.spec.argv:
            if item == name:
                state = True
            elif item == neg:
                state = False
        return state


@dataclass(frozen=True)
class Rule:
    """One start-up rule of one engine.

    Attributes:
        id: unique, ``<engine>.<what>``.
        engine: the engine's registered name.
        refuses: the engine's own message when the candidate breaks the rule, else None.
        source: the engine's source file that holds the check.
        version: the engine version that source was read at.
    """

    id: str
    engine: str
    refuses: Callable[[RenderedCandidate], str | None]
    source: str
    version: str


def broken_rule(candidate: RenderedCandidate, rules: Sequence[Rule]) -> tuple[Rule, str] | None:
    """The first of ``rules`` (the adapter's :attr:`~msopt.engines.base.EngineAdapter.startup_rules`)
    the candidate breaks, with the engine's message, or None."""
    for rule in rules:
        message = rule.refuses(candidate)
        if message is not None:
            return rule, message
    return None


def check_rules(spec: LaunchSpec, values: Mapping[str, Any], section: Mapping[str, Any], *,
                rules: Sequence[Rule], model: ModelFacts | None = None,
                environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`RefusedError` (the engine's message, the rule id) for a refused candidate.

    Args:
        spec: the rendered launch.
        values: the decoded values.
        section: the engine's section.
        model: facts of the model; default: read from ``<spec.model>/config.json`` when local.
        environ: the server's environment; default: this process's plus ``spec.env``.
        rules: the rules to check (the adapter's :attr:`~msopt.engines.base.EngineAdapter.startup_rules`).
    """
    env = {**(os.environ if environ is None else environ), **spec.env}
    cand = RenderedCandidate(spec, values, section, model if model is not None else model_facts(spec.model), env)
    hit = broken_rule(cand, rules)
    if hit is not None:
        rule, message = hit
        raise RefusedError(f"{spec.engine} refuses this configuration at start-up: {message} "
                           f"[rule {rule.id}, {rule.source}, {rule.version}]", rule.id)


# -- advisories: fields that tune nothing, reported by `msopt validate` -------------------------
@dataclass(frozen=True)
class Advisory:
    """A configuration an engine accepts but that cannot do what it says (a dead dimension).

    Attributes:
        id: unique, ``<engine>.<what>``.
        engine: the engine's registered name.
        warns: the warning for these fields and section, else None.
        source: the engine's source file that makes it so.
        version: the engine version that source was read at.
    """

    id: str
    engine: str
    warns: Callable[[Sequence[FieldDecl], Mapping[str, Any]], str | None]
    source: str
    version: str


def advisories(declared: Sequence[Advisory], fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> list[str]:
    """The warnings of the ``declared`` advisories (an adapter's
    :attr:`~msopt.engines.base.EngineAdapter.advisories`) for this configuration, each naming its source."""
    out = []
    for adv in declared:
        text = adv.warns(fields, section)
        if text is not None:
            out.append(f"{text} [advisory {adv.id}, {adv.source}, {adv.version}]")
    return out
