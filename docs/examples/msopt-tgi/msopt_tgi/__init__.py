"""msopt-tgi: Hugging Face Text Generation Inference as an msopt engine (a third-party plugin).

``text-generation-launcher --model-id MODEL --hostname H --port P --flag value ... others``;
the engine's section is ``[tgi]`` with ``[tgi.command]`` (executable, model, host, others),
``wait_start_time`` and ``[[tgi.target_field]]``.

Besides the launch, the adapter declares what msopt asks every engine for: the launcher's own
start-up checks as :attr:`startup_rules` (refused candidates are never launched), the launcher's
fatal log lines as :attr:`health_patterns`, and the simulator personality that models it
(:attr:`sim_personality`, registered by :mod:`msopt_tgi.sim`), which gives TGI simulated runs and
the simulator prior. Everything cited below is text-generation-inference ``launcher/src/main.rs``
at commit 009c4e0b945b2c111368afdc2c9813c32db0a9b7.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from msopt.engines import Candidate, EngineAdapter, LaunchSpec
from msopt.engines.rules import RenderedCandidate, Rule
from msopt.launch.render import (
    check_flag_positions,
    command_str,
    command_table,
    env_fields,
    executable,
    flag_args,
    split_others,
    substitute,
    wait_start_time,
)
from msopt.space.fields import FieldDecl

TGI_SOURCE = "text-generation-inference launcher/src/main.rs"
TGI_VERSION = "text-generation-inference 009c4e0b"
#: ``max_position_embeddings`` above this is cut to it for the defaults (main.rs: ``max_default = 4096``).
MAX_DEFAULT = 4096


def _max_total(c: RenderedCandidate) -> int | None:
    """``--max-total-tokens``, else its default min(max_position_embeddings, 4096) when the model is known."""
    given = c.int_flag("--max-total-tokens")
    if given is not None:
        return given
    return min(c.model.max_position, MAX_DEFAULT) if c.model.max_position else None


def _max_input(c: RenderedCandidate) -> int | None:
    """``--max-input-tokens`` (or the legacy ``--max-input-length``), else its default
    min(max_position_embeddings, 4096) - 1 when the model is known."""
    given = c.int_flag("--max-input-tokens", "--max-input-length")
    if given is not None:
        return given
    return min(c.model.max_position, MAX_DEFAULT) - 1 if c.model.max_position else None


def _input_vs_total(c: RenderedCandidate) -> str | None:
    # main.rs main(): "Validate args", if max_input_tokens >= max_total_tokens
    total, given = _max_total(c), _max_input(c)
    if total is None or given is None or given < total:
        return None
    return "Invalid argument: `max_input_tokens must be < `max_total_tokens`"


def _total_vs_batch_total(c: RenderedCandidate) -> str | None:
    # main.rs main(): if let Some(max_batch_total_tokens) ... max_total_tokens > max_batch_total_tokens
    batch_total, total = c.int_flag("--max-batch-total-tokens"), _max_total(c)
    if batch_total is None or total is None or total <= batch_total:
        return None
    return (f"Invalid argument: `max_total_tokens` must be <= `max_batch_total_tokens`. Given: {total} and "
            f"{batch_total}")


#: The launcher's own argument checks, as start-up rules.
RULES: tuple[Rule, ...] = (
    Rule("tgi.max_input_tokens_vs_max_total_tokens", "tgi", _input_vs_total, f"{TGI_SOURCE} (main: Validate args)",
         TGI_VERSION),
    Rule("tgi.max_total_tokens_vs_max_batch_total_tokens", "tgi", _total_vs_batch_total,
         f"{TGI_SOURCE} (main: max_batch_total_tokens check)", TGI_VERSION),
)


class TgiAdapter(EngineAdapter):
    """Renders one candidate configuration into the launch of a TGI server."""

    name: ClassVar[str] = "tgi"
    health_path: ClassVar[str] = "/health"
    default_port: ClassVar[int] = 3000
    default_executable: ClassVar[tuple[str, ...]] = ("text-generation-launcher",)
    startup_rules: ClassVar[tuple[Rule, ...]] = RULES
    #: main() returns ``Result<(), LauncherError>``, so a failed launcher ends with Rust's
    #: ``Error: <Debug of the error>`` line (``ArgumentValidation(..)``, ``ShardCannotStart``, ...);
    #: a missing server binary is logged as "text-generation-server not found in PATH".
    health_patterns: ClassVar[Mapping[str, Mapping[str, tuple[str, ...]]]] = MappingProxyType({
        "fatal": MappingProxyType({
            "tgi_invalid_argument": ("Error: ArgumentValidation(",),
            "tgi_shard": ("Error: ShardCannotStart", "Error: ShardFailed"),
            "tgi_not_installed": ("text-generation-server not found in PATH",),
        }),
    })
    sim_personality: ClassVar[str | None] = "tgi"

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Run by every command at load time (``msopt validate`` included): fields go on the
        command line or into the environment; the command table and timeout are well-formed."""
        check_flag_positions(fields, self.name)
        command_table(section, self.name)
        wait_start_time(section, self.name)

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        values, section = candidate.values, candidate.section
        cmd = command_table(section, self.name)
        model = substitute(command_str(cmd, "model", "Qwen/Qwen3-8B", self.name), values)
        host = command_str(cmd, "host", "127.0.0.1", self.name)
        argv = executable(cmd, self.default_executable, self.name, values)
        argv += ["--model-id", model, "--hostname", host, "--port", str(int(port))]
        argv += flag_args(values, candidate.fields, negate_enable=False)
        argv += split_others(cmd.get("others", ""), values, f"[{self.name}.command]")
        return LaunchSpec(engine=self.name, argv=tuple(argv), env=env_fields(candidate, self.name),
                          port=int(port), health_path=self.health_path, host=host, served_model_name=model,
                          model=model, ready_timeout=wait_start_time(section, self.name))
