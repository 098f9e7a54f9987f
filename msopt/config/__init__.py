"""Configuration: TOML layering into one immutable :class:`Settings` (no component knowledge).

Loading checks the schema (top-level keys, scalars, the field declarations); what each component
makes of its own section is checked by :func:`msopt.run.validate.validate`, which every command runs on
the typed :class:`Config` that :func:`split` makes of the settings (no function outside this package takes
the whole Settings).
"""

from __future__ import annotations

from msopt.config.settings import (
    DEFAULTS_PATH,
    ENV_CONFIG,
    Settings,
    dump_toml,
    load_settings,
    read_toml,
    resolve_config_path,
    split,
    thaw,
    tomllib,
)
from msopt.config.typed import ClusterConfig, Config, EngineConfig, PriorConfig, RunConfig, Section, Table

__all__ = ["DEFAULTS_PATH", "ENV_CONFIG", "ClusterConfig", "Config", "EngineConfig", "PriorConfig", "RunConfig",
           "Section", "Settings", "Table",
           "dump_toml", "load_settings", "read_toml", "resolve_config_path", "split", "thaw", "tomllib"]
