"""Other projects' files beside the repository (``../shared/``), read where they are, never copied in.

``../shared/original/`` holds the original tool's shipped config.toml (msserviceprofiler
ms_serviceparam_optimizer/config.toml, commit 9582f434, comments dropped) and MindIE's shipped
config.json (MindIE-LLM src/server/conf/config.json, commit 8b4871a); its README.md cites both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
ORIGINAL_CONFIG = SHARED / "original" / "config.toml"
MINDIE_SHIPPED = SHARED / "original" / "mindie_config.json"


def shared(path: Path) -> Path:
    """``path``, or skip the calling test, saying why, where it is absent."""
    if not path.exists():
        pytest.skip(f"{path} is absent: ../shared/original/ beside the repository holds other projects' files "
                    "(the original tool's config.toml, MindIE's shipped config.json), which the project does not carry")
    return path
