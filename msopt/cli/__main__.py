"""``python -m msopt.cli``: the ``msopt`` command line."""

from __future__ import annotations

import sys

from msopt.cli.main import main

sys.exit(main())
