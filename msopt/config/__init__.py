"""Configuration: TOML layering into one immutable :class:`Settings` (no component knowledge).

Loading checks the schema (top-level keys, scalars, the field declarations); what each component
makes of its own section is checked by :func:`msopt.run.validate.validate`, which every command runs on
the typed :class:`Config` that :func:`split` makes of the settings (no function outside this package takes
the whole Settings).
"""

from __future__ import annotations

import tomllib

from msopt.config.layers import dump_toml, read_toml, resolve_config_path, thaw
from msopt.config.settings import DEFAULTS_PATH, ENV_CONFIG, Settings, load_settings, split
from msopt.config.typed import ClusterConfig, Config, EngineConfig, PriorConfig, RunConfig, Section, Table, TrialShape

__all__ = ["DEFAULTS_PATH", "ENV_CONFIG", "ClusterConfig", "Config", "EngineConfig", "PriorConfig", "RunConfig",
           "Section", "Settings", "Table", "TrialShape",
           "dump_toml", "load_settings", "read_toml", "resolve_config_path", "split", "thaw", "tomllib"]
