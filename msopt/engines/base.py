"""What an engine adapter renders: the launch of one server, as data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    """

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Any] = field(default_factory=dict)
    port: int = 8000
    health_path: str = "/health"
