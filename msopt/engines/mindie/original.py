"""The original tool's MindIE prefill/decode inputs, which msopt refuses in one line at load time
(the ``mindie`` adapter's :meth:`~msopt.engines.base.EngineAdapter.check_config`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msopt.errors import ConfigError

if TYPE_CHECKING:
    from msopt.config import Config

#: What a user of the original tool's MindIE PD path reads instead.
MINDIE_PD_UNSUPPORTED = ("msopt tunes a MindIE prefill/decode (PD) deployment through [mindie.pd] on the simulator "
                         "(instance counts and prefill:/decode: fields, configs/mindie_pd_atlas_a2.toml, "
                         "docs/engines.md); its real launch runs on Kubernetes, which msopt does not start")


def refuse_mindie_pd(config: Config) -> None:
    """Refuse the original tool's MindIE PD inputs in one line, each naming msopt's way: the PD-ratio fields (a
    ``config_position`` starting with ``default``, such as ``default_p_rate`` and ``default_d_rate``,
    which its ``DisaggregationSimulator.update_config`` wrote to MindIE-MS's ms_controller.json:
    optimizer/plugins/simulate.py, msserviceprofiler@9582f434) and a ``[kubectl]
    kubectl_default_path``, the Kubernetes deployment that path starts.

    Raises:
        ConfigError: naming the file and the key.
    """
    for decl in config.engine.fields:
        if decl.config_position.startswith("default"):
            raise ConfigError(f"{decl.where}: config_position {decl.config_position!r} is a MindIE PD ratio of "
                              "the original tool (MindIE-MS ms_controller.json), which msopt writes from [mindie.pd] "
                              "prefill_instances and decode_instances: set config_position = \"none\" and name "
                              f"the field there; {MINDIE_PD_UNSUPPORTED}")
    path = config.kubectl.get("kubectl_default_path")
    if path not in (None, ""):
        raise ConfigError(f"{config.kubectl.where('kubectl_default_path')}: [kubectl] kubectl_default_path "
                          f"{path!r} starts the original tool's Kubernetes MindIE PD deployment: "
                          f"{MINDIE_PD_UNSUPPORTED}")
