"""The vLLM versions and platforms msopt knows (``[vllm] platform`` and ``version``), below the vLLM
adapter (:mod:`msopt.engines.vllm.adapter`) and its rules (:mod:`msopt.engines.vllm.rules`), which both read them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from msopt.errors import ConfigError

#: vLLM versions with a flag table (msopt/engines/vllm/flags/vllm-<version>.txt)
VLLM_VERSIONS = ("0.23.0", "0.25.1", "0.26.0", "0.27.1", "0.33.0")
#: the vLLM version msopt's rules and docs are written for when ``[vllm] version`` is not set
DEFAULT_VERSION = "0.33.0"
PLATFORMS = ("cuda", "ascend")
#: vLLM version -> the vllm-ascend release built on it (each release's Dockerfile ``ARG VLLM_TAG``): the stable
#: 0.23.0.post1 (the package index's newest, and the default on ascend), then the release candidates users run:
#: tag v0.25.1rc1, branch releases/v0.26.0rc at cf0baa38 and main at 182b75ea (vllm-project/vllm-ascend,
#: 2026-08-22), which the package index does not serve (their key tables come from ``git archive``).
ASCEND_RELEASES = MappingProxyType({"0.23.0": "0.23.0.post1", "0.25.1": "0.25.1rc1", "0.26.0": "0.26.0rc-cf0baa38",
                                   "0.27.1": "main-182b75ea"})


def target(section: Mapping[str, Any]) -> tuple[str, str | None]:
    """``([vllm] platform, [vllm] version)``; the version is None when unset (not checked at load time),
    except on ascend, where it defaults to the one vLLM version msopt knows vllm-ascend for."""
    platform = section.get("platform", "cuda")
    if platform not in PLATFORMS:
        raise ConfigError(f"[vllm] 'platform' must be one of {', '.join(PLATFORMS)}, got {platform!r}; "
                          "\"ascend\" is vllm-ascend")
    version = section.get("version")
    if platform == "ascend" and version is None:
        version = next(iter(ASCEND_RELEASES))
    if version is not None and version not in VLLM_VERSIONS:
        raise ConfigError(f"[vllm] 'version' {version!r} has no flag table in msopt; valid: {', '.join(VLLM_VERSIONS)} "
                          "(scripts/generators/engine_flags.py makes one from a wheel)")
    if platform == "ascend" and version not in ASCEND_RELEASES:
        raise ConfigError(f"[vllm] version {version!r}: msopt knows vllm-ascend only on vLLM "
                          f"{', '.join(ASCEND_RELEASES)} (vllm-ascend {', '.join(ASCEND_RELEASES.values())})")
    return str(platform), (str(version) if version is not None else None)
