"""Rewrite docs/configuration.md's key tables from msopt/config/keys.py and the packaged defaults.toml.

Each table sits between the markers of :mod:`msopt.config.reference`; everything else in the page is
left as written. tests/config/test_reference.py fails when the committed page differs from what this writes.

Usage: python scripts/generators/config_reference.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from msopt.config import DEFAULTS_PATH, read_toml  # noqa: E402
from msopt.config.reference import render  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page is in step (exit 1 if not)")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    new = render(text, read_toml(DEFAULTS_PATH))
    if args.check:
        print("in step" if new == text else f"{PAGE.relative_to(ROOT)}: out of step; run without --check")
        return 0 if new == text else 1
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
