"""Simulator personalities: how one engine's launch reads as knobs, and how that engine behaves
where engines differ (defaults, start-up and memory errors, the MoE layout, what its memory
fraction covers).

An engine adapter names the personality that models it
(:attr:`~msopt.engines.base.EngineAdapter.sim_personality`); the simulator asks the personality,
never the engine's name. Each built-in one (``vllm``, ``sglang``, ``mindie``) is in its engine's
folder (``msopt/engines/<name>/personality.py``), found by name as a plugin's is: a plugin registers a
:class:`Personality` instance through the ``msopt.sim_personalities`` entry-point group, the built-in
ones are the registry's ``builtin`` entries, written as entry points are. The simulator sits below the
engines and imports none of them. :attr:`msopt.sim.knobs.EngineKnobs.engine` holds the personality's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from msopt.errors import SimulationError
from msopt.registry import Registry
from msopt.sim.catalog_types import ModelSpec
from msopt.sim.knobs import EngineKnobs, Launch
from msopt.sim.memory import MemoryPlan


@dataclass(frozen=True)
class MeasuredLayout:
    """The layout and scheduler cells of one public measured row (:mod:`msopt.sim.measured`), read as numbers.

    Attributes:
        tp, pp, dp, ep: the parallel sizes (1 where the row leaves one empty).
        max_seqs: the row's ``max_num_seqs`` cell (the engine's running-request cap); None if empty.
        batched_tokens: its ``max_num_batched_tokens`` cell (the engine's per-step token budget); None if empty.
        chunked_off: the ``chunked_prefill`` cell says off.
        chunk: the chunk size the ``chunked_prefill`` cell gives ("on (32768)"); None if it gives none.
        notes: the row's notes, which quote flags of the source's launch command.
        is_moe: the model is a mixture of experts.
        devices_per_node: devices per node of the row's hardware.
    """

    tp: int
    pp: int
    dp: int
    ep: int
    max_seqs: int | None
    batched_tokens: int | None
    chunked_off: bool
    chunk: int | None
    notes: str
    is_moe: bool
    devices_per_node: int


class Personality:
    """One engine as the simulator models it; subclass it and override what differs.

    The defaults are the behaviour shared by most engines (a vLLM-like server); each attribute
    names the engine behaviour it stands for.
    """

    #: The name :attr:`EngineKnobs.engine` carries (the registry key).
    name: str = ""
    #: How the engine's launch spells its context limit (:attr:`EngineKnobs.max_model_len`), for messages.
    context_key: str = "max_model_len"
    #: ``max_num_batched_tokens`` when unset: (devices under 70 GiB, devices of 70 GiB or more).
    default_batched_tokens: tuple[int, int] = (2048, 8192)
    #: ``max_num_seqs`` when unset: (devices under 70 GiB, devices of 70 GiB or more).
    default_max_seqs: tuple[int, int] = (256, 1024)
    #: The engine's memory fraction covers weights and KV cache only, so the activations of a
    #: forward pass are not taken out of it (SGLang's ``--mem-fraction-static``).
    activation_outside_fraction: bool = False
    #: A server whose KV cache holds fewer tokens than the longest sequence still starts and caps
    #: requests at the cache's size (SGLang) instead of refusing to start.
    caps_context_to_kv: bool = False
    #: The dp ranks of one instance always share one set of MoE layers (vLLM); otherwise only with
    #: ``dp_attention``.
    moe_shares_dp: bool = False
    #: Without an explicit ``ep`` the MoE tensor-parallel size defaults to the attention tp and
    #: ``ep`` fills the rest (MindIE); otherwise ``ep`` defaults (1, or the whole MoE world with
    #: ``expert_parallel``) and ``moe_tp`` fills the rest.
    moe_tp_first: bool = False
    #: Prefix caching is on unless the launch turns it off: a prompt whose leading blocks an
    #: earlier prompt computed skips their prefill (blocks kept while free, least recently used
    #: evicted first). Off by default: a personality that models it says so.
    prefix_caching: bool = False
    #: The prefix cache keeps prompts to the token (a radix tree over tokens, SGLang's): a trace
    #: block is cached as far as a prompt filled it, so a shared prefix hits to its last shared
    #: token (aligned to the engine's page, ``block_size``); otherwise a trace block a prompt held
    #: counts whole and hits align to the KV block (vLLM's block hashes).
    prefix_cache_partial: bool = False
    #: Admission reserves each request's prompt and its whole remaining output, as MindIE does with
    #: ``maxPreemptCount`` 0 (which any personality gets from that knob) and SGLang always does for
    #: fixed-length requests.
    reserves_whole_output: bool = False
    #: A request whose prompt fits the context but whose prompt and output do not is served, its output cut
    #: to the context left (vLLM's ``max_tokens`` clamp); otherwise the engine refuses it, as SGLang does
    #: (sglang 0.5.23 srt/managers/tokenizer_manager.py:1353-1377, ``validate_total_tokens``). A prompt that
    #: fills the context is refused either way.
    cuts_output_to_context: bool = False
    #: The engine holds a batch back up to ``max_queue_delay_s`` (MindIE ``maxQueueDelayMicroseconds``);
    #: otherwise that knob means nothing.
    holds_queue_delay: bool = False
    #: A prefill batch stops adding requests once its prompt tokens reach ``max_prefill_tokens``, this
    #: being its default (SGLang ``--max-prefill-tokens``); None: no such bound.
    prefill_token_cap: int | None = None
    #: The engine sends a request carrying an ``X-Data-Parallel-Rank`` header to that data-parallel
    #: replica, and spreads the others in turn (a client that pins each session to one rank keeps its
    #: turns, and their prefix cache, on one replica); otherwise every request is spread in turn.
    dp_rank_header: bool = False
    #: How a public measured row's ``engine`` cell names this engine: lower-case prefixes of the cell
    #: (:mod:`msopt.sim.measured`). Empty: no measured row is read as this engine.
    measured_names: tuple[str, ...] = ()
    #: Why measured rows of this engine are not simulated; None when they are (:meth:`measured_argv`).
    measured_skip: str | None = None

    def measured_argv(self, layout: MeasuredLayout) -> tuple[list[str], list[str]]:
        """The server flags a measured row's cells describe, and what was assumed in reading them.

        Raises:
            SimulationError: this engine's rows are not read (override it with :attr:`measured_names`).
        """
        raise SimulationError(f"the {self.name} personality reads no measured rows; override measured_argv")

    def speculative_argv(self, method: str, steps: int, draft_tokens: int) -> list[str] | None:
        """The flags that launch speculative decoding ``method`` ("mtp", "eagle", ...) with ``steps`` draft steps
        and ``draft_tokens`` draft tokens a step, for a measured row; None when the engine's way is not modelled."""
        return None

    def measured_memory_fix(self, knobs: EngineKnobs, hbm_gib: float,
                            memory_kind: str = "CUDA") -> tuple[list[str], str] | None:
        """Flags a measured launch must have had although its row does not say (and the note saying so), when
        these knobs could not have served as the row did; None by default."""
        return None

    def aiconfigurator_argv(self, concurrency: int, input_len: int, output_len: int) -> list[str]:
        """The flags NVIDIA aiconfigurator's generator sets for an aggregated run of batch size ``concurrency``
        (the ``aiconfigurator`` launch rule of :mod:`msopt.sim.launch_rules`); none for an engine it does not
        generate."""
        return []

    def knobs_from_argv(self, argv: Sequence[str]) -> EngineKnobs | None:
        """The knobs of a server command line; None when this engine's knobs do not come from one."""
        return None

    def knobs_from_launch(self, spec: Launch) -> EngineKnobs:
        """The knobs of a rendered launch, as the engine itself would read it.

        Raises:
            SimulationError: a malformed knob value.
        """
        knobs = self.knobs_from_argv(spec.argv)
        if knobs is None:
            raise SimulationError(f"the {self.name} personality reads no launch; override knobs_from_launch")
        return knobs

    def default_memory_fraction(self, knobs: EngineKnobs, hbm_gib: float, batched_tokens: int,
                                memory_kind: str = "CUDA") -> float:
        """The share of device memory the engine takes when none is set, on devices of ``memory_kind``."""
        return 0.9

    def default_block_size(self, memory_kind: str) -> tuple[int, str]:
        """The KV-cache block (page) size in tokens the engine takes on devices of ``memory_kind``
        (the hardware entry's: "CUDA", "NPU", "CPU") when the launch sets none, and where that
        default is written (the engine's source, cited)."""
        return 16, "msopt's assumption: the engine's default is not known"

    def default_batched_tokens_for(self, hbm_gib: float, memory_kind: str = "CUDA", tp: int = 1) -> int:
        """The step token budget when none is set: :attr:`default_batched_tokens` by device size."""
        return self.default_batched_tokens[int(hbm_gib >= 70)]

    def hybrid_state_slots(self, knobs: EngineKnobs, rest_gib: float, per_seq_gib: float) -> int:
        """Requests whose linear-attention state a hybrid model's pool holds, from ``rest_gib`` (what weights,
        activations and reserve leave) and one request's state: one slot per running request
        (``max_num_seqs``) by default, at most what fits (vLLM 0.11+ keeps one state block per running request
        in the mamba layers' own KV cache group: vllm/v1/kv_cache_interface.py, MambaSpec)."""
        fits = int(rest_gib // per_seq_gib) if per_seq_gib > 0 else 0
        return max(0, min(int(knobs.max_num_seqs or 256), fits))

    def no_state_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        """The start-up error when a hybrid model's linear-attention state pool holds no request."""
        return ("RuntimeError: no memory left for the linear-attention state of one request "
                f"({mem.kv_gib + mem.state_gib:.2f} GiB left after the weights); raise the memory fraction or tp")

    def fraction_problem(self, knobs: EngineKnobs) -> str | None:
        """The start-up error for a resolved memory fraction outside (0, 1], if the engine refuses it there."""
        if not 0 < knobs.memory_fraction <= 1:  # type: ignore[operator]  # set by resolved()
            return f"ValueError: memory fraction must be in (0, 1], got {knobs.memory_fraction}"
        return None

    def default_max_model_len(self, model: ModelSpec) -> int:
        """The longest sequence the server accepts when none is set."""
        return model.max_position

    def startup_problem(self, knobs: EngineKnobs, model: ModelSpec, max_model_len: int) -> str | None:
        """An engine-specific start-up error for these (resolved) knobs, if any; none by default."""
        return None

    def draft_problem(self, method: str, memory_kind: str) -> str | None:
        """The engine's start-up error for a speculative ``method`` ("mtp", "eagle", "ngram") on devices
        of ``memory_kind`` (the hardware entry's: "CUDA", "NPU", ...), if it refuses that pairing; none by default."""
        return None

    def no_kv_memory(self, knobs: EngineKnobs, mem: MemoryPlan) -> str:
        """The error the server prints when no memory is left for the KV cache."""
        return ("ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.")

    def short_kv(self, knobs: EngineKnobs, mem: MemoryPlan, max_model_len: int) -> str:
        """The error the server prints when its KV cache cannot hold one sequence of ``max_model_len``."""
        need = mem.kv_gib * max_model_len / max(mem.kv_tokens, 1)
        return (f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
                f"({need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({mem.kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model length "
                f"is {mem.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                "when initializing the engine.")

    def kv_cap_warning(self, mem: MemoryPlan, max_model_len: int) -> str:
        """The warning of a server that :attr:`caps_context_to_kv`."""
        return (f"WARNING KV pool holds {mem.kv_tokens} tokens, fewer than the maximum sequence length "
                f"{max_model_len}. One full-length request cannot fit, so long requests will be "
                "refused or truncated at serving time.")


#: The built-in personalities, each in its engine's folder, loaded on the first lookup as a plugin's
#: entry point is (the engine folders sit above the simulator, which imports none of them).
BUILTIN_PERSONALITIES = {name: f"msopt.engines.{name}.personality:PERSONALITY" for name in ("vllm", "sglang", "mindie")}

PERSONALITIES: Registry[Personality] = Registry("simulator personality",
                                                entry_point_group="msopt.sim_personalities",
                                                builtin=BUILTIN_PERSONALITIES)


def get_personality(name: str) -> Personality:
    """The personality registered as ``name`` (an unknown name lists the valid ones); the built-in and
    the plugins' ones load on the first lookup."""
    return PERSONALITIES.get(name)


def known(name: str) -> bool:
    """Whether a personality is registered as ``name``."""
    return name in PERSONALITIES


def resolved(knobs: EngineKnobs, hbm_gib: float, memory_kind: str = "CUDA") -> EngineKnobs:
    """``knobs`` with the defaults of its personality (:attr:`EngineKnobs.engine`) that depend on the
    device (``hbm_gib`` of ``memory_kind``) filled in (vLLM: >= 70 GiB -> 8192/1024; the KV block size on
    ``memory_kind`` devices)."""
    p = get_personality(knobs.engine)
    block = knobs.block_size if knobs.block_size is not None else p.default_block_size(memory_kind)[0]
    big = int(hbm_gib >= 70)
    mnbt = knobs.max_num_batched_tokens or p.default_batched_tokens_for(hbm_gib, memory_kind, knobs.tp)
    mns = knobs.max_num_seqs or p.default_max_seqs[big]
    frac = knobs.memory_fraction
    if frac is None:
        frac = p.default_memory_fraction(knobs, hbm_gib, mnbt, memory_kind)
    return replace(knobs, max_num_batched_tokens=mnbt, max_num_seqs=mns, memory_fraction=frac, block_size=block)


def knobs_from_argv(engine: str, argv: Sequence[str]) -> EngineKnobs:
    """Read the modelled knobs from a server command line (flags only) of the personality ``engine``.

    Raises:
        SimulationError: no personality of that name reads a command line, or a malformed knob value.
    """
    knobs = get_personality(engine).knobs_from_argv(argv) if known(engine) else None
    if knobs is None:
        raise SimulationError(f"knobs come from a command line for {' and '.join(_argv_personalities())}, "
                              f"not {engine!r}")
    return knobs


def _argv_personalities() -> list[str]:
    return [n for n in PERSONALITIES.names() if get_personality(n).knobs_from_argv(()) is not None]


def knobs_from_launch(spec: Launch, personality: str | None = None) -> EngineKnobs:
    """Read the modelled knobs from a rendered launch, as the engine itself would: the personality
    ``personality`` (the name the engine's adapter gives,
    :attr:`~msopt.engines.base.EngineAdapter.sim_personality`; default: the launch's engine name)
    reads it (vLLM and SGLang from ``spec.argv``, MindIE from the config.json object in ``spec.files``).
    Flags that are not modelled are listed once in ``ignored``.

    Raises:
        SimulationError: no personality of that name, or a malformed knob value.
    """
    name = personality or spec.engine
    if not known(name):
        raise SimulationError(f"the simulator models engines {PERSONALITIES.names()}, not {name!r}")
    return get_personality(name).knobs_from_launch(spec)
