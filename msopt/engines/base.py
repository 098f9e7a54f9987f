"""Engine adapters: render a candidate's values into the launch of one server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from msopt.registry import Registry
from msopt.space.fields import FieldDecl


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server for one candidate configuration.

    Attributes:
        engine: registered engine name ("vllm", "mindie", "sglang", ...).
        argv: the command line, one item per argument; never joined into a shell string.
        env: environment variables to add to the process environment.
        files: files to write before the launch, path -> parsed JSON object (MindIE's config.json).
        port: the port the server will listen on.
        health_path: HTTP path answering 200 once the server is ready.
        host: the address the server listens on.
        served_model_name: the model name clients send.
    """

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Any] = field(default_factory=dict)
    port: int = 8000
    health_path: str = "/health"
    host: str = "127.0.0.1"
    served_model_name: str = ""


class EngineAdapter:
    """Base of the engine adapters; one instance per engine, stateless.

    ``render`` turns every field's value into a :class:`LaunchSpec`: fields whose
    ``config_position`` is ``env`` become environment variables (and ``$NAME`` substitutions in
    the ``[<engine>.command]`` items), flag positions (``--x``) become argv items, dotted paths
    go into the engine's JSON config where the engine has one.
    """

    name: ClassVar[str] = ""
    health_path: ClassVar[str] = "/health"

    def render(
        self,
        values: Mapping[str, Any],
        fields: Sequence[FieldDecl],
        section: Mapping[str, Any],
        *,
        port: int,
        devices: Sequence[str] = (),
        workdir: Path | None = None,
    ) -> LaunchSpec:
        """Render the launch of one server with these values."""
        raise NotImplementedError


ENGINES: Registry[type[EngineAdapter]] = Registry("engine", entry_point_group="msopt.engines")
