"""Where MindIE is installed on this machine, in either of its two layouts.

* ``mindie-service`` (the run package): ``$MIES_INSTALL_PATH`` (by default
  ``/usr/local/Ascend/mindie/latest/mindie-service``) holds ``bin/mindieservice_daemon`` and
  ``conf/config.json``.
* ``pip`` (MindIE-LLM as the ``mindie_llm`` wheel, MindIE-LLM 8b4871a setup.py:118-134): the console
  script ``mindie_llm_server`` (mindie_llm/server/main.py) sets ``MINDIE_LLM_HOME_PATH`` to
  ``<site-packages>/mindie_llm`` and ``LD_LIBRARY_PATH``, then execs ``<package>/bin/mindieservice_daemon``
  with its own arguments; the daemon reads ``--config-file`` (src/server/daemon/llm_daemon.cpp:50),
  else ``$MIES_CONFIG_JSON_PATH``, else ``<home>/conf/config.json`` (src/utils/common_util.cpp:264-282).

:func:`find_install` looks as the original tool did: the run package's daemon first, then the wrapper.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Where the original tool (and MindIE's docs) expect an install without ``$MIES_INSTALL_PATH``
#: (msserviceprofiler ms_serviceparam_optimizer/config/custom_command.py, MindieCommand, commit 55cb089).
DEFAULT_INSTALL_PATH = "/usr/local/Ascend/mindie/latest/mindie-service"
#: The pip package's console script (MindIE-LLM 8b4871a setup.py:131 -> mindie_llm/server/main.py).
PIP_WRAPPER = "mindie_llm_server"
#: Seconds a query of the wrapper's Python for the package directory may take.
_PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class MindieInstall:
    """A MindIE installation found on this machine.

    Attributes:
        layout: ``"mindie-service"`` (the older run package: ``<MIES_INSTALL_PATH>/bin/mindieservice_daemon``,
            ``<MIES_INSTALL_PATH>/conf/config.json``) or ``"pip"`` (the ``mindie_llm`` package:
            ``mindie_llm_server`` on PATH, ``<site-packages>/mindie_llm/conf/config.json``).
        executable: what starts the server.
        config: the config.json that installation reads when nothing else names one, None when not
            found (pip layout, package directory unknown).
        how: how it was found, for messages.
    """

    layout: str
    executable: str
    config: str | None
    how: str


def _pip_package_dir(wrapper: str, environ: Mapping[str, str], probe: bool) -> Path | None:
    """``<site-packages>/mindie_llm`` of the package ``wrapper`` starts, None when not found.

    The wrapper sets ``MINDIE_LLM_HOME_PATH`` to that directory (mindie_llm/server/main.py:44-57);
    a ``MINDIE_LLM_HOME_PATH`` holding ``__init__.py`` is what the daemon takes as its home
    (src/utils/common_util.cpp:170-179). Else the wrapper's own prefix is searched, and with
    ``probe`` the wrapper's Python (its ``#!`` line) is asked.
    """
    home = environ.get("MINDIE_LLM_HOME_PATH")
    if home and (Path(home) / "__init__.py").is_file():
        return Path(home)
    prefix = Path(wrapper).resolve().parent.parent
    for pattern in ("lib/python3*/site-packages/mindie_llm", "lib/python3*/dist-packages/mindie_llm",
                    "local/lib/python3*/dist-packages/mindie_llm"):
        for hit in sorted(prefix.glob(pattern)):
            if (hit / "__init__.py").is_file():
                return hit
    if not probe:
        return None
    try:
        first = Path(wrapper).read_bytes()[:512].split(b"\n", 1)[0].decode("utf-8", "replace")
    except OSError:
        return None
    interpreter = first[2:].split() if first.startswith("#!") else []
    if not interpreter:
        return None
    code = ("import importlib.util as u; s = u.find_spec('mindie_llm'); "
            "print(s.origin if s and s.origin else '')")
    try:
        out = subprocess.run([*interpreter, "-c", code], capture_output=True, text=True, check=False,
                             timeout=_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    origin = out.stdout.strip()
    return Path(origin).parent if origin else None


def find_install(environ: Mapping[str, str] | None = None, *, probe: bool = False) -> MindieInstall | None:
    """The MindIE installation on this machine, found as the original tool found it.

    First ``$MIES_INSTALL_PATH/bin/mindieservice_daemon`` (``$MIES_INSTALL_PATH`` defaulting to
    :data:`DEFAULT_INSTALL_PATH`), then ``mindie_llm_server`` on PATH (msserviceprofiler
    custom_command.py MindieCommand, commit 55cb089). ``probe``: may ask the wrapper's Python where
    the package is (a subprocess; ``msopt preflight``). None when neither is there.
    """
    env = os.environ if environ is None else environ
    root = env.get("MIES_INSTALL_PATH") or DEFAULT_INSTALL_PATH
    daemon = Path(root) / "bin" / "mindieservice_daemon"
    if daemon.is_file():
        how = "$MIES_INSTALL_PATH" if env.get("MIES_INSTALL_PATH") else f"the default {DEFAULT_INSTALL_PATH}"
        return MindieInstall("mindie-service", str(daemon), str(Path(root) / "conf" / "config.json"),
                             f"{how}/bin/mindieservice_daemon")
    wrapper = shutil.which(PIP_WRAPPER, path=env.get("PATH"))
    if wrapper is None:
        return None
    pkg = _pip_package_dir(wrapper, env, probe)
    # main.py:46-53: the wrapper execs <package>/bin/mindieservice_daemon and needs <package>/conf/config.json
    conf = str(pkg / "conf" / "config.json") if pkg is not None else None
    return MindieInstall("pip", wrapper, conf, f"{PIP_WRAPPER} on PATH")


def installed_config(environ: Mapping[str, str] | None = None) -> str | None:
    """The config.json of the MindIE installed here, as the original tool found it when ``config_path`` was not
    given: the installation's own (:func:`find_install`: ``$MIES_INSTALL_PATH/conf/config.json`` or the pip
    package's), else ``$MIES_INSTALL_PATH/../mindie_llm/conf/config.json`` (the original's and optix's
    ``MindieConfig.config_path`` default, Ascend/msmodeling optix/config/config.py:921-941
    ``_get_mindie_config_paths``); None when none exists."""
    env = os.environ if environ is None else environ
    found = find_install(env)
    candidates = [found.config] if found is not None and found.config else []
    if env.get("MIES_INSTALL_PATH"):
        candidates.append(str(Path(env["MIES_INSTALL_PATH"]).parent / "mindie_llm" / "conf" / "config.json"))
    return next((c for c in candidates if Path(c).is_file()), None)
