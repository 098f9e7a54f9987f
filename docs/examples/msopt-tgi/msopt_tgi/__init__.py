"""msopt-tgi: Hugging Face Text Generation Inference as an msopt engine (a third-party plugin).

``text-generation-launcher --model-id MODEL --hostname H --port P --flag value ... others``;
the engine's section is ``[tgi]`` with ``[tgi.command]`` (executable, model, host, others),
``wait_start_time`` and ``[[tgi.target_field]]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from msopt.engines import EngineAdapter, LaunchSpec
from msopt.engines.base import (
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


class TgiAdapter(EngineAdapter):
    """Renders one candidate configuration into the launch of a TGI server."""

    name: ClassVar[str] = "tgi"
    health_path: ClassVar[str] = "/health"
    default_port: ClassVar[int] = 3000

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Run by every command at load time (``msopt validate`` included): fields go on the
        command line or into the environment; the command table and timeout are well-formed."""
        check_flag_positions(fields, self.name)
        command_table(section, self.name)
        wait_start_time(section, self.name)

    def render(self, values: Mapping[str, Any], fields: Sequence[FieldDecl], section: Mapping[str, Any], *,
               port: int, devices: Sequence[str] = (), workdir: Path | None = None) -> LaunchSpec:
        cmd = command_table(section, self.name)
        model = substitute(command_str(cmd, "model", "Qwen/Qwen3-8B", self.name), values)
        host = command_str(cmd, "host", "127.0.0.1", self.name)
        argv = executable(cmd, ("text-generation-launcher",), self.name, values)
        argv += ["--model-id", model, "--hostname", host, "--port", str(int(port))]
        argv += flag_args(values, fields, negate_enable=False)
        argv += split_others(cmd.get("others", ""), values, f"[{self.name}.command]")
        return LaunchSpec(engine=self.name, argv=tuple(argv), env=env_fields(values, fields, section, self.name),
                          port=int(port), health_path=self.health_path, host=host, served_model_name=model,
                          model=model, ready_timeout=wait_start_time(section, self.name))
