"""Speculative decoding: draft tokens proposed, verified by the target in one step, some accepted.

Per decode step each running sequence is verified on ``verify`` tokens (the target's forward pass
carries ``verify`` query tokens per sequence instead of one and reads its context once), after
``steps`` draft passes that proposed them, and keeps ``accept`` tokens on average (the acceptance
length: accepted drafts plus the target's own token, as SGLang's ``accept length`` and vLLM's
``mean acceptance length`` count it). A draft pass costs:

* ``mtp``: one decoder layer of the target's shape plus its lm_head (DeepSeek's MTP module,
  SGLang ``NEXTN``, vLLM ``"method": "mtp"``);
* ``eagle``: the same, one layer of the target's width plus an lm_head (EAGLE / EAGLE-3 drafts);
* ``ngram``: nothing on the device (prompt lookup on the host).

The acceptance length comes from the measurement (a row's ``accept length``), else from
``[simulator] spec_accept_len``, else :func:`default_accept_len` (reported as assumed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msopt.sim.catalog_types import ModelSpec
from msopt.sim.knobs import EngineKnobs
from msopt.sim.perf import StepCost
from msopt.sim.personality import get_personality

#: per-token acceptance rate a default acceptance length assumes, per draft method: EAGLE-3 and
#: DeepSeek's MTP report 0.8-0.9 for the first drafted token and less for later ones (EAGLE-3
#: paper, Li et al. 2025; DeepSeek-V3 technical report: 85-90 % for the second token); n-gram
#: lookup depends on the text (repetitive code or retrieval: high; chat: low)
DEFAULT_ACCEPT_RATE = {"mtp": 0.8, "eagle": 0.75, "ngram": 0.4}
METHODS = tuple(DEFAULT_ACCEPT_RATE)


def chain_accept_len(rate: float, steps: int) -> float:
    """Tokens kept per verify step with ``steps`` drafted tokens each accepted at ``rate`` (a chain:
    ``(1 - a^(steps+1)) / (1 - a)``, the target's own token included)."""
    if rate >= 1.0:
        return float(steps + 1)
    return (1.0 - rate ** (steps + 1)) / (1.0 - rate)


def chain_accept_rate(accept_len: float, steps: int) -> float:
    """The per-token rate whose chain of ``steps`` drafts keeps ``accept_len`` tokens a step (the
    inverse of :func:`chain_accept_len`, clipped to [0, 1]): a measured acceptance length at one
    number of draft tokens, carried to another."""
    if steps < 1 or accept_len <= 1.0:
        return 0.0
    if accept_len >= steps + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # chain_accept_len rises with the rate
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chain_accept_len(mid, steps) < accept_len else (lo, mid)
    return (lo + hi) / 2


def default_accept_len(method: str, steps: int) -> float:
    """Tokens kept per verify step with ``steps`` drafted tokens each accepted at the method's
    assumed rate (:data:`DEFAULT_ACCEPT_RATE`, :func:`chain_accept_len`)."""
    return chain_accept_len(DEFAULT_ACCEPT_RATE[method], steps)


def draft_fraction(model: ModelSpec) -> float:
    """One draft pass as a share of one target decode pass: one decoder layer and an lm_head
    against all layers and the lm_head (active parameters, what a decode reads)."""
    head = model.vocab * model.hidden
    return (model.active_layer_params + head) / (model.layers * model.active_layer_params + head)


@dataclass(frozen=True)
class Speculation:
    """A speculative-decoding setting resolved for one simulation.

    Attributes:
        method: "mtp", "eagle" or "ngram".
        steps: draft passes per step (vLLM ``num_speculative_tokens``, SGLang ``--speculative-num-steps``).
        verify: tokens the target verifies per sequence and step (SGLang ``--speculative-num-draft-tokens``;
            steps + 1 for a chain).
        accept: tokens kept per sequence and step, >= 1 and <= verify.
        assumed: True when ``accept`` is :func:`default_accept_len`'s, not a measured or given one.
    """

    method: str
    steps: int
    verify: int
    accept: float
    assumed: bool = False

    def decode_steps(self, output_len: int) -> int:
        """Verify steps a request of ``output_len`` tokens takes after its first token."""
        return 1 + math.ceil(max(0, output_len - 1) / self.accept)


def chain_steps(knobs: EngineKnobs) -> int:
    """The drafted tokens a verify step of ``knobs`` can accept: the draft tokens, at most the verified ones less
    the target's own."""
    verify = knobs.spec_verify_tokens or knobs.spec_tokens + 1
    return min(knobs.spec_tokens, verify - 1)


def speculation_of(knobs: EngineKnobs) -> Speculation | None:
    """The knobs' speculative decoding (None: off), its acceptance length given or assumed."""
    if not knobs.spec_method:
        return None
    steps = knobs.spec_tokens
    verify = knobs.spec_verify_tokens or steps + 1
    if knobs.spec_accept_len is not None:
        accept, assumed = float(knobs.spec_accept_len), False
    else:
        accept, assumed = default_accept_len(knobs.spec_method, chain_steps(knobs)), True
    return Speculation(knobs.spec_method, steps, verify, min(max(1.0, accept), float(verify)), assumed)


def draft_refusal(knobs: EngineKnobs, draft: Speculation, memory_kind: str) -> str | None:
    """The engine's message when it would not start ``draft`` on this hardware (None: it starts)."""
    problem = get_personality(knobs.engine).draft_problem(draft.method, memory_kind)
    if problem is not None:
        return problem
    if draft.steps < 1 and draft.method != "ngram":  # vllm 0.32.0 vllm/config/speculative.py: gt=0
        return f"ValueError: num_speculative_tokens must be > 0, got {draft.steps}"
    return None


def draft_log(draft: Speculation) -> str:
    """The simulator's log line of a speculative setting."""
    how = "assumed default" if draft.assumed else "given"
    return (f"INFO [msopt.sim] speculative decoding: {draft.method}, {draft.steps} draft step(s), "
            f"{draft.verify} token(s) verified per step, acceptance length {draft.accept:.2f} ({how})")


class SpecStepCost(StepCost):
    """:class:`StepCost` of a server that decodes speculatively (``step`` and ``decode_coeffs``
    priced with the verify tokens and the draft passes; the other attributes are the base's)."""

    def __init__(self, base: StepCost, model: ModelSpec, spec: Speculation,  # noqa: D107
                 kv_per_token: bool = False) -> None:
        self.__dict__.update(base.__dict__)
        self.base = base
        self.spec = spec
        self.pp = base.pp
        self.frac = 0.0 if spec.method == "ngram" else draft_fraction(model)
        # Hardware.verify_kv_per_token: the verify step reads the context once per verified token
        self.kv_reads = spec.verify if kv_per_token else 1

    def _draft(self, n: int) -> float:
        """Seconds of the draft passes of one step of ``n`` sequences."""
        if not self.frac or n <= 0:
            return 0.0
        a, _ = self.base.decode_coeffs(n)
        return self.spec.steps * self.frac * (a - self.base.overhead - self.base.per_seq * n)

    def step(self, n_seqs: int, n_tokens: float, n_logits: float, attn_pairs: float,
             kv_read_tokens: float) -> float:
        """As :meth:`StepCost.step`, the sampling sequences verifying ``verify`` tokens each."""
        extra = (self.spec.verify - 1) * n_logits
        ctx = kv_read_tokens / max(n_seqs, 1)
        kv = kv_read_tokens + (self.kv_reads - 1) * ctx * n_logits
        return (self.base.step(n_seqs, n_tokens + extra, n_logits + extra, attn_pairs + extra * ctx, kv)
                + self._draft(int(n_logits)))

    def decode_coeffs(self, n: int) -> tuple[float, float]:
        """As :meth:`StepCost.decode_coeffs`: ``n`` sequences verifying ``verify`` tokens each."""
        v = self.spec.verify
        a, _ = self.base.decode_coeffs(n * v)
        a -= self.base.per_seq * n * (v - 1)  # per-sequence work is per sequence, not per token
        m = min(self.pp, max(n, 1))
        b = self.pp * max(self.kv_reads * self.base.kv_read_time, v * self.base.attn_flop_time) / m
        return a + self._draft(n), b


__all__ = ["DEFAULT_ACCEPT_RATE", "METHODS", "SpecStepCost", "Speculation", "chain_accept_len", "chain_accept_rate",
           "chain_steps", "default_accept_len", "draft_fraction", "draft_log", "draft_refusal", "speculation_of"]
