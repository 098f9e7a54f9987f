"""Engines configured entirely on the command line (vLLM, SGLang)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from msopt.engines.base import EngineAdapter
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    TrialNode,
    check_flag_positions,
    check_repeated_flags,
    command_str,
    command_table,
    env_fields,
    executable,
    expand_home,
    flag_args,
    int_flag,
    split_others,
    substitute,
    wait_start_time,
)
from msopt.space.fields import FieldDecl


class CommandLineAdapter(EngineAdapter):
    """``executable + model arguments + host/port/name + one flag per field + others``.

    Subclasses set the default executable, how the model is passed and whether a false
    ``--enable-x`` boolean becomes ``--no-enable-x``.
    """

    model_flag: ClassVar[str | None] = None  # None: the model is a positional argument
    negate_enable: ClassVar[bool] = False
    default_model: ClassVar[str] = "Qwen/Qwen3-8B"
    default_served_model_name: ClassVar[str] = "qwen3-8b"
    #: Other spellings the engine's parser accepts for a flag msopt may render.
    aliases: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: The flags of the data-parallel size when the server takes ``X-Data-Parallel-Rank`` (the
    #: engine's personality, ``dp_rank_header``, cites where); empty: it takes none.
    rank_header_flags: ClassVar[tuple[str, ...]] = ()

    def rank_header_ranks(self, argv: Sequence[str]) -> int:
        """The data-parallel ranks a request may name with ``X-Data-Parallel-Rank`` (1: none)."""
        return int_flag(argv, 1, *self.rank_header_flags) if self.rank_header_flags else 1

    def model_path(self, section: Mapping[str, Any]) -> str:
        """``[<engine>.command] model``, else the adapter's default model."""
        return super().model_path(section) or self.default_model

    def model_args(self, exe: Sequence[str], model: str) -> list[str]:
        """How the model is passed after the executable."""
        return [self.model_flag, model] if self.model_flag else [model]

    def owned_flags(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> dict[str, str]:
        """Flag -> where msopt takes it from, for every flag msopt renders itself.

        Raises:
            ConfigError: two fields place their value at the same flag.
        """
        cmd = f"[{self.name}.command]"
        owned = {"--host": f"{cmd} host", "--port": "msopt (every trial listens on a free port of its own)",
                 "--served-model-name": f"{cmd} served_model_name",
                 self.model_flag or "--model": f"{cmd} model"}
        for decl in fields:
            pos = decl.config_position
            if not pos.startswith("-"):
                continue
            key = self.aliases.get(pos, pos)
            prior = next((w for f, w in owned.items() if self.aliases.get(f, f) == key), None)
            if prior is not None:
                raise decl.error(f"config_position {pos!r} is already rendered from {prior}",
                                 "give every flag to one field only")
            owned[pos] = f"field '{decl.name}' ({decl.where})"
        return owned

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Every field must be ``env``, a flag, or unplaced; no flag is rendered twice (a field and
        ``others``, or two fields)."""
        if self.is_disaggregated(section):
            raise ConfigError(f"[{self.name}.pd]: msopt has no prefill/decode-disaggregated launch for {self.name} "
                              "(sglang has one); drop the table")
        check_flag_positions(fields, self.name)
        cmd = command_table(section, self.name)
        wait_start_time(section, self.name)
        check_repeated_flags(self.owned_flags(fields, section), cmd.get("others", ""),
                             f"[{self.name}.command] 'others'", self.aliases)

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        """Render the server's command line; ``devices`` are inherited from the actor's env."""
        values, section = candidate.values, candidate.section
        self.check(candidate.fields, section)
        cmd = command_table(section, self.name)
        model = expand_home(substitute(command_str(cmd, "model", self.default_model, self.name), values))
        name = substitute(command_str(cmd, "served_model_name", self.default_served_model_name,
                                      self.name), values)
        host = command_str(cmd, "host", "127.0.0.1", self.name)
        argv = executable(cmd, self.default_executable, self.name, values)
        argv += self.model_args(argv, model)
        argv += ["--host", host, "--port", str(int(port)), "--served-model-name", name]
        argv += flag_args(values, candidate.fields, negate_enable=self.negate_enable)
        argv += split_others(cmd.get("others", ""), values, f"[{self.name}.command]")
        health = section.get("health_path", self.health_path)
        return LaunchSpec(
            engine=self.name,
            argv=tuple(argv),
            env=env_fields(candidate, self.name),
            port=int(port),
            health_path=str(health),
            host=host,
            served_model_name=name,
            model=model,
            ready_timeout=wait_start_time(section, self.name),
            rank_header_ranks=self.rank_header_ranks(argv),
        )

    #: Flags the multi-node form adds (refused in the rendered single-node argv, where they would clash).
    node_flags: ClassVar[tuple[str, ...]] = ()

    def node_args(self, argv: Sequence[str], node: TrialNode, nodes: Sequence[TrialNode],
                  rendezvous_port: int) -> list[str]:
        """The arguments that place one node's server in a multi-node instance."""
        raise EvaluationError(f"engine {self.name!r} has no multi-node launch")

    def render_nodes(self, candidate: Candidate, *, port: int, nodes: Sequence[TrialNode], rendezvous_port: int,
                     workdir: Path | None = None, leader_ports: Sequence[int] = ()) -> list[LaunchSpec]:
        """The same command line on every node plus that node's placement arguments."""
        base = self.render(candidate, port=port, devices=list(nodes[0].devices), workdir=workdir)
        if len(nodes) == 1:
            return [base]
        clash = [a.split("=", 1)[0] for a in base.argv if a.split("=", 1)[0] in self.node_flags]
        if clash:
            raise EvaluationError(f"{', '.join(sorted(set(clash)))} in the {self.name} command line: msopt renders "
                                  "them for a trial that spans nodes; remove them from 'others' and the fields")
        return [replace(base, argv=base.argv + tuple(self.node_args(base.argv, node, nodes, rendezvous_port)))
                for node in nodes]
